#pragma once
// What the simulator plays out: per pipeline stage, the duration of every op and the bytes of every allocation,
// plus the schedule. plan_step() fills it from the planner's cost functions for a configuration; tests build small
// ones by hand with known answers.
#include <cstdint>
#include <vector>

#include "planner/context_parallel.hpp"
#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"
#include "sim/engine.hpp"

namespace shardplan::sim {

// How data-parallel gradients and parameters move.
enum class DpMode : uint8_t {
  none,        // dp = 1 (nothing to reduce)
  units,       // FSDP / ZeRO-3 (and FSDP SHARD_GRAD_OP): per-unit all-gather before compute, reduce-scatter after
  buckets,     // DDP, ZeRO-1 and DeepSpeed ZeRO-2: gradient buckets reduced as backward fills them
};

struct StageCosts {
  // Structure.
  std::vector<int64_t> chunk_layers;  // blocks of each model chunk on this stage (vpp entries)
  bool first = false, last = false;   // embedding / LM head
  // Compute of one micro-batch, seconds (planner/microbatch_costs.cpp).
  double block_fwd = 0, block_bwd = 0;  // bwd includes recomputation
  double block_wgrad = 0;               // the W share of block_bwd where the schedule splits backward (B = bwd − W)
  double tp_fwd = 0, tp_bwd = 0;        // TP collectives of one block (critical path)
  double ep_fwd = 0, ep_bwd = 0;        // EP all-to-alls of one block (critical path, their own stream)
  // Context parallelism: the ring of one block's forward and backward (planner/context_parallel.hpp). Its slices are
  // part of block_fwd / block_bwd; the simulator plays them on the compute stream and the transfers on a cp stream.
  CpRing cp_fwd, cp_bwd;
  double embed_fwd = 0, embed_bwd = 0, head_fwd = 0, head_bwd = 0;
  double optimizer = 0;                 // the optimizer step
  // Data-parallel communication, seconds (the collectives of planner/step_time.cpp dp_traffic).
  double gather_block = 0, gather_root = 0;      // DpMode::units: all-gather of one block / the root unit
  double gather_block_bwd = 0;                   // ZeRO-3 gathers again before backward (0 for SHARD_GRAD_OP)
  double copy_block = 0, copy_root = 0;          // FSDP2 copy-out of a gathered unit on the compute stream
  double reduce_block = 0, reduce_root = 0;      // reduce-scatter (+ HSDP replica all-reduce) of a unit's grads
  int64_t buckets = 0;                           // DpMode::buckets
  double reduce_bucket = 0;                      // one bucket's reduction
  double param_gather = 0;                       // ZeRO-1/2: all-gather of the updated parameters after the step
  double grad_norm = 0;                          // all-reduce of the gradient norm across all ranks
  // Parameters this rank holds (after TP), by part, for bucket filling order.
  double block_params = 0, root_params = 0, embed_params = 0, head_params = 0;
  // Memory, bytes.
  std::vector<std::pair<MemKind, double>> static_bytes;  // alive all step: model states, runtime, fixed buffers
  double activations_per_block = 0;    // saved by one block for one micro-batch
  int64_t offloaded_blocks = 0;        // Megatron's CPU activation offloading: the first N blocks' sets go to the host
  double recompute_working_set = 0;    // one block's full working set while it is recomputed (full recompute)
  // Partial recomputation (planner/partial_recompute.hpp): per block of the stage in forward order, whether it
  // recomputes (empty: every block as the strategy says); the others save activations_kept_block, hold no working
  // set and, with moments, backward_*_kept.
  std::vector<char> recomputed_blocks;
  double activations_kept_block = 0;
  double backward_grads_kept = 0, backward_temps_kept = 0;
  bool block_recomputes(int64_t l) const {
    return recomputed_blocks.empty() || (l >= 0 && static_cast<size_t>(l) < recomputed_blocks.size() &&
                                         recomputed_blocks[static_cast<size_t>(l)] != 0);
  }
  double saved_by_block(int64_t l) const { return block_recomputes(l) ? activations_per_block : activations_kept_block; }
  double first_extra = 0, last_extra = 0, logits = 0;  // per micro-batch
  double gathered_block = 0, gathered_root = 0;  // DpMode::units with ZeRO-3: compute-dtype copies
  double gathered_embed = 0, gathered_head = 0;  // DeepSpeed ZeRO-3: a module gathered for its pass and then freed
  double unit_grads = 0, root_grads = 0;         // unsharded gradients of one unit / the root before reduction
  double sharded_grads = 0;                      // no_sync: the sharded gradients appear at the first reduction
  double optimizer_temps = 0;
  double backward_bucket = 0;                    // a reduce bucket alive through each backward pass (DeepSpeed IPG)
  // Megatron-FSDP's optim_grads (ZeRO-2, parameters replicated): each unit's unsharded gradient bucket from its
  // backward until its reduce-scatter (freed as the next unit's backward ends), and the non-unit bucket from the
  // output layer's backward to the pass's end.
  double transient_unit_grads = 0, transient_root_grads = 0;
  // FSDP-family moments (planner/memory_moments.hpp MomentParts): the runtime's allocations at the ops that make them.
  // gathered_block/gathered_root are then the gathered units (params), unit_grads/root_grads the no_sync gradients.
  bool moments = false;
  bool reshard_after_forward = true;   // ZeRO-2 keeps a unit gathered until its backward ends
  double logits_bwd_extra = 0;         // the loss's backward on top of its forward's logits
  double logits_cached = 0;            // the freed bf16 logits' segment, cached while it runs (MemKind::cached_free)
  // FSDP's gradient shards come on its reduce-scatter stream (FrameworkTraits::sharded_grads_on_reduce_stream): all of
  // them are reserved from the step's start (MemKind::cached_free) and each takes its reserve's place when allocated.
  bool shards_replace_reserve = false;
  double backward_grads = 0, backward_temps = 0;  // a block's gradients and temporaries at its backward's peak
  double head_grads = 0, embed_grads = 0;         // the root's bf16 gradients, written by head / embedding backward
  double block_reduce_input = 0, root_reduce_input = 0;    // reduce-scatter inputs (reduce dtype)
  double block_sharded_grads = 0, root_sharded_grads = 0;  // appear with the unit's first reduce-scatter
  // FSDP2's ends as units of their own (planner/framework.hpp fsdp_end_units_split): the root's parts above are the
  // embedding unit's (gathered as the forward starts, under ZeRO-3 resharded after it and gathered again at block 0's
  // backward; reduced last). The [final norm, LM head] unit is gathered before the head's forward, reduced after the
  // head's backward and gathered again for the norm's (planner/memory_moments.cpp head_post_backward).
  bool end_units = false;
  double gather_head_unit = 0, copy_head_unit = 0, reduce_head_unit = 0;  // seconds
  double gathered_head_unit = 0, head_unit_reduce_input = 0, head_unit_sharded_grads = 0;
  // The embedding's MTP use (planner/framework.hpp torchtitan_mtp): its gradient held from the MTP's backward to
  // the embedding's, where the two are summed; under ZeRO-3 the unit gathered from then on (= gathered_root).
  double mtp_embed_grad = 0, mtp_embed_gathered = 0;
  double gathered_mtp_unit = 0;  // the MTP layers' units under ZeRO-2: gathered from the head's forward to its backward
  double allocator_reserve = -1;       // moments: the caching allocator's reserve in bytes (planner/allocator_reserve.hpp);
                                       // negative: the framework's fraction of what is allocated
  int64_t layers() const {
    int64_t n = 0;
    for (int64_t l : chunk_layers) n += l;
    return n;
  }
};

struct StepPlan {
  int64_t pp = 1, vpp = 1, micro_batches = 1;
  Schedule schedule = Schedule::one_f_one_b;
  DpMode dp_mode = DpMode::none;
  bool overlap_buckets = true;       // DDP-style reduction during backward (else after it)
  bool sync_every_micro = true;      // reduce every micro-batch (else only the last: no_sync)
  bool keeps_unsharded_grads = false;  // no_sync with ZeRO-2/3: unit gradients stay until the last micro-batch
  int64_t prefetch_units = 1;        // all-gathers in flight ahead of the computing unit
  bool gathers_once = false;         // DpMode::units: each unit gathered in its first forward, kept to its last
                                     // backward (torchtitan under PP; FSDP1 SHARD_GRAD_OP under no_sync)
  bool reduce_after_last_backward = false;  // DpMode::units: every unit reduce-scattered after the stage's last
                                            // backward, not behind it (torch.distributed.pipelining with FSDP)
  bool overlap_param_gather = false; // DpMode::buckets: the updated parameters' all-gather is waited for by the
                                     // next forward, bucket by bucket (played at this step's start)
  bool waits_for_root_reduce = false;  // the next pass waits for this one's reductions (framework.hpp backward_end_waits_for_reduce)
  bool prefetch_before_loss = false; // moments: the last block's backward all-gather is issued before the loss's
                                     // backward (the loss runs inside the root's forward)
  double send = 0;                   // one activation (or gradient) between consecutive stages
  double overlap_slowdown = 0;       // compute slowdown while data-parallel traffic runs
  std::vector<StageCosts> stages;    // pp entries
};

// The configuration's costs from the planner (validates the configuration first: InputError on bad input).
StepPlan plan_step(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// One stage's order of forward and backward passes: (is_forward, micro-batch, chunk).
struct PassRef {
  bool forward;
  int32_t micro;
  int32_t chunk;
  uint8_t part = 0;  // of a backward: 0 the whole, 1 B (input gradients only), 2 W (weight gradients)
};
// Megatron-LM's schedules (megatron/core/pipeline_parallel/schedules.py): GPipe (all forwards, then all
// backwards), 1F1B (warm-up p − i − 1 forwards, steady one-forward-one-backward, cool-down), interleaved 1F1B
// (warm-up (p − i − 1)·2 + (v − 1)·p model chunks; chunk of virtual micro-batch k is (k mod p·v) / p).
// ZB-H1, ZB-V and DualPipeV: torch.distributed.pipelining's orders (planner/pipeline_schedule.hpp
// split_backward_pass_order), with B and W as their own passes.
// Throws InputError for schedules that cannot run (interleaving with micro-batches not in groups of pp).
std::vector<PassRef> pass_order(const StepPlan& plan, int64_t stage);

// Adds the step's streams and ops to `engine`: one rank per stage. Returns, per stage, its compute stream id.
struct BuiltStep {
  std::vector<int32_t> compute_stream;  // [stage]
  std::vector<int32_t> last_op;         // [stage] the op that ends the stage's step
};
BuiltStep build_step(const StepPlan& plan, Engine& engine);

}  // namespace shardplan::sim
