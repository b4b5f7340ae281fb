"""What a torchtitan feed-forward block saves for backward under tensor parallelism, with and without torchao's
float8 TP plan: PyTorch's own saved tensors, on fake tensors with a fake process group (no GPU).

torchtitan's plan for the block (parallelize_llama apply_tp; models/llama3 sharding): the input all-gathered from the
sequence-sharded residual (PrepareModuleInput Shard(1) -> Replicate), w1 and w3 column-wise, w2 row-wise with a
sequence-sharded output; under float8 tensorwise the float8 variants (torchao/float8/float8_tensor_parallel.py:
PrepareFloat8ModuleInput casts before the gather, Float8RowwiseParallel casts w2's input). The saved-tensor hooks
see every tensor autograd keeps; the linears' weights are parameters, not activations, and are left out; a tensor
saved by two ops (the gathered input, read by w1 and w3) is counted once.

  .venv-torch/bin/python bench/torch/float8_tp_saved.py [--tp 8] [--hidden 4096] [--ffn 14336] [--tokens 8192]
                                                        [--json reports/float8-tp-saved.json]
"""
import argparse
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore


class FeedForward(nn.Module):
    """torchtitan's SwiGLU feed-forward: w2(silu(w1(x)) * w3(x))."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


def tp_plan(float8: bool) -> dict:
    if not float8:
        return {"": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "w1": ColwiseParallel(), "w3": ColwiseParallel(), "w2": RowwiseParallel(output_layouts=Shard(1))}
    from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                       PrepareFloat8ModuleInput)
    return {"": PrepareFloat8ModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                         float8_dtype=torch.float8_e4m3fn),
            "w1": Float8ColwiseParallel(), "w3": Float8ColwiseParallel(),
            "w2": Float8RowwiseParallel(output_layouts=Shard(1))}


def local_bytes(t) -> int:
    """Bytes of a saved tensor on this rank: a DTensor's local shard, a Float8 tensor's 1-byte data."""
    local = t._local_tensor if hasattr(t, "_local_tensor") else t
    data = getattr(local, "_data", local)
    return data.numel() * data.element_size()


def storage_key(t) -> int:
    """One key per storage: the 2-D view each linear makes of the gathered input shares the gathered tensor's."""
    local = t._local_tensor if hasattr(t, "_local_tensor") else t
    data = getattr(local, "_data", local)
    return data.untyped_storage()._cdata


def is_parameter(t) -> bool:
    local = t._local_tensor if hasattr(t, "_local_tensor") else t
    base = t._base if getattr(t, "_base", None) is not None else t
    return isinstance(base, nn.Parameter) or isinstance(local, nn.Parameter) or (base.is_leaf and base.requires_grad)


def saved_activation_bytes(mesh, args, float8: bool) -> dict:
    torch.set_default_dtype(torch.bfloat16)
    model = FeedForward(args.hidden, args.ffn)
    if float8:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"))
    parallelize_module(model, mesh, tp_plan(float8))
    x = torch.randn(1, args.tokens // args.tp, args.hidden)  # this rank's sequence shard of the residual
    seen, tensors = set(), []

    def pack(t):
        key = storage_key(t)
        if key not in seen and not is_parameter(t):
            seen.add(key)
            local = getattr(t, "_local_tensor", t)
            tensors.append({"local_shape": list(local.shape), "dtype": str(getattr(local, "_data", local).dtype),
                            "bytes": local_bytes(t)})
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    total = sum(t["bytes"] for t in tensors)
    return {"tensors": tensors, "bytes": total, "bytes_per_token": total / args.tokens}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--tokens", type=int, default=8192, help="tokens of one micro-batch (the sequence before SP)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    dist.init_process_group("fake", rank=0, world_size=args.tp, store=FakeStore())
    mesh = init_device_mesh("cpu", (args.tp,))
    with FakeTensorMode(allow_non_fake_inputs=True):
        result = {"torch": torch.__version__, "tp": args.tp, "hidden": args.hidden, "ffn": args.ffn,
                  "tokens": args.tokens, "bf16": saved_activation_bytes(mesh, args, False)}
        try:
            import torchao
            result["torchao"] = torchao.__version__
            result["float8_tensorwise"] = saved_activation_bytes(mesh, args, True)
        except ImportError:
            print("torchao is not installed (scripts/torch-venv.sh installs it): float8 case skipped", file=sys.stderr)
    for case in ("bf16", "float8_tensorwise"):
        if case in result:
            r = result[case]
            print(f"{case:18s} {r['bytes'] / 1e6:9.2f} MB saved, {r['bytes_per_token']:8.1f} B per token: " +
                  ", ".join(f"{t['dtype'].replace('torch.', '')}{t['local_shape']}" for t in r["tensors"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
