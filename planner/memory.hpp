#pragma once
// Per-rank memory of one training configuration, every part named, at the moment of the peak.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/precision.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// A planned peak under 80 % of HBM did not run out of memory in 454 runs (Fujii et al. 2024, arXiv 2411.06465):
// the default of --max-hbm-fraction, the line `plan` ranks under.
constexpr double kSafeFractionOfCapacity = 0.80;
// --max-hbm-fraction must lie in (0, 1]: InputError naming the flag otherwise.
double checked_max_hbm_fraction(double f);
// The fit rule in words, for the outputs: what `fits` means and what the planning line is.
std::string memory_fit_rule(double max_hbm_fraction, bool expandable_segments = false);

// The parts of CONTRACT.md's `memory.components`, in bytes.
struct MemoryComponents {
  double params = 0;
  double grads = 0;
  double master = 0;
  double optimizer = 0;
  double activations = 0;
  double logits = 0;
  double buffers = 0;
  double runtime = 0;
  double fragmentation = 0;
  double model_states() const { return params + grads + master + optimizer; }
  double total() const;
};

// One line of the explanation: which component, what it is, how many bytes.
struct MemoryItem {
  std::string component;  // one of the MemoryComponents names
  std::string what;
  double bytes = 0;
};

// The moment of a stage's peak. Frameworks with FrameworkTraits::memory_moments (the PyTorch FSDP family) name one of
// the step's distinct moments (planner/memory_moments.hpp); the others add every part's maximum in forward/backward.
enum class MemoryPhase { forward_backward, optimizer_step, loss_backward, block_backward, root_post_backward, head_post_backward };
const char* to_string(MemoryPhase p);
// The moment in words, with the block for a block's backward ("block 78 backward").
std::string moment_name(MemoryPhase p, int64_t block);

struct StageMemory {
  int64_t stage = 0;
  int64_t params_per_rank = 0;  // parameters this rank's stage holds after TP, before DP sharding
  MemoryPhase peak_phase = MemoryPhase::forward_backward;
  int64_t peak_block = -1;      // block_backward: which of the stage's blocks (0 = its first in forward order)
  MemoryComponents peak;        // at the stage's peak
  std::vector<MemoryItem> items;  // the peak's parts, finer grained
  // The moment with the most bytes allocated (torch.cuda.max_memory_allocated) and its parts. The peak above is what
  // the caching allocator reserves (max_memory_reserved): where part of its reserve depends on the moment (gradient
  // shards still to come on FSDP's reduce-scatter stream, a freed segment kept cached) the two moments can differ.
  MemoryPhase allocated_phase = MemoryPhase::forward_backward;
  int64_t allocated_block = -1;
  MemoryComponents allocated;
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;  // one per pipeline stage
  size_t busiest = 0;               // index of the stage with the highest peak
  int64_t capacity_bytes = 0;
  // Host memory for ZeRO-Offload: per rank, and per node (all its ranks); 0 without offload.
  double host_bytes_per_rank = 0;
  double host_activation_bytes_per_rank = 0;  // of which offloaded activations (--offload-activations)
  double host_bytes_per_node = 0;
  double host_capacity_bytes = 0;   // per node; 0 = unknown
  // The share of HBM a planned peak may take (--max-hbm-fraction): the margin left for what the model cannot see.
  double max_hbm_fraction = kSafeFractionOfCapacity;
  bool expandable_segments = false;  // the allocator mode in force (fit_bytes)
  const StageMemory& peak_stage() const { return stages[busiest]; }
};



