#pragma once
// Time of one optimizer step: compute (every GEMM at its shape's efficiency, attention, memory-bound work),
// communication that is exposed (TP on the critical path, pipeline sends, the part of data-parallel traffic
// that compute cannot hide), the pipeline bubble, and the optimizer.
#include "planner/comm_cost.hpp"
#include "planner/context_parallel.hpp"
#include "planner/framework.hpp"
#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/partition.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

struct StepTime {
  bool modelled = false;
  double step_s = 0;
  double compute_s = 0;         // busy compute of the busiest stage, incl. recomputation and overlap slowdown
  double exposed_comm_s = 0;    // = tp + cp + pp + dp + ep below
  double bubble_s = 0;
  double optimizer_s = 0;
  // Exposed communication per process group.
  double exposed_tp_s = 0;
  double exposed_pp_s = 0;
  double exposed_cp_s = 0;      // context-parallel K/V ring not hidden behind the attention slices
  double exposed_dp_s = 0;      // DDP/ZeRO/FSDP/HSDP traffic compute did not hide (incl. the expert-DP group's)
  double exposed_ep_s = 0;      // expert-parallel all-to-alls on the critical path (in exposed_comm_s)
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
  double block_offload_fwd_s = 0, block_offload_bwd_s = 0;  // activation offload copies not hidden (in fwd / bwd)
  double block_wgrad_s = 0;      // the weight-gradient GEMMs within block_bwd_s (zero-bubble W passes)
  double block_host_gap_s = 0;   // host-bound launch gaps within block_fwd_s (eager MoE layers: moe_costs.hpp)
  double block_tp_fwd_s = 0;     // TP collectives of one block's forward (critical path)
  double block_tp_bwd_s = 0;     // ... of its backward, incl. recomputed forward collectives
  double block_ep_fwd_s = 0;     // expert-parallel all-to-alls of one block's forward (critical path; moe_costs.hpp)
  double block_ep_bwd_s = 0;     // ... of its backward
  double block_ep_total_s = 0;   // their own time, hidden (DualPipe) or not
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

// Expert parallelism (issue 17): a data-parallel collective over `params` parameters of which `routed` are routed
// experts runs the dense rest over the shard group and the routed experts over the smaller expert-data-parallel group
// (groups.hpp expert_dp_group), one after the other (Megatron-Core reduces the expert gradient buffers over the
// expert-DP group: distributed_data_parallel.py expert_parallel_buffers / expert_data_parallel_group). `op` is
// all_gather, reduce_scatter or all_reduce; bytes_per_param the wire dtype. Without EP, one collective over shard_group.
double split_dp_collective_s(const Strategy& s, const ClusterSpec& c, Collective op, double params, double routed,
                             double bytes_per_param);
// ZeRO-1/2's all-gather of a stage's updated parameters once per step, in the parameter dtype; Megatron's FP8
// parameters (--fp8-param-gather, planner/fp8.hpp) in one byte, the rest beside them in the parameter dtype.
double optimizer_param_gather_s(const Strategy& s, const ClusterSpec& c, const StageParams& p);
// One rank's optimizer step on stage `p`: AdamW memory-bound on its local states, or Muon's momentum pass and
// Newton–Schulz work (optimizer.hpp); ZeRO-Offload's on the host.
double stage_optimizer_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const StageParams& p);
// The gradient buckets of a DDP/ZeRO-1/2 reducer (PyTorch DDP 25 MiB; DeepSpeed reduce_bucket_size; Megatron 40 M
// parameters) over a stage's psi parameters, the routed experts' in buckets of their own (Megatron's expert buffers):
// how many, and the mean time of one bucket's reduction (reduce-scatter under ZeRO ≥ 1 and shard > 1, else all-reduce;
// HSDP's replica all-reduce added).
struct GradientBuckets {
  double count = 0;
  double per_bucket_s = 0;
};
struct FrameworkTraits;
GradientBuckets gradient_buckets(const Strategy& s, const ClusterSpec& c, const FrameworkTraits& fw, double psi,
                                 double routed, double grad_bytes);

// Compute slows while communication kernels share the GPU: NCCL runs one CTA per channel (up to 32 channels,
// NCCL docs NCCL_MAX_NCHANNELS) that the GEMMs' tiles then lack (a wave of 132 tiles on an H100 spills into a second),
// and both compete for HBM bandwidth. The overlapped part of compute takes 1 + this much longer. Measured: 18.9 % on
// average, at most 40 %, for GPT and Llama layers on A100/H100 (Lee et al. 2025, "Characterizing Compute-Communication
// Overlap in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114). Fitted on the public set with the
// sustained fractions (bench/sustained_fit.cpp; reports/accuracy.md gives its leave-one-source-out values): 0.304
// (0.298 until attention had its own sustained share; 0.315 until Blackwell Ultra had its own fraction, 2026-12-07).
constexpr double kOverlapComputeSlowdown = 0.304;
inline double overlap_compute_slowdown(const GpuSpec& g) {
  return g.comm_overlap_slowdown > 0 ? g.comm_overlap_slowdown : kOverlapComputeSlowdown;
}
// PyTorch DDP's default bucket (bucket_cap_mb = 25).
constexpr double kDdpBucketBytes = 25.0 * 1024 * 1024;

}  // namespace shardplan
