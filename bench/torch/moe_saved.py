"""What torchtitan's MoE layer saves for backward: PyTorch's own saved tensors on fake tensors (no GPU), per token.

torchtitan 0.3.0's MoE (torchtitan/models/common/moe.py MoE: TokenChoiceTopKRouter, RoutedExperts with the EP=1
LocalTokenDispatcher and GroupedExperts on torch._grouped_mm, optional shared experts) is built from its own Config
classes in bf16 (the dtype FSDP2's MixedPrecisionPolicy hands the layer), run forward on one micro-batch under
saved-tensor hooks, and every tensor autograd keeps is counted once per storage, parameters left out. The router's
gate runs under torch.autocast(float32) on a GPU; CPU autocast has no float32 mode, so here it runs in bf16 and the
fp32 copy of its input it would save on a GPU (4 B per element of h) is reported apart ("gate input, fp32 on GPU").

  .venv-torch/bin/python bench/torch/moe_saved.py [--hidden 2048] [--expert-ffn 768] [--experts 128] [--top-k 8]
                                                  [--shared 0] [--tokens 4096] [--json FILE]

PYTHONPATH must reach torchtitan 0.3.0 (scripts/torch-venv.sh --torchtitan installs it into
.venv-torch/torchtitan-0.3; this script puts that directory first when it exists).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TITAN = os.path.join(HERE, "..", "..", ".venv-torch", "torchtitan-0.3")
if os.path.isdir(TITAN):
    sys.path.insert(0, TITAN)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402


def build_moe(args):
    from torchtitan.models.common.feed_forward import FeedForward
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import GroupedExperts, MoE, RoutedExperts, TokenChoiceTopKRouter
    from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher

    shared = None
    if args.shared > 0:
        shared = FeedForward.Config(dim=args.hidden, hidden_dim=args.shared * args.expert_ffn)
    config = MoE.Config(
        num_experts=args.experts,
        routed_experts=RoutedExperts.Config(
            inner_experts=GroupedExperts.Config(dim=args.hidden, hidden_dim=args.expert_ffn, num_experts=args.experts),
            token_dispatcher=LocalTokenDispatcher.Config(num_experts=args.experts, top_k=args.top_k)),
        router=TokenChoiceTopKRouter.Config(num_experts=args.experts, top_k=args.top_k, score_func="softmax",
                                            route_norm=True,
                                            gate=Linear.Config(in_features=args.hidden, out_features=args.experts)),
        shared_experts=shared)
    return config.build()


def is_parameter(t) -> bool:
    base = t._base if getattr(t, "_base", None) is not None else t
    return isinstance(base, nn.Parameter) or (base.is_leaf and base.requires_grad)


def saved(args) -> dict:
    torch.set_default_dtype(torch.bfloat16)
    moe = build_moe(args)
    moe.train()
    # The pre-MLP norm's output: not a leaf, so that what keeps it is counted.
    x = torch.randn(1, args.tokens, args.hidden, requires_grad=True).clone()
    seen, kinds = set(), {}

    def pack(t):
        key = t.untyped_storage()._cdata
        if key not in seen and not is_parameter(t):
            seen.add(key)
            kind = f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
            kinds[kind] = kinds.get(kind, 0) + t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        moe(x)
    total = sum(kinds.values())
    return {"tensors": kinds, "bytes": total, "bytes_per_token": total / args.tokens,
            "gate_input_fp32_on_gpu_per_token": 4 * args.hidden}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--expert-ffn", type=int, default=768)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--shared", type=int, default=0, help="shared experts (each expert-ffn wide)")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--json")
    args = ap.parse_args()
    with FakeTensorMode(allow_non_fake_inputs=True):
        result = saved(args)
    result.update({"torch": torch.__version__, "hidden": args.hidden, "expert_ffn": args.expert_ffn,
                   "experts": args.experts, "top_k": args.top_k, "shared": args.shared, "tokens": args.tokens})
    for kind, b in result["tensors"].items():
        print(f"  {kind:32s} {b / args.tokens:10.1f} B per token")
    print(f"saved {result['bytes_per_token']:.1f} B per token (+ {result['gate_input_fp32_on_gpu_per_token']} "
          f"B: the gate's fp32 input on a GPU)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
