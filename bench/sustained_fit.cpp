#include "bench/sustained_fit.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "planner/error.hpp"
#include "planner/moe.hpp"

namespace shardplan::validation {

namespace {

using BySource = std::map<std::string, std::vector<const PublishedRun*>>;

// fit(i) for i in [0, n), on as many threads as the machine has cores: each leave-one-source-out refit is independent
// of the others and writes only its own slot, so the result does not depend on the threads (the planner holds no
// state: sim/rerank.cpp simulates plan's candidates the same way). An exception is rethrown after every thread ended.
void for_each_index_parallel(size_t n, const std::function<void(size_t)>& fit) {
  std::atomic<size_t> next{0};
  std::mutex lock;
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        fit(i);
      } catch (...) {
        const std::lock_guard<std::mutex> g(lock);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// The override the planner takes (GpuSpec::sustained_tensor_fraction): the row's generation value (Volta, two rows,
// is not fitted: 1; no AMD row is in the set).
double fraction_of(const PublishedRun& r, const ComputeFraction& f) {
  if (r.cluster.gpu.architecture == GpuArchitecture::blackwell_ultra) return f.blackwell_ultra;
  switch (gpu_generation(r.cluster.gpu)) {
    case GpuGeneration::volta: return 1.0;
    case GpuGeneration::ampere: return f.ampere;
    case GpuGeneration::blackwell: return f.blackwell;
    case GpuGeneration::hopper:
    case GpuGeneration::cdna3:
    case GpuGeneration::cdna4: return f.hopper;
  }
  return f.hopper;
}

struct RowError {
  double log_ratio = NAN;  // |log(measured / predicted step)|
  double error = NAN;      // (predicted − measured) / measured of the row's metric
};

RowError row_error(const PublishedRun& r, const ComputeFraction& f, const MoeHost* host = nullptr) {
  ClusterSpec c = r.cluster;
  c.gpu.sustained_tensor_fraction = fraction_of(r, f);
  c.gpu.comm_overlap_slowdown = std::max(f.overlap_slowdown, 1e-15);  // 0 means "the fitted default" to the planner
  c.gpu.fp8_sustained_ratio = f.fp8_ratio;
  c.gpu.attention_sustained_fraction = f.attention;
  if (host) {  // 0 means "the fitted default" to the planner: the smallest positive time stands for none
    c.moe_host_layer_s = std::max(host->layer_s, 1e-15);
    c.moe_host_local_expert_s = std::max(host->local_expert_s, 1e-15);
    c.moe_host_fused_dispatch_share = std::max(host->fused_dispatch_share, 1e-15);
    c.gpu.grouped_gemm_ratio = host->grouped_gemm_ratio;
  }
  try {
    const Prediction p = predict(r.model, r.strategy, c);
    const double pred = predicted_metric(r, p);
    return {std::fabs(std::log(measured_over_predicted_step(r, pred))), (pred - r.measured) / r.measured};
  } catch (const InputError&) {
    return {};
  }
}

// The mean over sources of each source's mean |log ratio|: every source weighs the same, however many rows it has.
double objective(const BySource& by_source, const ComputeFraction& f, const MoeHost* host = nullptr) {
  double sum = 0;
  int sources = 0;
  for (const auto& [source, rows] : by_source) {
    double s = 0;
    int n = 0;
    for (const PublishedRun* r : rows) {
      const RowError e = row_error(*r, f, host);
      if (std::isnan(e.log_ratio)) continue;
      s += e.log_ratio;
      ++n;
    }
    if (n == 0) continue;
    sum += s / n;
    ++sources;
  }
  return sources ? sum / sources : 0;
}

// Golden-section search for the minimum of `at` on [lo, hi], at most `iterations` steps or until the bracket is
// narrower than `tolerance`; the bracket's middle.
template <typename F>
double golden_section(double lo, double hi, int iterations, double tolerance, F at) {
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = lo, b = hi;
  double c = b - phi * (b - a), d = a + phi * (b - a), fc = at(c), fd = at(d);
  for (int i = 0; i < iterations && b - a > tolerance; ++i) {
    if (fc < fd) b = d, d = c, fd = fc, c = b - phi * (b - a), fc = at(c);
    else a = c, c = d, fc = fd, d = a + phi * (b - a), fd = at(d);
  }
  return (a + b) / 2;
}

// One fraction on [0.2, 1.2] (step times fall monotonically as tensor throughput rises); the overlap slowdown on
// [0, 1] (Lee et al. 2025 measured up to 0.40).
void minimise(const BySource& by_source, ComputeFraction& f, double ComputeFraction::*coord) {
  const bool slowdown = coord == &ComputeFraction::overlap_slowdown;
  f.*coord = golden_section(slowdown ? 0.0 : 0.2, slowdown ? 1.0 : 1.2, 30, 1e-4, [&](double x) {
    ComputeFraction g = f;
    g.*coord = x;
    return objective(by_source, g);
  });
}

// The generations' rows are disjoint, but a source may span two (FMS-eager, MLM20), and the overlap slowdown moves
// every generation's fraction (a long, narrow valley): rounds of coordinate descent, each followed by a line search
// along the round's own move (a pattern move, Hooke and Jeeves 1961), until no value moves by more than 1e-4.
ComputeFraction fit(const BySource& by_source) {
  using F = ComputeFraction;
  constexpr double F::*kCoords[] = {&F::ampere,           &F::hopper,    &F::blackwell,
                                    &F::blackwell_ultra, &F::attention, &F::overlap_slowdown};
  F f;
  for (int round = 0; round < 12; ++round) {
    const F before = f;
    for (double F::*coord : kCoords) minimise(by_source, f, coord);
    auto along = [&](double a) {
      F g = before;
      for (double F::*coord : kCoords) g.*coord = std::max(0.0, before.*coord + a * (f.*coord - before.*coord));
      return g;
    };
    const double a = golden_section(1.0, 6.0, 20, 1e-2, [&](double x) { return objective(by_source, along(x)); });
    if (objective(by_source, along(a)) < objective(by_source, f)) f = along(a);
    double moved = 0;
    for (double F::*coord : kCoords) moved = std::max(moved, std::fabs(f.*coord - before.*coord));
    if (moved < 1e-4) break;
  }
  return f;
}

double mean_abs_error(const std::vector<const PublishedRun*>& rows, const ComputeFraction& f, int& counted,
                      const MoeHost* host = nullptr) {
  double s = 0;
  counted = 0;
  for (const PublishedRun* r : rows) {
    const RowError e = row_error(*r, f, host);
    if (std::isnan(e.error)) continue;
    s += std::fabs(e.error);
    ++counted;
  }
  return counted ? s / counted : 0;
}

std::vector<std::string> source_names(const BySource& by_source) {
  std::vector<std::string> names;
  for (const auto& entry : by_source) names.push_back(entry.first);
  return names;
}

}  // namespace

ComputeFit fit_compute_fraction(const PublishedRuns& runs, std::string (*group)(const PublishedRun&)) {
  BySource by_source;
  ComputeFit out;
  for (const PublishedRun& r : runs.runs) {
    if (r.historical) continue;
    // Mixture-of-experts rows are predicted and reported, but not fitted on: their grouped expert GEMMs run at an
    // assumed efficiency (planner/moe_costs.cpp), a second unknown that the dense tensor-core fraction would absorb
    // and carry into every dense prediction (the two GPT-OSS rows alone moved Hopper from 0.787 to 0.753).
    if (model_is_moe(r.model)) {
      ++out.moe_rows_apart;
      continue;
    }
    by_source[group(r)].push_back(&r);
  }
  out.fit = fit(by_source);
  const std::vector<std::string> sources = source_names(by_source);
  std::vector<SourceFit> fits(sources.size());
  for_each_index_parallel(sources.size(), [&](size_t i) {
    const std::vector<const PublishedRun*>& rows = by_source.at(sources[i]);
    SourceFit& sf = fits[i];
    sf.source = sources[i];
    sf.in_sample_error = mean_abs_error(rows, out.fit, sf.rows);
    BySource others = by_source;
    others.erase(sources[i]);
    sf.held_out = fit(others);  // cold start: nothing of the left-out source reaches its own refit
    int n = 0;
    sf.held_out_error = mean_abs_error(rows, sf.held_out, n);
  });
  double in_sum = 0, out_sum = 0;
  for (const SourceFit& sf : fits) {
    in_sum += sf.in_sample_error * sf.rows;
    out_sum += sf.held_out_error * sf.rows;
    out.rows += sf.rows;
    out.sources.push_back(sf);
  }
  out.in_sample_error = out.rows ? in_sum / out.rows : 0;
  out.held_out_error = out.rows ? out_sum / out.rows : 0;
  return out;
}

namespace {

// One host time on [0, hi] seconds.
void minimise_host(const BySource& by_source, const ComputeFraction& f, MoeHost& h, double MoeHost::*coord, double hi) {
  h.*coord = golden_section(0.0, hi, 40, hi * 1e-4, [&](double x) {
    MoeHost g = h;
    g.*coord = x;
    return objective(by_source, f, &g);
  });
}

MoeHost fit_host(const BySource& by_source, const ComputeFraction& f) {
  MoeHost h;
  for (int round = 0; round < 3; ++round) {
    minimise_host(by_source, f, h, &MoeHost::layer_s, 20e-3);        // at most 20 ms per layer and micro-batch
    minimise_host(by_source, f, h, &MoeHost::local_expert_s, 1e-3);  // at most 1 ms per local expert
    minimise_host(by_source, f, h, &MoeHost::fused_dispatch_share, 2.0);  // at most twice the all-to-all's
    minimise_host(by_source, f, h, &MoeHost::grouped_gemm_ratio, 1.5);   // at most 1.5× a dense GEMM's rate
  }
  return h;
}

}  // namespace

MoeHostFit fit_moe_host(const PublishedRuns& runs, const ComputeFraction& dense,
                        std::string (*group)(const PublishedRun&)) {
  BySource by_source;
  for (const PublishedRun& r : runs.runs)
    if (!r.historical && model_is_moe(r.model)) by_source[group(r)].push_back(&r);
  MoeHostFit out;
  out.fit = fit_host(by_source, dense);
  const std::vector<std::string> sources = source_names(by_source);
  std::vector<MoeHostSource> fits(sources.size());
  std::vector<double> without(sources.size());  // each source's summed |error| with no host time
  for_each_index_parallel(sources.size(), [&](size_t i) {
    const std::vector<const PublishedRun*>& rows = by_source.at(sources[i]);
    MoeHostSource& sf = fits[i];
    sf.source = sources[i];
    int n = 0;
    const MoeHost none;
    without[i] = mean_abs_error(rows, dense, n, &none) * n;
    sf.in_sample_error = mean_abs_error(rows, dense, sf.rows, &out.fit);
    BySource others = by_source;
    others.erase(sources[i]);
    sf.held_out = fit_host(others, dense);
    sf.held_out_error = mean_abs_error(rows, dense, n, &sf.held_out);
  });
  double before = 0, in_sum = 0, out_sum = 0;
  for (size_t i = 0; i < fits.size(); ++i) {
    const MoeHostSource& sf = fits[i];
    before += without[i];
    in_sum += sf.in_sample_error * sf.rows;
    out_sum += sf.held_out_error * sf.rows;
    out.rows += sf.rows;
    out.sources.push_back(sf);
  }
  out.before_error = out.rows ? before / out.rows : 0;
  out.in_sample_error = out.rows ? in_sum / out.rows : 0;
  out.held_out_error = out.rows ? out_sum / out.rows : 0;
  return out;
}

}  // namespace shardplan::validation
