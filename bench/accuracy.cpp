// Accuracy benchmark: predict every complete row of the public validation set (published training runs: the shared
// set and bench/data/published_runs_modern.csv) from the presets alone, convert to the metric the source reports,
// and print per-row errors, the headline mean, and means per source, per set and per framework family × GPU
// generation. N21 Table 2's DeepSpeed-2021 ZeRO-3 rows are reported apart, outside the headline (issue 14, item 5).
//
//   shardplan_accuracy [published_runs.csv] [--modern published_runs_modern.csv] [--markdown]
//                      [--emit-bands planner/error_band_data.cpp] [--detail TEXT] [--moe-fit]
// --detail prints, for every row whose source, model, GPU or layout contains TEXT, the busiest stage's memory parts,
// one block's times per micro-batch and the step's time parts, and stops there (no fits): the quick look behind one
// row's error.
// --moe-fit refits only the MoE values (the host times and the grouped GEMMs' share) with the dense fractions held at
// the planner's constants, prints that fit and its leave-one-source-out check, and stops: seconds, where the whole
// bench (the dense refit first) takes minutes — for trying an MoE mechanism.
// --emit-bands writes the error band table (planner/error_band.hpp) that these predictions give, and prints the
// bands.
#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include <fmt/format.h>

#include "bench/published_runs.hpp"
#include "bench/sustained_fit.hpp"
#include "io/atomic_write.hpp"
#include "planner/compute_cost.hpp"
#include "planner/error.hpp"
#include "planner/moe.hpp"
#include "planner/step_time.hpp"

using namespace shardplan;
using namespace shardplan::validation;

namespace {

struct Mean {
  double sum = 0, worst = 0;
  int rows = 0;
  void add(double abs_err) {
    sum += abs_err;
    worst = std::max(worst, abs_err);
    ++rows;
  }
  double mean() const { return rows ? sum / rows : 0.0; }
};

std::string layout_of(const Strategy& s) {
  return fmt::format("tp{} pp{}{}{} dp{} z{}{} mb{} s{} {}{}", s.tp, s.pp, s.vpp > 1 ? fmt::format(" v{}", s.vpp) : "",
                     s.cp > 1 ? fmt::format(" cp{}", s.cp) : "", s.dp, s.zero, s.hsdp ? fmt::format(" hsdp{}", s.hsdp) : "", s.micro_batch, s.seq,
                     to_string(s.recompute), s.sp ? " sp" : "");
}

// The family a row is summed under in the per-source list: the source id up to its first '-' for the shared set
// (N21-Tab1 and N21-Tab2 together), the whole id for modern rows (MPT-H100 apart from the shared MPT rows).
std::string source_group(const PublishedRun& c) {
  const std::string group = c.modern ? c.source : c.source.substr(0, c.source.find_first_of('-'));
  return group + (c.historical ? " DeepSpeed ZeRO-3" : "");
}

// The rows a source ran twice, in BF16 and in FP8, with everything else alike (DGX Cloud's and NeMo's tables,
// torchtitan's): the ratio of their measured steps isolates how FP8 is priced from what the two share. Returns the
// pairs' mean |log(predicted FP8 speedup / measured)| and mean log (its bias), over the pairs.
struct Fp8Pairs {
  int pairs = 0;
  double mean_abs_log = 0, mean_log = 0;
};
struct PairSide {
  double bf16 = 0, fp8 = 0;  // measured / predicted step of each side; 0 = absent
  int count = 0;
};
std::string pair_key(const PublishedRun& r) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}", r.source, r.model.name, r.cluster.gpu.name, r.strategy.gpus,
                     layout_of(r.strategy), r.strategy.global_batch, to_string(r.strategy.framework));
}
Fp8Pairs fp8_pairs(const std::map<std::string, PairSide>& sides) {
  Fp8Pairs out;
  for (const auto& [key, side] : sides) {
    if (side.count != 2 || !(side.bf16 > 0) || !(side.fp8 > 0)) continue;
    const double l = std::log(side.fp8 / side.bf16);  // measured/predicted FP8 speedup, in log
    out.mean_abs_log += std::fabs(l);
    out.mean_log += l;
    ++out.pairs;
  }
  if (out.pairs) out.mean_abs_log /= out.pairs, out.mean_log /= out.pairs;
  return out;
}

