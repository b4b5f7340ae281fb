// `plan --simulate-top K` (sim/rerank.hpp): the ordering and recommendation rules on hand-made figures, and a
// hand-made candidate list re-ranked by the real simulator.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <vector>

#include "io/preset_store.hpp"
#include "sim/rerank.hpp"

using namespace shardplan;
using namespace shardplan::sim;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy layout(int64_t tp, int64_t pp, int zero, int64_t hsdp = 0) {
  Strategy s;
  s.gpus = 16;
  s.tp = tp;
  s.pp = pp;
  s.dp = 16 / (tp * pp);
  s.zero = zero;
  s.hsdp = hsdp;
  // A runtime that runs the layout: Megatron-Core for ZeRO-1, torchtitan for FSDP under a pipeline.
  s.framework = zero == 1 ? Framework::megatron : pp > 1 ? Framework::torchtitan : Framework::fsdp;
  s.sp = s.framework == Framework::torchtitan && tp > 1;  // torchtitan's TP is sequence-parallel
  s.micro_batch = 1;
  s.global_batch = 32;
  s.seq = 2048;
  return s;
}

// A simulated figure: tokens/s from a step of 1/tokens s (so that faster = more tokens), peak under or over 80 %.
SimulatedCandidate sim_of(double tokens_per_s, bool over_safety = false) {
  SimulatedCandidate c;
  c.tokens_per_s = tokens_per_s;
  c.step_s = 1.0 / tokens_per_s;
  c.capacity_bytes = 100;
  c.peak_bytes = over_safety ? 81 : 50;
  return c;
}

}  // namespace

