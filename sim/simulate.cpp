// Plays a planned step and explains it: where each stage's time went (by sweeping its streams), its memory peak
// and what was live at it, and how far both are from the analytic model.
#include "sim/simulate.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "planner/framework.hpp"
#include "planner/pipeline_layout.hpp"

namespace shardplan::sim {

namespace {

enum Lane : int { kCompute = 0, kTp, kCp, kPp, kDp, kEp, kLanes };

Lane lane_of(StreamKind k) {
  switch (k) {
    case StreamKind::compute: return kCompute;
    case StreamKind::tp: return kTp;
    case StreamKind::cp: return kCp;
    case StreamKind::pp: return kPp;
    case StreamKind::ep: return kEp;
    default: return kDp;
  }
}

struct Edge {
  double t;
  int lane;
  int delta;
  bool operator<(const Edge& o) const { return t < o.t; }
};

// Where each stage's time went. A moment when the compute stream is idle is charged to what the stage was doing
// instead, in the order TP collective, pipeline transfer (its own or one arriving), data-parallel traffic; with
// nothing running the stage waits for others (bubble).
std::vector<StageTime> breakdown(const Engine& e, double step, bool v_shaped) {
  const auto ranks = static_cast<size_t>(e.ranks());
  std::vector<std::vector<Edge>> edges(ranks);
  std::vector<StageTime> out(ranks);
  const int32_t last_rank = e.ranks() - 1;
  for (size_t i = 0; i < e.ops().size(); ++i) {
    const OpInfo& op = e.ops()[i];
    const StreamInfo& st = e.streams()[static_cast<size_t>(op.stream)];
    const double a = e.start(static_cast<int32_t>(i)), b = e.end(static_cast<int32_t>(i));
    const int lane = lane_of(st.kind);
    StageTime& t = out[static_cast<size_t>(st.rank)];
    t.end_s = std::max(t.end_s, b);
    if (lane == kCompute) {
      if (op.kind == OpKind::optimizer) t.optimizer_s += b - a;
      else t.busy_compute_s += b - a, t.overlap_slowdown_s += std::max(0.0, (b - a) - op.work);
    }
    if (b <= a) continue;
    edges[static_cast<size_t>(st.rank)].push_back({a, lane, 1});
    edges[static_cast<size_t>(st.rank)].push_back({b, lane, -1});
    // A transfer also keeps its receiver waiting.
    if (op.kind == OpKind::send_act || op.kind == OpKind::send_grad) {
      // V-shaped schedules send chunk 1's activations towards rank 0 and its gradients away from it.
      const int32_t towards = (op.kind == OpKind::send_act ? 1 : -1) * (v_shaped && op.chunk == 1 ? -1 : 1);
      int32_t to = st.rank + towards;
      if (to > last_rank) to = 0;
      if (to < 0) to = last_rank;
      edges[static_cast<size_t>(to)].push_back({a, kPp, 1});
      edges[static_cast<size_t>(to)].push_back({b, kPp, -1});
    }
  }
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<Edge>& ev = edges[r];
    std::sort(ev.begin(), ev.end());
    StageTime& t = out[r];
    t.stage = static_cast<int64_t>(r);
    int active[kLanes] = {};
    double now = 0;
    auto charge = [&](double until) {
      const double dt = std::min(until, step) - now;
      if (dt <= 0) return;
      if (active[kCompute] > 0) {
      } else if (active[kTp] > 0) t.exposed_tp_s += dt;
      else if (active[kCp] > 0) t.exposed_cp_s += dt;
      else if (active[kEp] > 0) t.exposed_ep_s += dt;
      else if (active[kPp] > 0) t.exposed_pp_s += dt;
      else if (active[kDp] > 0) t.exposed_dp_s += dt;
      else t.bubble_s += dt;
    };
    for (const Edge& x : ev) {
      charge(x.t);
      now = std::max(now, x.t);
      active[x.lane] += x.delta;
    }
    charge(step);
  }
  return out;
}

// The moment of a peak: the compute op of the rank that started last at or before it (a reduce-scatter or gather
// that reaches the peak runs beside the backward that needs it).
void name_moment(const Engine& e, int32_t rank, const RankMemory& m, StagePeak& p) {
  int32_t at = -1;
  for (size_t i = 0; i < e.ops().size(); ++i) {
    const OpInfo& op = e.ops()[i];
    const StreamInfo& st = e.streams()[static_cast<size_t>(op.stream)];
    if (st.rank != rank || st.kind != StreamKind::compute) continue;
    const double start = e.start(static_cast<int32_t>(i));
    if (start <= m.peak_time && (at < 0 || start >= e.start(at))) at = static_cast<int32_t>(i);
  }
  if (m.peak_op >= 0 && e.streams()[static_cast<size_t>(e.ops()[static_cast<size_t>(m.peak_op)].stream)].kind == StreamKind::compute)
    at = m.peak_op;
  if (at < 0) return;
  const OpInfo& op = e.ops()[static_cast<size_t>(at)];
  switch (op.kind) {
    // The loss's logits live from the head's forward to its backward: a peak reached at either is the loss's moment.
    case OpKind::head_fwd:
    case OpKind::head_bwd: p.moment = MemoryPhase::loss_backward; break;
    case OpKind::backward:
    case OpKind::backward_weight: p.moment = MemoryPhase::block_backward, p.block = op.layer; break;
    case OpKind::embed_bwd: p.moment = MemoryPhase::root_post_backward; break;
    case OpKind::head_regather: p.moment = MemoryPhase::head_post_backward; break;
    case OpKind::optimizer: p.moment = MemoryPhase::optimizer_step; break;
    default: break;
  }
}

StagePeak peak_of(const Engine& e, int32_t rank, double fragmentation, double reserve) {
  const RankMemory& m = e.memory(rank);
  StagePeak p;
  p.stage = rank;
  p.allocated = m.peak;
  p.time_s = m.peak_time;
  p.during = m.peak_op >= 0 ? op_name(e.ops()[static_cast<size_t>(m.peak_op)]) : "start of the step";
  name_moment(e, rank, m, p);
  for (int k = 0; k < static_cast<int>(MemKind::count); ++k) {
    const auto kind = static_cast<MemKind>(k);
    const double bytes = m.live[k];
    if (bytes <= 0.5) continue;
    // Cached free segments are reported within the allocator's reserve (fragmentation), not as a live allocation.
    if (kind != MemKind::cached_free) p.live.push_back({kind, bytes, m.count[k]});
    const std::string comp = component_of(kind);
    MemoryComponents& c = p.components;
    if (comp == "params") c.params += bytes;
    else if (comp == "grads") c.grads += bytes;
    else if (comp == "master") c.master += bytes;
    else if (comp == "optimizer") c.optimizer += bytes;
    else if (comp == "activations") c.activations += bytes;
    else if (comp == "logits") c.logits += bytes;
    else if (comp == "fragmentation") c.fragmentation += bytes;  // cached free segments: reserved, not allocated
    else if (comp == "runtime") c.runtime += bytes;
    else c.buffers += bytes;
  }
  std::sort(p.live.begin(), p.live.end(), [](const LiveItem& a, const LiveItem& b) { return a.bytes > b.bytes; });
  // The allocator's reserve on what is allocated through it (memory.cpp add_fragmentation: not the runtime).
  // The FSDP family's moments carry the caching allocator's reserve in bytes (planner/allocator_reserve.hpp).
  const double cached = p.components.fragmentation;
  p.allocated -= cached;
  p.fragmentation = cached + (reserve >= 0 ? reserve : fragmentation * (p.allocated - p.components.runtime));
  p.components.fragmentation = p.fragmentation;
  p.peak_bytes = p.allocated + p.fragmentation;
  return p;
}

}  // namespace