void print_means(const std::map<std::string, Mean>& means, const char* title, bool markdown) {
  if (markdown) {
    std::cout << fmt::format("\n| {} | rows | mean abs error | worst |\n|---|---:|---:|---:|\n", title);
    for (const auto& [key, m] : means)
      std::cout << fmt::format("| {} | {} | {:.1f} % | {:.1f} % |\n", key, m.rows, 100 * m.mean(), 100 * m.worst);
  } else {
    std::cout << fmt::format("\n{}:\n", title);
    for (const auto& [key, m] : means)
      std::cout << fmt::format("  {:<34} {:>3} rows, mean absolute error {:5.1f} %, worst {:5.1f} %\n", key, m.rows,
                               100 * m.mean(), 100 * m.worst);
  }
}

// One row's prediction, part by part (--detail).
void print_detail(const PublishedRun& c, const Prediction& p, double pred, double err) {
  const StageMemory& st = p.memory.peak_stage();
  std::cout << fmt::format("\n{} {} {} GPUs {} ({}): measured {:.4g}, predicted {:.4g} ({:+.1f} %) {}\n", c.source,
                           c.model.name, c.strategy.gpus, c.cluster.gpu.name, layout_of(c.strategy), c.measured, pred,
                           100 * err, metric_name(c.metric));
  std::cout << fmt::format("  memory: stage {} of {} at {}, peak {:.2f} GiB, fit {:.2f} of {:.2f} GiB\n", st.stage,
                           p.memory.stages.size(), moment_name(st.peak_phase, st.peak_block),
                           p.peak_bytes() / kGiB, p.fit_bytes() / kGiB,
                           p.memory.capacity_bytes / kGiB);
  for (const MemoryItem& it : st.items)
    std::cout << fmt::format("    {:<14}{:>9.2f} GiB  {}\n", it.component, it.bytes / kGiB, it.what);
  const MicrobatchCosts mc = microbatch_costs(c.model, c.strategy, c.cluster);
  std::cout << fmt::format("  one block, one micro-batch: forward {:.3f} ms, backward {:.3f} ms, recomputed {:.3f} ms, "
                           "TP {:.3f} + {:.3f} ms, host gap {:.3f} ms; {} micro-batches a step\n",
                           1e3 * mc.block_fwd_s, 1e3 * mc.block_bwd_s, 1e3 * mc.block_recompute_s,
                           1e3 * mc.block_tp_fwd_s, 1e3 * mc.block_tp_bwd_s, 1e3 * mc.block_host_gap_s,
                           grad_accum_steps(c.strategy));
  const StepTime& t = p.time;
  std::cout << fmt::format("  time: step {:.4f} s = compute {:.4f} (overlap slowdown {:.4f}) + bubble {:.4f} + "
                           "optimizer {:.4f} + exposed comm {:.4f} (tp {:.4f}, cp {:.4f}, pp {:.4f}, dp {:.4f}, ep "
                           "{:.4f}; all DP traffic {:.4f})\n",
                           t.step_s, t.compute_s, t.overlap_slowdown_s, t.bubble_s, t.optimizer_s, t.exposed_comm_s,
                           t.exposed_tp_s, t.exposed_cp_s, t.exposed_pp_s, t.exposed_dp_s, t.exposed_ep_s,
                           t.dp_comm_total_s);
}

