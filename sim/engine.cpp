#include "sim/engine.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>

namespace shardplan::sim {

const char* to_string(StreamKind k) {
  switch (k) {
    case StreamKind::compute: return "compute";
    case StreamKind::tp: return "tp collectives";
    case StreamKind::pp: return "pp send/recv";
    case StreamKind::dp_gather: return "dp all-gather";
    case StreamKind::dp_reduce: return "dp reduce-scatter";
    case StreamKind::dp_bucket: return "dp reduce / step";
    case StreamKind::ep: return "ep all-to-all";
    case StreamKind::cp: return "cp ring";
    case StreamKind::count: break;
  }
  return "?";
}

Resource resource_of(StreamKind k) {
  switch (k) {
    case StreamKind::compute: return Resource::compute;
    case StreamKind::tp: return Resource::tp_link;
    case StreamKind::pp: return Resource::pp_link;
    case StreamKind::ep: return Resource::ep_link;
    case StreamKind::cp: return Resource::cp_link;
    default: return Resource::dp_link;
  }
}

const char* to_string(OpKind k) {
  static const char* const names[] = {"forward", "backward", "embedding fwd", "embedding bwd", "head+loss fwd",
                                      "head+loss bwd", "TP fwd", "TP bwd", "send activation", "send gradient",
                                      "all-gather", "all-gather (bwd)", "all-gather root", "reduce-scatter",
                                      "reduce-scatter root", "gradient reduce", "grad-norm all-reduce", "optimizer",
                                      "param all-gather", "weight grad", "release", "EP all-to-all fwd",
                                      "EP all-to-all bwd", "CP ring fwd", "CP ring bwd", "head unit re-gathered"};
  const auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "?";
}

const char* to_string(MemKind k) {
  static const char* const names[] = {"weights (local)", "gradients (local)", "fp32 master weights",
                                      "Adam m and v", "CUDA context, cuBLAS, NCCL",
                                      "saved block activations", "embedding/final-norm/LM-head inputs",
                                      "block working set during recomputation", "logits and cross-entropy",
                                      "gathered block parameters", "gathered root unit",
                                      "unsharded unit gradients awaiting reduce-scatter",
                                      "unsharded root-unit gradients", "unsharded gradients kept across micro-batches",
                                      "gradient reduction buffers", "pipeline send/receive buffers",
                                      "sequence-parallel all-gather output", "optimizer-step temporaries",
                                      "reduce-scatter inputs", "block backward temporaries", "module buffers (RoPE)",
                                      "gathered units (compute dtype)", "unsharded gradients in backward",
                                      "cached free segments", "EP all-to-all receive buffer",
                                      "context-parallel K/V buffers", "FP8 weight copies (Transformer Engine)"};
  const auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "?";
}

const char* component_of(MemKind k) {
  switch (k) {
    case MemKind::params: case MemKind::gathered_weights: return "params";
    case MemKind::grads: case MemKind::unsharded_grads: case MemKind::reduce_inputs: case MemKind::working_grads:
      return "grads";
    case MemKind::master: return "master";
    case MemKind::optimizer: return "optimizer";
    case MemKind::runtime: return "runtime";
    case MemKind::activations: case MemKind::boundary_activations: case MemKind::recompute_working_set:
    case MemKind::backward_temps:
      return "activations";
    case MemKind::logits: return "logits";
    case MemKind::cached_free: return "fragmentation";
    default: return "buffers";
  }
}

int32_t Engine::add_stream(int32_t rank, StreamKind kind) {
  ranks_ = std::max(ranks_, rank + 1);
  streams_.push_back({rank, kind});
  stream_ops_.emplace_back();
  return static_cast<int32_t>(streams_.size() - 1);
}

int32_t Engine::add_op(int32_t stream, OpKind kind, double seconds, int32_t micro, int32_t chunk, int32_t layer) {
  const auto id = static_cast<int32_t>(ops_.size());
  ops_.push_back({stream, kind, micro, chunk, layer, std::max(0.0, seconds)});
  stream_ops_[static_cast<size_t>(stream)].push_back(id);
  return id;
}

void Engine::add_dep(int32_t op, int32_t depends_on) {
  if (op >= 0 && depends_on >= 0 && depends_on != op) edges_.emplace_back(op, depends_on);
}

void Engine::alloc_at_start(int32_t op, MemKind kind, double bytes) {
  if (bytes > 0) mem_events_.push_back({op, kind, false, bytes});
}
void Engine::free_at_end(int32_t op, MemKind kind, double bytes) {
  if (bytes > 0) mem_events_.push_back({op, kind, true, bytes});
}
void Engine::free_at_start(int32_t op, MemKind kind, double bytes) {
  if (bytes > 0) mem_events_.push_back({op, kind, false, -bytes});
}
void Engine::alloc_static(int32_t rank, MemKind kind, double bytes) {
  ranks_ = std::max(ranks_, rank + 1);
  if (bytes > 0) static_allocs_.push_back({rank, {kind, bytes}});
}

double Engine::compute_rate(int32_t rank) const {
  return running_[slot(rank, Resource::dp_link)].empty() ? 1.0 : 1.0 / (1.0 + slowdown_);
}

void Engine::set_rate(int32_t op, double now, double rate) {
  Active& a = active_[static_cast<size_t>(op)];
  a.remaining = std::max(0.0, a.remaining - (now - a.since) * a.rate);
  a.since = now;
  a.rate = rate;
  ++a.version;
  heap_.push_back({now + a.remaining / rate, seq_++, op, a.version});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<Event>());
}

