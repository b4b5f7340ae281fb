#pragma once
// The pipeline schedules' arithmetic: the bubble and the pipeline transfers on the critical path, the activations
// each stage holds in flight, the micro-batch counts each schedule accepts, and, for the schedules that split the
// backward into B (input gradients) and W (weight gradients), the W share of a block and the order of passes each
// rank runs (which sim/schedule.cpp plays).
//
// Bubbles, per micro-batch stage times F (forward), B (full backward incl. recomputation and TP), W (its weight-
// gradient GEMMs), p stages, v chunks per rank, m micro-batches (Narayanan et al. 2021 §2.2; Qi et al. 2024 "Zero
// Bubble Pipeline Parallelism", arXiv 2401.10241, §2-§6; DeepSeek-V3 technical report, arXiv 2412.19437, §3.2.1):
//   GPipe, 1F1B          (p − 1)(F + B)
//   interleaved 1F1B     (p − 1)(F + B)/v
//   ZB-H1, ZB-V,         the critical path of torch's pass order at the stage's per-chunk times
//   DualPipeV            (pipeline_makespan) less the stage's own work. It equals ZB-H1's
//                        (p − 1)(T_F + T_B − T_W), T_B = B − W (§2.1; ÷ v interleaved) for m ≥ p and T_W ≤ T_B,
//                        leaves ZB-V only its (p − 1)·T_F warm-up offset at T_F = T_B = T_W (§6's zero bubble
//                        once steps overlap), and stays below DualPipe's (PP/2 − 1)(F&B + B − 3W) (DeepSeek-V3
//                        Table 2), which counts an overlapped F&B pair as one unit: tests/test_pipeline_schedules.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/step_time.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Megatron's interleaved 1F1B order (schedules.py forward_backward_pipelining_with_interleaving), which the simulator
// plays (sim/pass_order.cpp) and the memory model walks: forward k runs micro-batch (k / p·v)·p + k mod p on chunk
// (k mod p·v) / p, backward k the same micro-batch on chunk v − 1 − (k mod p·v) / p; rank `stage` warms up with
// (p − stage − 1)·2 + (v − 1)·p forwards (at most all m·v of them), then alternates one forward, one backward.
struct InterleavedOrder {
  static constexpr int64_t kMaxChunks = 64;  // chunks per rank the memory model walks (fixed arrays, no allocation)
  int64_t p = 1, v = 1;
  int64_t micro(int64_t k) const { return (k / (p * v)) * p + k % p; }
  int64_t forward_chunk(int64_t k) const { return (k % (p * v)) / p; }
  int64_t backward_chunk(int64_t k) const { return v - 1 - (k % (p * v)) / p; }
  int64_t warmup(int64_t stage, int64_t total) const {
    const int64_t w = (p - stage - 1) * 2 + (v - 1) * p;
    return w < total ? w : total;
  }
};

// Micro-batches per step the schedule cannot run with (torch.distributed.pipelining's checks), or nothing:
//   zb-h1 with vpp > 1: a multiple of its rounds max(1, m // pp) (ScheduleInterleavedZeroBubble);
//   dualpipev: at least 2·pp (ScheduleDualPipeV: "at least as many microbatches as stages").
std::optional<std::string> pipeline_microbatch_refusal(const Strategy& s);

// One stage's per-micro-batch times for the schedule formulas.
struct StagePassTimes {
  double fwd = 0;    // forward compute
  double bwd = 0;    // full backward compute, incl. recomputation
  double wgrad = 0;  // the W part of bwd (0 for schedules without a B/W split)
  double tp = 0;     // TP collectives on the critical path, forward and backward
  double send = 0;   // one activation or gradient between consecutive stages
};

struct PipelineTimes {
  double bubble_s = 0;
  double exposed_pp_s = 0;  // pipeline transfers on the critical path, whole step
};

// The bubble (formulas above) and the transfers: each micro-batch and chunk pairs a send with a receive
// (Megatron's send_forward_recv_backward), two transfers on the critical path. Every stage at the times `t`.
PipelineTimes pipeline_times(const Strategy& s, const StagePassTimes& t);

