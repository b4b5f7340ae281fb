#pragma once
// The public validation set (../shared/validation/published_runs.csv): each published training run as a
// configuration shardplan can predict, the metric its source reports, and the measured value.
//
// Nothing of a row's measurement enters its configuration: the model preset is matched by architecture, the
// cluster by GPU name, the strategy from the row's published layout; every guess is listed in `assumptions`.
#include <string>
#include <vector>

#include "io/preset_store.hpp"
#include "planner/predict.hpp"

namespace shardplan::validation {

enum class Metric { hardware_tflops, iteration_s, tokens_per_gpu };
const char* metric_name(Metric m);

struct PublishedRun {
  std::string source;       // N21-Tab1, K22-Tab5, MLM20, TTA, MPT, FP-...
  std::string label;        // the row's model column
  ModelSpec model;
  ClusterSpec cluster;
  Strategy strategy;
  Metric metric = Metric::tokens_per_gpu;
  double measured = 0;
  std::vector<std::string> assumptions;
};

struct PublishedRuns {
  std::vector<PublishedRun> runs;
  std::vector<std::string> skipped;  // rows no preset matches, with the reason
};

// The CSV shipped beside the repository (CI lays shared/ next to the clone).
std::string default_csv_path();
// Throws std::runtime_error when the file cannot be read.
PublishedRuns load_published_runs(const std::string& csv_path, const PresetStore& store);
// The prediction converted to the row's metric (N21 eq. 3 for hardware TFLOP/s).
double predicted_metric(const PublishedRun& run, const Prediction& p);

}  // namespace shardplan::validation