// Every stage, with described items: for reports.
MemoryEstimate estimate_memory(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// The busiest stage's peak only, without descriptions or allocation: for the search's inner loop. Agrees with
// estimate_memory's busiest stage (tests).
struct MemoryPeak {
  MemoryComponents peak;
  int64_t stage = 0;
  int64_t params_per_rank = 0;
  MemoryPhase phase = MemoryPhase::forward_backward;
  int64_t block = -1;
};
struct FrameworkTraits;
MemoryPeak estimate_peak_memory(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);

// The bytes that decide whether a peak fits HBM. The caching allocator's reserve (`fragmentation`) is memory it keeps
// cached beyond what is allocated; by default a free block inside a segment that still holds live blocks cannot be
// returned, so the reserve can fail a run. With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
// a segment is virtual memory the allocator maps page by page, and before an allocation fails it unmaps every free
// page (c10/cuda/CUDACachingAllocator.cpp: ExpandableSegment::unmap, called by release_cached_blocks), so only what
// is allocated (and the CUDA/NCCL runtime) has to fit; the reserve still shows in max_memory_reserved, hence in the
// peak.
double fit_bytes(const MemoryComponents& peak, bool expandable_segments);

// The fp32 gradient copy some optimizers make for the step (FrameworkTraits::optimizer_fp32_grad_copy_bytes): bytes
// for `local_params` parameters of this rank; 0 where the gradients are fp32 already or not sharded.
double optimizer_grad_copy_bytes(const Strategy& s, const FrameworkTraits& fw, double local_params);

// Textbook model states per rank (ZeRO, Rajbhandari et al. 2020, §5.1 and Figure 1): params, grads, master and
// optimizer of `params` parameters under ZeRO stage `zero` sharded over `shard` ranks.
MemoryComponents model_states(double params, Precision p, int zero, int64_t shard);
MemoryComponents model_states(double params, const StateBytes& b, int zero, int64_t shard);

// One stage's model states under expert parallelism: the routed experts (StageParams::routed_experts) sharded over
// the expert-data-parallel group, everything else over shard_degree (Megatron-Core distributed optimizer: separate
// expert buffers reduced and sharded over the expert-DP group, distributed_data_parallel.py expert_parallel_buffers).
struct StageParams;
MemoryComponents stage_model_states(const StageParams& st, const Strategy& s);

// The blocks' weights on one rank under Megatron's FP8 parameters (fp8.hpp fp8_params_only): what they would take in
// the parameter dtype (`replaced`, part of stage_model_states' params) and what they take as FP8 instead.
struct Fp8BlockWeights {
  double replaced = 0;
  double fp8 = 0;
};
Fp8BlockWeights fp8_block_weights(const StageParams& st, const Strategy& s);
// The block parameters whose Transformer Engine FP8 cast (with its transpose) is alive: every block's, kept from the
// first micro-batch of the step; under ZeRO-3 only the gathered units' (current + prefetch), freed with them.
struct FrameworkTraits;
double fp8_cast_params(const StageParams& st, const Strategy& s, const FrameworkTraits& fw);

// DeepSpeed ZeRO-3 fetches parameters submodule by submodule, and each Linear is one
// (runtime/zero/partitioned_param_coordinator.py fetch_sub_module: the current submodule's own partitions; prefetch:
// the parameters of the submodules traced next, popped until stage3_prefetch_bucket_size elements, at least one), so
// a block is never gathered whole: the largest linear of a block on one TP rank, its weight only.
int64_t largest_block_linear_params(const ModelSpec& m, const Strategy& s);
// What DeepSpeed's prefetch holds beside the submodule computing: the bucket, or one more linear where that is larger.
double deepspeed_prefetched_params(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);

// The components with their rounded byte counts, in CONTRACT.md order; they sum to the peak exactly.
struct NamedBytes {
  const char* name;
  int64_t bytes;
};
std::vector<NamedBytes> component_bytes(const MemoryComponents& c);
// Bytes beyond any machine (2^59 ≈ 576 PB): predict() refuses a configuration that needs more per GPU, and
// conversions to integers saturate there so that no sum of components can overflow int64.
constexpr double kMaxPlausibleBytes = 576460752303423488.0;
int64_t bytes_to_int(double bytes);
int64_t peak_bytes(const MemoryComponents& c);

}  // namespace shardplan
