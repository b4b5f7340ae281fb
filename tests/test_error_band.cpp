// The error band: its percentile rule by hand, the GPU generations of the presets, the committed table against what
// the model predicts for the public set today, and how predict and plan use it.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "bench/published_runs.hpp"
#include "io/preset_store.hpp"
#include "planner/error_band.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"

using namespace shardplan;
using namespace shardplan::validation;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

}  // namespace

TEST_SUITE("error band") {
  TEST_CASE("the band of a group: min–max under 10 runs, 10th–90th percentile from 10") {
    CHECK_FALSE(band_of_ratios({1.0, 1.1}));  // fewer than kMinBandRuns
    const auto three = band_of_ratios({1.2, 0.9, 1.05});
    REQUIRE(three);
    CHECK(three->first == 0.9);
    CHECK(three->second == 1.2);
    // 1..10: the 10th percentile sits at 0.1 · 9 = 0.9 between the first two (1 + 0.9 · 1 = 1.9), the 90th at 8.1
    // between the ninth and tenth (9 + 0.1 · 1 = 9.1).
    const auto ten = band_of_ratios({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
    REQUIRE(ten);
    CHECK(ten->first == doctest::Approx(1.9));
    CHECK(ten->second == doctest::Approx(9.1));
  }

  TEST_CASE("GPU generations of the shipped presets") {
    CHECK(gpu_generation(presets().gpu("v100-32g")) == GpuGeneration::volta);
    CHECK(gpu_generation(presets().gpu("a100-80g")) == GpuGeneration::ampere);
    CHECK(gpu_generation(presets().gpu("a800-80g")) == GpuGeneration::ampere);
    CHECK(gpu_generation(presets().gpu("h100-sxm")) == GpuGeneration::hopper);
    CHECK(gpu_generation(presets().gpu("h200")) == GpuGeneration::hopper);
    CHECK(framework_family(Framework::torchtitan) == FrameworkFamily::pytorch_fsdp);
    CHECK(framework_family(Framework::fsdp1) == FrameworkFamily::pytorch_fsdp);
  }

  TEST_CASE("the committed table is what the model predicts for the public set today") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) {
      MESSAGE("validation set not found at " << csv << "; skipped");
      return;
    }
    PublishedRuns runs = load_published_runs(csv, presets());
    PublishedRuns modern = load_modern_runs(modern_csv_path(), presets());
    for (PublishedRun& r : modern.runs) runs.runs.push_back(std::move(r));
    const std::vector<ErrorBandGroup> now = band_groups(published_errors(runs));
    const auto table = error_band_table();
    INFO("the model's errors on the public set changed: regenerate the table with "
         "`build/bench/shardplan_accuracy --emit-bands planner/error_band_data.cpp` and commit it");
    REQUIRE(table.size() == now.size());
    for (size_t i = 0; i < now.size(); ++i) {
      CAPTURE(i);
      CHECK(table[i].family == now[i].family);
      CHECK(table[i].generation == now[i].generation);
      CHECK(table[i].all_generations == now[i].all_generations);
      CHECK(table[i].runs == now[i].runs);
      CHECK(table[i].low == doctest::Approx(now[i].low).epsilon(1e-5));
      CHECK(table[i].high == doctest::Approx(now[i].high).epsilon(1e-5));
      CHECK(table[i].low <= table[i].high);
    }
  }

  TEST_CASE("predict carries the band of its group; none for the reference loop or CPU ranks") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec h100 = presets().cluster("dgx-h100");
    Strategy s;
    s.gpus = s.dp = 8;
    s.zero = 3;
    s.micro_batch = 1;
    s.global_batch = 8;
    s.seq = 8192;
    const Prediction p = predict(m, s, h100);
    const auto expected = error_band(Framework::fsdp, h100.gpu, p.time.step_s);
    if (expected) {
      REQUIRE(p.band);
      CHECK(p.band->step_low_s == doctest::Approx(p.time.step_s * p.band->low));
      CHECK(p.band->step_high_s == doctest::Approx(p.time.step_s * p.band->high));
      CHECK(p.band->basis.find("Hopper") != std::string::npos);
    }
    s.framework = Framework::reference;
    CHECK_FALSE(predict(m, s, h100).band);
    // An MoE model's band is the MoE runs' (every runtime), not the dense runs' of its framework.
    Strategy e = s;
    e.framework = Framework::megatron;
    e.zero = 1;
    e.recompute = Recompute::full;
    e.gpus = e.dp = 16;
    e.global_batch = 16;
    e.seq = 4096;
    const Prediction moe = predict(presets().model("mixtral-8x7b"), e, h100);
    if (const auto want = error_band(Framework::megatron, h100.gpu, moe.time.step_s, true)) {
      REQUIRE(moe.band);
      CHECK(moe.band->basis.find("mixture-of-experts") != std::string::npos);
      CHECK(moe.band->low == doctest::Approx(want->low));
    }
    // A dense model under context parallelism gets the CP runs' band, and the dense groups hold no CP run: the
    // committed table's CP group is another band than the FSDP/Hopper one (which side is wider has changed with refits).
    Strategy l = s;
    l.framework = Framework::torchtitan;
    l.cp = 4;
    l.dp = s.dp / 4;
    l.seq = 32768;
    l.recompute = Recompute::full;
    const Prediction ring = predict(presets().model("llama3-8b"), l, h100);
    const auto cp_band = error_band(Framework::torchtitan, h100.gpu, ring.time.step_s, false, true);
    const auto dense_band = error_band(Framework::torchtitan, h100.gpu, ring.time.step_s);
    REQUIRE(cp_band);
    REQUIRE(dense_band);
    REQUIRE(ring.band);
    CHECK(ring.band->basis.find("context parallelism") != std::string::npos);
    CHECK(ring.band->high == doctest::Approx(cp_band->high));
    CHECK((cp_band->low != dense_band->low || cp_band->high != dense_band->high));
    std::vector<PublishedError> runs(3, PublishedError{Framework::fsdp, h100.gpu, 1.3, false, true});
    runs.push_back({Framework::fsdp, h100.gpu, 1.0});
    for (const ErrorBandGroup& g : band_groups(runs)) CHECK(g.family == FrameworkFamily::context_parallel);
    GpuSpec cpu = h100.gpu;
    cpu.cpu_ranks = true;
    CHECK_FALSE(error_band(Framework::fsdp, cpu, 1.0));
  }

  TEST_CASE("plan ties candidates inside the band: the tolerance is the band's half-width when wider") {
    const ClusterSpec h100 = presets().cluster("dgx-h100");
    SearchSpace sp;
    sp.base.gpus = 16;
    sp.base.global_batch = 64;
    sp.base.seq = 4096;
    const SearchResult r = search_strategies(presets().model("llama3-8b"), h100, sp, 10);
    const auto band = error_band(Framework::fsdp, h100.gpu, 1.0);
    if (band && band->half_width() > kSimplicityTolerance) {
      CHECK(r.tie_tolerance == doctest::Approx(band->half_width()));
      CHECK_FALSE(r.tie_basis.empty());
    } else {
      CHECK(r.tie_tolerance == kSimplicityTolerance);
    }
    REQUIRE(r.recommended);
    // The recommendation is within the tolerance of the fastest, and nothing simpler is.
    CHECK(r.recommended->tokens_per_s >= (1 - r.tie_tolerance) * r.ranked.front().tokens_per_s);
    for (const Candidate& f : r.families)
      if (f.within_safety() && f.tokens_per_s >= (1 - r.tie_tolerance) * r.ranked.front().tokens_per_s)
        CHECK(complexity(f.strategy) >= complexity(r.recommended->strategy));
  }
}
