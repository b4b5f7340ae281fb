// Full recomputation of some blocks only (planner/partial_recompute.hpp): which blocks each runtime picks, memory
// and time by hand, the limiting cases, the simulator against predict, PyTorch's own allocations
// (reports/fsdp2-memory-partial.json, bench/torch/compare.py --cases partial), the search and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/framework.hpp"
#include "planner/memory.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "planner/search_recompute.hpp"
#include "planner/step_time.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"
#include "tests/memory_check.hpp"

using namespace shardplan;
using test::h100;
using test::presets;

namespace {

Strategy full_recompute(Framework fw, int64_t gpus, int64_t tp, int64_t pp, int64_t seq) {
  Strategy s;
  s.framework = fw;
  s.precision = fw == Framework::megatron ? Precision::megatron_bf16 : Precision::amp_bf16;
  s.gpus = gpus;
  s.tp = tp;
  s.sp = tp > 1;
  s.pp = pp;
  s.dp = gpus / tp / pp;
  s.zero = fw == Framework::megatron ? 1 : 3;
  s.recompute = Recompute::full;
  s.seq = seq;
  s.micro_batch = 1;
  s.global_batch = s.dp * 8;
  return s;
}

Strategy first_blocks(Strategy s, int64_t n) {
  s.recompute_layers = n;
  return s;
}

Strategy every_kth(Strategy s, int64_t k) {
  s.recompute_every = k;
  return s;
}

double activations_at_peak(const Prediction& p) { return p.memory.peak_stage().peak.activations; }

}  // namespace

