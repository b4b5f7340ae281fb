"""The training recipe the FSDP2 harnesses share (fsdp2_mem.py, pp_mem.py): torchtitan's activation checkpointing,
fully_shard per block and root with its mixed-precision policy, and AdamW. Split out of fsdp2_mem.py, which keeps the
tracker and the run."""
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

# The CPU flash-attention op stands for CUDA's under fake CPU tensors (README.md "CPU fake tensors standing in for
# CUDA"): the selective policy saves it, the tracker counts its calls.
FLASH_OP = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def recompute_mode(text: str) -> str:
    """argparse type: none | full | selective | layersN | everyK (see apply_recompute)."""
    if text in ("none", "full", "selective"):
        return text
    for prefix in ("layers", "every"):
        if text.startswith(prefix) and text[len(prefix):].isdigit() and int(text[len(prefix):]) >= 1:
            return text
    raise ValueError(f"--recompute {text}: none, full, selective, layersN or everyK")


def recomputed(mode: str, index: int) -> bool:
    """Whether block `index` (0-based, forward order) is checkpointed. layersN: the first N blocks (Megatron-Core's
    --recompute-method block, transformer_block.py _checkpointed_forward); everyK: the K-th, 2K-th, ... counted from 1
    (torchtitan's layer SAC, activation_checkpoint.py _apply_layer_sac); full and selective: every block."""
    if mode.startswith("layers"):
        return index < int(mode[len("layers"):])
    if mode.startswith("every"):
        return (index + 1) % int(mode[len("every"):]) == 0
    return mode in ("full", "selective")


def apply_recompute(impl, model, mode: str) -> None:
    """torchtitan/distributed/activation_checkpoint.py: FullAC wraps each block in ptd_checkpoint_wrapper;
    SelectiveAC (op policy) saves compute-intensive ops and attention, recomputing every second mm. layersN and
    everyK wrap only some blocks for full recomputation (recomputed)."""
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def selective_context():
        from torch._functorch.partitioners import get_default_op_list
        save = {op.default for op in get_default_op_list().compute_intensive_ops}
        save |= {torch.ops.aten.linear.default, FLASH_OP}  # the CPU flash op stands for CUDA's, which is listed
        mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            mode_key = "recompute" if ctx.is_recompute else "forward"
            if func in mm_ops:
                count[mode_key] += 1
            if func in save:
                if func in mm_ops and count[mode_key] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    blocks = impl.block_container(model)
    for index, (name, block) in enumerate(list(blocks.named_children())):
        if not recomputed(mode, index):
            continue
        # torchtitan passes early_stop=False: the recompute runs the whole block forward again
        if mode != "selective":
            wrapped = checkpoint_wrapper(block, preserve_rng_state=False, early_stop=False)
        else:
            wrapped = checkpoint_wrapper(block, context_fn=selective_context, preserve_rng_state=False,
                                         early_stop=False)
        blocks.register_module(name, wrapped)


def apply_fsdp(impl, model, mesh, zero: int, wrap: str) -> int:
    """fully_shard per block, then the root; MixedPrecisionPolicy(bf16 params, fp32 reduce) as torchtitan.
    ZeRO-3 reshards blocks after forward (the root keeps the default: not resharded, FSDPState._lazy_init);
    ZeRO-2 never does. wrap=titan also gives the embedding and [norm, lm_head] units of their own."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = zero == 3
    units = 0
    if wrap == "titan":
        emb, norm, head = impl.head_modules(model)
        if impl.shape.tied_embeddings:
            fully_shard([emb, norm, head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
            units += 1
        else:
            fully_shard(emb, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            fully_shard([norm, head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
            units += 2
    for block in impl.block_container(model).children():
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        units += 1
    # torchtitan/models/deepseek_v3/mtp.py apply_fsdp_to_mtp_decoder: each MTP layer a unit as the blocks (wrap titan,
    # torchtitan's wrapping since MTP exists); with wrap blocks they stay in the root.
    if wrap == "titan":
        for layer in getattr(model, "mtp_layers", []):
            fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
            units += 1
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=None if reshard else False)
    return units + 1


def make_optimizer(params, impl: str):
    kw = {"lr": 1e-4, "betas": (0.9, 0.95), "weight_decay": 0.1}
    if impl == "fused":
        return torch.optim.AdamW(params, fused=True, **kw)
    return torch.optim.AdamW(params, foreach=(impl == "foreach"), **kw)