// The same for the model's real stages, which an uneven split, the embedding and the LM head make unequal; `t` is
// the slowest stage's (it sets the steady-state pace). 1F1B, interleaved, GPipe: the warm-up and cool-down pass
// through every other stage once, Σ_{i ≠ slowest} T_i (÷ v interleaved) in place of (p − 1)·T — the same for equal
// stages; the B/W-split schedules: the critical path with each rank's own chunk times. `block_wgrad` is
// MicrobatchCosts::block_wgrad_s, one block's weight-gradient GEMMs (dW = Xᵀ·dY of QKV, projection, MLP up/gate and
// down; attention, elementwise work and TP collectives stay in B), or 0 without a B/W split.
PipelineTimes pipeline_times(const ModelSpec& m, const Strategy& s, const MicrobatchCosts& mb, double block_wgrad,
                             const StagePassTimes& t);

// Micro-batches whose activations stage `stage` holds at its peak, in units of "all of the stage's layers", for the
// schedules with a B/W split (a micro-batch's activations live from its forward to its W):
//   ZB-H1: min(p, m) on every stage (W of stage i is delayed by i passes, §2.1: 1F1B's peak everywhere);
//   ZB-H1 interleaved: ((v − 1)·r + p)/v chunks' worth, r = m / max(1, m // p) micro-batches per round;
//   ZB-V: min(p, m) (2p half-size chunks: "the same memory as 1F1B", §6);
//   DualPipeV: (2p + 1)/2 (DeepSeek-V3 Table 2: PP + 1 chunks of DualPipe; here chunks of half a stage).
double split_backward_in_flight(const Strategy& s, int64_t stage);

// The passes one rank runs, in order, for the schedules with a B/W split, from torch.distributed.pipelining
// (ScheduleInterleavedZeroBubble with _get_1f1b_rank_ops(enable_zero_bubble); ScheduleZBVZeroBubble;
// ScheduleDualPipeV): F forward, B input gradients, W weight gradients, BW a full backward (DualPipeV's main phase).
enum class PassKind : uint8_t { forward, backward_input, backward_weight, backward_full };
struct PipelinePass {
  PassKind kind;
  int32_t micro;
  int32_t chunk;
};
std::vector<PipelinePass> split_backward_pass_order(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                                                    int64_t rank);
// Any schedule's passes for one rank: the B/W-split ones above; Megatron-LM's GPipe (every forward, then every
// backward), 1F1B (warm-up p − i − 1 forwards, one forward one backward, cool-down) and interleaved 1F1B
// (InterleavedOrder) with full backwards (megatron/core/pipeline_parallel/schedules.py; torch's Schedule1F1B and
// ScheduleInterleaved1F1B play the same orders). Empty for an interleaved step whose micro-batches are not in
// groups of pp (the simulator refuses it; pipeline_times keeps its formula).
std::vector<PipelinePass> pipeline_pass_order(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                                              int64_t rank);

// One chunk's pass times for pipeline_makespan: forward, B (input gradients), W (weight gradients; a full backward is
// B + W), and one transfer between ranks (none at a V's turn, which stays on its rank).
struct ChunkPassTimes {
  double fwd = 0, input_grad = 0, wgrad = 0, send = 0;
};
// The step's pipeline makespan when every rank plays its pipeline_pass_order with these times and each pass waits for
// its input from the neighbouring piece: a longest path through the schedule, no allocation per pass beyond the
// orders themselves. 0 where the schedule has no order for these micro-batches.
double pipeline_makespan(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches, const ChunkPassTimes& t);
// With each rank's chunks at their own times: `chunks[rank · vpp + chunk]` (vpp = 2 for the V-shaped schedules).
double pipeline_makespan(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                         const std::vector<ChunkPassTimes>& chunks);

// The most micro-batch chunks whose activations are alive at once in `order` (a forward adds one; a W or a full
// backward frees it): the peak that split_backward_in_flight gives in closed form (tests compare the two).
int64_t peak_live_chunks(const std::vector<PipelinePass>& order);

}  // namespace shardplan
