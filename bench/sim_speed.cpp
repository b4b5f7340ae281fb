// Simulator benchmark: how long one simulated step takes (8b on 8 GPUs; gpt-1t with tp 8, pp 64 on 3072 GPUs),
// and how close the simulated step time is to the analytic one on every row of the public validation set
// (the configurations bench/published_runs.cpp builds for the accuracy benchmark).
//
//   shardplan_sim_speed [published_runs.csv]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "bench/published_runs.hpp"
#include "planner/error.hpp"
#include "sim/simulate.hpp"

using namespace shardplan;

namespace {

// Best of `repeats` wall times of one whole simulate() (plan, play, breakdown, analytic prediction).
double time_simulation(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, int repeats, sim::SimResult& out) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    out = sim::simulate(m, s, c);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Strategy layout(int64_t gpus, int64_t tp, int64_t pp, int zero, int64_t global_batch, int64_t seq) {
  Strategy s;
  s.gpus = gpus;
  s.tp = tp;
  s.pp = pp;
  s.dp = gpus / (tp * pp);
  s.zero = zero;
  s.micro_batch = 1;
  s.global_batch = global_batch;
  s.seq = seq;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const PresetStore store = PresetStore::builtin();
  std::string csv = validation::default_csv_path();
  if (argc > 1) csv = argv[1];

  // 1. Speed.
  {
    const ModelSpec m = store.model("8b");
    const Strategy s = layout(8, 1, 1, 3, 8, m.seq);  // the seed case: FSDP FULL_SHARD on one A800 node
    sim::SimResult r;
    const double t = time_simulation(m, s, store.cluster("a800x8"), 20, r);
    std::cout << fmt::format("8b, 8 GPUs (zero 3, 1 micro-batch):           {:>9.3f} ms  ({} ops; target < 10 ms)\n",
                             t * 1e3, r.ops);
  }
  {
    // N21 Table 1's largest row: GPT 1T on 3072 A100, tp 8, pp 64, dp 6, global batch 3072 (512 micro-batches).
    const ModelSpec m = store.model("gpt-1t");
    Strategy s = layout(3072, 8, 64, 0, 3072, 2048);
    s.framework = Framework::megatron;
    s.precision = Precision::megatron_bf16;
    s.recompute = Recompute::full;
    s.flash_attn = false;
    sim::SimResult r;
    double t = time_simulation(m, s, store.cluster("dgx-a100-80g"), 3, r);
    std::cout << fmt::format("gpt-1t, 3072 GPUs, tp 8 pp 64, 1F1B:           {:>9.3f} ms  ({} ops; target < 1 s)\n",
                             t * 1e3, r.ops);
    s.schedule = Schedule::interleaved;
    s.vpp = 2;
    t = time_simulation(m, s, store.cluster("dgx-a100-80g"), 3, r);
    std::cout << fmt::format("gpt-1t, 3072 GPUs, tp 8 pp 64, interleaved v2: {:>9.3f} ms  ({} ops; target < 1 s)\n",
                             t * 1e3, r.ops);
  }

  // 2. Simulated against analytic step time on the validation rows.
  validation::PublishedRuns runs;
  try {
    runs = validation::load_published_runs(csv, store);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  std::cout << fmt::format("\n{:<16}{:<14}{:>6}  {:<30}{:>12}{:>12}{:>9}  {}\n", "source", "model", "GPUs", "layout",
                           "analytic s", "simulated s", "diff", "largest difference");
  double sum = 0, worst = 0;
  int rows = 0, within = 0;
  for (const validation::PublishedRun& run : runs.runs) {
    sim::SimResult r;
    try {
      r = sim::simulate(run.model, run.strategy, run.cluster);
    } catch (const InputError& e) {
      std::cout << fmt::format("{:<16}{:<14} skipped: {}\n", run.source, run.label, e.what());
      continue;
    }
    const StepTime& a = r.analytic.time;
    const sim::StageTime& t = r.critical_stage();
    const double diff = (r.step_s - a.step_s) / a.step_s;
    // Which part of the step differs most.
    const std::pair<const char*, double> parts[] = {{"compute", t.busy_compute_s - a.compute_s},
                                                    {"tp", t.exposed_tp_s - a.exposed_tp_s},
                                                    {"pp", t.exposed_pp_s - a.exposed_pp_s},
                                                    {"dp", t.exposed_dp_s - a.exposed_dp_s},
                                                    {"bubble", t.bubble_s - a.bubble_s}};
    const auto* largest = std::max_element(std::begin(parts), std::end(parts), [](const auto& x, const auto& y) {
      return std::fabs(x.second) < std::fabs(y.second);
    });
    const Strategy& s = run.strategy;
    const std::string lay = fmt::format("tp{} pp{} dp{} v{} z{} mb{} ga{}", s.tp, s.pp, s.dp, s.vpp, s.zero,
                                        s.micro_batch, grad_accum_steps(s));
    std::cout << fmt::format("{:<16}{:<14}{:>6}  {:<30}{:>12.4f}{:>12.4f}{:>+8.2f}%  {} {:+.4f} s\n", run.source,
                             run.model.name, s.gpus, lay, a.step_s, r.step_s, 100 * diff, largest->first,
                             largest->second);
    sum += std::fabs(diff);
    worst = std::max(worst, std::fabs(diff));
    within += std::fabs(diff) <= 0.03 ? 1 : 0;
    ++rows;
  }
  std::cout << fmt::format("\n{} rows: simulated vs analytic step time, mean |difference| {:.2f} %, worst {:.2f} %, "
                           "{} rows within 3 %\n",
                           rows, rows ? 100 * sum / rows : 0.0, 100 * worst, within);
  return 0;
}