TEST_SUITE("sim rerank") {
  TEST_CASE("order_by_keys: the window sorted by key, stable, the rest in place") {
    const std::vector<RankKey> keys = {{false, 3.0}, {false, 1.0}, {false, 2.0}, {false, 0.5}};
    CHECK(order_by_keys(keys, 3) == std::vector<size_t>{1, 2, 0, 3});  // 0.5 is outside the window: stays 4th
    CHECK(order_by_keys(keys, 0) == std::vector<size_t>{0, 1, 2, 3});
    CHECK(order_by_keys(keys, 10) == std::vector<size_t>{3, 1, 2, 0});
    // Ties keep the analytic order.
    CHECK(order_by_keys({{false, 1.0}, {false, 1.0}, {false, 0.5}}, 3) == std::vector<size_t>{2, 0, 1});
    // Over the 80 % line by the simulated peak: after every candidate under it, however fast.
    CHECK(order_by_keys({{true, 0.1}, {false, 2.0}, {false, 1.0}}, 3) == std::vector<size_t>{2, 1, 0});
  }

  TEST_CASE("rerank_key: step for throughput and cost, peak for memory") {
    SimulatedCandidate c = sim_of(4.0);  // step 0.25 s, peak 50 of 100
    CHECK(rerank_key(c, Objective::throughput).value == doctest::Approx(0.25));
    CHECK(rerank_key(c, Objective::cost).value == doctest::Approx(0.25));
    CHECK(rerank_key(c, Objective::memory).value == doctest::Approx(50));
    CHECK_FALSE(rerank_key(c, Objective::throughput).over_safety);
    CHECK(rerank_key(sim_of(4.0, true), Objective::throughput).over_safety);  // 81 > 0.8 × 100
  }

  TEST_CASE("recommend_simulated: the planner's simplicity rule on simulated figures") {
    // complexity: ZeRO-2 0, ZeRO-3 + TP 2, ZeRO-1 + PP 4 (planner/search.cpp).
    const std::vector<Strategy> st = {layout(1, 2, 1), layout(1, 1, 2), layout(2, 1, 3)};
    REQUIRE(complexity(st[0]) == 4);
    REQUIRE(complexity(st[1]) == 0);
    REQUIRE(complexity(st[2]) == 2);
    // ZeRO-2 (the planner's pick, position 1) is 1 % slower than the fastest: within 2 %, and simplest — stays.
    CHECK(recommend_simulated(st, {sim_of(100), sim_of(99), sim_of(90)}, 1, Objective::throughput) == 1);
    // Simulated 3 % slower: out. The simplest within 2 % of 100 is ZeRO-3 + TP at 98.5 (complexity 2 < 4).
    CHECK(recommend_simulated(st, {sim_of(100), sim_of(97), sim_of(98.5)}, 1, Objective::throughput) == 2);
    // Only the fastest is within 2 %: it is recommended.
    CHECK(recommend_simulated(st, {sim_of(100), sim_of(97), sim_of(90)}, 1, Objective::throughput) == 0);
    // The pick's simulated peak is above the 80 % line: never recommended, however fast.
    CHECK(recommend_simulated(st, {sim_of(100), sim_of(101, true), sim_of(99)}, 1, Objective::throughput) == 2);
    // A planner's pick that could not be simulated stays (nothing to weigh it by).
    CHECK(recommend_simulated(st, {sim_of(100), std::nullopt, sim_of(99)}, 1, Objective::throughput) == 1);
    // Memory and cost: the first of the re-ranked list that stays under the line.
    CHECK(recommend_simulated(st, {sim_of(100, true), sim_of(99), sim_of(90)}, 0, Objective::memory) == 1);
    CHECK(recommend_simulated(st, {sim_of(100), sim_of(99), sim_of(90)}, 0, Objective::cost) == 0);
  }

  TEST_CASE("a hand-made candidate list is re-ranked by the simulated step") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    // Four layouts of 16 GPUs, in an arbitrary order (not the planner's).
    std::vector<Prediction> top;
    for (const Strategy& s : {layout(2, 2, 3), layout(1, 1, 3), layout(1, 2, 1), layout(2, 1, 2)})
      top.push_back(predict(m, s, c));
    // The expected order, computed here: every candidate simulated on its own, sorted by step (ties stable).
    std::vector<double> step;
    for (const Prediction& p : top) step.push_back(simulate(p.model, p.strategy, p.cluster).step_s);
    std::vector<size_t> expected(top.size());
    std::iota(expected.begin(), expected.end(), size_t{0});
    std::stable_sort(expected.begin(), expected.end(), [&](size_t a, size_t b) { return step[a] < step[b]; });
    // The list was not already in simulated order (else the test would show nothing).
    REQUIRE(expected != std::vector<size_t>{0, 1, 2, 3});

    size_t calls = 0;
    const RerankResult r = rerank_candidates(top, top.size(), 0, 4, Objective::throughput,
                                             [&](size_t done, size_t total) {
                                               CHECK(done == ++calls);
                                               CHECK(total == 4);
                                             });
    CHECK(calls == 4);
    CHECK(r.window == 4);
    CHECK(r.order == expected);
    CHECK(r.order_changed);
    for (size_t i = 0; i < top.size(); ++i) {
      REQUIRE(r.simulated[i].has_value());
      CHECK(r.simulated[i]->step_s == doctest::Approx(step[i]).epsilon(1e-12));
      // tokens/s = 32 sequences × 2048 tokens / step.
      CHECK(r.simulated[i]->tokens_per_s == doctest::Approx(32.0 * 2048 / step[i]));
      CHECK(r.simulated[i]->ops > 0);
    }
    for (size_t pos = 1; pos < r.order.size(); ++pos)
      CHECK(r.simulated[r.order[pos - 1]]->step_s <= r.simulated[r.order[pos]]->step_s);
    // The recommendation is a position of the new order and within 2 % of the simulated fastest.
    REQUIRE(r.recommended < top.size());
    CHECK(r.simulated[r.order[r.recommended]]->tokens_per_s >=
          (1 - kSimplicityTolerance) * r.simulated[r.order[0]]->tokens_per_s);
    // The explanation names a part of the breakdown and both step times.
    const std::string why = explain_difference(*r.simulated[0], top[0].time);
    CHECK(why.find("simulated") != std::string::npos);
    CHECK(why.find("analytic") != std::string::npos);
  }

  TEST_CASE("the window: K = 0 changes nothing; beyond K nothing moves; the recommendation is always simulated") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    std::vector<Prediction> top;
    for (const Strategy& s : {layout(2, 2, 3), layout(1, 1, 3), layout(1, 2, 1), layout(2, 1, 2)})
      top.push_back(predict(m, s, c));

    const RerankResult none = rerank_candidates(top, top.size(), 2, 0, Objective::throughput);
    CHECK(none.order == std::vector<size_t>{0, 1, 2, 3});
    CHECK(none.recommended == 2);
    CHECK_FALSE(none.order_changed);
    CHECK_FALSE(none.recommendation_changed);
    for (const auto& s : none.simulated) CHECK_FALSE(s.has_value());

    // K = 2, recommendation at position 3: positions 0-1 re-ranked, 2-3 in place, 3 simulated for comparison.
    const RerankResult two = rerank_candidates(top, top.size(), 3, 2, Objective::throughput);
    CHECK(two.window == 2);
    CHECK(two.order[2] == 2);
    CHECK(two.order[3] == 3);
    CHECK(two.simulated[0].has_value());
    CHECK(two.simulated[1].has_value());
    CHECK_FALSE(two.simulated[2].has_value());
    CHECK(two.simulated[3].has_value());
    // `ranked` bounds the window: an appended recommendation (not a ranked candidate) is never moved.
    const RerankResult appended = rerank_candidates(top, 3, 3, 10, Objective::throughput);
    CHECK(appended.window == 3);
    CHECK(appended.order[3] == 3);
  }
}

