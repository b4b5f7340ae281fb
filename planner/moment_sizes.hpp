#pragma once
// Internal to planner/memory_moments.cpp: the sizes every FSDP memory moment is built from (memory_moments.hpp), per
// stage: bytes per parameter of each state, unit sizes, micro-batches held, and what the runtime keeps gathered or
// reduces when. sizes_of reads them off the stage's inputs and the framework's traits.
#include "planner/allocator_reserve.hpp"
#include "planner/memory_ledger.hpp"

namespace shardplan::memory_detail {

// What the moments share, per stage (bytes per parameter, counts).
struct Sizes {
  double n = 1;            // shard degree
  double psi = 0, block = 0, root = 0, layers = 0;
  double local = 0, block_local = 0;  // one shard of psi / of a block (routed experts over expert-DP: StageInputs)
  double a = 2;            // compute dtype: gathered parameters, unsharded gradients, activations
  double block_gather_b = 2;  // a gathered block parameter: the compute dtype, 1 B under FP8 all-gather
  double shard_b = 0;      // the persistent parameter shard: the parameter's own dtype (fp32 under amp)
  double grad_shard_b = 0; // sharded gradients: the shard's dtype (FSDPParam.sharded_param.grad)
  double reduce_b = 0;     // reduce-scatter input: the reduce dtype (MixedPrecisionPolicy.reduce_dtype)
  double accum = 1;        // micro-batches per step
  double in_flight = 1;    // micro-batches whose activations the stage holds (pipeline schedules)
  // no_sync under a pipeline whose first stage holds every micro-batch: the first backward's moments (all in flight,
  // the gradients not yet accumulated) apart from the later ones (one fewer in flight, every gradient kept).
  bool first_pass = false;
  // The first backward's last block (block 0 of the stage) instead of its first: every block's unsharded gradients
  // written, every other micro-batch still held (where the gradients a block adds outweigh the activations it frees).
  bool first_pass_end = false;
  // Inside that first backward (not at its end): how many blocks' unsharded gradients it has written (the block in
  // backward's included); block_backward sets it from its block.
  double first_pass_blocks = 1;
  // torchtitan's interleaved pipeline (keep_all_gathered, reduce_after_last): each chunk is reduced and resharded
  // right after its own last backward, so the stage's worst backward holds only some chunks' gathered parameters and
  // unsharded gradients (interleaved_hold); 1 = all of them.
  double gathered_share = 1, grad_share = 1;
  bool interleaved_hold = false;
  int64_t hold_block = -1;  // the stage's block (forward order) in backward at the worst moment: its pass's first or last
  double first_chunk_in_flight = 0;  // ... and the micro-batches of chunk 0 then held (the embedding's saved mask)
  // The last stage's worst loss backward under the same hold (another backward's start than the worst's): in_flight
  // in the held bytes' micro-batches of the stage's blocks as above, the shares of the stage's blocks.
  struct Hold {
    double in_flight = 0, first_chunk_in_flight = 0, gathered_share = 1, grad_share = 1;
  };
  bool loss_hold = false;
  Hold loss;
  double head_grad_params = 0;  // the LM head (or the tied embedding) on the last stage
  // FrameworkTraits::end_units_own where it changes anything (fsdp_end_units_split): the embedding and [final norm,
  // LM head] are units of their own, not in the root; their parameters.
  bool split = false;
  double embed_unit = 0, head_unit = 0;
  double last_unit() const { return split ? embed_unit : root; }  // the unit reduced last: root or embedding
  double embedding_grad_extra = 0;  // no_sync under DTensor TP: the embedding gradient's other TP ranks' rows
  // FrameworkTraits::torchtitan_mtp with MTP modules on the stage: the MTP layers' parameters (not in head_unit),
  // and the embedding's gradient from their use, held (with the gathered unit) from the MTP's backward to the
  // embedding's last (embed_unit · a; 0 otherwise).
  double mtp_unit = 0, mtp_embed_grad = 0;
  double down_params = 0;  // the MLP's output projection: the first weight gradient of a block's backward
  bool zero3 = false;
  bool keep_all_gathered = false;  // torchtitan under PP: every unit gathered from first forward to last backward
  bool reduce_after_last = false;  // ... and every unit reduced after the stage's last backward, none during it
  AllocatorReserve reserve;        // the caching allocator's, the same at every moment (allocator_reserve.hpp)
  // Every gradient shard of the step, when FSDP allocates them on its reduce-scatter stream
  // (FrameworkTraits::sharded_grads_on_reduce_stream); 0 otherwise.
  double reduce_stream_shards = 0;
  // Partial recomputation (planner/partial_recompute.hpp), computed once for the moments: a recomputed block's saved
  // bytes (its input), a kept block's (its working set), and the stage's blocks of one micro-batch together.
  bool partial = false;
  double saved_recomputed = 0, saved_kept = 0, saved_stage = 0;
};

Sizes sizes_of(const StageInputs& in);
// The sizes at the loss's backward: `z` with Sizes::loss in place of the worst backward's hold where it has one.
Sizes at_loss(const Sizes& z);

}  // namespace shardplan::memory_detail
