// Speed benchmark of the planner: configuration evaluations per second on one core, whole searches, and
// `shardplan plan` end to end (process start to exit).
//
//   shardplan_search_speed [path/to/shardplan]
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "io/preset_store.hpp"
#include "planner/framework.hpp"
#include "planner/memory.hpp"
#include "planner/search.hpp"
#include "planner/step_time.hpp"

using namespace shardplan;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The inner evaluation the search runs per configuration: peak memory and step time from precomputed
// micro-batch costs. Varies zero stage, HSDP group and pipeline depth over a fixed (tp, micro-batch, recompute).
void inner_evaluation_rate(const ModelSpec& m, const ClusterSpec& c) {
  Strategy base;
  base.gpus = 64;
  base.tp = 1;
  base.micro_batch = 1;
  base.seq = 2048;
  base.global_batch = 512;
  base.precision = Precision::amp_bf16;
  const FrameworkTraits fw = framework_traits(base.framework);
  const MicrobatchCosts costs = microbatch_costs(m, base, c);
  std::vector<Strategy> grid;
  for (int64_t pp : {1, 2, 4, 8})
    for (int zero = 0; zero <= 3; ++zero)
      for (int64_t hsdp : {0, 2, 4, 8}) {
        Strategy s = base;
        s.pp = pp;
        s.dp = base.gpus / pp;
        s.zero = zero;
        s.hsdp = zero >= 2 ? hsdp : 0;
        grid.push_back(s);
      }
  double sink = 0;
  int64_t evaluations = 0;
  const auto t0 = Clock::now();
  while (seconds_since(t0) < 2.0) {
    for (int rep = 0; rep < 1000; ++rep)
      for (const Strategy& s : grid) {
        sink += estimate_peak_memory(m, s, fw).peak.total();
        sink += step_time_from_costs(m, s, c, fw, costs).step_s;
        ++evaluations;
      }
  }
  const double rate = static_cast<double>(evaluations) / seconds_since(t0);
  fmt::print("inner evaluation (memory peak + step time), one core: {:.2f} M configurations/s  [{} evaluations; "
             "checksum {:.3g}]\n",
             rate / 1e6, evaluations, sink);
}

void search_rate(const PresetStore& store, const char* model, const char* cluster, int64_t gpus,
                 Framework framework = Framework::fsdp) {
  const ModelSpec m = store.model(model);
  const ClusterSpec c = store.cluster(cluster);
  SearchSpace space;
  space.base.gpus = gpus;
  space.base.seq = m.seq;
  space.base.framework = framework;  // megatron for an MoE model: the search then tries every EP degree (issue 17)
  // As plan without --global-batch: each layout at the default rule's batch for its dp (planner/batch.hpp).
  space.batch_default = default_batch_target(m.seq, gpus);
  space.base.global_batch = space.batch_default->sequences;
  std::vector<double> times;
  SearchResult r;
  for (int i = 0; i < 21; ++i) {
    const auto t0 = Clock::now();
    r = search_strategies(m, c, space, 5);
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  fmt::print("search {:<12} on {:>5} × {:<10}: {:>6} configurations in {:7.2f} ms (median of 21) = {:.2f} M/s{}\n",
             model, gpus, c.gpu.name, r.evaluated, median * 1e3, static_cast<double>(r.evaluated) / median / 1e6,
             r.recommended && r.recommended->strategy.ep > 1
                 ? fmt::format("; recommends ep {}", r.recommended->strategy.ep)
                 : "");
}

void end_to_end(const std::string& binary, const std::string& args) {
  std::vector<double> times;
  for (int i = 0; i < 11; ++i) {
    const auto t0 = Clock::now();
    const int status = std::system((binary + " " + args + " >/dev/null 2>&1").c_str());
    times.push_back(seconds_since(t0));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fmt::print("end to end: `shardplan {}` failed\n", args);
      return;
    }
  }
  std::sort(times.begin(), times.end());
  fmt::print("end to end `shardplan {}`: {:.1f} ms (median of 11, incl. the shell)\n", args, times[5] * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const PresetStore store = PresetStore::builtin();
  inner_evaluation_rate(store.model("8b"), store.cluster("a800x8"));
  search_rate(store, "8b", "a800x8", 8);
  search_rate(store, "llama3-70b", "dgx-h100", 512);
  search_rate(store, "llama3-405b", "dgx-h100", 16384);
  search_rate(store, "deepseek-v3", "h800x8", 2048, Framework::megatron);  // EP searched (issue 17: under 1 s)
  if (argc > 1) {
    end_to_end(argv[1], "plan --preset 8b --gpus 8");
    end_to_end(argv[1], "plan --preset llama3-405b --gpus 16384 --cluster dgx-h100");
    end_to_end(argv[1], "plan --preset deepseek-v3 --gpus 2048 --cluster h800x8 --framework megatron");
  }
  return 0;
}
