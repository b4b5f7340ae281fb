#include "planner/error_band.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace shardplan {

FrameworkFamily framework_family(Framework f) {
  switch (f) {
    case Framework::fsdp:
    case Framework::fsdp1:
    case Framework::torchtitan: return FrameworkFamily::pytorch_fsdp;
    case Framework::megatron: return FrameworkFamily::megatron;
    case Framework::deepspeed: return FrameworkFamily::deepspeed;
    case Framework::reference: break;
  }
  return FrameworkFamily::reference;
}

const char* to_string(FrameworkFamily f) {
  switch (f) {
    case FrameworkFamily::pytorch_fsdp: return "PyTorch FSDP (fsdp, fsdp1, torchtitan)";
    case FrameworkFamily::megatron: return "Megatron";
    case FrameworkFamily::deepspeed: return "DeepSpeed";
    case FrameworkFamily::moe: return "mixture-of-experts models (every runtime)";
    case FrameworkFamily::context_parallel: return "dense models with context parallelism (every runtime)";
    case FrameworkFamily::reference: break;
  }
  return "reference";
}

std::optional<std::pair<double, double>> band_of_ratios(std::vector<double> r) {
  if (static_cast<int>(r.size()) < kMinBandRuns) return std::nullopt;
  std::sort(r.begin(), r.end());
  if (static_cast<int>(r.size()) < kPercentileRuns) return std::pair{r.front(), r.back()};
  // Percentiles by linear interpolation between order statistics (NumPy's default, "linear").
  auto quantile = [&](double q) {
    const double at = q * static_cast<double>(r.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(at));
    const size_t hi = std::min(lo + 1, r.size() - 1);
    return r[lo] + (at - static_cast<double>(lo)) * (r[hi] - r[lo]);
  };
  return std::pair{quantile(0.10), quantile(0.90)};
}

std::vector<ErrorBandGroup> band_groups(const std::vector<PublishedError>& runs) {
  std::vector<ErrorBandGroup> out;
  const FrameworkFamily families[] = {FrameworkFamily::pytorch_fsdp, FrameworkFamily::megatron,
                                      FrameworkFamily::deepspeed};
  const GpuGeneration generations[] = {GpuGeneration::volta, GpuGeneration::ampere, GpuGeneration::hopper,
                                       GpuGeneration::blackwell};
  for (FrameworkFamily fam : families) {
    std::vector<double> all;
    for (GpuGeneration gen : generations) {
      std::vector<double> ratios;
      for (const PublishedError& e : runs)
        if (!e.moe && !e.cp && framework_family(e.framework) == fam && gpu_generation(e.gpu) == gen)
          ratios.push_back(e.measured_over_predicted);
      all.insert(all.end(), ratios.begin(), ratios.end());
      if (const auto b = band_of_ratios(ratios))
        out.push_back({fam, gen, false, static_cast<int>(ratios.size()), b->first, b->second});
    }
    if (const auto b = band_of_ratios(all))
      out.push_back({fam, GpuGeneration::ampere, true, static_cast<int>(all.size()), b->first, b->second});
  }
  std::vector<double> moe;
  for (const PublishedError& e : runs)
    if (e.moe) moe.push_back(e.measured_over_predicted);
  if (const auto b = band_of_ratios(moe))
    out.push_back({FrameworkFamily::moe, GpuGeneration::ampere, true, static_cast<int>(moe.size()), b->first, b->second});
  std::vector<double> cp;
  for (const PublishedError& e : runs)
    if (e.cp && !e.moe) cp.push_back(e.measured_over_predicted);
  if (const auto b = band_of_ratios(cp))
    out.push_back({FrameworkFamily::context_parallel, GpuGeneration::ampere, true, static_cast<int>(cp.size()), b->first,
                   b->second});
  return out;
}

std::optional<ErrorBand> error_band(Framework f, const GpuSpec& g, double step_s, bool moe, bool cp) {
  if (g.cpu_ranks || !(step_s > 0)) return std::nullopt;  // no published run measured CPU ranks
  const FrameworkFamily fam = moe ? FrameworkFamily::moe : cp ? FrameworkFamily::context_parallel : framework_family(f);
  const bool across_runtimes = fam == FrameworkFamily::moe || fam == FrameworkFamily::context_parallel;
  const GpuGeneration gen = gpu_generation(g);
  const ErrorBandGroup* pick = nullptr;
  for (const ErrorBandGroup& grp : error_band_table())
    if (grp.family == fam && !grp.all_generations && grp.generation == gen) pick = &grp;
  if (!pick)
    for (const ErrorBandGroup& grp : error_band_table())
      if (grp.family == fam && grp.all_generations) pick = &grp;
  if (!pick) return std::nullopt;
  ErrorBand b;
  b.runs = pick->runs;
  b.low = pick->low;
  b.high = pick->high;
  b.step_low_s = step_s * pick->low;
  b.step_high_s = step_s * pick->high;
  b.basis = across_runtimes
                ? fmt::format("{}, {} published runs", to_string(fam), pick->runs)
            : pick->all_generations
                ? fmt::format("{} on every GPU generation (none measured on {} GPUs), {} published runs",
                              to_string(fam), to_string(gen), pick->runs)
                : fmt::format("{} on {} GPUs, {} published runs", to_string(fam), to_string(gen), pick->runs);
  return b;
}

}  // namespace shardplan
