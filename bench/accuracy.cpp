// Accuracy benchmark: predict every complete row of the public validation set (published training runs) from
// the presets alone, convert to the metric the source reports, and print per-row and mean errors.
//
//   shardplan_accuracy [published_runs.csv] [--markdown]
#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include <fmt/format.h>

#include "bench/published_runs.hpp"
#include "planner/error.hpp"

using namespace shardplan;
using namespace shardplan::validation;

int main(int argc, char** argv) {
  std::string path = default_csv_path();
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--markdown") markdown = true;
    else path = a;
  }
  PublishedRuns runs;
  try {
    runs = load_published_runs(path, PresetStore::builtin());
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  double sum_abs = 0, worst = 0;
  int counted = 0;
  std::string table = markdown ? "| source | model | GPUs | layout | metric | measured | predicted | error | assumptions |\n"
                                 "|---|---|---:|---|---|---:|---:|---:|---|\n"
                               : "";
  std::vector<std::string> skipped = runs.skipped;
  std::map<std::string, std::pair<double, int>> by_source;  // source family → (Σ|error|, rows)
  for (const PublishedRun& c : runs.runs) {
    Prediction p;
    try {
      p = predict(c.model, c.strategy, c.cluster);
    } catch (const InputError& e) {
      skipped.push_back(fmt::format("{} {}: {}", c.source, c.label, e.what()));
      continue;
    }
    const double pred = predicted_metric(c, p);
    const double err = (pred - c.measured) / c.measured;
    sum_abs += std::fabs(err);
    worst = std::max(worst, std::fabs(err));
    ++counted;
    const std::string family = c.source.substr(0, c.source.find_first_of("-"));
    const bool ds_zero3 = c.strategy.zero == 3 && c.strategy.framework == Framework::deepspeed;
    auto& [family_sum, family_rows] = by_source[family + (ds_zero3 ? " DeepSpeed ZeRO-3" : "")];
    family_sum += std::fabs(err);
    ++family_rows;
    const std::string layout = fmt::format("tp{} pp{} dp{} z{} mb{} {}{}", c.strategy.tp, c.strategy.pp, c.strategy.dp,
                                           c.strategy.zero, c.strategy.micro_batch, to_string(c.strategy.recompute),
                                           c.strategy.sp ? " sp" : "");
    std::string notes;
    for (const std::string& a : c.assumptions) notes += (notes.empty() ? "" : "; ") + a;
    if (!p.fits()) notes += (notes.empty() ? "" : "; ") + std::string("predicted not to fit");
    table += markdown ? fmt::format("| {} | {} | {} | {} | {} | {:.4g} | {:.4g} | {:+.1f} % | {} |\n", c.source,
                                    c.model.name, c.strategy.gpus, layout, metric_name(c.metric), c.measured, pred,
                                    100 * err, notes)
                      : fmt::format("{:<16}{:<13}{:>6}  {:<36}{:<16}{:>10.4g}{:>10.4g}{:>+8.1f} %  {}\n", c.source,
                                    c.model.name, c.strategy.gpus, layout, metric_name(c.metric), c.measured, pred,
                                    100 * err, notes);
  }
  std::cout << table;
  std::cout << fmt::format("\n{} rows predicted; mean absolute error {:.1f} %, worst {:.1f} %\n", counted,
                           counted ? 100 * sum_abs / counted : 0.0, 100 * worst);
  for (const auto& [family, acc] : by_source)
    std::cout << fmt::format("  {:<22} {:>2} rows, mean absolute error {:5.1f} %\n", family, acc.second,
                             100 * acc.first / acc.second);
  for (const std::string& s : skipped) std::cout << "skipped: " << s << "\n";
  return 0;
}