// The MoE values' fit and its leave-one-source-out check (bench/sustained_fit.hpp fit_moe_host).
void print_moe_fit(const MoeHostFit& hf, bool markdown) {
  std::cout << fmt::format(
      "\nfitted MoE host gaps (planner/moe_costs.cpp kMoeHostLayerS, kMoeHostLocalExpertS, kMoeHostFusedDispatchShare): "
      "{:.3f} ms per MoE layer and micro-batch (× {:.3f} under DeepEP/HybridEP) + {:.4f} ms per local expert, and the "
      "grouped GEMMs' share of the dense rate (kGroupedOverDenseSustained) {:.3f}; MoE rows' "
      "mean abs error {:.1f} % without the host gaps, {:.1f} % with them, leave-one-source-out {:.1f} % over {} rows\n",
      1e3 * hf.fit.layer_s, hf.fit.fused_dispatch_share, 1e3 * hf.fit.local_expert_s, hf.fit.grouped_gemm_ratio,
      100 * hf.before_error,
      100 * hf.in_sample_error,
      100 * hf.held_out_error, hf.rows);
  if (markdown) std::cout << "\n| source | rows | mean abs error (fit on all) | fit without it | mean abs error (left out) |\n"
                             "|---|---:|---:|---|---:|\n";
  for (const MoeHostSource& s : hf.sources)
    std::cout << fmt::format(fmt::runtime(markdown ? "| {} | {} | {:.1f} % | {:.3f} (× {:.2f}) + {:.4f} ms, grouped {:.3f} | {:.1f} % |\n"
                                                   : "  {:<28}{:>3} rows {:>6.1f} %   without it: {:.3f} (× {:.2f}) + {:.4f} ms, grouped {:.3f} → {:>6.1f} %\n"),
                             s.source, s.rows, 100 * s.in_sample_error, 1e3 * s.held_out.layer_s,
                             s.held_out.fused_dispatch_share, 1e3 * s.held_out.local_expert_s,
                             s.held_out.grouped_gemm_ratio, 100 * s.held_out_error);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = default_csv_path(), modern_path = modern_csv_path();
  bool markdown = false;
  std::string bands_out, detail;
  bool moe_fit_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--markdown") markdown = true;
    else if (a == "--emit-bands" && i + 1 < argc) bands_out = argv[++i];
    else if (a == "--modern" && i + 1 < argc) modern_path = argv[++i];
    else if (a == "--detail" && i + 1 < argc) detail = argv[++i];
    else if (a == "--moe-fit") moe_fit_only = true;
    else path = a;
  }
  PublishedRuns runs;
  try {
    const PresetStore& store = PresetStore::builtin();
    runs = load_published_runs(path, store);
    PublishedRuns modern = load_modern_runs(modern_path, store);
    for (PublishedRun& r : modern.runs) runs.runs.push_back(std::move(r));
    for (std::string& s : modern.skipped) runs.skipped.push_back(std::move(s));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (moe_fit_only) {
    // The dense fractions as the planner holds them: 0 asks for its fitted constant (sustained_fit.cpp row_error);
    // the overlap slowdown is passed as the constant itself.
    ComputeFraction held;
    held.ampere = held.hopper = held.blackwell = held.blackwell_ultra = held.attention = 0;
    held.overlap_slowdown = kOverlapComputeSlowdown;
    print_moe_fit(fit_moe_host(runs, held, source_group), markdown);
    return 0;
  }
  Mean headline, historical;
  std::map<std::string, Mean> by_source, by_set, by_family, by_class;  // family × GPU generation; model class
  std::string table = markdown ? "| source | model | GPUs | layout | metric | measured | predicted | error | assumptions |\n"
                                 "|---|---|---:|---|---|---:|---:|---:|---|\n"
                               : "";
  std::vector<std::string> skipped = runs.skipped;
  std::string memory_table;     // rows whose source states a peak: predicted (allocator view) against it
  Mean memory_error;
  std::vector<std::string> over_capacity;  // runs that happened but are predicted beyond the GPU's memory
  std::map<std::string, PairSide> fp8_sides;  // same-layout BF16/FP8 runs of one source (fp8_pairs)
  for (const PublishedRun& c : runs.runs) {
    Prediction p;
    try {
      p = predict(c.model, c.strategy, c.cluster);
    } catch (const InputError& e) {
      skipped.push_back(fmt::format("{} {} ({} GPUs): {}", c.source, c.label, c.strategy.gpus, e.what()));
      continue;
    }
    const double pred = predicted_metric(c, p);
    const double err = (pred - c.measured) / c.measured;
    if (!detail.empty()) {
      const std::string id = fmt::format("{} {} {} {}", c.source, c.model.name, c.cluster.gpu.name, layout_of(c.strategy));
      if (id.find(detail) != std::string::npos) print_detail(c, p, pred, err);
      continue;
    }
    if (!c.historical) {
      PairSide& side = fp8_sides[pair_key(c)];
      (c.strategy.fp8 == Fp8Recipe::off ? side.bf16 : side.fp8) = measured_over_predicted_step(c, pred);
      ++side.count;
    }
    by_source[source_group(c)].add(std::fabs(err));
    if (c.historical) {
      historical.add(std::fabs(err));
    } else {
      headline.add(std::fabs(err));
      by_set[c.modern ? "modern (bench/data)" : "shared (../shared/validation)"].add(std::fabs(err));
      by_family[fmt::format("{} / {}", c.family, c.generation)].add(std::fabs(err));
      // The classes issue 14's bar is read against: dense models without CP, dense with CP, mixture of experts.
      const char* kind = model_is_moe(c.model) ? "mixture of experts" : c.strategy.cp > 1 ? "dense, context-parallel"
                                                                                        : "dense, no CP";
      by_class[kind].add(std::fabs(err));
      if (std::fabs(err) > 0.15) by_class[std::string(kind) + ": rows beyond 15 %"].add(std::fabs(err));
    }
    std::string notes = c.historical ? "historical (DeepSpeed 2021): outside the headline" : "";
    for (const std::string& a : c.assumptions) notes += (notes.empty() ? "" : "; ") + a;
    if (!p.fits()) {
      notes += (notes.empty() ? "" : "; ") + std::string("predicted not to fit");
      // What failed the fit: the peak, or under expandable segments the peak less the allocator's reserve.
      over_capacity.push_back(fmt::format("{} {} ({} GPUs, {}): predicted {:.1f} GiB{} of {:.1f} GiB", c.source,
                                          c.model.name, c.strategy.gpus, layout_of(c.strategy),
                                          p.fit_bytes() / 1073741824.0,
                                          p.memory.expandable_segments ? " (peak less the allocator reserve)" : "",
                                          p.memory.capacity_bytes / 1073741824.0));
    }
    // The peak depends on the recomputation more than on anything else: compared only where the source gives it.
    if (c.measured_peak_bytes > 0 && !c.historical && recompute_published(c)) {
      // What PyTorch's caching allocator reserves: the peak less the CUDA context, cuBLAS workspace and NCCL
      // buffers (the runtime component), which it does not count.
      const double reserved = p.peak_bytes() - p.memory.peak_stage().peak.runtime;
      const double merr = (reserved - c.measured_peak_bytes) / c.measured_peak_bytes;
      memory_error.add(std::fabs(merr));
      memory_table += fmt::format(fmt::runtime(markdown ? "| {} | {} | {} | {} | {:.1f} | {:.1f} | {:+.1f} % |\n"
                                                        : "  {:<16}{:<16}{:>6}  {:<40}{:>9.1f}{:>11.1f}{:>+8.1f} %\n"),
                                  c.source, c.model.name, c.strategy.gpus, layout_of(c.strategy),
                                  c.measured_peak_bytes / 1073741824.0, reserved / 1073741824.0, 100 * merr);
    }
    table += markdown ? fmt::format("| {} | {} | {} | {} | {} | {:.4g} | {:.4g} | {:+.1f} % | {} |\n", c.source,
                                    c.model.name, c.strategy.gpus, layout_of(c.strategy), metric_name(c.metric),
                                    c.measured, pred, 100 * err, notes)
                      : fmt::format("{:<16}{:<16}{:>6}  {:<40}{:<18}{:>10.4g}{:>10.4g}{:>+8.1f} %  {}\n", c.source,
                                    c.model.name, c.strategy.gpus, layout_of(c.strategy), metric_name(c.metric),
                                    c.measured, pred, 100 * err, notes);
  }
  if (!detail.empty()) return 0;
  std::cout << table;
  std::cout << fmt::format("\n{} rows predicted, {} historical rows apart; mean absolute error {:.1f} %, worst {:.1f} %\n",
                           headline.rows, historical.rows, 100 * headline.mean(), 100 * headline.worst);
  std::cout << fmt::format("historical (N21 Table 2, DeepSpeed-2021 ZeRO-3): {} rows, mean absolute error {:.1f} %, "
                           "worst {:.1f} %\n",
                           historical.rows, 100 * historical.mean(), 100 * historical.worst);
  std::cout << (markdown ? "\n| source | model | GPUs | layout | published peak GiB | predicted GiB | error |\n"
                           "|---|---|---:|---|---:|---:|---:|\n"
                         : "\npublished peak memory (max reserved) against the predicted peak less the CUDA/NCCL "
                           "runtime, GiB:\n");
  std::cout << memory_table;
  std::cout << fmt::format("{} rows with a published peak: mean absolute error {:.1f} %, worst {:.1f} %\n",
                           memory_error.rows, 100 * memory_error.mean(), 100 * memory_error.worst);
  std::cout << fmt::format("\n{} runs that happened are predicted beyond their GPU's memory{}\n", over_capacity.size(),
                           over_capacity.empty() ? "" : ":");
  for (const std::string& o : over_capacity) std::cout << (markdown ? "- " : "  ") << o << "\n";
  print_means(by_source, "by source", markdown);
  print_means(by_set, "by set (historical rows apart)", markdown);
  print_means(by_family, "by framework family / GPU generation (historical rows apart)", markdown);
  print_means(by_class, "by model class (historical rows apart)", markdown);
  const Fp8Pairs pairs = fp8_pairs(fp8_sides);
  std::cout << fmt::format("\nsame-layout BF16/FP8 pairs (one source, one layout, both precisions): {} pairs; the "
                           "predicted FP8 speedup is off by {:.1f} % on average, bias {:+.1f} % (positive: FP8 "
                           "predicted to gain more than it did)\n",
                           pairs.pairs, 100 * (std::exp(pairs.mean_abs_log) - 1), 100 * (std::exp(pairs.mean_log) - 1));
  // The fitted parameters and their leave-one-source-out check (bench/sustained_fit.hpp).
  const ComputeFit cf = fit_compute_fraction(runs, source_group);
  auto fractions = [](const ComputeFraction& f) {
    return fmt::format("Ampere {:.3f}, Hopper {:.3f}, Blackwell {:.3f}, Blackwell Ultra {:.3f}, attention {:.3f}, "
                       "overlap slowdown {:.3f}, FP8 share {:.3f} (held)",
                       f.ampere, f.hopper, f.blackwell, f.blackwell_ultra, f.attention, f.overlap_slowdown,
                       f.fp8_ratio > 0 ? f.fp8_ratio : fp8_sustained_share(GpuSpec{}));
  };
  std::cout << fmt::format(
      "\nfitted compute fractions (planner/compute_cost.cpp sustained_tensor_fraction) and overlap slowdown "
      "(planner/step_time.hpp kOverlapComputeSlowdown): {}; mean abs error {:.1f} % over {} rows, "
      "leave-one-source-out {:.1f} %{}\n",
      fractions(cf.fit), 100 * cf.in_sample_error, cf.rows, 100 * cf.held_out_error,
      cf.moe_rows_apart ? fmt::format(" ({} MoE rows predicted but not fitted on: bench/sustained_fit.cpp)", cf.moe_rows_apart) : "");
  if (markdown) std::cout << "\n| source | rows | mean abs error (fit on all) | fit without it | mean abs error (left out) |\n"
                             "|---|---:|---:|---|---:|\n";
  for (const SourceFit& s : cf.sources)
    std::cout << (markdown ? fmt::format("| {} | {} | {:.1f} % | {} | {:.1f} % |\n", s.source, s.rows,
                                         100 * s.in_sample_error, fractions(s.held_out), 100 * s.held_out_error)
                           : fmt::format("  {:<28} {:>3} rows {:5.1f} %   without it: {} → {:5.1f} %\n", s.source,
                                         s.rows, 100 * s.in_sample_error, fractions(s.held_out),
                                         100 * s.held_out_error));
  // The MoE rows' host-bound launch gaps (planner/moe_costs.hpp moe_host_gap_s), fitted with the dense fractions held.
  print_moe_fit(fit_moe_host(runs, cf.fit, source_group), markdown);
  const std::vector<ErrorBandGroup> bands = band_groups(published_errors(runs));
  std::cout << (markdown ? "\n| error band group | runs | measured / predicted step, low | high |\n|---|---:|---:|---:|\n"
                         : "\nerror bands (measured / predicted step, 10th–90th percentile; min–max under 10 runs):\n");
  for (const ErrorBandGroup& g : bands) {
    const std::string name = fmt::format("{} / {}", to_string(g.family),
                                         g.all_generations ? "every generation" : to_string(g.generation));
    std::cout << (markdown ? fmt::format("| {} | {} | {:.3f} | {:.3f} |\n", name, g.runs, g.low, g.high)
                           : fmt::format("  {:<58} {:>3} runs  {:.3f} – {:.3f}\n", name, g.runs, g.low, g.high));
  }
  if (!bands_out.empty()) {
    try {
      io::write_file_atomically(bands_out, error_band_source(bands), "--emit-bands");
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cout << fmt::format("\n{} rows skipped:\n", skipped.size());
  for (const std::string& s : skipped) std::cout << (markdown ? "- " : "skipped: ") << s << "\n";
  return 0;
}
