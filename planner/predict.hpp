#pragma once
// One fully specified configuration evaluated: parameters, memory, FLOPs (and, once the step-time model
// exists, time). The single entry point the CLI's `predict` uses.
#include "planner/flops.hpp"
#include "planner/hardware.hpp"
#include "planner/memory.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

struct StepTime {
  bool modelled = false;  // false until the step-time model exists: the fields below are then 0
  double step_s = 0;
  double compute_s = 0;
  double exposed_comm_s = 0;
  double bubble_s = 0;
  double optimizer_s = 0;
};

struct Prediction {
  ModelSpec model;
  Strategy strategy;
  ClusterSpec cluster;
  ParamCounts params;
  MemoryEstimate memory;
  StepFlops flops;
  StepTime time;
  int64_t peak_bytes() const { return shardplan::peak_bytes(memory.peak_stage().peak); }
  bool fits() const { return peak_bytes() <= memory.capacity_bytes; }
};

// Validates the model, the cluster and the strategy (InputError naming the problem), then evaluates.
Prediction predict(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

}  // namespace shardplan
