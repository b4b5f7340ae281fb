// Pipeline schedules: bubble formulas, in-flight activations, and the pass orders of the zero-bubble family as
// torch.distributed.pipelining builds them (torch/distributed/pipelining/schedules.py), so that the simulator plays
// exactly what torchtitan runs.
#include "planner/pipeline_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <deque>

#include <fmt/format.h>

#include "planner/compute_cost.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/precision.hpp"

namespace shardplan {

std::optional<std::string> pipeline_microbatch_refusal(const Strategy& s) {
  if (s.pp < 2) return std::nullopt;
  const int64_t m = grad_accum_steps(s);
  if (m < 1) return std::nullopt;  // validate_batch names the batch flags
  if (s.schedule == Schedule::zb_h1 && s.vpp > 1) {
    // ScheduleInterleavedZeroBubble.__init__: number_of_rounds = max(1, m // pp); m % number_of_rounds == 0.
    const int64_t rounds = std::max<int64_t>(1, m / s.pp);
    if (m % rounds != 0)
      return fmt::format("--schedule zb-h1 with --vpp {} needs the micro-batches per step ({}) to be a multiple of its "
                         "rounds max(1, m // pp) = {} (torch.distributed.pipelining ScheduleInterleavedZeroBubble); "
                         "change --global-batch or --micro-batch",
                         s.vpp, m, rounds);
  }
  if (s.schedule == Schedule::dualpipev && m < 2 * s.pp)
    return fmt::format("--schedule dualpipev needs at least 2·pp = {} micro-batches per step, got {} "
                       "(torch.distributed.pipelining ScheduleDualPipeV); raise --global-batch or lower --micro-batch",
                       2 * s.pp, m);
  return std::nullopt;
}

namespace {

// Whether Megatron's GPipe / 1F1B / interleaved order exists for these micro-batches (interleaving needs them in
// groups of pp: schedules.py get_pp_rank_microbatches; the simulator refuses the rest).
bool megatron_order_exists(Schedule schedule, int64_t p, int64_t v, int64_t m) {
  if (p == 1 || schedule == Schedule::gpipe || schedule == Schedule::one_f_one_b) return v == 1;
  return schedule == Schedule::interleaved && v >= 2 && m % p == 0;
}

// Pass j of a rank under Megatron-LM's schedules (megatron/core/pipeline_parallel/schedules.py; torch's Schedule1F1B
// and ScheduleInterleaved1F1B play the same orders): GPipe every forward then every backward; 1F1B p − i − 1 warm-up
// forwards (Narayanan et al. 2021 §2.2.1), then one forward one backward, then the cool-down backwards; interleaved
// the same over the m·v virtual micro-batches of InterleavedOrder (§2.2.2). Without pipelining: forward, backward.
PipelinePass megatron_pass(Schedule schedule, int64_t p, int64_t v, int64_t m, int64_t rank, int64_t j) {
  auto f = [](int64_t mb, int64_t c) { return PipelinePass{PassKind::forward, static_cast<int32_t>(mb), static_cast<int32_t>(c)}; };
  auto b = [](int64_t mb, int64_t c) { return PipelinePass{PassKind::backward_full, static_cast<int32_t>(mb), static_cast<int32_t>(c)}; };
  if (p == 1) return j % 2 == 0 ? f(j / 2, 0) : b(j / 2, 0);
  if (schedule == Schedule::gpipe) return j < m ? f(j, 0) : b(j - m, 0);
  const InterleavedOrder o{p, v};
  const int64_t total = m * v;
  const int64_t warmup = v == 1 ? std::min(p - rank - 1, m) : o.warmup(rank, total);
  auto fwd = [&](int64_t k) { return v == 1 ? f(k, 0) : f(o.micro(k), o.forward_chunk(k)); };
  auto bwd = [&](int64_t k) { return v == 1 ? b(k, 0) : b(o.micro(k), o.backward_chunk(k)); };
  if (j < warmup) return fwd(j);
  const int64_t steady = 2 * (total - warmup);
  if (j < warmup + steady) {
    const int64_t k = (j - warmup) / 2;
    return (j - warmup) % 2 == 0 ? fwd(warmup + k) : bwd(k);
  }
  return bwd(total - warmup + (j - warmup - steady));
}

// The bubble of a walked schedule: its makespan less the stage's own work and transfers. The slowest stage's idle
// settles once the steady phase is long enough for the others' slack to absorb what it can (a few rounds of pp
// micro-batches; sim/rerank.cpp's extrapolation assumes the same, and 2·pp·v keeps every rounds rule the schedules
// have), so the walk stops at 2·pp·v micro-batches and its bubble stands for the step's. −1: no order to walk.
double walked_bubble(const Strategy& s, int64_t v, const std::vector<ChunkPassTimes>& chunks, const StagePassTimes& t) {
  const int64_t walked = std::min(grad_accum_steps(s), 2 * s.pp * v);
  const double makespan = pipeline_makespan(s.schedule, s.pp, v, walked, chunks);
  if (!(makespan > 0)) return -1;
  const double w = static_cast<double>(walked);
  return std::max(0.0, makespan - w * (t.fwd + t.bwd + t.tp) - w * 2 * static_cast<double>(v) * t.send);
}

}  // namespace

PipelineTimes pipeline_times(const Strategy& s, const StagePassTimes& t) {
  PipelineTimes out;
  if (s.pp <= 1) return out;
  const double ga = static_cast<double>(grad_accum_steps(s));
  const double v = static_cast<double>(chunks_per_rank(s));
  const double p = static_cast<double>(s.pp);
  out.exposed_pp_s = ga * 2 * v * t.send;
  // One micro-batch through the stage, with its transfers: the unit the bubble formulas count in.
  const double whole = t.fwd + t.bwd + t.tp + 2 * v * t.send;
  const double w = std::min(t.wgrad, t.bwd);
  switch (s.schedule) {
    case Schedule::gpipe:
    case Schedule::one_f_one_b:
    case Schedule::interleaved: out.bubble_s = (p - 1) / v * whole; break;
    // ZB-H1 (interleaved or not), ZB-V and DualPipeV: the critical path of torch's pass order
    // (pipeline_makespan) less the stage's own work and transfers. Where the papers' assumptions hold it is
    // their figure: ZB-H1's (p − 1)(T_F + T_B − T_W), T_B = B − W (Qi et al. 2024 §2.1), ÷ v interleaved, for
    // m ≥ p and T_W ≤ T_B (torch's interleaved zero bubble also runs m < p, where the bubble grows); ZB-V's
    // "zero bubble" (ibid. §6) only up to its (p − 1)·T_F warm-up offset, the rest needing the next step's warm-up
    // to overlap this cool-down; DualPipe's (PP/2 − 1)(F&B + B − 3W) (DeepSeek-V3 Table 2) counts an overlapped
    // F&B pair as one unit and bounds the played order from above. tests/test_pipeline_schedules.cpp checks each.
    case Schedule::zb_h1:
    case Schedule::zbv:
    case Schedule::dualpipev: {
      const double tp_half = t.tp / 2 / v;
      const ChunkPassTimes chunk{(t.fwd / v) + tp_half, (t.bwd - w) / v + tp_half, w / v, t.send};
      out.bubble_s = std::max(0.0, walked_bubble(s, chunks_per_rank(s),
                                                 std::vector<ChunkPassTimes>(static_cast<size_t>(s.pp) * chunks_per_rank(s), chunk), t));
      break;
    }
  }
  return out;
}

PipelineTimes pipeline_times(const ModelSpec& m, const Strategy& s, const MicrobatchCosts& mb, double block_wgrad,
                             const StagePassTimes& t) {
  if (s.pp <= 1) return {};
  const int64_t v = chunks_per_rank(s), pieces = virtual_stage_count(s);
  const double w_block = schedule_splits_backward(s.schedule)
                             ? std::min(block_wgrad, mb.block_bwd_s + mb.block_recompute_s)
                             : 0;
  // One chunk's times as the simulator plays it (sim/costs.cpp, sim/schedule.cpp): its blocks with their TP
  // collectives and EP all-to-alls, the embedding on the first piece, the head and loss on the last.
  auto chunk = [&](int64_t r, int64_t c) {
    const auto blocks = static_cast<double>(chunk_layers(m, s, r, c));
    const int64_t k = virtual_stage_of(s, r, c);
    ChunkPassTimes x;
    x.fwd = blocks * (mb.block_fwd_s + mb.block_tp_fwd_s + mb.block_ep_fwd_s + mb.block_cp_fwd_s) +
            (k == 0 ? mb.embed_fwd_s : 0) + (k == pieces - 1 ? mb.head_fwd_s : 0);
    x.input_grad = blocks * (mb.block_bwd_s + mb.block_recompute_s - w_block + mb.block_tp_bwd_s + mb.block_ep_bwd_s +
                             mb.block_cp_bwd_s) +
                   (k == 0 ? mb.embed_bwd_s : 0) + (k == pieces - 1 ? mb.head_bwd_s : 0);
    x.wgrad = blocks * w_block;
    x.send = t.send;
    return x;
  };
  const double ga = static_cast<double>(grad_accum_steps(s));
  PipelineTimes out;
  out.exposed_pp_s = ga * 2 * static_cast<double>(v) * t.send;  // as pipeline_times(s, t)
  std::vector<ChunkPassTimes> chunks;
  chunks.reserve(static_cast<size_t>(s.pp * v));
  double all = 0, lo = 0, hi = 0;
  for (int64_t r = 0; r < s.pp; ++r)
    for (int64_t c = 0; c < v; ++c) {
      chunks.push_back(chunk(r, c));
      const ChunkPassTimes& x = chunks.back();
      const double each = x.fwd + x.input_grad + x.wgrad;
      all += each;
      lo = chunks.size() == 1 ? each : std::min(lo, each);
      hi = std::max(hi, each);
    }
  // The B/W-split schedules are always walked. The others: with equal chunks the formula (Narayanan et al. 2021
  // §2.2's (p − 1) stage times, ÷ v interleaved) is the schedule's critical path; with unequal ones (an uneven split,
  // the embedding and the LM head) the slowest stage waits less than the others' sum, their slack absorbing part of
  // its fill and drain, so the critical path is walked as the simulator plays it (pipeline_makespan).
  if (schedule_splits_backward(s.schedule) || hi > lo * (1 + 1e-9)) {
    const double bubble = walked_bubble(s, v, chunks, t);
    if (bubble >= 0) {
      out.bubble_s = bubble;
      return out;
    }
  }
  const double others = std::max(0.0, all - (t.fwd + t.bwd + t.tp));
  const double sends = static_cast<double>(s.pp - 1) * 2 * static_cast<double>(v) * t.send;
  out.bubble_s = (others + sends) / static_cast<double>(v);
  return out;
}

double pipeline_makespan(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches, const ChunkPassTimes& t) {
  const int64_t v = schedule_is_v_shaped(schedule) ? 2 : std::max<int64_t>(1, vpp);
  return pipeline_makespan(schedule, pp, vpp, micro_batches, std::vector<ChunkPassTimes>(static_cast<size_t>(pp * v), t));
}

double pipeline_makespan(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                         const std::vector<ChunkPassTimes>& chunks) {
  const int64_t p = pp, v = schedule_is_v_shaped(schedule) ? 2 : std::max<int64_t>(1, vpp), m = micro_batches;
  const int64_t pieces = p * v;
  // The piece (virtual stage) of a rank's chunk, and the rank that runs a piece (pipeline_layout.cpp's mapping).
  const bool v_shaped = schedule_is_v_shaped(schedule);
  auto piece_of = [&](int64_t r, int64_t c) { return v_shaped ? (c == 0 ? r : 2 * p - 1 - r) : r + c * p; };
  auto rank_of = [&](int64_t k) { return v_shaped ? (k < p ? k : 2 * p - 1 - k) : k % p; };
  // The B/W-split schedules' orders are built; Megatron's 1F1B, interleaved and GPipe are computed pass by pass
  // (megatron_pass, no allocation: the search walks every unequal pipeline it prices).
  const bool built = p > 1 && schedule_splits_backward(schedule);
  if (!built && !megatron_order_exists(schedule, p, v, m)) return 0;
  std::vector<std::vector<PipelinePass>> orders;
  if (built)
    for (int64_t r = 0; r < p; ++r) orders.push_back(split_backward_pass_order(schedule, p, v, m, r));
  const size_t passes = static_cast<size_t>(2 * m * v);
  auto count = [&](size_t ri) { return built ? orders[ri].size() : passes; };
  auto pass = [&](int64_t r, size_t j) {
    return built ? orders[static_cast<size_t>(r)][j] : megatron_pass(schedule, p, v, m, r, static_cast<int64_t>(j));
  };
  // Finish times of each piece's forward and input-gradient backward per micro-batch; −1 = not yet played.
  std::vector<double> forward(static_cast<size_t>(pieces * m), -1), backward(static_cast<size_t>(pieces * m), -1);
  std::vector<double> free_at(static_cast<size_t>(p), 0);
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  auto at = [&](int64_t k, int32_t mb) { return static_cast<size_t>(k * m + mb); };
  // A worklist of ranks: each runs its passes until one waits for an input not yet produced, and is visited again
  // only when a neighbour produces something for it (each pass is played once; no rescans of blocked ranks).
  std::vector<int64_t> work;
  std::vector<char> queued(static_cast<size_t>(p), 1);
  work.reserve(static_cast<size_t>(p));
  for (int64_t r = p - 1; r >= 0; --r) work.push_back(r);
  auto wake = [&](int64_t r) {
    if (!queued[static_cast<size_t>(r)]) queued[static_cast<size_t>(r)] = 1, work.push_back(r);
  };
  while (!work.empty()) {
    const int64_t r = work.back();
    work.pop_back();
    const auto ri = static_cast<size_t>(r);
    queued[ri] = 0;
    while (next[ri] < count(ri)) {
      const PipelinePass x = pass(r, next[ri]);
      const int64_t k = piece_of(r, x.chunk);
      const ChunkPassTimes& t = chunks[static_cast<size_t>(r * v + x.chunk)];
      double ready = 0, seconds = 0;
      // What the pass waits for (its input, delivered), and whether it sends its output to another rank.
      bool sends = false;
      if (x.kind == PassKind::forward) {
        if (k > 0) {
          ready = forward[at(k - 1, x.micro)];
          if (ready < 0) break;
        }
        seconds = t.fwd;
        sends = k < pieces - 1 && rank_of(k + 1) != r;
      } else if (x.kind == PassKind::backward_weight) {
        seconds = t.wgrad;
      } else {
        ready = k < pieces - 1 ? backward[at(k + 1, x.micro)] : forward[at(k, x.micro)];
        if (ready < 0) break;
        seconds = t.input_grad + (x.kind == PassKind::backward_full ? t.wgrad : 0);
        sends = k > 0 && rank_of(k - 1) != r;
      }
      // Transfers block their sender, as Megatron's and torch's batched p2p waits do (sim/schedule.cpp send).
      const double end = std::max(free_at[ri], ready) + seconds + (sends ? t.send : 0);
      free_at[ri] = end;
      if (x.kind == PassKind::forward) {
        forward[at(k, x.micro)] = end;
        if (k < pieces - 1) wake(rank_of(k + 1));
      } else if (x.kind != PassKind::backward_weight) {
        backward[at(k, x.micro)] = end;
        if (k > 0) wake(rank_of(k - 1));
      }
      ++next[ri];
    }
  }
  double makespan = 0;
  for (int64_t r = 0; r < p; ++r) makespan = std::max(makespan, free_at[static_cast<size_t>(r)]);
  return makespan;
}

double split_backward_in_flight(const Strategy& s, int64_t stage) {
  const double p = static_cast<double>(s.pp);
  const double m = static_cast<double>(grad_accum_steps(s));
  (void)stage;
  switch (s.schedule) {
    case Schedule::zb_h1: {
      if (s.vpp <= 1) return std::min(p, m);
      const double v = static_cast<double>(s.vpp);
      const double rounds = std::max(1.0, std::floor(m / p));
      const double per_round = m / rounds;
      // _get_warmup_ops (multiply_factor 1): (v − 1)·r + (p − 1 − rank) forwards, then rank passes without W before
      // the W passes start: (v − 1)·r + p chunks at the peak, at most every chunk of every micro-batch.
      return std::min((v - 1) * per_round + p, m * v) / v;
    }
    case Schedule::zbv: return std::min(p, m);
    case Schedule::dualpipev: return (2 * p + 1) / 2;
    default: return 1;
  }
}

namespace {

// _get_1f1b_rank_ops(..., num_1f1b_microbatches = rank, enable_zero_bubble = True) as ScheduleInterleavedZeroBubble
// calls it: warm-up forwards, then F + B per step, each step's W deferred by `rank` steps, then the remaining Ws.
std::vector<PipelinePass> interleaved_zero_bubble(int64_t p, int64_t v, int64_t m, int64_t rank) {
  const int64_t rounds = std::max<int64_t>(1, m / p);
  const int64_t per_round = m / rounds;
  const int64_t warmup = std::min((v - 1) * per_round + (p - 1 - rank), m * v);  // _get_warmup_ops, factor 1
  const int64_t ops = m * v, steady = ops - warmup;
  auto fwd_chunk = [&](int64_t step) { return (step / per_round) % v; };
  auto bwd_chunk = [&](int64_t step) { return v - 1 - ((step - warmup) / per_round) % v; };
  std::vector<int32_t> f_count(static_cast<size_t>(v), 0), b_count(static_cast<size_t>(v), 0),
      w_count(static_cast<size_t>(v), 0);
  std::vector<int64_t> backward_steps;
  std::vector<PipelinePass> out;
  out.reserve(static_cast<size_t>(3 * ops));
  auto add = [&](PassKind k, int64_t chunk, std::vector<int32_t>& count) {
    out.push_back({k, count[static_cast<size_t>(chunk)]++, static_cast<int32_t>(chunk)});
  };
  size_t weights = 0;
  auto weight = [&] {
    add(PassKind::backward_weight, bwd_chunk(backward_steps[weights]), w_count);
    ++weights;
  };
  for (int64_t step = 0; step < warmup + steady + warmup; ++step) {
    if (step < warmup) {
      add(PassKind::forward, fwd_chunk(step), f_count);
      continue;
    }
    if (step < warmup + steady) add(PassKind::forward, fwd_chunk(step), f_count);
    add(PassKind::backward_input, bwd_chunk(step), b_count);
    backward_steps.push_back(step);
    if (step - warmup >= rank) weight();
  }
  while (weights < backward_steps.size()) weight();
  return out;
}

// ScheduleZBVZeroBubble._calculate_single_rank_operations: chunk 0 runs virtual stage rank, chunk 1 stage 2p − 1 −
// rank; micro-batches beyond m that the warm-up formula assumes (max(2p − 1, m)) are dropped.
std::vector<PipelinePass> zbv(int64_t p, int64_t m, int64_t rank) {
  const int64_t n = std::max(2 * p - 1, m);
  std::vector<PipelinePass> out;
  int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  auto push = [&](PassKind k, int32_t mb, int32_t chunk) {
    if (mb < m) out.push_back({k, mb, chunk});
  };
  for (int64_t i = 0; i < 2 * (p - rank) - 1; ++i) push(PassKind::forward, f0++, 0);
  for (int64_t i = 0; i < rank; ++i) push(PassKind::forward, f1++, 1), push(PassKind::forward, f0++, 0);
  for (int64_t i = 0; i < p - rank; ++i) {
    push(PassKind::forward, f1++, 1);
    push(PassKind::backward_input, b1, 1);
    push(PassKind::backward_weight, b1++, 1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) push(PassKind::forward, f0++, 0);
    push(PassKind::backward_input, b0, 0);
    push(PassKind::backward_weight, b0++, 0);
    push(PassKind::forward, f1++, 1);
    push(PassKind::backward_input, b1, 1);
    push(PassKind::backward_weight, b1++, 1);
  }
  int32_t w0 = b0, w1 = b1;
  for (int64_t i = 0; i < rank; ++i) push(PassKind::backward_input, b0++, 0), push(PassKind::backward_input, b1++, 1);
  for (int64_t i = 0; i < p - rank; ++i) push(PassKind::backward_input, b0++, 0), push(PassKind::backward_weight, w0++, 0);
  while (w1 < b1) push(PassKind::backward_weight, w1++, 1);
  while (w0 < b0) push(PassKind::backward_weight, w0++, 0);
  return out;
}

// ScheduleDualPipeV._calculate_single_rank_operations (after deepseek-ai/DualPipe dualpipe.py's eight steps): its
// overlapped F+B pairs run one after the other on the rank; a W pass is taken from the queue of earlier B passes.
std::vector<PipelinePass> dualpipev(int64_t p, int64_t m, int64_t rank) {
  std::vector<PipelinePass> out;
  int32_t f[2] = {0, 0}, b[2] = {0, 0};
  std::deque<std::pair<int32_t, int32_t>> weights;  // (chunk, micro-batch) whose W is pending
  auto forward = [&](int32_t c) { out.push_back({PassKind::forward, f[c]++, c}); };
  auto backward = [&](int32_t c, bool zero_bubble) {
    if (zero_bubble) {
      weights.push_back({c, b[c]});
      out.push_back({PassKind::backward_input, b[c]++, c});
    } else {
      out.push_back({PassKind::backward_full, b[c]++, c});
    }
  };
  auto weight = [&] {
    if (weights.empty()) return;
    out.push_back({PassKind::backward_weight, weights.front().second, weights.front().first});
    weights.pop_front();
  };
  for (int64_t i = 0; i < (p - rank - 1) * 2; ++i) forward(0);                         // step 1: F0
  for (int64_t i = 0; i < rank + 1; ++i) forward(0), forward(1);                       // step 2: F0 F1
  for (int64_t i = 0; i < p - rank - 1; ++i) backward(1, true), weight(), forward(1);  // step 3: I1 W F1
  for (int64_t i = 0; i < m - 2 * p + rank + 1; ++i) {                                  // step 4: F0B1 F1B0
    forward(0), backward(1, false);
    forward(1), backward(0, false);
  }
  for (int64_t i = 0; i < p - rank - 1; ++i) backward(1, false), forward(1), backward(0, false);  // step 5
  const int64_t step6 = rank + 1;                                                       // step 6: B1 B0, then I
  bool zero_bubble = false;
  for (int64_t i = 0; i < step6; ++i) {
    if (i == step6 / 2 && rank % 2 == 1) zero_bubble = true;
    backward(1, zero_bubble);
    if (i == step6 / 2 && rank % 2 == 0) zero_bubble = true;
    backward(0, zero_bubble);
  }
  for (int64_t i = 0; i < p - rank - 1; ++i) weight(), backward(0, zero_bubble);  // step 7: W B0
  for (int64_t i = 0; i < rank + 1; ++i) weight();                                 // step 8: W
  return out;
}

}  // namespace

std::vector<PipelinePass> split_backward_pass_order(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                                                    int64_t rank) {
  switch (schedule) {
    case Schedule::zb_h1: return interleaved_zero_bubble(pp, std::max<int64_t>(1, vpp), micro_batches, rank);
    case Schedule::zbv: return zbv(pp, micro_batches, rank);
    case Schedule::dualpipev: return dualpipev(pp, micro_batches, rank);
    default: return {};
  }
}

std::vector<PipelinePass> pipeline_pass_order(Schedule schedule, int64_t pp, int64_t vpp, int64_t micro_batches,
                                              int64_t rank) {
  if (pp > 1 && schedule_splits_backward(schedule)) return split_backward_pass_order(schedule, pp, vpp, micro_batches, rank);
  const int64_t v = std::max<int64_t>(1, vpp);
  if (!megatron_order_exists(schedule, pp, v, micro_batches)) return {};
  std::vector<PipelinePass> order;
  const int64_t passes = 2 * micro_batches * v;
  order.reserve(static_cast<size_t>(passes));
  for (int64_t j = 0; j < passes; ++j) order.push_back(megatron_pass(schedule, pp, v, micro_batches, rank, j));
  return order;
}

int64_t peak_live_chunks(const std::vector<PipelinePass>& order) {
  int64_t live = 0, peak = 0;
  for (const PipelinePass& pass : order) {
    if (pass.kind == PassKind::forward) peak = std::max(peak, ++live);
    else if (pass.kind != PassKind::backward_input) --live;
  }
  return peak;
}

}  // namespace shardplan
