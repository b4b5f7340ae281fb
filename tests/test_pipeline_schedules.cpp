// Pipelines as the runtimes run them: uneven stage splits (planner/pipeline_layout.cpp) with the embedding and loss
// where each runtime puts them, Llama-3 405B interleaved on 16 stages, the zero-bubble and DualPipeV schedules
// (planner/pipeline_schedule.cpp, sim/schedule.cpp) against their papers' bubbles and memory, the simulator against
// the analytic model, and the combinations a runtime refuses.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/framework_support.hpp"
#include "planner/partition.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "sim/rerank.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy pipelined(Framework fw, int64_t gpus, int64_t tp, int64_t pp, int64_t global_batch, int64_t seq) {
  Strategy s;
  s.framework = fw;
  s.gpus = gpus;
  s.tp = tp;
  s.pp = pp;
  s.dp = gpus / (tp * pp);
  s.sp = tp > 1;
  s.zero = fw == Framework::torchtitan ? 2 : 1;
  s.micro_batch = 1;
  s.global_batch = global_batch;
  s.seq = seq;
  s.recompute = Recompute::full;
  return s;
}

std::vector<int64_t> blocks_per_rank(const ModelSpec& m, const Strategy& s) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < s.pp; ++r) out.push_back(rank_layers(m, s, r));
  return out;
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

// p stages of `chunks` chunks of one block each, forward f, full backward b (incl. its W share w) per block; no
// communication unless `send` (as tests/test_sim.cpp's hand-built pipelines).
sim::StepPlan hand_pipeline(int64_t p, int64_t m, Schedule schedule, int64_t chunks, double f, double b, double w,
                            double send = 0) {
  sim::StepPlan plan;
  plan.pp = p;
  plan.vpp = chunks;
  plan.micro_batches = m;
  plan.schedule = schedule;
  plan.send = send;
  for (int64_t i = 0; i < p; ++i) {
    sim::StageCosts sc;
    sc.chunk_layers.assign(static_cast<size_t>(chunks), 1);
    sc.first = i == 0;
    sc.last = schedule_is_v_shaped(schedule) ? i == 0 : i == p - 1;
    sc.block_fwd = f;
    sc.block_bwd = b;
    sc.block_wgrad = w;
    sc.activations_per_block = 1;  // one byte per block and micro-batch: the peak counts chunks in flight
    plan.stages.push_back(sc);
  }
  return plan;
}

// A Strategy whose schedule arithmetic matches hand_pipeline (only pp, vpp, schedule and the micro-batches matter).
Strategy schedule_only(int64_t p, int64_t m, Schedule schedule, int64_t chunks) {
  Strategy s;
  s.gpus = p;
  s.pp = p;
  s.vpp = chunks;
  s.schedule = schedule;
  s.micro_batch = 1;
  s.global_batch = m;
  s.seq = 1;
  return s;
}

}  // namespace

