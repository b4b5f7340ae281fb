#pragma once
// Per-rank memory of one training configuration, every part named, at the moment of the peak.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/precision.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// The parts of CONTRACT.md's `memory.components`, in bytes.
struct MemoryComponents {
  double params = 0;
  double grads = 0;
  double master = 0;
  double optimizer = 0;
  double activations = 0;
  double logits = 0;
  double buffers = 0;
  double runtime = 0;
  double fragmentation = 0;
  double model_states() const { return params + grads + master + optimizer; }
  double total() const;
};

// One line of the explanation: which component, what it is, how many bytes.
struct MemoryItem {
  std::string component;  // one of the MemoryComponents names
  std::string what;
  double bytes = 0;
};

enum class MemoryPhase { forward_backward, optimizer_step };
const char* to_string(MemoryPhase p);

struct StageMemory {
  int64_t stage = 0;
  int64_t params_per_rank = 0;  // parameters this rank's stage holds after TP, before DP sharding
  MemoryPhase peak_phase = MemoryPhase::forward_backward;
  MemoryComponents peak;        // at the stage's peak
  std::vector<MemoryItem> items;  // the peak's parts, finer grained
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;  // one per pipeline stage
  size_t busiest = 0;               // index of the stage with the highest peak
  int64_t capacity_bytes = 0;
  // Host memory for ZeRO-Offload: per rank, and per node (all its ranks); 0 without offload.
  double host_bytes_per_rank = 0;
  double host_bytes_per_node = 0;
  double host_capacity_bytes = 0;   // per node; 0 = unknown
  const StageMemory& peak_stage() const { return stages[busiest]; }
};

// A planned peak under 80 % of HBM did not run out of memory in 454 runs (Fujii et al. 2024, arXiv 2411.06465).
constexpr double kSafeFractionOfCapacity = 0.80;

// Every stage, with described items: for reports.
MemoryEstimate estimate_memory(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// The busiest stage's peak only, without descriptions or allocation: for the search's inner loop. Agrees with
// estimate_memory's busiest stage (tests).
struct MemoryPeak {
  MemoryComponents peak;
  int64_t stage = 0;
  int64_t params_per_rank = 0;
  MemoryPhase phase = MemoryPhase::forward_backward;
};
struct FrameworkTraits;
MemoryPeak estimate_peak_memory(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);

// Textbook model states per rank (ZeRO, Rajbhandari et al. 2020, §5.1 and Figure 1): params, grads, master and
// optimizer of `params` parameters under ZeRO stage `zero` sharded over `shard` ranks.
MemoryComponents model_states(double params, Precision p, int zero, int64_t shard);

// The components with their rounded byte counts, in CONTRACT.md order; they sum to the peak exactly.
struct NamedBytes {
  const char* name;
  int64_t bytes;
};
std::vector<NamedBytes> component_bytes(const MemoryComponents& c);
// Bytes beyond any machine (2^59 ≈ 576 PB): predict() refuses a configuration that needs more per GPU, and
// conversions to integers saturate there so that no sum of components can overflow int64.
constexpr double kMaxPlausibleBytes = 576460752303423488.0;
int64_t bytes_to_int(double bytes);
int64_t peak_bytes(const MemoryComponents& c);

}  // namespace shardplan
