#pragma once
// `shardplan simulate`: one training step of one configuration played out as a schedule, compared with the
// analytic model (planner/predict.hpp).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/predict.hpp"
#include "sim/engine.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

// Where one stage's step went; the parts add up to the step time.
struct StageTime {
  int64_t stage = 0;
  double busy_compute_s = 0;   // compute ops as they ran, incl. the slowdown while DP traffic overlapped them
  double overlap_slowdown_s = 0;  // the part of busy_compute_s lost to overlapping DP traffic
  double exposed_tp_s = 0;     // compute idle while a TP collective ran
  double exposed_cp_s = 0;     // ... while a context-parallel ring transfer ran
  double exposed_pp_s = 0;     // ... while a pipeline transfer to or from this stage ran
  double exposed_dp_s = 0;     // ... while data-parallel traffic ran (gathers, reductions, grad norm)
  double exposed_ep_s = 0;     // ... while an expert-parallel all-to-all ran
  double bubble_s = 0;         // ... while nothing of this stage ran: waiting for other stages
  double optimizer_s = 0;
  double end_s = 0;            // when this stage's step ended
};

struct LiveItem {
  MemKind kind;
  double bytes = 0;
  int32_t count = 0;   // allocations of this kind live
};

struct StagePeak {
  int64_t stage = 0;
  double allocated = 0;        // allocated bytes at the peak (runtime included)
  double fragmentation = 0;    // the caching allocator's reserve on top (framework.hpp), as the analytic model
  double peak_bytes = 0;       // allocated + fragmentation
  double time_s = 0;           // moment of the peak
  std::string during;          // the op that reached it
  // The step's moment it falls in, named as planner/memory.hpp's MemoryPhase (by the compute op running then): the
  // loss's backward, block `block`'s backward, the root's post-backward, the optimizer step, or a forward.
  MemoryPhase moment = MemoryPhase::forward_backward;
  int64_t block = -1;
  std::vector<LiveItem> live;  // what is live at the peak, largest first
  MemoryComponents components; // the same by CONTRACT.md component
};

struct SimResult {
  StepPlan plan;
  double step_s = 0;
  std::vector<StageTime> stages;
  size_t critical = 0;         // index of the stage reported (the busiest compute)
  std::vector<StagePeak> memory;
  size_t busiest = 0;          // index of the stage with the highest peak
  Prediction analytic;
  size_t ops = 0;
  double wall_s = 0;           // how long the simulation took
  std::shared_ptr<const Engine> engine;  // the played schedule (op times; memory samples with record_timeline)
  const StageTime& critical_stage() const { return stages[critical]; }
  const StagePeak& peak_stage() const { return memory[busiest]; }
};

// Validates the configuration (InputError), plans and plays the step, and predicts it analytically.
// record_timeline keeps every memory change for write_trace's counter tracks.
SimResult simulate(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, bool record_timeline = false);

// Plays a hand-built plan (tests): step, breakdown and memory, without the analytic comparison.
SimResult simulate_plan(const StepPlan& plan, double fragmentation = 0, bool record_timeline = false);

// The op's display name ("F mb3 L5", "all-gather L5", ...).
std::string op_name(const OpInfo& op);

// Chrome trace event format (chrome://tracing, Perfetto): one process per stage, one thread per stream, a memory
// counter per stage. Written to a temporary file beside `path` and renamed (io/atomic_write.hpp); throws InputError
// for a path that cannot be a file, std::runtime_error for a failing disk (nothing left behind either way).
void write_trace(const SimResult& r, const std::string& path);

}  // namespace shardplan::sim
