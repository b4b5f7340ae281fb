#pragma once
// What the PyTorch cross-checks (reports/fsdp2-memory.json, reports/tp-memory.json) compare: the predicted peak less
// the runtime's allocations and the allocator's reserve, which the fake-tensor tracker cannot see.
#include <string>

#include "planner/predict.hpp"

namespace shardplan::test {

inline double tracked_allocation(const Prediction& p) {
  const MemoryComponents& c = p.memory.peak_stage().allocated;  // at the moment of the most allocated
  return c.total() - c.runtime - c.fragmentation;
}

inline Recompute recompute_named(const std::string& r) {
  return r == "full" ? Recompute::full : r == "selective" ? Recompute::selective : Recompute::none;
}

}  // namespace shardplan::test
