#pragma once
// One fully specified configuration evaluated: parameters, memory, FLOPs (and, once the step-time model
// exists, time). The single entry point the CLI's `predict` uses.
#include <optional>

#include "planner/error_band.hpp"
#include "planner/flops.hpp"
#include "planner/hardware.hpp"
#include "planner/memory.hpp"
#include "planner/model.hpp"
#include "planner/step_time.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Rates derived from FLOPs and step time (zero when time is not modelled). MFU and HFU against the GPU's dense
// peak for the compute dtype (PaLM, Chowdhery et al. 2022, App. B).
struct Throughput {
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_tflops_per_gpu = 0;
  double hardware_tflops_per_gpu = 0;
  double mfu = 0;
  double hfu = 0;
};
Throughput throughput_of(const StepFlops& f, const StepTime& t, const Strategy& s, const GpuSpec& g);

struct Prediction {
  ModelSpec model;
  Strategy strategy;
  ClusterSpec cluster;
  ParamCounts params;
  MemoryEstimate memory;
  StepFlops flops;
  StepTime time;
  Throughput throughput;
  std::optional<ErrorBand> band;  // the step's range from comparable published runs (error_band.hpp), if any
  int64_t peak_bytes() const { return shardplan::peak_bytes(memory.peak_stage().peak); }
  // Whether the peak fits HBM: the peak less the allocator's reserve under expandable segments (memory.hpp fit_bytes).
  double fit_bytes() const { return shardplan::fit_bytes(memory.peak_stage().peak, memory.expandable_segments); }
  bool fits() const { return fit_bytes() <= static_cast<double>(memory.capacity_bytes); }
};

// Validates the model, the cluster and the strategy (InputError naming the problem), then evaluates.
Prediction predict(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

}  // namespace shardplan
