#pragma once
// Internal to planner/memory*.cpp: what one stage's memory depends on, and the ledger that adds its parts up.
#include <string>
#include <vector>

#include "planner/framework.hpp"
#include "planner/memory.hpp"
#include "planner/partition.hpp"
#include "planner/precision.hpp"

namespace shardplan::memory_detail {

// Everything one stage's memory depends on, computed once.
struct StageInputs {
  const ModelSpec& model;
  const Strategy& strategy;
  const FrameworkTraits& fw;
  const StageParams& stage;
  double psi = 0;           // parameters on this rank before DP sharding
  double shard = 1;         // DP shard degree
  StateBytes state;         // bytes per parameter of each state
  double compute_bytes = 2; // bytes of a gathered (compute-dtype) parameter
  bool keeps_unsharded_grads = false;  // no_sync under gradient accumulation with ZeRO-2/3
  // Expert parallelism (issue 17): the routed experts' states are sharded over the expert-data-parallel group
  // (strategy.hpp expert_data_parallel), the rest over `shard`. local_psi = what one shard holds of psi:
  // (psi − routed)/shard + routed/expert_shard; block_local the same of one block unit.
  double expert_shard = 1;
  double local_psi = 0;
  double block_local = 0;
};

StageInputs stage_inputs(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const StageParams& st);

// Adds bytes to a component; with `record`, also keeps a described item. Descriptions are callables so that
// the search's inner loop (record = false) formats and allocates nothing.
class Ledger {
 public:
  explicit Ledger(bool record) : record_(record) {}
  template <typename Describe>
  void add(double MemoryComponents::*field, const char* component, Describe&& describe, double bytes) {
    if (bytes <= 0) return;
    parts_.*field += bytes;
    if (record_) items_.push_back({component, std::string(describe()), bytes});
  }
  bool recording() const { return record_; }
  MemoryComponents parts_;
  std::vector<MemoryItem> items_;

 private:
  bool record_;
};

// A fixed description.
inline auto text(const char* t) {
  return [t] { return t; };
}

// Parts every moment shares (memory.cpp): runtime allocations outside the allocator, pipeline and sequence-parallel
// buffers, and the allocator's reserve on what the ledger holds so far.
void add_parallel_buffers(Ledger& l, const StageInputs& in);
void add_runtime(Ledger& l, const StageInputs& in);
void add_fragmentation(Ledger& l, const StageInputs& in);

}  // namespace shardplan::memory_detail
