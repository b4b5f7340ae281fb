#pragma once
// `plan --simulate-top K`: the planner's best candidates played out by the event-driven simulator and re-ranked by
// the simulated step. The planner (planner/) cannot depend on the simulator, so the re-ranking lives here.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "sim/simulate.hpp"

namespace shardplan::sim {

// One candidate's simulated step, summarised for the plan.
struct SimulatedCandidate {
  double step_s = 0;        // simulated step of the stage with the most compute
  double tokens_per_s = 0;  // global batch × seq / step_s
  double peak_bytes = 0;    // simulated peak of the busiest stage, fragmentation reserve included
  int64_t capacity_bytes = 0;
  StageTime stage;          // the critical stage's breakdown (parts add up to step_s)
  size_t ops = 0;
  // Micro-batches actually played: all of them, or two shorter steps (m1 < m2) the step was extrapolated from
  // (simulate_candidate).
  int64_t micro_batches = 0, simulated_m1 = 0, simulated_m2 = 0;
  bool extrapolated() const { return simulated_m2 > 0; }
  double max_hbm_fraction = kSafeFractionOfCapacity;  // the plan's --max-hbm-fraction (the candidate's prediction's)
  // The allocator's reserve at that peak when it cannot fail the run (expandable segments: memory.hpp fit_bytes).
  double reclaimable_bytes = 0;
  // Fits under the planning line by the simulated peak (the planner checked the analytic one).
  bool within_safety() const {
    return peak_bytes - reclaimable_bytes <= max_hbm_fraction * static_cast<double>(capacity_bytes);
  }
};

SimulatedCandidate summarise_simulation(const SimResult& r, const Strategy& s);

// The candidate's simulated step for re-ranking. A step of m micro-batches repeats one steady-state period per
// micro-batch once the pipeline is full, so its time, breakdown and peak are affine in m beyond the warm-up. For a
// long accumulation (m > 2·m2) two shorter steps of m1 and m2 = 2·m1 micro-batches are played, with m1 the
// smallest multiple of pp that is at least max(8, pp·vpp), and the figures extrapolated to m; otherwise the whole
// step is played. Why pp·vpp is past the warm-up: interleaved 1F1B warms up with at most 2(pp − 1) + (vpp − 1)·pp
// model chunks (Narayanan et al. 2021 §2.2; Megatron's get_forward_backward_func), fewer than the m·vpp chunks of
// m = pp·vpp micro-batches for every vpp ≥ 2 (pp·vpp² ≥ pp·(vpp + 1)); plain 1F1B warms up with pp − 1 micro-batches,
// fewer than max(8, pp).
// tests/test_sim_rerank.cpp holds the extrapolation against whole-step simulations on eight layouts (up to vpp 10).
SimulatedCandidate simulate_candidate(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// Why the simulated step differs from the analytic one, in words: the part of the breakdown that differs the most
// ("the schedule hides more pipeline transfer time: 7.0 s exposed vs 9.4 s analytic").
std::string explain_difference(const SimulatedCandidate& sim, const StepTime& analytic);
// The same for the memory objective: the simulated and analytic peaks.
std::string explain_peak_difference(const SimulatedCandidate& sim, double analytic_peak_bytes);

// What a candidate is re-ranked by: the simulated step (throughput, cost — at a fixed GPU count cost per token
// follows the step) or the simulated peak (memory). A candidate whose simulated peak is above the 80 % line goes
// after every candidate that stays under it.
// Ties go by the other figure, as the planner's `better` (planner/search.cpp): the peak after the step, the step
// after the peak.
struct RankKey {
  bool over_safety = false;
  double value = 0;     // seconds or bytes: smaller is better
  double tiebreak = 0;  // bytes or seconds
  bool operator<(const RankKey& o) const {
    if (over_safety != o.over_safety) return !over_safety;
    return value != o.value ? value < o.value : tiebreak < o.tiebreak;
  }
};
RankKey rerank_key(const SimulatedCandidate& s, Objective o);

// The pure ordering: entries [0, window) sorted by key (ties keep their order), the rest unchanged.
// Returns order[new position] = old position.
std::vector<size_t> order_by_keys(const std::vector<RankKey>& keys, size_t window);

struct RerankResult {
  size_t k = 0;                    // the K asked for
  size_t window = 0;               // min(K, ranked candidates): the positions re-ranked
  std::vector<size_t> order;       // order[new position] = old position
  std::vector<std::optional<SimulatedCandidate>> simulated;  // by old position; the window plus the recommendation
  std::vector<std::string> skipped;  // by old position: why a candidate could not be simulated ("" otherwise)
  size_t recommended = 0;          // new position of the recommendation
  bool order_changed = false;
  bool recommendation_changed = false;
  std::string recommendation_note;  // why the recommendation changed ("" when it did not)
};

// The recommendation after simulation. Throughput: the planner's rule (planner/search.cpp choose_recommendation)
// on the simulated figures — the least complex simulated candidate within `tolerance` (the search's
// tie_tolerance) of the fastest
// simulated one and under the 80 % line by its simulated peak; the planner's choice stays when it still
// qualifies and nothing simpler does. Memory and cost: the first after re-ranking. `sims` by position; returns a
// position (`current` when nothing is simulated).
size_t recommend_simulated(const std::vector<Strategy>& strategies, const std::vector<std::optional<SimulatedCandidate>>& sims,
                           size_t current, Objective o, double tolerance = kSimplicityTolerance);

// Simulates positions [0, min(k, top.size() − appended)) of `top` and the recommendation, and re-ranks that window.
// `ranked` is how many leading entries of `top` are the search's ranked candidates (the recommendation may be
// appended after them). progress(done, total) is called after each simulation. k = 0 changes nothing.
RerankResult rerank_candidates(const std::vector<Prediction>& top, size_t ranked, size_t recommended, size_t k,
                               Objective o, const std::function<void(size_t, size_t)>& progress = {},
                               double tolerance = kSimplicityTolerance);

}  // namespace shardplan::sim
