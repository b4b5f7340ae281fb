#pragma once
// The strategy search behind `plan`: every valid combination of tp, pp (and vpp), sp, ZeRO stage, HSDP group,
// micro-batch and recomputation for the given GPUs and global batch; what does not fit is dropped with its
// reason; the rest is ranked.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/batch.hpp"
#include "planner/memory.hpp"
#include "planner/step_time.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// throughput: most tokens/s (the least complex family within SearchResult::tie_tolerance is recommended);
// memory: smallest peak; cost: fewest GPU-hours per trained token (planner/cost.hpp), the cheapest recommended
// outright — at the fixed GPU count of one search it orders like throughput, but without the simplicity allowance.
enum class Objective { throughput, memory, cost };
std::optional<Objective> parse_objective(const std::string& s);
const char* to_string(Objective o);

// What the search enumerates. A set optional fixes that dimension; an unset one is searched.
// The shortest sequence for which plan tries context parallelism (--cp). Below 16 K tokens a sequence's attention is
// a small share of a block's work and the layouts without CP already cover its memory (torchtitan's CP table starts
// at 32 K: bench/data/published_runs_modern.csv TT-2412-T2).
constexpr int64_t kCpMinSeq = 16384;

struct SearchSpace {
  Strategy base;  // gpus, global_batch, seq, precision, framework, flash_attn, loss, grad_sync
  // Set when --global-batch was not given: each layout then gets the default rule's batch for its dp and micro-batch
  // (planner/batch.hpp), and base.global_batch is ignored.
  std::optional<BatchTarget> batch_default;
  std::optional<int64_t> tp, pp, cp, ep, dp, vpp, micro_batch, hsdp;  // ep: expert parallelism (issue 17)
  std::optional<int> zero;
  std::optional<Recompute> recompute;
  std::optional<bool> sp;
  std::optional<Schedule> schedule;
  std::optional<PipelineSplit> split;  // unset: the runtime's default and a few uneven splits (pipeline_layout.hpp)
  bool offload_optimizer = false;  // also consider ZeRO-Offload
  Objective objective = Objective::throughput;
  double max_hbm_fraction = kSafeFractionOfCapacity;  // --max-hbm-fraction: the line candidates are ranked under
};

struct Candidate {
  Strategy strategy;
  MemoryPeak memory;
  StepTime time;
  double tokens_per_s = 0;
  int64_t capacity_bytes = 0;
  double max_hbm_fraction = kSafeFractionOfCapacity;  // the search's --max-hbm-fraction
  bool expandable_segments = false;  // the allocator mode in force: the reserve cannot fail the run (memory.hpp)
  double peak_total() const { return memory.peak.total(); }
  double fit_total() const { return fit_bytes(memory.peak, expandable_segments); }
  bool fits() const { return fit_total() <= static_cast<double>(capacity_bytes); }
  bool within_safety() const { return fit_total() <= max_hbm_fraction * static_cast<double>(capacity_bytes); }
};

// A strategy family: the sharding stage with or without HSDP, TP, PP and offload ("ZeRO-3 + TP").
std::string family_of(const Strategy& s);

// How many moving parts a strategy has beyond plain data parallelism: pipeline 4 (+1 interleaved, +1 for a
// schedule that splits the backward into B and W), tensor
// parallelism 2 (+1 sequence parallel), optimizer offload 3, HSDP 1. ZeRO stages are one setting each: 0.
int complexity(const Strategy& s);
// Throughput an expert gives up for a simpler strategy: the recommendation is the least complex family whose
// best is within this fraction of the fastest candidate.
constexpr double kSimplicityTolerance = 0.02;

// A part of the space the framework cannot run, and its reason (framework_support.cpp).
struct NotRun {
  std::string what;    // "ZeRO-1", "pipeline parallelism", ...
  std::string reason;
};

struct SearchResult {
  std::vector<Candidate> ranked;   // fitting candidates under the safety line, best first (at most keep_top)
  std::optional<Candidate> recommended;  // see kSimplicityTolerance; the best by the objective otherwise
  std::vector<Candidate> tight;    // the best few that fit only above the 80 % line
  std::vector<Candidate> families; // the best of every family seen, fitting or not, best first
  int64_t evaluated = 0;           // configurations evaluated
  int64_t fitting = 0;             // of which fit under the safety line
  std::vector<NotRun> not_run;     // what the search left out because --framework cannot run it
  // Throughput gaps smaller than this do not tell candidates apart: kSimplicityTolerance, or the error band's
  // relative half-width for this framework family and GPU generation when that is wider (error_band.hpp).
  double tie_tolerance = kSimplicityTolerance;
  std::string tie_basis;           // the band's basis when it set tie_tolerance
};

// Throws InputError when a fixed dimension is one the framework cannot run (its reason), or when the space is empty
// before any evaluation (e.g. no (tp, pp, dp) divides the GPUs, or
// the global batch divides by no data-parallel degree).
SearchResult search_strategies(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& space, size_t keep_top);

// Why a candidate that does not fit fails: the largest part and the overshoot ("model states need 99.9 GB >
// 85.9 GB"), in one line.
std::string why_not_fit(const Candidate& c);

}  // namespace shardplan