TEST_SUITE("partial recompute") {
  TEST_CASE("which blocks: the first N of each chunk (Megatron's block method), every K-th counted from 1 (torchtitan)") {
    Strategy s;
    s.recompute = Recompute::full;
    s.recompute_layers = 3;
    CHECK(recomputes_block(s, 0, 20));
    CHECK(recomputes_block(s, 2, 20));
    CHECK_FALSE(recomputes_block(s, 3, 20));
    CHECK(recomputed_blocks(s, 20) == 3);
    CHECK(recomputed_blocks(s, 2) == 2);  // a chunk smaller than N: all of it, as Megatron's loop does
    CHECK(recomputed_among_first(s, 2, 20) == 2);
    s.recompute_layers = 0;
    s.recompute_every = 4;  // _apply_layer_sac: the 4th and 8th of 10, indices 3 and 7
    CHECK(recomputes_block(s, 3, 10));
    CHECK(recomputes_block(s, 7, 10));
    CHECK_FALSE(recomputes_block(s, 0, 10));
    CHECK_FALSE(recomputes_block(s, 4, 10));
    CHECK(recomputed_blocks(s, 10) == 2);
    CHECK(recomputed_among_first(s, 4, 10) == 1);
    s.recompute = Recompute::selective;
    CHECK(recomputed_blocks(s, 10) == 0);
    CHECK_FALSE(partial_recompute(s));
    // Llama 3 8B (32 layers) over 2 stages of 16: 3 of each recomputed, 6 of 32.
    const ModelSpec m = presets().model("llama3-8b");
    const Strategy two = first_blocks(full_recompute(Framework::megatron, 8, 2, 2, 4096), 3);
    CHECK(stage_recomputed_blocks(m, two, 0) == 3);
    CHECK(recomputed_block_share(m, two) == doctest::Approx(6.0 / 32));
    CHECK(recomputed_block_share(m, full_recompute(Framework::megatron, 8, 2, 2, 4096)) == 1.0);
    CHECK(recompute_label(two) == "first 3");
    CHECK(recompute_label(every_kth(first_blocks(two, 0), 2)) == "every 2nd");
  }

  TEST_CASE("memory: each block more recomputed saves its working set less its input; time: the recomputed share of "
            "the forward") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = h100();
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    const Strategy full = full_recompute(Framework::megatron, 8, 2, 1, 4096);
    const double input = block_activation_bytes(m, full, fw);
    Strategy none = full;
    none.recompute = Recompute::none;
    const double working_set = block_working_set_bytes(m, none, fw);
    REQUIRE(working_set > 10 * input);
    // The last block keeps its activations at 3 and at 5 recomputed, so the first backward is the peak in both.
    const Prediction three = predict(m, first_blocks(full, 3), c), five = predict(m, first_blocks(full, 5), c);
    CHECK(activations_at_peak(three) - activations_at_peak(five) == doctest::Approx(2 * (working_set - input)).epsilon(1e-9));
    // Time: a block's recompute is 5/32 of its forward.
    const MicrobatchCosts all = microbatch_costs(m, full, c), some = microbatch_costs(m, first_blocks(full, 5), c);
    CHECK(all.block_recompute_s == doctest::Approx(all.block_fwd_s));
    CHECK(some.block_recompute_s == doctest::Approx(5.0 / 32 * all.block_fwd_s));
    const double none_s = predict(m, none, c).time.step_s, full_s = predict(m, full, c).time.step_s;
    const double five_s = five.time.step_s;
    CHECK(none_s < five_s);
    CHECK(five_s < full_s);
  }

  TEST_CASE("every block named is plain full recomputation: the same memory and time") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = h100();
    for (const Strategy& full : {full_recompute(Framework::megatron, 8, 2, 2, 4096),
                                 full_recompute(Framework::fsdp, 8, 1, 1, 4096)}) {
      CAPTURE(to_string(full.framework));
      const int64_t chunk = m.layers / full.pp;
      const Prediction a = predict(m, full, c), b = predict(m, first_blocks(full, chunk), c);
      CHECK(a.memory.peak_stage().peak.total() == doctest::Approx(b.memory.peak_stage().peak.total()).epsilon(1e-12));
      CHECK(a.time.step_s == doctest::Approx(b.time.step_s).epsilon(1e-12));
    }
  }

  TEST_CASE("simulate plays each block as it saves: peak and step within 3 % of predict's") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = h100();
    Strategy interleaved = first_blocks(full_recompute(Framework::megatron, 8, 2, 2, 4096), 2);
    interleaved.vpp = 2;
    interleaved.schedule = Schedule::interleaved;
    Strategy titan = every_kth(full_recompute(Framework::torchtitan, 8, 1, 1, 8192), 3);
    titan.zero = 2;
    const Strategy cases[] = {first_blocks(full_recompute(Framework::megatron, 8, 2, 2, 4096), 3), interleaved,
                              first_blocks(full_recompute(Framework::fsdp, 8, 1, 1, 8192), 5), titan,
                              first_blocks(full_recompute(Framework::fsdp1, 8, 1, 1, 4096), 4)};
    for (const Strategy& s : cases) {
      CAPTURE(to_string(s.framework));
      CAPTURE(s.recompute_layers);
      CAPTURE(s.recompute_every);
      const sim::SimResult r = sim::simulate(m, s, c);
      const double predicted = static_cast<double>(peak_bytes(r.analytic.memory.peak_stage().peak));
      CHECK(std::fabs(r.peak_stage().peak_bytes / predicted - 1) < 0.03);
      CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.03);
    }
  }

  TEST_CASE("PyTorch's allocations with some blocks recomputed (reports/fsdp2-memory-partial.json): within 2 %") {
    const nlohmann::json rows = test::report_json("fsdp2-memory-partial.json");
    REQUIRE(rows.size() >= 14);
    int first = 0, every = 0;
    double worst = 0;
    for (const nlohmann::json& r : rows) {
      const nlohmann::json& cs = r["case"];
      CAPTURE(cs.dump());
      const ModelSpec m = test::case_model(presets(), cs["model"]);
      const Strategy s = test::case_strategy(cs);
      REQUIRE(partial_recompute(s));
      first += s.recompute_layers > 0;
      every += s.recompute_every > 0;
      const double err = test::tracked_allocation(predict(m, s, h100())) / r["measured"]["total"].get<double>() - 1;
      CHECK(std::fabs(err) < 0.02);
      worst = std::max(worst, std::fabs(err));
    }
    MESSAGE("worst |error| ", 100 * worst, " %");
    CHECK(first >= 6);
    CHECK(every >= 6);
  }

  TEST_CASE("plan: the fewest first blocks that fit, faster than recomputing all; never under torchtitan or DeepSpeed") {
    // Llama 3 70B at 8 K tokens on 64 H100 under FSDP2, one sequence a micro-batch: recomputing every block fits,
    // none does not.
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    SearchSpace sp;
    sp.base.gpus = 64;
    sp.base.seq = 8192;
    sp.base.global_batch = 128;
    sp.base.precision = Precision::amp_bf16;
    sp.base.framework = Framework::fsdp;
    sp.micro_batch = 1;
    const SearchResult r = search_strategies(m, c, sp, 50);
    REQUIRE(r.recommended);
    const Strategy& best = r.recommended->strategy;
    CHECK(best.recompute == Recompute::full);
    CHECK(best.recompute_layers > 0);
    CHECK(best.recompute_layers < m.layers);
    // The fewest: one block fewer does not fit under the line.
    Strategy fewer = best;
    fewer.recompute_layers -= 1;
    const FrameworkTraits fw = framework_traits(Framework::fsdp);
    const bool expandable = effective_expandable_segments(fewer, fw);
    CHECK(fit_bytes(estimate_peak_memory(m, fewer, fw).peak, expandable) >
          sp.max_hbm_fraction * static_cast<double>(gpu_capacity_bytes(c.gpu)));
    Strategy all = best;
    all.recompute_layers = 0;
    CHECK(predict(m, best, c).time.step_s < predict(m, all, c).time.step_s);
    for (Framework f : {Framework::torchtitan, Framework::deepspeed}) {
      CAPTURE(to_string(f));
      sp.base.framework = f;
      for (const Candidate& cand : search_strategies(m, c, sp, 50).ranked)
        CHECK(!partial_recompute(cand.strategy));
    }
  }

  TEST_CASE("refusals: one error line each, naming the flag and the way out") {
    const std::vector<std::pair<std::string, std::string>> refused = {
        {" --framework megatron --tp 2 --pp 2 --recompute-layers 17", "--recompute-layers 17"},  // beyond a chunk of 16
        {" --framework megatron --recompute-every 2", "--recompute-every under --framework megatron"},
        {" --framework torchtitan --recompute-layers 2", "--recompute-layers under --framework torchtitan"},
        {" --framework deepspeed --recompute-layers 2", "--recompute-layers under --framework deepspeed"},
        {" --recompute selective --recompute-layers 2", "--recompute-layers 2 with --recompute selective"},
        {" --recompute-every 1", "--recompute-every 1"},
        {" --recompute-layers 0", "--recompute-layers must be at least 1"},
        {" --recompute-layers 2 --recompute-every 2", "--recompute-layers with --recompute-every"}};
    std::vector<std::string> args;
    for (const auto& [flags, name] : refused) args.push_back(flags);
    args.push_back(" --framework megatron --tp 2 --pp 2 --recompute-layers 16 --format json");  // every block: accepted
    const std::vector<test::CliResult> runs = test::run_cli_batch("predict --preset llama3-8b --gpus 8 --gpu h100-sxm", args);
    REQUIRE(runs.size() == args.size());
    for (size_t i = 0; i < refused.size(); ++i) {
      CAPTURE(runs[i].out);
      CHECK(runs[i].exit_code == 2);
      CHECK(runs[i].out.rfind("error: ", 0) == 0);
      CHECK(runs[i].out.find(refused[i].second) != std::string::npos);
      CHECK(std::count(runs[i].out.begin(), runs[i].out.end(), '\n') == 1);  // one line
    }
    CHECK(runs.back().exit_code == 0);
    CHECK(nlohmann::json::parse(runs.back().out)["config"]["recompute_layers"] == 16);
  }
}
