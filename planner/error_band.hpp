#pragma once
// How far a step-time prediction can be trusted: the measured errors of comparable published runs (the same
// framework family on the same GPU generation) turned into a range around the prediction. The ratios come from
// bench/shardplan_accuracy over the public set (bench/data and ../shared/validation), which writes them into
// error_band_data.cpp (`shardplan_accuracy --emit-bands planner/error_band_data.cpp`); tests/test_error_band.cpp
// fails when the table no longer matches what the model predicts for those runs.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "planner/hardware.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Runtimes whose step-time errors behave alike: PyTorch FSDP in its three forms, Megatron, DeepSpeed. Mixture-of-
// experts models are a group of their own over every runtime and GPU (moe): their published errors (routing,
// dispatch, a framework's own MoE overlaps) are of another size than the dense runs', and few. So are dense runs
// with context parallelism (context_parallel): ring attention at long sequences errs mostly one way (predicted
// faster than measured, +13 ... +25 %), which the dense bands would hide.
enum class FrameworkFamily { pytorch_fsdp, megatron, deepspeed, reference, moe, context_parallel };

FrameworkFamily framework_family(Framework f);
const char* to_string(FrameworkFamily f);

// One group of published runs: measured step / predicted step, at the group's 10th and 90th percentiles (its
// smallest and largest with fewer than kPercentileRuns runs). `all_generations`: the family on every GPU.
struct ErrorBandGroup {
  FrameworkFamily family;
  GpuGeneration generation;
  bool all_generations;
  int runs;
  double low, high;
};
constexpr int kMinBandRuns = 3;
constexpr int kPercentileRuns = 10;

// The committed table (error_band_data.cpp).
std::span<const ErrorBandGroup> error_band_table();

// The (low, high) ratios of a group's runs, as the table keeps them; nullopt below kMinBandRuns.
std::optional<std::pair<double, double>> band_of_ratios(std::vector<double> measured_over_predicted);

// The groups the public set gives, as error_band_data.cpp lists them: every (family, generation) and every family
// over all generations with at least kMinBandRuns runs.
struct PublishedError {
  Framework framework;
  GpuSpec gpu;
  double measured_over_predicted;
  bool moe = false;  // an MoE model's run: counted in the moe group only
  bool cp = false;   // a dense run with --cp > 1: counted in the context_parallel group only
};
std::vector<ErrorBandGroup> band_groups(const std::vector<PublishedError>& runs);

struct ErrorBand {
  double step_low_s = 0, step_high_s = 0;
  double low = 1, high = 1;  // the group's ratios
  std::string basis;         // "fsdp family on Hopper-class GPUs, 39 published runs"
  int runs = 0;              // under kPercentileRuns the ratios are the smallest and largest, not percentiles
  // Relative half-width of the range: two predictions closer than this are not told apart.
  double half_width() const { return (high - low) / (high + low); }
};

// The band for a configuration of this runtime on this GPU: its (family, generation) group, else its family over
// every generation; for an MoE model (`moe`) the moe group, for a dense one with context parallelism (`cp`) the
// context_parallel group. nullopt when there is none.
std::optional<ErrorBand> error_band(Framework f, const GpuSpec& g, double step_s, bool moe = false, bool cp = false);

}  // namespace shardplan
