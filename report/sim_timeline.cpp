#include "report/sim_timeline.hpp"

#include <fmt/format.h>

namespace shardplan::report {

namespace {

const char* category_of(sim::OpKind k) {
  using sim::OpKind;
  switch (k) {
    case OpKind::forward:
    case OpKind::embed_fwd:
    case OpKind::head_fwd: return "forward";
    case OpKind::backward:
    case OpKind::embed_bwd:
    case OpKind::head_bwd:
    case OpKind::head_regather:
    case OpKind::backward_weight: return "backward";
    case OpKind::tp_fwd:
    case OpKind::tp_bwd: return "tp";
    case OpKind::cp_fwd:
    case OpKind::cp_bwd: return "cp";
    case OpKind::ep_fwd:
    case OpKind::ep_bwd: return "ep";
    case OpKind::send_act:
    case OpKind::send_grad: return "pp";
    case OpKind::gather_fwd:
    case OpKind::gather_bwd:
    case OpKind::gather_root:
    case OpKind::param_gather: return "dp_gather";
    case OpKind::reduce_unit:
    case OpKind::reduce_root:
    case OpKind::reduce_bucket:
    case OpKind::grad_norm:
    case OpKind::release: return "dp_reduce";
    case OpKind::optimizer: return "optimizer";
    case OpKind::count: break;
  }
  return "other";
}

}  // namespace

Timeline timeline_from_simulation(const sim::SimResult& r) {
  Timeline t;
  t.step_s = r.step_s;
  t.capacity_bytes = static_cast<double>(r.analytic.memory.capacity_bytes);
  t.categories = {{"forward", "forward", "#4e79a7"},        {"backward", "backward", "#2f5d8a"},
                  {"tp", "TP collective", "#e15759"},       {"cp", "CP ring", "#ff9da7"},
                  {"ep", "EP all-to-all", "#d37295"},
                  {"pp", "pipeline send", "#f28e2b"},
                  {"dp_gather", "DP all-gather", "#59a14f"}, {"dp_reduce", "DP reduce", "#8cd17d"},
                  {"optimizer", "optimizer", "#b07aa1"},    {"other", "other", "#bab0ac"}};
  if (!r.engine) return t;
  const sim::Engine& e = *r.engine;
  // Lanes: the streams that ran something, in the engine's order (rank by rank).
  std::vector<int> lane_of(e.streams().size(), -1);
  for (const sim::OpInfo& op : e.ops()) lane_of[static_cast<size_t>(op.stream)] = 0;
  for (size_t s = 0; s < e.streams().size(); ++s) {
    if (lane_of[s] < 0) continue;
    lane_of[s] = static_cast<int>(t.lanes.size());
    t.lanes.push_back(fmt::format("stage {} · {}", e.streams()[s].rank, sim::to_string(e.streams()[s].kind)));
  }
  for (size_t i = 0; i < e.ops().size(); ++i) {
    const sim::OpInfo& op = e.ops()[i];
    const auto id = static_cast<int32_t>(i);
    t.spans.push_back({lane_of[static_cast<size_t>(op.stream)], e.start(id), e.end(id), category_of(op.kind),
                       sim::op_name(op)});
  }
  for (int32_t rank = 0; rank < e.ranks(); ++rank) {
    const auto& samples = e.memory_timeline(rank);
    if (samples.empty()) continue;
    MemoryTrack track{fmt::format("stage {}", rank), {}};
    track.samples.reserve(samples.size());
    for (const sim::MemorySample& s : samples) track.samples.push_back({s.t, s.bytes});
    t.memory.push_back(std::move(track));
  }
  return t;
}

}  // namespace shardplan::report