std::string op_name(const OpInfo& op) {
  const std::string mb = op.micro >= 0 ? fmt::format(" mb{}", op.micro) : "";
  const std::string chunk = op.chunk > 0 ? fmt::format(" c{}", op.chunk) : "";
  const std::string layer = op.layer >= 0 ? fmt::format(" L{}", op.layer) : "";
  switch (op.kind) {
    case OpKind::forward: return "F" + mb + chunk + layer;
    case OpKind::backward: return "B" + mb + chunk + layer;
    default: return to_string(op.kind) + mb + chunk + layer;
  }
}

SimResult simulate_plan(const StepPlan& plan, double fragmentation, bool record_timeline) {
  const auto t0 = std::chrono::steady_clock::now();
  SimResult r;
  auto owned = std::make_shared<Engine>(plan.overlap_slowdown);
  Engine& engine = *owned;
  build_step(plan, engine);
  engine.run(record_timeline);
  r.step_s = engine.makespan();
  r.stages = breakdown(engine, r.step_s, schedule_is_v_shaped(plan.schedule));
  for (size_t i = 1; i < r.stages.size(); ++i) {
    const StageTime& a = r.stages[i];
    const StageTime& b = r.stages[r.critical];
    if (a.busy_compute_s + a.optimizer_s > (b.busy_compute_s + b.optimizer_s) * (1 + 1e-9)) r.critical = i;
  }
  for (int32_t i = 0; i < engine.ranks(); ++i) {
    const double reserve = static_cast<size_t>(i) < plan.stages.size() ? plan.stages[static_cast<size_t>(i)].allocator_reserve : -1;
    r.memory.push_back(peak_of(engine, i, fragmentation, reserve));
    if (r.memory.back().peak_bytes > r.memory[r.busiest].peak_bytes) r.busiest = r.memory.size() - 1;
  }
  r.ops = engine.ops().size();
  r.plan = plan;
  r.engine = std::move(owned);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

SimResult simulate(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, bool record_timeline) {
  const auto t0 = std::chrono::steady_clock::now();
  const StepPlan plan = plan_step(m, s, c);
  SimResult r = simulate_plan(plan, framework_traits(s.framework).fragmentation, record_timeline);
  r.analytic = predict(m, s, c);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace shardplan::sim