void Engine::relink(int32_t rank, Resource r, double now) {
  const std::vector<int32_t>& run = running_[slot(rank, r)];
  if (r == Resource::compute) {
    for (int32_t op : run) set_rate(op, now, compute_rate(rank));
    return;
  }
  // Processor sharing: transfers on one link split its bandwidth equally.
  const double rate = run.empty() ? 1.0 : 1.0 / static_cast<double>(run.size());
  for (int32_t op : run) set_rate(op, now, rate);
}

void Engine::apply_memory(int32_t op, bool at_end, double now) {
  const int32_t rank = streams_[static_cast<size_t>(ops_[static_cast<size_t>(op)].stream)].rank;
  const auto r = static_cast<size_t>(rank);
  bool grew = false;
  for (int32_t i = mem_begin_[static_cast<size_t>(op)]; i < mem_begin_[static_cast<size_t>(op) + 1]; ++i) {
    const MemEvent& e = mem_events_[static_cast<size_t>(i)];
    if (e.at_end != at_end) continue;
    const auto k = static_cast<size_t>(e.kind);
    const double delta = at_end ? -e.bytes : e.bytes;  // free_at_start: negative bytes at the start
    current_[r] += delta;
    live_[r][k] += delta;
    live_count_[r][k] += delta < 0 ? -1 : 1;
    grew = grew || delta > 0;
  }
  if (record_timeline_ && mem_begin_[static_cast<size_t>(op)] < mem_begin_[static_cast<size_t>(op) + 1])
    timeline_[r].push_back({now, current_[r]});
  RankMemory& m = memory_[r];
  if (grew && current_[r] > m.peak * (1 + 1e-12)) {
    m.peak = current_[r];
    m.peak_time = now;
    m.peak_op = op;
    for (size_t k = 0; k < static_cast<size_t>(MemKind::count); ++k) {
      m.live[k] = live_[r][k];
      m.count[k] = live_count_[r][k];
    }
  }
}

void Engine::start_op(int32_t op, double now) {
  const OpInfo& info = ops_[static_cast<size_t>(op)];
  const StreamInfo& st = streams_[static_cast<size_t>(info.stream)];
  busy_[static_cast<size_t>(info.stream)] = 1;
  start_[static_cast<size_t>(op)] = now;
  apply_memory(op, false, now);
  Active& a = active_[static_cast<size_t>(op)];
  a.remaining = info.work;
  a.since = now;
  a.rate = 1;
  const Resource r = resource_of(st.kind);
  running_[slot(st.rank, r)].push_back(op);
  relink(st.rank, r, now);
  if (r == Resource::dp_link && running_[slot(st.rank, r)].size() == 1) relink(st.rank, Resource::compute, now);
}

void Engine::finish_op(int32_t op, double now) {
  const OpInfo& info = ops_[static_cast<size_t>(op)];
  const StreamInfo& st = streams_[static_cast<size_t>(info.stream)];
  end_[static_cast<size_t>(op)] = now;
  makespan_ = std::max(makespan_, now);
  apply_memory(op, true, now);
  const Resource r = resource_of(st.kind);
  std::vector<int32_t>& run = running_[slot(st.rank, r)];
  run.erase(std::find(run.begin(), run.end(), op));
  relink(st.rank, r, now);
  if (r == Resource::dp_link && run.empty()) relink(st.rank, Resource::compute, now);
  busy_[static_cast<size_t>(info.stream)] = 0;
  ++head_[static_cast<size_t>(info.stream)];
  try_start(info.stream, now);
  for (int32_t i = dependents_begin_[static_cast<size_t>(op)]; i < dependents_begin_[static_cast<size_t>(op) + 1]; ++i) {
    const int32_t d = dependents_[static_cast<size_t>(i)];
    if (--pending_[static_cast<size_t>(d)] == 0) try_start(ops_[static_cast<size_t>(d)].stream, now);
  }
}

