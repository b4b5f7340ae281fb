#pragma once
// Per-rank memory of the PyTorch FSDP family (FSDP2 `fully_shard`, FSDP1, torchtitan) as the runtime allocates it.
// The step's peak is the largest of a few distinct moments, each with what is live then (reports/fsdp2-memory.md,
// "The peak is one of four moments"; Ψ parameters of the stage's rank, N shard ranks, R the root unit, B a block):
//   cross-entropy backward  12Ψ/N states; gathered root (+ the last block's prefetch when the loss runs inside the
//                           root's forward); no gradient yet (zero_grad(set_to_none=True)); every block's saved
//                           activations; 12 B per logit
//   block k backward        states; gathered root + block k + the prefetched block k − 1 (ZeRO-2: blocks 0..k);
//                           LM-head gradients; block k's gradients; block k + 1's fp32 reduce-scatter input; fp32
//                           sharded gradients of the blocks already reduced; blocks 0..k's activations and block k's
//                           backward temporaries (its recomputed working set under full recompute)
//   root post-backward      states; 4(Ψ − R)/N sharded gradients; the root's bf16 gradients and fp32 reduce-scatter
//                           input (6 B × R)
//   head post-backward      with the embedding and [final norm, LM head] units of their own (torchtitan since
//                           2025-07; the root is then empty and the embedding's post-backward takes its place):
//                           states; the head unit's shard and fp32 reduce-scatter input; the unit gathered again
//                           for the norm's backward (2 × 2 B × H); every block's activations
//   optimizer step          20Ψ/N under amp: fp32 shard, fp32 gradient, Adam m and v, foreach's sqrt temporary
// Components as CONTRACT.md's amp-bf16 names them: `params` the bf16 compute copies alive (gathered units; pure-bf16
// also its bf16 shards), `master` the fp32 shards, `grads` every gradient byte (sharded, unsharded, reduce-scatter
// inputs), `buffers` optimizer temporaries, RoPE caches, pipeline and sequence-parallel buffers. Every term names its
// PyTorch source in memory_moments.cpp.
#include <cstdint>

#include "planner/memory_ledger.hpp"

namespace shardplan::memory_detail {

// Whether memory follows these moments: frameworks with FrameworkTraits::memory_moments, sharded data parallelism
// (ZeRO-2/3 over `shard` ranks, or over one where the runtime still works unit by unit: units_on_one_rank),
// optimizer states on the device. sim/costs.cpp builds FSDP's units on the same rule.
bool moments_apply(const Strategy& s, const FrameworkTraits& fw, int64_t shard);
bool uses_moments(const StageInputs& in);  // moments_apply for the stage
// no_sync under gradient accumulation: FSDP2/FSDP1 keep each unit's unsharded gradients from its first backward to
// the micro-batch that syncs (ZeRO-2/3, per-step sync, more than one micro-batch), over `shard` ranks or over one
// where the runtime still works unit by unit (FSDP2's accumulation into unsharded_accumulated_grad does not look at
// the mesh's size: _fsdp_param.py FSDPParam.to_accumulated_grad_if_needed). sim/costs.cpp plays the same rule.
bool keeps_unsharded_grads(const Strategy& s, const FrameworkTraits& fw, int64_t shard);

struct MomentLedger {
  Ledger ledger;
  MemoryPhase phase = MemoryPhase::forward_backward;
  int64_t block = -1;  // block_backward: the stage's block
};

// The stage's largest moment (runtime, buffers and the allocator's reserve included). With `record`, its items are
// described.
// by_allocation: the moment with the most bytes allocated (torch.cuda.max_memory_allocated) instead of reserved, the
// caching allocator's moment-dependent reserve (cached segments, shards to come on another stream) left out.
MomentLedger peak_moment(const StageInputs& in, bool record, bool by_allocation = false);

// One moment, by phase (and block for block_backward; sub 0 = the MLP's backward, 1 = the attention's): for the
// simulator's agreement tests and for reports that list every moment.
MomentLedger moment_at(const StageInputs& in, MemoryPhase phase, int64_t block, int sub, bool record);

}  // namespace shardplan::memory_detail

namespace shardplan {

// The parts the moments are made of, per stage rank, for the simulator (sim/costs.cpp, sim/schedule.cpp) to allocate
// at the ops where the runtime allocates them; the same numbers the analytic moments add up.
struct MomentParts {
  bool applies = false;          // the stage's memory follows the moments (memory_detail::uses_moments)
  // Alive all step.
  double shard_params = 0;       // parameter shards in a half dtype (pure-bf16)
  double shard_master = 0;       // fp32 parameter shards (amp: the master copy)
  double optimizer = 0;          // Adam m and v
  double model_buffers = 0;      // RoPE caches
  // Per micro-batch.
  double logits_forward = 0;     // bf16 logits, fp32 upcast, log_softmax output: at the loss's forward
  double logits_backward = 0;    // at its backward (FrameworkTraits::loss_backward_bytes_per_logit)
  double logits_cached = 0;      // the freed bf16 logits' segment, cached through the backward (`fragmentation`)
  double last_extra = 0;         // final norm and LM head inputs
  double gathered_block = 0, gathered_root = 0;
  bool reshard_after_forward = true;  // ZeRO-3; ZeRO-2 keeps units gathered until their post-backward
  double backward_grads = 0;     // a block's gradients at its backward's peak (bf16)
  double backward_temps = 0;     // ... and its temporaries (with the recomputed working set under full recompute)
  double backward_grads_kept = 0, backward_temps_kept = 0;  // the same for a block that partial recomputation keeps
  double head_grads = 0, embed_grads = 0;         // the root unit's bf16 gradients, as its backward writes them
  // The ends as units of their own (fsdp_end_units_split): gathered_root, embed_grads and the root's reduce-scatter
  // input and shard are then the embedding unit's; the [final norm, LM head] unit's below (head_post_backward).
  bool end_units = false;
  double gathered_head_unit = 0, head_unit_reduce_input = 0, head_unit_sharded_grads = 0;
  // FrameworkTraits::torchtitan_mtp: from the MTP's backward (before the norm's) to the embedding's, its gradient
  // from the MTP's use and, under ZeRO-3, the embedding unit gathered again early; the embedding's backward adds a sum.
  double mtp_embed_grad = 0, mtp_embed_gathered = 0;
  double gathered_mtp_unit = 0;  // ... and its MTP layers' units, gathered from their forward to their backward (ZeRO-2)
  double block_reduce_input = 0, root_reduce_input = 0;    // reduce-scatter inputs in the reduce dtype
  double block_sharded_grads = 0, root_sharded_grads = 0;  // appear with the unit's first reduce-scatter
  double accumulated_block = 0, accumulated_root = 0;      // no_sync: unsharded gradients kept across micro-batches
  double optimizer_temps = 0;
  double allocator_reserve = 0;  // the `fragmentation` component (allocator_reserve.hpp), the same at every moment
  // FrameworkTraits::sharded_grads_on_reduce_stream: every gradient shard of the step, reserved (`fragmentation`) until
  // its unit's reduce-scatter allocates it (memory_moments.cpp add_reduce_stream_reserve); 0 otherwise.
  double reduce_stream_reserve = 0;
};
MomentParts moment_parts(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const StageParams& st);

}  // namespace shardplan
