"""Context parallelism for the cross-check's torchtitan-style decoder (fsdp2_mem.py --cp N): torch's ring attention
on fake tensors.

torchtitan runs CP through torch's `context_parallel` context manager around each forward and backward
(torchtitan/distributed/utils.py create_context_parallel_ctx / train_context; train.py at 9dec370 the same): the
token, label (and RoPE) buffers are split along the sequence into 2·cp chunks, rank i keeping chunks i and 2cp−1−i
(the head-tail load balancer), F.scaled_dot_product_attention is patched to turn q, k, v into DTensors sharded on
the sequence, and DTensor's dispatch hands the flash kernel to the ring (torch/distributed/tensor/experimental/
_context_parallel/_attention.py: _sdpa_handler → _templated_ring_attention, K/V all-gathered by default,
`set_rotate_method("allgather")`; backward re-gathers K/V and passes dK/dV around the ring in fp32). The mesh is
torchtitan's: (dp_shard, cp), FSDP over the two flattened ("dp_shard_cp"), CP over "cp".

On fake CPU tensors SDPA would pick the CPU flash op, which the ring does not know, and a ring run inside DTensor's
dispatch would allocate below the memory tracker's dispatch mode, unseen. `flash_sdpa` runs the same ring functions
on the local shards inside an autograd.Function (RingFlash) with CUDA's aten._scaled_dot_product_flash_attention
per step (its meta function runs under FakeTensorMode on CPU tensors, its backward too): the op a GPU run hands the
ring, and every buffer the ring makes is tracked.
"""
import contextlib

import torch
import torch.nn.functional as F

FLASH_CUDA_OP = torch.ops.aten._scaled_dot_product_flash_attention.default


def check(seq: int, cp: int, ranks: int, tp: int = 1) -> None:
    """`ranks`: the ranks CP groups cp at a time (fsdp2_mem.py: all of them; pp_mem.py: a stage's dp × cp); `tp`: the
    sequence-parallel split of each CP rank's tokens."""
    if cp <= 1:
        return
    if ranks % cp:
        raise ValueError(f"--cp {cp} needs a multiple of it as ranks, got {ranks}")
    if seq % (2 * cp * tp):
        raise ValueError(f"--cp {cp} needs --seq a multiple of 2·cp·tp = {2 * cp * tp} (the load balancer's chunks, "
                         "then sequence parallelism)")


def meshes(ranks: int, cp: int):
    """(FSDP's mesh, CP's mesh): torchtitan's world mesh (dp_shard, cp) with FSDP over dp_shard_cp."""
    from torch.distributed.device_mesh import init_device_mesh
    world = init_device_mesh("cpu", (ranks // cp, cp), mesh_dim_names=("dp_shard", "cp"))
    return world["dp_shard", "cp"]._flatten("dp_shard_cp"), world["cp"]


class RingFlash(torch.autograd.Function):
    """What a GPU run does under CP, with every allocation at the top of the dispatch where the tracker sees it. There
    F.sdpa's q, k, v are DTensors and the flash op's forward and backward are handed to the ring inside DTensor's
    dispatch (_sdpa_handler), below autograd; the op's autograd node keeps the local q, k, v, output and log-sum-exp.
    Here the same two ring functions run inside an autograd.Function that keeps the same tensors."""

    @staticmethod
    def forward(ctx, q, k, v, group, scale):  # q [B, H, S/cp, hd], k and v [B, Hkv, S/cp, hd]
        from torch.distributed.tensor.experimental._context_parallel._attention import _templated_ring_attention
        out, lse, *rest = _templated_ring_attention(group, 2, torch.ops.aten._scaled_dot_product_flash_attention,
                                                    query=q, key=k, value=v, is_causal=True, dropout_p=0.0, scale=scale)
        cum_q, cum_k, max_q, max_k, seed, offset = rest[:6]
        ctx.save_for_backward(q, k, v, out, lse, seed, offset)
        ctx.ring = (group, scale, cum_q, cum_k, max_q, max_k)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from torch.distributed.tensor.experimental._context_parallel._attention import (
            _templated_ring_attention_backward)
        q, k, v, out, lse, seed, offset = ctx.saved_tensors
        group, scale, cum_q, cum_k, max_q, max_k = ctx.ring
        dq, dk, dv, *_ = _templated_ring_attention_backward(
            group, 2, torch.ops.aten._scaled_dot_product_flash_attention_backward.default, grad_out=grad_out,
            grad_out_name="grad_out", query=q, key=k, value=v, out=out, logsumexp=lse, is_causal=True,
            cum_seq_q=cum_q, cum_seq_k=cum_k, max_q=max_q, max_k=max_k, dropout_p=0.0, philox_seed=seed,
            philox_offset=offset, scale=scale)
        return dq, dk, dv, None, None


def flash_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention under context_parallel's patch, which hands it q, k, v as DTensors sharded on
    the sequence over the CP mesh: the ring on their local shards (RingFlash), the output wrapped back."""
    from torch.distributed.tensor import DTensor
    if attn_mask is not None or not is_causal or not isinstance(query, DTensor):
        raise ValueError(f"context parallelism here takes causal attention without a mask, on DTensors: "
                         f"{type(query).__name__}, mask {attn_mask is not None}, causal {is_causal}")
    group = query.device_mesh.get_group()
    out = RingFlash.apply(query.to_local(), key.to_local(), value.to_local(), group, scale)
    return DTensor.from_local(out, query.device_mesh, query.placements, run_check=False)


# context_parallel's patch wraps F's attribute of the wrapped function's own name (_distribute_function: setattr(F,
# fn.__name__, wrapper)), so this one must be named as the function it stands in for.
flash_sdpa.__name__ = "scaled_dot_product_attention"


@contextlib.contextmanager
def cp_context(cp_mesh, buffers):
    """One forward and backward under torch's context_parallel, `buffers` ([B, S] tokens, labels) split along S in
    place (torchtitan passes them as no_restore_buffers: they are used up)."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    set_rotate_method("allgather")  # torch's default and torchtitan's (parallelism.context_parallel_rotate_method)
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = flash_sdpa
    try:
        with context_parallel(cp_mesh, buffers=list(buffers), buffer_seq_dims=[1] * len(buffers),
                              no_restore_buffers=set(buffers)):
            yield
    finally:
        F.scaled_dot_product_attention = original
