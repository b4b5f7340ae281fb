// The strategy search: every ranked candidate is a valid, fitting configuration, ranked by the objective; the
// recommendation follows the simplicity rule; the seed's case; fixed dimensions; impossible inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/search.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

SearchSpace space_for(int64_t gpus, int64_t global_batch, int64_t seq, Precision p,
                      Framework fw = Framework::fsdp) {
  SearchSpace sp;
  sp.base.gpus = gpus;
  sp.base.global_batch = global_batch;
  sp.base.seq = seq;
  sp.base.precision = p;
  sp.base.framework = fw;
  sp.base.flash_attn = true;
  return sp;
}

std::string describe(const Strategy& s) {
  return family_of(s) + " tp " + std::to_string(s.tp) + " pp " + std::to_string(s.pp) + " dp " +
         std::to_string(s.dp) + " vpp " + std::to_string(s.vpp) + " hsdp " + std::to_string(s.hsdp) + " mb " +
         std::to_string(s.micro_batch) + " recompute " + to_string(s.recompute) + (s.sp ? " sp" : "");
}

// What every search result must satisfy, whatever the space.
void check_result(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& space, const SearchResult& r) {
  const int64_t capacity = gpu_capacity_bytes(c.gpu);
  const Strategy& base = space.base;
  CHECK(r.fitting <= r.evaluated);
  CHECK(static_cast<int64_t>(r.ranked.size()) <= r.fitting);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const Candidate& cand = r.ranked[i];
    const Strategy& s = cand.strategy;
    CAPTURE(i);
    CAPTURE(describe(s));
    CHECK_NOTHROW(validate_strategy(s, m, c));
    CHECK(s.tp * s.pp * s.dp == base.gpus);
    CHECK(s.global_batch == base.global_batch);
    CHECK(s.seq == base.seq);
    CHECK(s.precision == base.precision);
    CHECK(s.global_batch % (s.micro_batch * s.dp) == 0);
    CHECK(cand.capacity_bytes == capacity);
    // Under the line by what decides a fit: the peak, less the allocator's reserve under expandable segments.
    CHECK(cand.fit_total() <= 0.80 * static_cast<double>(capacity));
    CHECK(cand.fit_total() <= cand.peak_total());
    CHECK(cand.within_safety());
    // The search's fast paths (micro-batch costs reused across dp/pp/sharding, the peak-only memory model)
    // give what the full models give for the same strategy.
    const StepTime t = estimate_step_time(m, s, c);
    CHECK(cand.time.step_s == doctest::Approx(t.step_s).epsilon(1e-9));
    CHECK(cand.tokens_per_s == doctest::Approx(static_cast<double>(s.global_batch * s.seq) / t.step_s).epsilon(1e-9));
    CHECK(std::abs(cand.peak_total() - estimate_memory(m, s, c).peak_stage().peak.total()) <= 1.0);
    // Order by the objective.
    if (i > 0) {
      if (space.objective == Objective::throughput)
        CHECK(r.ranked[i - 1].tokens_per_s >= cand.tokens_per_s);
      else
        CHECK(r.ranked[i - 1].peak_total() <= cand.peak_total());
    }
    // Its family's best is at least as good as any ranked member of the family.
    bool family_seen = false;
    for (const Candidate& f : r.families)
      if (family_of(f.strategy) == family_of(s)) {
        family_seen = true;
        CHECK(f.within_safety());
        if (space.objective == Objective::throughput) CHECK(f.tokens_per_s >= cand.tokens_per_s);
      }
    CHECK(family_seen);
  }
  // One entry per family.
  for (size_t i = 0; i < r.families.size(); ++i)
    for (size_t j = i + 1; j < r.families.size(); ++j) CHECK(family_of(r.families[i].strategy) != family_of(r.families[j].strategy));

  CHECK(r.recommended.has_value() == !r.ranked.empty());
  if (!r.recommended) return;
  const Candidate& best = r.ranked.front();
  const Candidate& rec = *r.recommended;
  CAPTURE(describe(rec.strategy));
  CHECK(rec.within_safety());
  CHECK_NOTHROW(validate_strategy(rec.strategy, m, c));
  if (space.objective == Objective::memory) {
    CHECK(rec.peak_total() == best.peak_total());
    return;
  }
  // The least complex family within the tie tolerance (kSimplicityTolerance, or the error band's half-width).
  CHECK(rec.tokens_per_s >= (1 - r.tie_tolerance) * best.tokens_per_s);
  CHECK(rec.tokens_per_s <= best.tokens_per_s);
  CHECK(complexity(rec.strategy) <= complexity(best.strategy));
  // The simplicity rule: no fitting family within the tolerance of the fastest is simpler than the choice.
  for (const Candidate& f : r.families)
    if (f.within_safety() && f.tokens_per_s >= (1 - kSimplicityTolerance) * best.tokens_per_s) {
      CAPTURE(describe(f.strategy));
      CHECK(complexity(f.strategy) >= complexity(rec.strategy));
    }
}

}  // namespace

