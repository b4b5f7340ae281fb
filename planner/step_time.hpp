#pragma once
// Time of one optimizer step: compute (every GEMM at its shape's efficiency, attention, memory-bound work),
// communication that is exposed (TP on the critical path, pipeline sends, the part of data-parallel traffic
// that compute cannot hide), the pipeline bubble, and the optimizer.
#include "planner/context_parallel.hpp"
#include "planner/framework.hpp"
#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

struct StepTime {
  bool modelled = false;
  double step_s = 0;
  double compute_s = 0;         // busy compute of the busiest stage, incl. recomputation and overlap slowdown
  double exposed_comm_s = 0;    // = tp + cp + pp + dp below
  double bubble_s = 0;
  double optimizer_s = 0;
  // Exposed communication per process group.
  double exposed_tp_s = 0;
  double exposed_pp_s = 0;
  double exposed_cp_s = 0;      // context-parallel K/V ring not hidden behind the attention slices
  double exposed_dp_s = 0;      // DDP/ZeRO/FSDP/HSDP traffic compute did not hide
  double dp_comm_total_s = 0;   // all DP traffic, hidden or not
  double overlap_slowdown_s = 0;  // compute lost to communication kernels running alongside (in compute_s)
};

// Costs of one micro-batch on one rank that depend only on the model, tp, sp, micro-batch, sequence,
// recomputation, attention kernel and precision — not on dp, pp or sharding. The search computes them once
// per such combination and reuses them across the rest.
struct MicrobatchCosts {
  double block_fwd_s = 0;        // one block forward: GEMMs, attention, elementwise
  double block_bwd_s = 0;        // one block backward (input and weight gradients)
  double block_recompute_s = 0;  // forward work recomputation repeats in the backward pass
  double block_wgrad_s = 0;      // the weight-gradient GEMMs within block_bwd_s (zero-bubble W passes)
  double block_tp_fwd_s = 0;     // TP collectives of one block's forward (critical path)
  double block_tp_bwd_s = 0;     // ... of its backward, incl. recomputed forward collectives
  // Context parallelism (planner/context_parallel.hpp): the rings of one block, and what they add to its forward and
  // backward beyond the attention slices (critical path, like the TP collectives).
  CpRings cp;
  double block_cp_fwd_s = 0, block_cp_bwd_s = 0;
  double embed_fwd_s = 0, embed_bwd_s = 0;
  double head_fwd_s = 0, head_bwd_s = 0;  // final norm, LM head, loss (incl. their TP collectives)
};

// One activation (or its gradient) sent between consecutive pipeline stages; 0 without a pipeline.
double pipeline_send_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

MicrobatchCosts microbatch_costs(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// The rest of the model, from precomputed micro-batch costs. Allocates nothing, except for the schedules with a B/W
// split, whose bubble is the critical path of their pass orders (planner/pipeline_schedule.hpp).
StepTime step_time_from_costs(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const FrameworkTraits& fw,
                              const MicrobatchCosts& mb);

StepTime estimate_step_time(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// Compute slows while communication kernels share the GPU: NCCL runs one CTA per channel (up to 32 channels,
// NCCL docs NCCL_MAX_NCHANNELS) and competes for HBM bandwidth. The overlapped part of compute takes this much
// longer; a calibration profile replaces it.
constexpr double kOverlapComputeSlowdown = 0.10;
// PyTorch DDP's default bucket (bucket_cap_mb = 25).
constexpr double kDdpBucketBytes = 25.0 * 1024 * 1024;

}  // namespace shardplan