TEST_SUITE("pipeline schedules") {
  TEST_CASE("uneven splits sum to the layers and put the embedding and the loss where the runtime does") {
    const ModelSpec l405 = presets().model("llama3-405b");  // 126 layers
    REQUIRE(l405.layers == 126);
    // Megatron --decoder-first/last-pipeline-num-layers 7 (Llama 3 §3.3.2): 126 − 14 = 112 over 14 middle stages = 8.
    Strategy s = pipelined(Framework::megatron, 16384, 8, 16, 2048, 8192);
    s.split.first_layers = 7;
    s.split.last_layers = 7;
    CHECK_FALSE(pipeline_layout_refusal(l405, s));
    std::vector<int64_t> want(16, 8);
    want.front() = want.back() = 7;
    CHECK(blocks_per_rank(l405, s) == want);
    CHECK(stage_params(l405, s, 0).first);
    CHECK(stage_params(l405, s, 15).last);
    CHECK(stage_params(l405, s, 15).lm_head > 0);

    // Megatron --account-for-embedding/loss-in-pipeline-split with vpp 4: (126 + 2)/16 = 8 per rank, 2 per chunk,
    // the first chunk of rank 0 and the last of rank 15 one fewer (transformer_block.py get_num_layers_to_build).
    Strategy a = pipelined(Framework::megatron, 16384, 8, 16, 2048, 8192);
    a.vpp = 4;
    a.schedule = Schedule::interleaved;
    a.split.embedding_layers = a.split.loss_layers = 1;
    CHECK_FALSE(pipeline_layout_refusal(l405, a));
    CHECK(chunk_layers(l405, a, 0, 0) == 1);
    CHECK(chunk_layers(l405, a, 0, 1) == 2);
    CHECK(chunk_layers(l405, a, 15, 3) == 1);
    CHECK(chunk_layers(l405, a, 7, 2) == 2);
    CHECK(sum(blocks_per_rank(l405, a)) == 126);

    // torchtitan's default weights (first/last_stage_less_layers = 1), 80 layers, pp 4 × 2 chunks: E = 82 over 8
    // virtual stages, ⌊82/8⌋ = 10 each, the remainder 2 to stages 0 and 1; stage 0 less 1, stage 7 less 1:
    // [10, 11, 10, 10, 10, 10, 10, 9]; rank r holds stages r and r + 4: 20, 21, 20, 19.
    const ModelSpec l70 = presets().model("llama3-70b");
    Strategy t = pipelined(Framework::torchtitan, 64, 8, 4, 32, 8192);
    t.vpp = 2;
    t.schedule = Schedule::interleaved;
    CHECK(effective_embedding_layers(t) == 1);
    CHECK(blocks_per_rank(l70, t) == std::vector<int64_t>{20, 21, 20, 19});

    // V-shaped (ZB-V): rank 0 runs virtual stages 0 and 31, so it holds the embedding and the loss.
    Strategy v = pipelined(Framework::torchtitan, 16384, 8, 16, 2048, 8192);
    v.vpp = 2;
    v.schedule = Schedule::zbv;
    CHECK(virtual_stage_of(v, 0, 1) == 31);
    CHECK(virtual_stage_of(v, 15, 1) == 16);
    const StageParams v0 = stage_params(l405, v, 0);
    CHECK(v0.first);
    CHECK(v0.last);
    CHECK_FALSE(stage_params(l405, v, 15).last);
    // (126 + 2)/32 = 4 per virtual stage: rank 0 has 3 + 3, the others 4 + 4.
    CHECK(v0.layers == 6);
    CHECK(sum(blocks_per_rank(l405, v)) == 126);

    // BLOOM-176B's 'type:transformer|embedding' (bigscience tr11-176B-ml README): 70 + 2 = 72 over 12 stages,
    // [embed | 5 blocks], 10 × 6, [5 blocks | embed]; the tied head is a copy on the last stage.
    const ModelSpec bloom = presets().model("bloom-176b");
    Strategy b = pipelined(Framework::deepspeed, 384, 4, 12, 2048, 2048);
    b.split.embedding_layers = b.split.loss_layers = 1;
    std::vector<int64_t> bloom_want(12, 6);
    bloom_want.front() = bloom_want.back() = 5;
    CHECK(blocks_per_rank(bloom, b) == bloom_want);
    CHECK(stage_params(bloom, b, 11).lm_head == stage_params(bloom, b, 0).embedding);
    // DeepSpeed without the embedding counted: Megatron-DeepSpeed's 'type:transformer' (GPTModelPipe), DeepSpeed's
    // partition_balanced over the 70 blocks: ⌊70/12⌋ = 5, the remainder 10 to the first stages: 10 × 6, 5, 5.
    b.split = PipelineSplit{};
    std::vector<int64_t> ds_want(12, 6);
    ds_want[10] = ds_want[11] = 5;
    CHECK(blocks_per_rank(bloom, b) == ds_want);
  }

  TEST_CASE("launch files carry the schedule and the split: torchtitan's names and stage size, Megatron's flags") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("shardplan_pipe_emit_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const test::CliResult tt = test::run_cli("plan --preset llama3-70b --gpus 64 --cluster dgx-h100 --tp 8 --pp 4 "
                                             "--framework torchtitan --schedule zbv --pp-embedding-layers 1 --pp-loss-layers 1 --emit '" + (dir / "tt").string() + "'");
    REQUIRE(tt.exit_code == 0);
    const std::string toml = test::read_all(dir / "tt" / "torchtitan.toml");
    CHECK(toml.find("pipeline_parallel_schedule = \"ZBVZeroBubble\"") != std::string::npos);
    // (80 + 1 + 1) effective layers over 4 × 2 virtual stages: layers_per_stage ⌈82/8⌉ = 11, and torchtitan's
    // ⌈82/11⌉ = 8 stages back (pipeline_parallel.py _get_pipeline_metadata).
    CHECK(toml.find("pipeline_parallel_layers_per_stage = 11") != std::string::npos);
    CHECK(toml.find("pipeline_parallel_first_stage_less_layers = 1") != std::string::npos);
    const test::CliResult mg = test::run_cli("plan --preset llama3-405b --gpus 16384 --cluster dgx-h100 --tp 8 --pp 16 "
                                             "--framework megatron --pp-first-layers 7 --pp-last-layers 7 --emit '" +
                                             (dir / "mg").string() + "'");
    REQUIRE(mg.exit_code == 0);
    const std::string args = test::read_all(dir / "mg" / "megatron_args.sh");
    CHECK(args.find("--decoder-first-pipeline-num-layers 7") != std::string::npos);
    CHECK(args.find("--decoder-last-pipeline-num-layers 7") != std::string::npos);
    fs::remove_all(dir);
  }

  TEST_CASE("Llama-3 405B on TP 8, PP 16: expressible interleaved and priced; plan finds interleaving at PP 16") {
    const ModelSpec m = presets().model("llama3-405b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy s = pipelined(Framework::megatron, 16384, 8, 16, 2048, 8192);
    s.precision = Precision::megatron_bf16;
    s.vpp = 4;
    s.schedule = Schedule::interleaved;
    s.split.embedding_layers = s.split.loss_layers = 1;
    const Prediction p = predict(m, s, c);
    CHECK(p.time.step_s > 0);
    // Interleaving divides the bubble by v against 1F1B on Meta's 7/8/7 split (same pipeline, 16 micro-batches).
    Strategy plain = s;
    plain.vpp = 1;
    plain.schedule = Schedule::one_f_one_b;
    plain.split = PipelineSplit{7, 7, 0, 0, {}};
    const Prediction q = predict(m, plain, c);
    CHECK(p.time.bubble_s < q.time.bubble_s / 2);
    CHECK(p.time.step_s < q.time.step_s);
    // Without a split Megatron refuses 126 layers on 16 stages (get_num_layers_to_build's assertion).
    Strategy none = s;
    none.split = PipelineSplit{};
    CHECK_THROWS_AS(predict(m, none, c), InputError);

    SearchSpace space;
    space.base = s;
    space.base.split = PipelineSplit{};
    space.tp = 8;
    space.pp = 16;
    space.recompute = Recompute::full;
    const SearchResult r = search_strategies(m, c, space, 200);
    bool interleaved = false;
    for (const Candidate& cand : r.ranked)
      if (cand.strategy.schedule == Schedule::interleaved) {
        interleaved = true;
        CHECK(sum(blocks_per_rank(m, cand.strategy)) == 126);
        CHECK_FALSE(pipeline_layout_refusal(m, cand.strategy));
      }
    CHECK(interleaved);
  }

  TEST_CASE("ZB-H1 bubble: (p − 1)(T_F + T_B − T_W), a third of 1F1B's at T_F = T_B = T_W (Qi et al. 2024 §2.1)") {
    // p = 4, m = 8, two blocks a stage, f = 1, b = 2 (of which w = 1) per block: T_F = 2, T_B = 2, T_W = 2 per stage.
    // 1F1B: 8·6 + 3·6 = 66 s; ZB-H1: 8·6 + 3·(2 + 2 − 2) = 54 s, bubble 6 = 18 / 3.
    auto two_blocks = [](Schedule sch) {
      sim::StepPlan plan = hand_pipeline(4, 8, sch, 1, 1, 2, 1);
      for (auto& st : plan.stages) st.chunk_layers = {2};
      return plan;
    };
    const sim::SimResult one = sim::simulate_plan(two_blocks(Schedule::one_f_one_b));
    const sim::SimResult zb = sim::simulate_plan(two_blocks(Schedule::zb_h1));
    CHECK(one.step_s == doctest::Approx(66.0));
    CHECK(zb.step_s == doctest::Approx(54.0));
    CHECK(zb.stages[0].bubble_s == doctest::Approx(6.0));
    // The analytic formula on the same stage times: F 2, B 4 (W 2).
    const PipelineTimes t = pipeline_times(schedule_only(4, 8, Schedule::zb_h1, 1), {2, 4, 2, 0, 0});
    CHECK(t.bubble_s == doctest::Approx(6.0));
    // W = 1 of a B of 3 per stage... T_F = 2, T_B = 4, T_W = 2 (b = 3, w = 1): 3·(2 + 4 − 2) = 12.
    sim::StepPlan heavy = two_blocks(Schedule::zb_h1);
    for (auto& st : heavy.stages) st.block_bwd = 3;
    CHECK(sim::simulate_plan(heavy).step_s == doctest::Approx(8 * 8.0 + 12.0));
    CHECK(pipeline_times(schedule_only(4, 8, Schedule::zb_h1, 1), {2, 6, 2, 0, 0}).bubble_s == doctest::Approx(12.0));
    // Interleaved zero bubble (torch ScheduleInterleavedZeroBubble), v = 2 chunks of one block: the bubble over v,
    // 3·(2 + 4 − 4)/2 = 3 → 8·6 + 3 = 51 s.
    const sim::SimResult izb = sim::simulate_plan(hand_pipeline(4, 8, Schedule::zb_h1, 2, 1, 2, 1));
    CHECK(izb.step_s == doctest::Approx(51.0));
    CHECK(pipeline_times(schedule_only(4, 8, Schedule::zb_h1, 2), {2, 4, 2, 0, 0}).bubble_s == doctest::Approx(3.0));
  }

  TEST_CASE("ZB-V and DualPipeV: the played step is the schedule's critical path; the papers' figures as bounds") {
    // Equal chunk times T_F = T_B = T_W = 1 (f = 1, b = 2, w = 1 per one-block chunk), p = 4, m = 8: ZB-V leaves only
    // its warm-up offset, (p − 1)·T_F = 3 s: the paper's "zero bubble" (Qi et al. 2024 §6) once the next step's
    // warm-up overlaps this cool-down, which a step with a gradient-norm all-reduce does not allow.
    const sim::SimResult zbv = sim::simulate_plan(hand_pipeline(4, 8, Schedule::zbv, 2, 1, 2, 1));
    CHECK(zbv.step_s == doctest::Approx(8 * 2 * 3.0 + 3.0));
    // DualPipeV under the same times: 3 s, below DeepSeek's (PP/2 − 1)(F&B + B − 3W) = (p − 1)(3 + 2 − 3) = 6 s for
    // DualPipe (DeepSeek-V3 Table 2) with F&B = F + B (no overlap gain in this model).
    const sim::SimResult dpv = sim::simulate_plan(hand_pipeline(4, 8, Schedule::dualpipev, 2, 1, 2, 1));
    const double deepseek = 3 * ((1 + 2) + 2 - 3 * 1);
    CHECK(dpv.step_s - 48 == doctest::Approx(3.0));
    CHECK(dpv.step_s - 48 <= deepseek);
    // The analytic model takes the same critical path (pipeline_makespan); with transfers it matches the played
    // schedule to the last bit for every schedule with a B/W split.
    for (Schedule sch : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev})
      for (int64_t p : {2, 3, 4, 8})
        for (double send : {0.0, 0.3}) {
          const int64_t m = 3 * p, chunks = sch == Schedule::zb_h1 ? 1 : 2;
          const sim::SimResult r = sim::simulate_plan(hand_pipeline(p, m, sch, chunks, 1.0, 2.5, 0.7, send));
          CHECK(pipeline_makespan(sch, p, chunks, m, {1.0, 1.8, 0.7, send}) == doctest::Approx(r.step_s).epsilon(1e-12));
        }
    // Unequal stages (an uneven split): each rank's chunks at their own times, still the played step exactly.
    for (Schedule sch : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
      const int64_t p = 4, m = 8;
      sim::StepPlan plan = hand_pipeline(p, m, sch, 2, 1.0, 2.5, 0.7, 0.1);
      std::vector<ChunkPassTimes> chunks;
      for (int64_t r = 0; r < p; ++r)
        for (int64_t c = 0; c < 2; ++c) {
          const int64_t blocks = 1 + (r + 2 * c) % 3;  // 1, 2 or 3 blocks
          plan.stages[static_cast<size_t>(r)].chunk_layers[static_cast<size_t>(c)] = blocks;
          const auto b = static_cast<double>(blocks);
          chunks.push_back({b * 1.0, b * 1.8, b * 0.7, 0.1});
        }
      CHECK(pipeline_makespan(sch, p, 2, m, chunks) == doctest::Approx(sim::simulate_plan(plan).step_s).epsilon(1e-12));
    }
    // And pipeline_times' bubble for a V schedule is that makespan less the stage's work: F 2, B 4, W 2 per stage.
    const PipelineTimes t = pipeline_times(schedule_only(4, 8, Schedule::zbv, 2), {2, 4, 2, 0, 0});
    CHECK(t.bubble_s == doctest::Approx(3.0));
  }

  TEST_CASE("activations in flight: ZB-H1 and ZB-V keep 1F1B's peak, DualPipeV one chunk more (PP + 1)") {
    for (int64_t p : {2, 4, 8}) {
      const int64_t m = 4 * p;
      for (int64_t r = 0; r < p; ++r) {
        // ZB-H1: p micro-batches on every stage (Qi et al. 2024 §2.1: the same as 1F1B's first stage).
        CHECK(peak_live_chunks(split_backward_pass_order(Schedule::zb_h1, p, 1, m, r)) == p);
        // Interleaved zero bubble, 2 chunks: (v − 1)·p + p = 2p chunks = p micro-batches.
        CHECK(peak_live_chunks(split_backward_pass_order(Schedule::zb_h1, p, 2, m, r)) == 2 * p);
        // ZB-V: 2p half-stage chunks = p micro-batches (§6: "the same peak memory as 1F1B").
        CHECK(peak_live_chunks(split_backward_pass_order(Schedule::zbv, p, 2, m, r)) == 2 * p);
        // DualPipeV: 2p + 1 chunks (DeepSeek-V3 Table 2: PP + 1 for DualPipe; here PP = 2p half-size chunks).
        CHECK(peak_live_chunks(split_backward_pass_order(Schedule::dualpipev, p, 2, m, r)) == 2 * p + 1);
      }
      // The closed forms the memory model uses, in units of a whole stage.
      CHECK(split_backward_in_flight(schedule_only(p, m, Schedule::zb_h1, 1), 0) == doctest::Approx(p));
      CHECK(split_backward_in_flight(schedule_only(p, m, Schedule::zb_h1, 2), 0) == doctest::Approx(p));
      CHECK(split_backward_in_flight(schedule_only(p, m, Schedule::zbv, 2), 0) == doctest::Approx(p));
      CHECK(split_backward_in_flight(schedule_only(p, m, Schedule::dualpipev, 2), 0) == doctest::Approx(p + 0.5));
    }
    // The simulator frees a block's activations at its W pass: its peak on rank 0 is the same count (one byte per
    // block and micro-batch here).
    const sim::SimResult zbv = sim::simulate_plan(hand_pipeline(4, 16, Schedule::zbv, 2, 1, 2, 1));
    CHECK(zbv.memory[0].allocated == doctest::Approx(8.0));
    const sim::SimResult dpv = sim::simulate_plan(hand_pipeline(4, 16, Schedule::dualpipev, 2, 1, 2, 1));
    CHECK(dpv.memory[0].allocated == doctest::Approx(9.0));
  }

  TEST_CASE("simulated and analytic steps agree for every new schedule on torchtitan, llama3-70b on 64 H100") {
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    // Memory: against the same layout under interleaved 1F1B, so that what the two models count alike (model states,
    // buffers, the allocator's reserve) cancels and the schedules' activations in flight are compared.
    auto peak_ratio = [](const sim::SimResult& r) {
      return r.peak_stage().peak_bytes / static_cast<double>(r.analytic.memory.peak_stage().peak.total());
    };
    Strategy base = pipelined(Framework::torchtitan, 64, 8, 4, 32, 8192);
    base.recompute = Recompute::none;
    base.vpp = 2;
    base.schedule = Schedule::interleaved;
    const double interleaved_ratio = peak_ratio(sim::simulate(m, base, c));
    for (Schedule sch : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
      Strategy s = base;
      s.schedule = sch;
      const sim::SimResult r = sim::simulate(m, s, c);
      CAPTURE(std::string(to_string(sch)));
      // The tolerance of tests/test_sim.cpp's agreement (3 %; sim/README.md: pipelines −0.4 to −3.1 %).
      CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.03);
      CHECK(r.critical_stage().bubble_s > 0);
      // The activations live to the W passes in both models: the simulated/analytic peak ratio within 3 % of
      // interleaved 1F1B's.
      CHECK(std::fabs(peak_ratio(r) / interleaved_ratio - 1) < 0.03);
    }
  }

  TEST_CASE("plan's re-ranking extrapolates the new schedules' long steps exactly (sim/rerank.hpp)") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    for (Schedule sch : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
      Strategy s = pipelined(Framework::torchtitan, 8, 1, 2, 512, 2048);  // dp 4: 128 micro-batches
      s.recompute = Recompute::none;
      s.vpp = 2;
      s.schedule = sch;
      CAPTURE(std::string(to_string(sch)));
      const sim::SimulatedCandidate fast = sim::simulate_candidate(m, s, c);
      REQUIRE(fast.extrapolated());
      const sim::SimulatedCandidate whole = sim::summarise_simulation(sim::simulate(m, s, c), s);
      CHECK(fast.step_s == doctest::Approx(whole.step_s).epsilon(1e-7));
      CHECK(fast.peak_bytes == doctest::Approx(whole.peak_bytes).epsilon(1e-7));
      CHECK(fast.stage.bubble_s + 1 == doctest::Approx(whole.stage.bubble_s + 1).epsilon(1e-7));
    }
  }

  TEST_CASE("which runtime runs which schedule, with its source") {
    Strategy s = pipelined(Framework::torchtitan, 64, 8, 4, 32, 8192);
    s.vpp = 2;
    for (Schedule sch : {Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev}) {
      s.schedule = sch;
      s.framework = Framework::torchtitan;
      CHECK(framework_runs(s));
      for (Framework f : {Framework::megatron, Framework::deepspeed}) {
        s.framework = f;
        s.zero = 1;
        CHECK_FALSE(framework_runs(s));
        CHECK(framework_refusal(s)->find("schedule") != std::string::npos);
      }
      s.zero = 2;
    }
    // torchtitan's zero bubble is a multi-stage schedule: ≥ 2 stages per rank (pipeline_parallel.py).
    s.framework = Framework::torchtitan;
    s.schedule = Schedule::zb_h1;
    s.vpp = 1;
    CHECK_FALSE(framework_runs(s));
    CHECK(framework_refusal(s)->find("--vpp 1") != std::string::npos);
  }

  TEST_CASE("plan: torchtitan prices the zero-bubble schedules; the recommendation keeps the plain one when within 2 %") {
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    SearchSpace space;
    space.base = pipelined(Framework::torchtitan, 64, 8, 4, 32, 8192);
    space.tp = 8;
    space.pp = 4;
    const SearchResult r = search_strategies(m, c, space, 500);
    bool zbv = false, dualpipe = false;
    for (const Candidate& cand : r.ranked) {
      zbv = zbv || cand.strategy.schedule == Schedule::zbv;
      dualpipe = dualpipe || cand.strategy.schedule == Schedule::dualpipev;
    }
    CHECK(zbv);
    CHECK(dualpipe);
    REQUIRE(r.recommended);
    // A B/W-split schedule is its own family; it is recommended only when more than 2 % faster than the plainer one.
    if (schedule_splits_backward(r.recommended->strategy.schedule))
      for (const Candidate& f : r.families)
        if (f.within_safety() && complexity(f.strategy) < complexity(r.recommended->strategy))
          CHECK(f.tokens_per_s < (1 - kSimplicityTolerance) * r.ranked.front().tokens_per_s);
  }

  TEST_CASE("bad combinations are one error line and exit 2") {
    using test::is_one_error_line;
    using test::run_cli;
    const std::string l405 = "predict --preset llama3-405b --gpus 16384 --cluster dgx-h100 --tp 8 --pp 16 --sp "
                             "--global-batch 2048 --recompute full ";
    for (const std::string& args : std::vector<std::string>{
             l405 + "--framework megatron --vpp 3",                                        // no split runs
             l405 + "--framework megatron --pp-first-layers 100 --pp-last-layers 100",     // more than the layers
             l405 + "--framework megatron --pp-first-layers 7 --pp-last-layers 8",        // 111 over 14 middle stages
             l405 + "--framework megatron --vpp 2 --pp-first-layers 7 --pp-last-layers 7",  // 7 % vpp 2
             l405 + "--framework megatron --pp-first-layers 7 --pp-embedding-layers 1",   // both ways at once
             l405 + "--framework megatron --pp-first-layers 0",                           // below 1
             l405 + "--framework megatron --pp-embedding-layers 2",                       // Megatron's is a switch
             l405 + "--framework megatron --schedule zbv",                                // Megatron has no ZB-V
             l405 + "--framework deepspeed --zero 1 --schedule dualpipev",                // nor DeepSpeed DualPipeV
             l405 + "--framework deepspeed --zero 1 --pp-first-layers 7",                 // DeepSpeed has no first/last
             l405 + "--framework torchtitan --zero 2 --schedule zb-h1",                   // torchtitan: ≥ 2 stages
             l405 + "--framework torchtitan --zero 2 --schedule zbv --vpp 3",             // a V is two chunks
             std::string("predict --preset llama3-405b --gpus 16384 --cluster dgx-h100 --tp 8 --pp 16 --sp "
                         "--global-batch 256 --framework torchtitan --zero 2 --schedule dualpipev"),  // 2 < 2·pp
             l405 + "--framework torchtitan --zero 2 --schedule zbv --pp-first-layers 7",  // V: no first/last
             std::string("plan --preset llama3-70b --gpus 64 --cluster dgx-h100 --framework torchtitan --schedule zbv "
                         "--vpp 3"),                                                        // plan: a V of 3 chunks
             std::string("plan --preset llama3-70b --gpus 64 --cluster dgx-h100 --framework deepspeed "
                         "--pp-first-layers 3"),                                            // plan: DeepSpeed first/last
             std::string("plan --preset llama3-70b --gpus 64 --cluster dgx-h100 --framework megatron --pp 16 "
                         "--pp-first-layers 3 --pp-last-layers 3"),                         // plan: 74 over 14
             std::string("predict --preset 8b --gpus 8 --pp-loss-layers 1"),               // no pipeline
             std::string("predict --preset 8b --gpus 8 --pp 2 --framework megatron --schedule zero"),  // unknown
         }) {
      const test::CliResult r = run_cli(args);
      CAPTURE(args);
      CAPTURE(r.err);
      CHECK(is_one_error_line(r));
    }
    // The fixes they suggest run.
    const test::CliResult ok = run_cli(l405 + "--framework megatron --vpp 4 --pp-embedding-layers 1 --pp-loss-layers 1 "
                                              "--format json");
    REQUIRE(ok.exit_code == 0);
    const auto j = nlohmann::json::parse(ok.out);
    CHECK(j["config"]["pipeline"]["chunk_layers"][0][0] == 1);
    CHECK(j["config"]["schedule"] == "interleaved");
    CHECK(run_cli(l405 + "--framework torchtitan --zero 2 --schedule zbv --format json").exit_code == 0);
    // No split given and 126 blocks on 16 stages: the split Megatron-Bridge's recipes use (embedding and loss counted
    // as a block each: 128 / 16, the same blocks as 7 on the first and last), said in the answer (config_flags.cpp, pipeline_layout.hpp runnable_split_for_default).
    const test::CliResult inferred = run_cli(l405 + "--framework megatron --format json");
    CAPTURE(inferred.err);
    REQUIRE(inferred.exit_code == 0);
    const auto ji = nlohmann::json::parse(inferred.out);
    CHECK(ji["config"]["pipeline_split_rule"].get<std::string>().find("--pp-") != std::string::npos);
    CHECK(ji["config"]["pipeline"]["chunk_layers"][0][0] == 7);  // 8 − the embedding's block
  }
}