TEST_SUITE("search") {
  TEST_CASE("complexity and families: the documented weights") {
    Strategy s;
    CHECK(complexity(s) == 0);
    CHECK(family_of(s) == "ZeRO-3");
    s.zero = 0;
    CHECK(family_of(s) == "DDP");
    s.pp = 4;
    CHECK(complexity(s) == 4);
    s.vpp = 2;
    CHECK(complexity(s) == 5);
    s.tp = 2;
    CHECK(complexity(s) == 7);
    s.sp = true;
    CHECK(complexity(s) == 8);
    s.zero = 3;
    s.hsdp = 4;
    s.offload_optimizer = true;
    CHECK(complexity(s) == 8 + 3 + 1);
    CHECK(family_of(s) == "ZeRO-3 HSDP + TP + PP + offload");
  }

  TEST_CASE("the seed's case: DDP does not fit, a sharded data-parallel strategy is recommended") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    // The CLI's default global batch: about 4 M tokens (2^22) per step = 2048 sequences of 2048 tokens.
    const SearchSpace space = space_for(8, 2048, 2048, Precision::pure_bf16);
    const SearchResult r = search_strategies(m, c, space, 20);
    check_result(m, c, space, r);
    REQUIRE_FALSE(r.ranked.empty());
    CHECK(r.ranked.size() == 20);
    // DDP: 12 B × 8.32 B parameters = 99.9 GB of model states > 85.9 GB (80 GiB).
    bool ddp_seen = false;
    for (const Candidate& f : r.families)
      if (f.strategy.zero == 0 && f.strategy.tp == 1 && f.strategy.pp == 1 && f.strategy.hsdp == 0 &&
          !f.strategy.offload_optimizer) {
        ddp_seen = true;
        CHECK(family_of(f.strategy) == "DDP");
        CHECK_FALSE(f.within_safety());
        CHECK_FALSE(f.fits());
        CHECK(f.memory.peak.model_states() == doctest::Approx(12.0 * 8322162688.0).epsilon(1e-6));
        CHECK(why_not_fit(f).find("model states") != std::string::npos);
      }
    CHECK(ddp_seen);
    REQUIRE(r.recommended);
    const Strategy& rec = r.recommended->strategy;
    CAPTURE(describe(rec));
    CHECK(rec.zero >= 2);
    CHECK(rec.tp == 1);
    CHECK(rec.pp == 1);
    CHECK(rec.dp == 8);
  }

  TEST_CASE("keep_top only truncates: the best candidate does not depend on it") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    const SearchSpace space = space_for(16, 64, 4096, Precision::amp_bf16);
    const SearchResult one = search_strategies(m, c, space, 1), many = search_strategies(m, c, space, 50);
    check_result(m, c, space, many);
    REQUIRE(one.ranked.size() == 1);
    REQUIRE(many.ranked.size() == static_cast<size_t>(std::min<int64_t>(50, many.fitting)));
    CHECK(one.ranked.front().strategy == many.ranked.front().strategy);
    CHECK(one.evaluated == many.evaluated);
    CHECK(one.fitting == many.fitting);
    REQUIRE(one.recommended);
    CHECK(one.recommended->strategy == many.recommended->strategy);
  }

  TEST_CASE("fixed dimensions are respected: --tp 2 --zero 3") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    SearchSpace space = space_for(8, 64, 2048, Precision::amp_bf16);
    space.tp = 2;
    space.zero = 3;
    const SearchResult r = search_strategies(m, c, space, 30);
    check_result(m, c, space, r);
    REQUIRE_FALSE(r.ranked.empty());
    for (const Candidate& cand : r.ranked) {
      CHECK(cand.strategy.tp == 2);
      CHECK(cand.strategy.zero == 3);
    }
    for (const Candidate& f : r.families) {
      CHECK(f.strategy.tp == 2);
      CHECK(f.strategy.zero == 3);
    }
    // Fixing more: pp 2 (under torchtitan, FSDP2's pipelining runtime), micro-batch 2, full recomputation.
    space.base.framework = Framework::torchtitan;
    space.pp = 2;
    space.micro_batch = 2;
    space.recompute = Recompute::full;
    const SearchResult r2 = search_strategies(m, c, space, 30);
    check_result(m, c, space, r2);
    REQUIRE_FALSE(r2.ranked.empty());
    for (const Candidate& cand : r2.ranked) {
      CHECK(cand.strategy.tp == 2);
      CHECK(cand.strategy.pp == 2);
      CHECK(cand.strategy.dp == 2);
      CHECK(cand.strategy.micro_batch == 2);
      CHECK(cand.strategy.recompute == Recompute::full);
    }
  }

  TEST_CASE("Megatron: ZeRO 0/1 (distributed optimizer) and 2/3 (Megatron-FSDP) are searched, 2/3 never with PP") {
    const ModelSpec m = presets().model("gpt-22b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    const SearchSpace space = space_for(16, 64, 2048, Precision::megatron_bf16, Framework::megatron);
    const SearchResult r = search_strategies(m, c, space, 300);
    check_result(m, c, space, r);
    REQUIRE_FALSE(r.ranked.empty());
    bool fsdp = false;
    for (const Candidate& cand : r.ranked) {
      if (cand.strategy.zero >= 2) CHECK(cand.strategy.pp == 1);
      fsdp |= cand.strategy.zero >= 2;
    }
    for (const Candidate& f : r.families)
      if (f.strategy.zero >= 2) CHECK(f.strategy.pp == 1);
    CHECK(fsdp);
  }

  TEST_CASE("objective memory: ranked by peak, smallest first") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    SearchSpace space = space_for(8, 64, 2048, Precision::pure_bf16);
    space.objective = Objective::memory;
    const SearchResult r = search_strategies(m, c, space, 25);
    check_result(m, c, space, r);
    REQUIRE(r.ranked.size() == 25);
    for (size_t i = 1; i < r.ranked.size(); ++i) CHECK(r.ranked[i - 1].peak_total() <= r.ranked[i].peak_total());
    REQUIRE(r.recommended);
    CHECK(r.recommended->strategy == r.ranked.front().strategy);
    // The least memory on 8 GPUs for the 8b model cannot be more than ZeRO-3 with full recomputation, micro-batch 1
    // (a candidate of the space); it must also be below the throughput search's best.
    SearchSpace fast = space;
    fast.objective = Objective::throughput;
    const SearchResult rf = search_strategies(m, c, fast, 1);
    REQUIRE_FALSE(rf.ranked.empty());
    CHECK(r.ranked.front().peak_total() <= rf.ranked.front().peak_total());
    Strategy z3 = space.base;
    z3.dp = 8;
    z3.zero = 3;
    z3.recompute = Recompute::full;
    z3.micro_batch = 1;
    CHECK(r.ranked.front().peak_total() <= estimate_memory(m, z3, c).peak_stage().peak.total() + 1.0);
  }

  TEST_CASE("nothing fits: llama3-405b on one node of 8 × A800") {
    // 405 B parameters × 16 B (amp-bf16) / 8 GPUs = 811 GB of model states per GPU even under ZeRO-3.
    const ModelSpec m = presets().model("llama3-405b");
    const ClusterSpec c = presets().cluster("a800x8");
    const SearchSpace space = space_for(8, 16, 2048, Precision::amp_bf16);
    const SearchResult r = search_strategies(m, c, space, 5);
    CHECK(r.evaluated > 0);
    CHECK(r.fitting == 0);
    CHECK(r.ranked.empty());
    CHECK(r.tight.empty());
    CHECK_FALSE(r.recommended.has_value());
    REQUIRE_FALSE(r.families.empty());
    for (const Candidate& f : r.families) CHECK_FALSE(f.fits());
    // Families that do not fit are ordered by what decides a fit (memory.hpp fit_bytes), smallest first.
    for (size_t i = 1; i < r.families.size(); ++i)
      CHECK(r.families[i - 1].fit_total() <= r.families[i].fit_total());
    CHECK(why_not_fit(r.families.front()).find("model states") != std::string::npos);
  }

  TEST_CASE("an empty space is an InputError") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    // dp fixed to 8 and a global batch of 3 sequences: 3 is no multiple of 8.
    SearchSpace space = space_for(8, 3, 2048, Precision::pure_bf16);
    space.dp = 8;
    CHECK_THROWS_AS(search_strategies(m, c, space, 5), InputError);
    // tp 3 does not divide 8 GPUs (nor the 32 heads): no layout at all.
    space = space_for(8, 8, 2048, Precision::pure_bf16);
    space.tp = 3;
    CHECK_THROWS_AS(search_strategies(m, c, space, 5), InputError);
    // Unfixed dp, global batch 3 on 8 GPUs: dp 1 divides 3 (pipeline/tensor layouts with dp 1), so no error.
    space = space_for(8, 3, 2048, Precision::pure_bf16);
    const SearchResult r = search_strategies(m, c, space, 5);
    check_result(m, c, space, r);
    for (const Candidate& cand : r.ranked) CHECK(cand.strategy.dp == 1);
    // bf16 on a V100 (no bf16 tensor cores).
    CHECK_THROWS_AS(search_strategies(m, presets().cluster("dgx-2-v100"), space_for(8, 8, 2048, Precision::pure_bf16), 5),
                    InputError);
  }
}