TEST_SUITE("sim rerank: extrapolated long steps") {
  // simulate_candidate plays two short steps and extrapolates when the accumulation is long. Held here against
  // the whole step played out, on layouts of every kind: data parallel with per-step and per-micro-batch
  // reduction, ZeRO-3, pipelines with 1F1B and interleaving, tensor parallelism.
  struct Case {
    const char* model;
    const char* cluster;
    int64_t gpus, tp, pp, vpp, zero, micro_batch, global_batch;
    std::optional<GradSync> sync;
  };
  TEST_CASE("the extrapolated step, breakdown and peak equal the whole step's") {
    const Case cases[] = {
        {"8b", "a800x8", 8, 1, 1, 1, 2, 2, 2048, std::nullopt},            // ZeRO-2, 128 micro-batches
        {"8b", "a800x8", 8, 1, 2, 1, 1, 2, 2048, std::nullopt},            // ZeRO-1 + PP 2, 256
        {"8b", "a800x8", 8, 1, 2, 4, 3, 2, 2048, std::nullopt},            // ZeRO-3 + PP 2 interleaved
        {"8b", "a800x8", 8, 1, 2, 10, 1, 2, 2048, std::nullopt},           // ZeRO-1 + PP 2, vpp 10 (m1 = 20)
        {"8b", "a800x8", 8, 1, 4, 5, 1, 1, 1024, std::nullopt},            // ZeRO-1 + PP 4, vpp 5 (m1 = 20)
        {"8b", "a800x8", 8, 1, 1, 1, 3, 1, 512, GradSync::per_micro},  // ZeRO-3, reduce every micro-batch
        {"gpt3-175b", "dgx-a100-80g", 384, 8, 12, 1, 0, 1, 1536, std::nullopt},  // N21 Table 2, 384 micro-batches
        {"gpt-39.1b", "dgx-a100-80g", 512, 8, 2, 3, 0, 1, 3072, std::nullopt},   // N21 Table 1 shape, interleaved v3, 96
    };
    for (const Case& k : cases) {
      Strategy s;
      s.gpus = k.gpus, s.tp = k.tp, s.pp = k.pp, s.vpp = k.vpp, s.dp = k.gpus / (k.tp * k.pp);
      s.zero = static_cast<int>(k.zero), s.micro_batch = k.micro_batch, s.global_batch = k.global_batch;
      s.seq = 2048, s.grad_sync = k.sync, s.sp = k.tp > 1;
      // A runtime that runs the layout: Megatron-Core for ZeRO-0/1 under a pipeline, torchtitan for FSDP under one.
      s.framework = k.zero <= 1 && (k.pp > 1 || k.zero == 1) ? Framework::megatron
                    : k.pp > 1                               ? Framework::torchtitan
                                                             : Framework::fsdp;
      s.recompute = k.tp > 1 ? Recompute::full : Recompute::none;
      if (k.vpp > 1) s.schedule = Schedule::interleaved;
      const ModelSpec m = presets().model(k.model);
      const ClusterSpec c = presets().cluster(k.cluster);
      const std::string name = k.model;
      CAPTURE(name);
      CAPTURE(s.pp);
      CAPTURE(s.zero);
      const SimulatedCandidate fast = simulate_candidate(m, s, c);
      REQUIRE(fast.extrapolated());
      const SimulatedCandidate whole = summarise_simulation(simulate(m, s, c), s);
      CHECK(fast.micro_batches == grad_accum_steps(s));
      CHECK(fast.ops < whole.ops / 2);
      CHECK(fast.step_s == doctest::Approx(whole.step_s).epsilon(1e-7));
      CHECK(fast.peak_bytes == doctest::Approx(whole.peak_bytes).epsilon(1e-7));
      CHECK(fast.stage.bubble_s + 1 == doctest::Approx(whole.stage.bubble_s + 1).epsilon(1e-7));
      CHECK(fast.stage.exposed_dp_s + 1 == doctest::Approx(whole.stage.exposed_dp_s + 1).epsilon(1e-7));
      CHECK(fast.stage.busy_compute_s == doctest::Approx(whole.stage.busy_compute_s).epsilon(1e-7));
    }
  }
}
