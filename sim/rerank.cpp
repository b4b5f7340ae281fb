// `plan --simulate-top K`: play the planner's best candidates out and re-rank them by what the schedule gives.
#include "sim/rerank.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "planner/error.hpp"

namespace shardplan::sim {

namespace {

std::string seconds(double s) { return std::abs(s) < 1 ? fmt::format("{:.1f} ms", s * 1e3) : fmt::format("{:.2f} s", s); }

std::string describe(const Strategy& s) {
  std::string out = fmt::format("{} (tp {} pp {} dp {}", family_of(s), s.tp, s.pp, s.dp);
  if (s.vpp > 1) out += fmt::format(" vpp {}", s.vpp);
  if (s.sp) out += " sp";
  if (s.hsdp > 0) out += fmt::format(" hsdp {}", s.hsdp);
  if (s.ep > 1) out += fmt::format(" ep {}", s.ep);
  if (s.ep > 1 && s.tp > 1) out += fmt::format(" etp {}", expert_tensor_parallel(s));
  return out + fmt::format(", mb {}, recompute {})", s.micro_batch, to_string(s.recompute));
}

RankKey analytic_key(const Prediction& p, Objective o) {
  const auto peak = static_cast<double>(p.peak_bytes());
  return o == Objective::memory ? RankKey{false, peak, p.time.step_s} : RankKey{false, p.time.step_s, peak};
}

}  // namespace

SimulatedCandidate summarise_simulation(const SimResult& r, const Strategy& s) {
  SimulatedCandidate c;
  c.step_s = r.step_s;
  c.tokens_per_s = r.step_s > 0 ? static_cast<double>(s.global_batch * s.seq) / r.step_s : 0;
  c.peak_bytes = r.peak_stage().peak_bytes;
  c.reclaimable_bytes = r.analytic.memory.expandable_segments ? r.peak_stage().fragmentation : 0;
  c.capacity_bytes = r.analytic.memory.capacity_bytes;
  c.stage = r.critical_stage();
  c.ops = r.ops;
  return c;
}

namespace {

// f(m) on the line through (m1, f1) and (m2, f2).
double affine_at(double m, double m1, double f1, double m2, double f2) { return f2 + (m - m2) * (f2 - f1) / (m2 - m1); }

Strategy with_micro_batches(Strategy s, int64_t micro_batches) {
  s.global_batch = micro_batches * s.micro_batch * s.dp;
  return s;
}

}  // namespace

SimulatedCandidate simulate_candidate(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  const int64_t micro = grad_accum_steps(s);
  const int64_t group = std::max<int64_t>(s.pp, 1);
  const int64_t floor_m1 = std::max<int64_t>(8, s.pp * s.vpp);
  const int64_t m1 = (floor_m1 + group - 1) / group * group, m2 = 2 * m1;
  if (micro <= 2 * m2) {
    SimulatedCandidate whole = summarise_simulation(simulate(m, s, c), s);
    whole.micro_batches = micro;
    return whole;
  }
  const SimulatedCandidate a = summarise_simulation(simulate(m, with_micro_batches(s, m1), c), s);
  const SimulatedCandidate b = summarise_simulation(simulate(m, with_micro_batches(s, m2), c), s);
  const auto x = static_cast<double>(micro), x1 = static_cast<double>(m1), x2 = static_cast<double>(m2);
  auto at = [&](double f1, double f2) { return affine_at(x, x1, f1, x2, f2); };
  SimulatedCandidate out = b;
  out.step_s = at(a.step_s, b.step_s);
  out.tokens_per_s = out.step_s > 0 ? static_cast<double>(s.global_batch * s.seq) / out.step_s : 0;
  out.peak_bytes = at(a.peak_bytes, b.peak_bytes);  // flat for 1F1B; GPipe keeps every micro-batch in flight
  out.reclaimable_bytes = at(a.reclaimable_bytes, b.reclaimable_bytes);
  StageTime& t = out.stage;
  t.busy_compute_s = at(a.stage.busy_compute_s, b.stage.busy_compute_s);
  t.overlap_slowdown_s = at(a.stage.overlap_slowdown_s, b.stage.overlap_slowdown_s);
  t.exposed_tp_s = at(a.stage.exposed_tp_s, b.stage.exposed_tp_s);
  t.exposed_cp_s = at(a.stage.exposed_cp_s, b.stage.exposed_cp_s);
  t.exposed_pp_s = at(a.stage.exposed_pp_s, b.stage.exposed_pp_s);
  t.exposed_dp_s = at(a.stage.exposed_dp_s, b.stage.exposed_dp_s);
  t.exposed_ep_s = at(a.stage.exposed_ep_s, b.stage.exposed_ep_s);
  t.bubble_s = at(a.stage.bubble_s, b.stage.bubble_s);
  t.optimizer_s = at(a.stage.optimizer_s, b.stage.optimizer_s);
  t.end_s = at(a.stage.end_s, b.stage.end_s);
  out.ops = a.ops + b.ops;
  out.micro_batches = micro;
  out.simulated_m1 = m1;
  out.simulated_m2 = m2;
  return out;
}

std::string explain_difference(const SimulatedCandidate& sim, const StepTime& a) {
  struct Part {
    const char* what;
    double sim, analytic;
  };
  const StageTime& t = sim.stage;
  const Part parts[] = {{"busy compute", t.busy_compute_s, a.compute_s},
                        {"exposed tensor-parallel communication", t.exposed_tp_s, a.exposed_tp_s},
                        {"exposed pipeline transfers", t.exposed_pp_s, a.exposed_pp_s},
                        {"exposed data-parallel communication", t.exposed_dp_s, a.exposed_dp_s},
                        {"exposed expert-parallel all-to-all", t.exposed_ep_s, a.exposed_ep_s},
                        {"pipeline bubble", t.bubble_s, a.bubble_s},
                        {"optimizer step", t.optimizer_s, a.optimizer_s}};
  const Part* top = &parts[0];
  for (const Part& p : parts)
    if (std::abs(p.sim - p.analytic) > std::abs(top->sim - top->analytic)) top = &p;
  const double pct = a.step_s > 0 ? 100 * (sim.step_s - a.step_s) / a.step_s : 0;
  return fmt::format("simulated {} vs {} analytic ({:+.1f} %), mostly {}: {} in the schedule vs {} analytic",
                     seconds(sim.step_s), seconds(a.step_s), pct, top->what, seconds(top->sim), seconds(top->analytic));
}

RankKey rerank_key(const SimulatedCandidate& s, Objective o) {
  return o == Objective::memory ? RankKey{!s.within_safety(), s.peak_bytes, s.step_s}
                                : RankKey{!s.within_safety(), s.step_s, s.peak_bytes};
}

std::string explain_peak_difference(const SimulatedCandidate& sim, double analytic_peak_bytes) {
  const double pct = analytic_peak_bytes > 0 ? 100 * (sim.peak_bytes / analytic_peak_bytes - 1) : 0;
  return fmt::format("simulated peak {:.2f} GB vs {:.2f} GB analytic ({:+.1f} %)", sim.peak_bytes / kGB,
                     analytic_peak_bytes / kGB, pct);
}

std::vector<size_t> order_by_keys(const std::vector<RankKey>& keys, size_t window) {
  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  window = std::min(window, keys.size());
  std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(window),
                   [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  return order;
}

size_t recommend_simulated(const std::vector<Strategy>& strategies,
                           const std::vector<std::optional<SimulatedCandidate>>& sims, size_t current, Objective o,
                           double tolerance) {
  auto safe = [&](size_t i) { return sims[i] && sims[i]->within_safety(); };
  if (o != Objective::throughput) {
    // The planner recommends its first candidate outright; so does the re-ranked list.
    for (size_t i = 0; i < sims.size(); ++i)
      if (!sims[i] || sims[i]->within_safety()) return i;
    return current;
  }
  if (current >= sims.size() || !sims[current]) return current;  // nothing simulated to weigh it by
  double fastest = 0;
  for (size_t i = 0; i < sims.size(); ++i)
    if (safe(i)) fastest = std::max(fastest, sims[i]->tokens_per_s);
  if (fastest <= 0) return current;
  auto eligible = [&](size_t i) { return safe(i) && sims[i]->tokens_per_s >= (1 - tolerance) * fastest; };
  std::optional<size_t> pick;
  for (size_t i = 0; i < sims.size(); ++i) {
    if (!eligible(i)) continue;
    if (!pick) {
      pick = i;
      continue;
    }
    const int ci = complexity(strategies[i]), cp = complexity(strategies[*pick]);
    if (ci < cp || (ci == cp && sims[i]->tokens_per_s > sims[*pick]->tokens_per_s)) pick = i;
  }
  // The planner's choice stays while it qualifies and nothing simpler does (it may have weighed families the
  // window does not hold).
  if (eligible(current) && complexity(strategies[current]) <= complexity(strategies[*pick]))
    return current;
  return *pick;
}

namespace {

// The candidates in `todo` simulated into out.simulated (or out.skipped), independently of each other: on as many
// threads as the machine has cores, up to one per candidate ("use both cores where it helps": the simulations are
// most of plan's time for long pipelines). Each result lands in its own slot, so the outcome does not depend on the
// threads; progress is reported under a lock; an unexpected exception is rethrown after every thread has ended.
void simulate_all(const std::vector<Prediction>& top, const std::vector<size_t>& todo, RerankResult& out,
                  const std::function<void(size_t, size_t)>& progress) {
  std::atomic<size_t> next{0};
  size_t finished = 0;
  std::mutex lock;
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t d = next++; d < todo.size(); d = next++) {
      const Prediction& p = top[todo[d]];
      try {
        out.simulated[todo[d]] = simulate_candidate(p.model, p.strategy, p.cluster);
        out.simulated[todo[d]]->max_hbm_fraction = p.memory.max_hbm_fraction;
      } catch (const InputError& e) {
        out.skipped[todo[d]] = e.what();  // a schedule the simulator cannot build: keeps its analytic place
      } catch (...) {
        const std::lock_guard<std::mutex> g(lock);
        if (!failure) failure = std::current_exception();
      }
      const std::lock_guard<std::mutex> g(lock);
      ++finished;
      if (progress) progress(finished, todo.size());
    }
  };
  const size_t threads = std::min<size_t>(todo.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

RerankResult rerank_candidates(const std::vector<Prediction>& top, size_t ranked, size_t recommended, size_t k,
                               Objective o, const std::function<void(size_t, size_t)>& progress, double tolerance) {
  RerankResult out;
  const size_t n = top.size();
  out.k = k;
  out.window = std::min({k, ranked, n});
  out.simulated.resize(n);
  out.skipped.resize(n);
  out.order.resize(n);
  std::iota(out.order.begin(), out.order.end(), size_t{0});
  out.recommended = recommended;
  if (out.window == 0) return out;

  std::vector<size_t> todo(out.window);
  std::iota(todo.begin(), todo.end(), size_t{0});
  if (recommended >= out.window && recommended < n) todo.push_back(recommended);
  simulate_all(top, todo, out, progress);

  std::vector<RankKey> keys(n);
  for (size_t i = 0; i < n; ++i)
    keys[i] = out.simulated[i] ? rerank_key(*out.simulated[i], o) : analytic_key(top[i], o);
  out.order = order_by_keys(keys, out.window);
  for (size_t i = 0; i < n; ++i) out.order_changed = out.order_changed || out.order[i] != i;

  // The recommendation, on the re-ranked list.
  std::vector<Strategy> strategies(n);
  std::vector<std::optional<SimulatedCandidate>> sims(n);
  size_t current = 0;
  for (size_t pos = 0; pos < n; ++pos) {
    strategies[pos] = top[out.order[pos]].strategy;
    sims[pos] = out.simulated[out.order[pos]];
    if (out.order[pos] == recommended) current = pos;
  }
  out.recommended = recommend_simulated(strategies, sims, current, o, tolerance);
  out.recommendation_changed = out.recommended != current;
  if (out.recommendation_changed) {
    const SimulatedCandidate* was = sims[current] ? &*sims[current] : nullptr;
    const SimulatedCandidate& now = *sims[out.recommended];
    const std::string from = describe(strategies[current]), to = describe(strategies[out.recommended]);
    if (was && !was->within_safety())
      out.recommendation_note = fmt::format(
          "the analytic choice {} peaks at {:.1f} GB in the schedule, above the 80 % line of {:.1f} GB; {} stays under it",
          from, was->peak_bytes / kGB, kSafeFractionOfCapacity * static_cast<double>(was->capacity_bytes) / kGB, to);
    else if (was && o == Objective::throughput && now.tokens_per_s > was->tokens_per_s)
      out.recommendation_note = fmt::format(
          "the simulator puts {} at {:.1f} % more tokens/s than the analytic choice {} ({} vs {} per step), beyond "
          "the {:.0f} % that simplicity is worth",
          to, 100 * (now.tokens_per_s / was->tokens_per_s - 1), from, seconds(now.step_s), seconds(was->step_s),
          100 * tolerance);
    else if (was && o == Objective::throughput)
      out.recommendation_note = fmt::format(
          "{} is simpler than the analytic choice {} and, simulated, within {:.0f} % of the fastest ({} vs {} per step)",
          to, from, 100 * tolerance, seconds(now.step_s), seconds(was->step_s));
    else if (was && o == Objective::memory)
      out.recommendation_note = fmt::format(
          "{} has the smallest simulated peak, {:.2f} GB; the analytic choice {} peaks at {:.2f} GB in the schedule", to,
          now.peak_bytes / kGB, from, was->peak_bytes / kGB);
    else if (was)
      out.recommendation_note = fmt::format("{} is the cheapest by simulation, {} per step; the analytic choice {} "
                                            "takes {}", to, seconds(now.step_s), from, seconds(was->step_s));
    else
      out.recommendation_note = fmt::format("{} comes first by simulation; the analytic choice was {}", to, from);
  }
  return out;
}

}  // namespace shardplan::sim
