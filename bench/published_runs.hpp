#pragma once
// The public validation set: each published training run as a configuration shardplan can predict, the metric
// its source reports, and the measured value. Two files: the shared set (../shared/validation/published_runs.csv,
// read-only) and the modern rows of bench/data/published_runs_modern.csv (bench/data/README.md: columns, sources).
//
// Nothing of a row's measurement enters its configuration: the model preset is matched by architecture (shared
// set) or named by the row and checked against its architecture (modern set), the cluster comes from the GPU,
// the strategy from the row's published layout; every guess is listed in `assumptions`.
#include <string>
#include <vector>

#include "bench/megatron_flops.hpp"
#include "io/preset_store.hpp"
#include "planner/error_band.hpp"
#include "planner/predict.hpp"

namespace shardplan::validation {

// hardware_tflops: N21 eq. 3 (full-recompute forward included); mcore_model_tflops: Megatron-LM's
// num_floating_point_operations (megatron/training/training.py), the figure its README's H100 tables report.
enum class Metric { hardware_tflops, iteration_s, tokens_per_gpu, mcore_model_tflops };
const char* metric_name(Metric m);

struct PublishedRun {
  std::string source;       // N21-Tab1, K22-Tab5, MLM20, TTA, MPT, FP-..., and the modern sources (bench/data/README.md)
  std::string label;        // the row's model column
  ModelSpec model;
  ClusterSpec cluster;
  Strategy strategy;
  Metric metric = Metric::tokens_per_gpu;
  double measured = 0;
  // mcore_model_tflops rows: how the source's Megatron counts the core attention (option mcore_flops=causal|full;
  // full, Megatron-Core r0.8.0's count, unless the row says otherwise).
  AttentionCount mcore_attention = AttentionCount::full;
  // A tokens_per_gpu row that also states its model TFLOP/s ("4912 tok/s/GPU; 1276 TFLOP/s/GPU": Megatron-Bridge's
  // tables print both); 0 when it states none. tests/test_megatron_flops.cpp holds the two against Megatron's count.
  double stated_model_tflops = 0;
  // The peak memory per GPU the source reports (torch.cuda.max_memory_reserved for torchtitan's tables), bytes;
  // 0 when it reports none. Compared with the predicted peak less the CUDA/NCCL runtime, which PyTorch's caching
  // allocator does not count.
  double measured_peak_bytes = 0;
  std::vector<std::string> assumptions;
  // --- how the accuracy bench groups the row ---
  std::string family;       // the runtime the source ran: megatron, deepspeed, fsdp, fsdp1, torchtitan
  std::string generation;   // GPU generation (planner/error_band.hpp gpu_generation): Ampere-class, Hopper-class, ...
  // N21 Table 2's DeepSpeed ZeRO-3 rows measure the 2021 DeepSpeed, an implementation that no longer exists
  // (reports/accuracy.md): reported apart, outside the headline mean (issue 14, item 5).
  bool historical = false;
  bool modern = false;      // from bench/data/published_runs_modern.csv
  double stated_params = 0; // the source's parameter count (params column); 0 when it gives none
  std::string reference;    // modern rows: where the figure comes from
};

// A modern row whose model preset resolved, loaded or skipped: what tests check the preset against.
struct RowPreset {
  std::string source;
  std::string label;
  ModelSpec model;          // the preset, seq set to the row's (learned position tables are that long)
  double stated_params = 0;
  std::string stated_params_text;  // as the params column writes it ("1.7B", "6658859008")
};

struct PublishedRuns {
  std::vector<PublishedRun> runs;
  std::vector<std::string> skipped;  // rows that cannot be predicted, with the reason
  std::vector<RowPreset> presets;    // modern rows only (see RowPreset)
};

// The CSV shipped beside the repository (CI lays shared/ next to the clone).
std::string default_csv_path();
// bench/data/published_runs_modern.csv in the source tree.
std::string modern_csv_path();
// The shared set's format. Throws std::runtime_error when the file cannot be read.
PublishedRuns load_published_runs(const std::string& csv_path, const PresetStore& store);
// The modern set's format (bench/data/README.md). Throws std::runtime_error when the file cannot be read, lacks a
// column, or a row contradicts its preset (a data error, not a skip).
PublishedRuns load_modern_runs(const std::string& csv_path, const PresetStore& store);
// Whether the row's source gives its recomputation (the peak depends on it more than on anything else).
bool recompute_published(const PublishedRun& run);
// The prediction converted to the row's metric (N21 eq. 3 for hardware TFLOP/s, Megatron's count for model TFLOP/s:
// bench/megatron_flops.hpp, the attention as the row's mcore_attention says).
double predicted_metric(const PublishedRun& run, const Prediction& p);
// Measured step time over predicted step time, from the row's metric (every metric is a step time or its inverse).
double measured_over_predicted_step(const PublishedRun& run, double predicted_metric);
// Every run outside the historical rows that predicts, as the error band's input (planner/error_band.hpp).
std::vector<PublishedError> published_errors(const PublishedRuns& runs);
// The error band table as C++ source: what planner/error_band_data.cpp holds.
std::string error_band_source(const std::vector<ErrorBandGroup>& groups);

// --- helpers shared by the two loaders (published_runs.cpp) ---
// The first number in a string ("137 TFLOP/s/GPU (44%)" → 137; "iter 1.42 s" → 1.42); NAN when there is none.
double first_number(const std::string& s);
// A parameter count as the CSVs write it: "1.7B", "174.6B", "1T", "6658859008"; 0 for "?".
double parse_param_count(const std::string& s);
std::vector<std::string> split_fields(const std::string& line, char sep);

}  // namespace shardplan::validation