void Engine::try_start(int32_t stream, double now) {
  const auto s = static_cast<size_t>(stream);
  if (busy_[s] || head_[s] >= stream_ops_[s].size()) return;
  const int32_t op = stream_ops_[s][head_[s]];
  if (pending_[static_cast<size_t>(op)] == 0) start_op(op, now);
}

void Engine::run(bool record_memory_timeline) {
  const size_t n = ops_.size();
  record_timeline_ = record_memory_timeline;
  start_.assign(n, -1);
  end_.assign(n, -1);
  pending_.assign(n, 0);
  active_.assign(n, Active{});
  // Dependents in CSR form.
  dependents_begin_.assign(n + 1, 0);
  for (const auto& [op, dep] : edges_) {
    ++pending_[static_cast<size_t>(op)];
    ++dependents_begin_[static_cast<size_t>(dep) + 1];
  }
  for (size_t i = 0; i < n; ++i) dependents_begin_[i + 1] += dependents_begin_[i];
  dependents_.assign(edges_.size(), 0);
  {
    std::vector<int32_t> fill(dependents_begin_.begin(), dependents_begin_.end() - 1);
    for (const auto& [op, dep] : edges_) dependents_[static_cast<size_t>(fill[static_cast<size_t>(dep)]++)] = op;
  }
  // Memory events grouped by op.
  std::stable_sort(mem_events_.begin(), mem_events_.end(), [](const MemEvent& a, const MemEvent& b) { return a.op < b.op; });
  mem_begin_.assign(n + 1, 0);
  for (const MemEvent& e : mem_events_) ++mem_begin_[static_cast<size_t>(e.op) + 1];
  for (size_t i = 0; i < n; ++i) mem_begin_[i + 1] += mem_begin_[i];

  const auto ranks = static_cast<size_t>(ranks_);
  const auto kinds = static_cast<size_t>(MemKind::count);
  head_.assign(streams_.size(), 0);
  busy_.assign(streams_.size(), 0);
  running_.assign(ranks * static_cast<size_t>(Resource::count), {});
  current_.assign(ranks, 0);
  live_.assign(ranks, std::vector<double>(kinds, 0));
  live_count_.assign(ranks, std::vector<int32_t>(kinds, 0));
  memory_.assign(ranks, RankMemory{});
  timeline_.assign(ranks, {});
  for (const auto& [rank, what] : static_allocs_) {
    const auto r = static_cast<size_t>(rank);
    current_[r] += what.second;
    live_[r][static_cast<size_t>(what.first)] += what.second;
    live_count_[r][static_cast<size_t>(what.first)] += 1;
  }
  for (size_t r = 0; r < ranks; ++r) {
    RankMemory& m = memory_[r];
    m.peak = current_[r];
    for (size_t k = 0; k < kinds; ++k) {
      m.live[k] = live_[r][k];
      m.count[k] = live_count_[r][k];
    }
    if (record_timeline_) timeline_[r].push_back({0, current_[r]});
  }
  heap_.clear();
  makespan_ = 0;
  for (size_t s = 0; s < streams_.size(); ++s) try_start(static_cast<int32_t>(s), 0);
  size_t finished = 0;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Event>());
    const Event e = heap_.back();
    heap_.pop_back();
    const auto op = static_cast<size_t>(e.op);
    if (end_[op] >= 0 || active_[op].version != e.version) continue;  // superseded by a rate change
    finish_op(e.op, e.t);
    ++finished;
  }
  if (finished != n) {
    for (size_t s = 0; s < streams_.size(); ++s)
      if (head_[s] < stream_ops_[s].size()) {
        const OpInfo& o = ops_[static_cast<size_t>(stream_ops_[s][head_[s]])];
        throw std::runtime_error(fmt::format(
            "the schedule deadlocks: {} of {} ops never start (first: {} of micro-batch {} on rank {}, {} stream)",
            n - finished, n, to_string(o.kind), o.micro, streams_[s].rank, to_string(streams_[s].kind)));
      }
  }
}

}  // namespace shardplan::sim
