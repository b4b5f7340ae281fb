#pragma once
// Predicted against measured: the comparison `shardplan validate` prints (CONTRACT.md `validate --format json`).
// The prediction comes from the model, the presets and a calibration profile only; the measurement from the run.
// Nothing here feeds one into the other.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/predict.hpp"

namespace shardplan {

// What a run measured (per rank, busiest rank), by CONTRACT.md names; absent figures are not compared.
struct MeasuredFigures {
  std::optional<double> step_s;
  std::optional<int64_t> peak_bytes;
  std::map<std::string, int64_t> components;  // params grads master optimizer activations logits buffers ...
};

struct ComparedFigure {
  std::string name;                  // "peak_bytes", "step_s" or a component name
  std::optional<double> predicted;   // bytes or seconds
  std::optional<double> measured;
  std::optional<double> error_pct;   // (predicted − measured) / measured × 100; absent when either is absent or
                                     // measured is 0 while predicted is not
};

struct Validation {
  ComparedFigure peak;               // name "peak_bytes"
  ComparedFigure step;               // name "step_s"
  std::vector<ComparedFigure> components;  // CONTRACT.md order, then any extra measured names
};

// (predicted − measured) / measured in percent; 0 when both are 0; nullopt when measured is 0 alone.
std::optional<double> error_percent(double predicted, double measured);

// Compares p with m. `time_predicted` false: the prediction has no step time worth comparing (e.g. CPU ranks
// without a calibration profile), so step.predicted stays empty.
Validation compare_with_measurement(const Prediction& p, const MeasuredFigures& m, bool time_predicted);

}  // namespace shardplan
