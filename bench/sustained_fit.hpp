#pragma once
// The fitted parameters of the compute model: the tensor throughput a training step sustains per GPU generation
// (planner/compute_cost.hpp sustained_tensor_fraction). Fitted together on the public set, each source weighted
// equally, and checked by leaving each source out of the fit in turn and predicting it with the values the others
// give. (A third value, eager PyTorch's share against Megatron's fused stack, was fitted with them on 2026-12-01 and
// came out 1.000 with leave-one-out values of 0.94–1.00: the set does not tell the runtimes apart once the
// generations' values are in, so the model has no such parameter.)
#include <string>
#include <vector>

#include "bench/published_runs.hpp"

namespace shardplan::validation {

struct ComputeFraction {
  double ampere = 1, hopper = 1, blackwell = 1, blackwell_ultra = 1;
  // Fitted with them: how much longer compute runs beside communication kernels (planner/step_time.hpp
  // overlap_compute_slowdown); the one value every generation shares.
  double overlap_slowdown = 0.1;
  // The share of the fused attention kernels' benchmark rates a step sustains, every generation alike
  // (planner/compute_cost.cpp kAttentionSustained); 0 = the planner's constant.
  double attention = 1;
  // The share of its generation's fraction an FP8 GEMM keeps (planner/compute_cost.cpp kFp8OverBf16Sustained): held,
  // not fitted (0 = the planner's constant). The same-layout BF16/FP8 pairs the bench prints set it; in the fit it
  // trades against Blackwell's fraction (that generation's rows are nearly all FP8) along a flat valley.
  double fp8_ratio = 0;
};

struct SourceFit {
  std::string source;
  int rows = 0;
  double in_sample_error = 0;  // mean |error| of the source's rows at the fit on every source
  ComputeFraction held_out;    // the fit without this source
  double held_out_error = 0;   // mean |error| of the source's rows at that fit
};

struct ComputeFit {
  ComputeFraction fit;         // on every source
  int rows = 0;
  double in_sample_error = 0;  // mean |error| over the rows, each row alike
  double held_out_error = 0;   // the same, each row predicted with its own source left out
  int moe_rows_apart = 0;      // MoE rows: predicted and reported, not fitted on (sustained_fit.cpp)
  std::vector<SourceFit> sources;
};

// Historical and MoE rows apart. `group` names a row's source for the leave-one-out (accuracy.cpp source_group).
ComputeFit fit_compute_fraction(const PublishedRuns& runs, std::string (*group)(const PublishedRun&));

// The host-bound launch gaps of eager MoE layers (planner/moe_costs.hpp moe_host_gap_s): a fixed host time per MoE layer
// and micro-batch, one per local expert, and the share of the fixed time a flex dispatcher (DeepEP, HybridEP) keeps;
// with them the share of the dense sustained rate the routed experts' grouped GEMMs keep (planner/moe_costs.cpp
// kGroupedOverDenseSustained). Fitted on the MoE rows with the dense fit's fractions held, each source weighted
// equally; checked by leaving each source out.
struct MoeHost {
  double layer_s = 0, local_expert_s = 0, fused_dispatch_share = 1;
  double grouped_gemm_ratio = 1;  // GpuSpec::grouped_gemm_ratio
};
struct MoeHostSource {
  std::string source;
  int rows = 0;
  double in_sample_error = 0, held_out_error = 0;
  MoeHost held_out;
};
struct MoeHostFit {
  MoeHost fit;
  int rows = 0;
  double before_error = 0;     // mean |error| with no host gap
  double in_sample_error = 0, held_out_error = 0;
  std::vector<MoeHostSource> sources;
};
MoeHostFit fit_moe_host(const PublishedRuns& runs, const ComputeFraction& dense,
                        std::string (*group)(const PublishedRun&));

}  // namespace shardplan::validation
