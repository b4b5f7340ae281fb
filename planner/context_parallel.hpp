#pragma once
// Context parallelism (--cp N): each sequence split over N ranks, 2·N chunks with rank i holding chunks i and
// 2N−1−i (strategy.cpp validate_context_parallel), attention computed as a ring over the ranks' K and V. What the
// ring moves, what it holds, and how much of it the attention slices hide.
#include <cstdint>

#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// How a runtime moves K and V between the CP ranks (its default; shardplan has no flag for it).
//   p2p: each ring step sends the K,V it holds to the next rank while it computes with them; backward sends K,V and
//        the accumulated dK,dV (Megatron-Core's default --cp-comm-type p2p, megatron/training/arguments.py; Transformer
//        Engine's AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py).
//   all_gather: one all-gather of K,V issued with the first slice and waited for by the second; backward gathers K,V
//        again and passes dK,dV around the ring in fp32 (torch _ContextParallelOptions.rotate_method = ALL_GATHER by
//        default, _AllGatherRotater; _templated_ring_attention_backward: dkv_rotater ALL_TO_ALL, accum_dtype float32:
//        torch/distributed/tensor/experimental/_context_parallel/_attention.py). torchtitan uses torch's default.
enum class CpComm { p2p, all_gather };
CpComm cp_comm(Framework f);
const char* to_string(CpComm c);

// torch's ring hands its output back in [B, H, S, D] memory order on every CP rank but the last: the load balancer's
// half-sequence steps update half the running output and concatenate it (_SDPAMerger._merge_one → _partial_update's
// torch.cat), where a flash kernel's own output is [B, S, H, D] in memory. The model's transpose-then-contiguous before
// the output projection (torchtitan Attention.forward) then copies it, and the attention's node keeps the ring's output
// while the projection keeps the copy: one more q-wide tensor a block (bench/torch/fsdp2_mem.py --cp, measured;
// reports/cp-memory.md). Megatron's p2p ring (Transformer Engine) returns its own layout: not affected.
bool cp_output_copied(const Strategy& s);

// K and V of this rank's seq/cp tokens of one micro-batch in one layer, TP-split: 2 · b · (seq/cp) · kv_width · a.
double cp_local_kv_bytes(const ModelSpec& m, const Strategy& s);
// The ring's transient buffers during one layer's attention, the larger of forward and backward (0 without CP):
//   p2p: two K,V buffers (send, receive) forward; two (K,V) + two (dK,dV) backward (TE p2p_comm_buffers);
//   all_gather (torch _templated_ring_attention_backward, the larger pass): the gathered K,V of the whole sequence
//   (cp × local), the local K,V concatenated as its all-gather's input (held until the wait) and made contiguous
//   (`key.contiguous()`: SDPA's K and V are transposed views), the fp32 dQ accumulator, the fp32 dK,dV accumulator
//   and the one in flight (measured at the flash backward inside the ring: reports/cp-memory.md).
double cp_kv_buffer_bytes(const ModelSpec& m, const Strategy& s);

// Memory traffic of torch's ring around its attention kernels, one block and micro-batch, bytes (0 for Megatron's p2p
// ring, whose output correction Transformer Engine fuses into its own kernels: not priced, an assumption). Forward:
// each step's output upcast to fp32 and merged into the running output and log-sum-exp, a full copy of it on the
// steps that update half (_SDPAMerger with convert_to_f32, _partial_update's torch.cat), K,V concatenated for the
// exchange. Backward: dQ, dK, dV accumulated in fp32 with the same partial copies, dK,dV concatenated every step
// (_templated_ring_attention_backward). torch/distributed/tensor/experimental/_context_parallel/_attention.py.
struct CpMergeBytes {
  double fwd = 0, bwd = 0;
};
CpMergeBytes cp_merge_bytes(const ModelSpec& m, const Strategy& s);

// One pass of ring attention (a block's forward or backward on one micro-batch): `steps` slices of the attention
// core, `slice_s` each (the load-balanced split gives every step the same work: see _attention.py's note "Context
// parallelism load balance algorithm for causal masking"). Slice 1 waits for `first_s`, issued with slice 0; each
// later slice for `step_s`, issued with the slice before; `tail_s` follows the last slice, exposed whole (the last
// dK,dV hop home; under full recomputation also the recomputed forward's ring). The hidden part slows the slices by
// kOverlapComputeSlowdown (step_time.hpp): `slowdown_s`.
struct CpRing {
  int64_t steps = 0;
  double slice_s = 0, first_s = 0, step_s = 0, tail_s = 0, slowdown_s = 0;
  // What the pass adds to the critical path beyond its slices: max(0, first − slice) + (steps − 2)·max(0, step −
  // slice) + tail + slowdown.
  double exposed() const;
};
struct CpRings {
  CpRing fwd, bwd;
};
// The rings of one block, from its attention core on this rank (forward, backward; already 1/cp of the sequence's).
CpRings cp_rings(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, double attention_fwd_s,
                 double attention_bwd_s);

}  // namespace shardplan
