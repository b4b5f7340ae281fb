// What each runtime can run (planner/framework_support.cpp) and what each one does differently
// (planner/framework.cpp): refused layouts are refused by predict and never offered by plan; each behaviour moves
// the step the way its source says.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/partition.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "planner/step_time.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

constexpr Framework kRuntimes[] = {Framework::fsdp, Framework::fsdp1, Framework::torchtitan, Framework::deepspeed,
                                   Framework::megatron, Framework::reference};

Strategy layout(Framework fw, int64_t gpus, int64_t tp, int64_t pp, int zero, int64_t global_batch) {
  Strategy s;
  s.framework = fw;
  s.gpus = gpus;
  s.tp = tp;
  s.pp = pp;
  s.dp = gpus / (tp * pp);
  s.zero = zero;
  s.micro_batch = 1;
  s.global_batch = global_batch;
  s.seq = 2048;
  s.sp = tp > 1;
  s.precision = fw == Framework::megatron ? Precision::megatron_bf16 : Precision::amp_bf16;
  return s;
}

}  // namespace

TEST_SUITE("framework support") {
  TEST_CASE("names: fsdp2 is fsdp; every runtime parses and prints") {
    CHECK(parse_framework("fsdp2") == Framework::fsdp);
    CHECK(parse_framework("fsdp") == Framework::fsdp);
    CHECK(std::string(to_string(Framework::fsdp)) == "fsdp");
    for (Framework f : kRuntimes) CHECK(parse_framework(to_string(f)) == f);
    CHECK_FALSE(parse_framework("fsdp3"));
  }

  TEST_CASE("a ZeRO stage outside 0..3 is refused as such, before any runtime's pipeline rule asks about it") {
    // Found by fuzz_strategy: --zero -1 with --pp reached the pipeline split rule's stage lookup first.
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    for (Framework f : kRuntimes)
      for (int zero : {-1, 4, 31, 40}) {
        CAPTURE(std::string(to_string(f)));
        CAPTURE(zero);
        CHECK_THROWS_WITH_AS(predict(m, layout(f, 16, 1, 2, zero, 16), c), doctest::Contains("--zero must be 0, 1, 2 or 3"),
                             InputError);
      }
    CHECK_FALSE(has(~SmallSet{0}, -1));
    CHECK_FALSE(has(~SmallSet{0}, 32));
  }

  TEST_CASE("each runtime refuses what its source says it cannot run, and runs the rest") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    auto refused = [&](const Strategy& s) { return framework_refusal(s).has_value(); };
    // FSDP (both APIs) and torchtitan: no ZeRO-1.
    for (Framework f : {Framework::fsdp, Framework::fsdp1, Framework::torchtitan}) {
      CAPTURE(std::string(to_string(f)));
      CHECK(refused(layout(f, 16, 1, 1, 1, 16)));
      CHECK_FALSE(refused(layout(f, 16, 1, 1, 0, 16)));
      CHECK_FALSE(refused(layout(f, 16, 2, 1, 3, 16)));
    }
    // Pipelines: not plain FSDP; torchtitan with FSDP; DeepSpeed's pipe only with ZeRO-0/1 and 1F1B; Megatron 1F1B
    // and interleaved, no GPipe.
    CHECK(refused(layout(Framework::fsdp, 16, 1, 2, 3, 16)));
    CHECK(refused(layout(Framework::fsdp1, 16, 1, 2, 3, 16)));
    CHECK_FALSE(refused(layout(Framework::torchtitan, 16, 1, 2, 3, 16)));
    CHECK(refused(layout(Framework::deepspeed, 16, 1, 2, 2, 16)));
    CHECK(refused(layout(Framework::deepspeed, 16, 1, 2, 3, 16)));
    CHECK_FALSE(refused(layout(Framework::deepspeed, 16, 4, 2, 1, 16)));  // BLOOM's TP4 PP12 DP8 ZeRO-1, smaller
    Strategy ds_interleaved = layout(Framework::deepspeed, 16, 1, 2, 1, 16);
    ds_interleaved.vpp = 2;
    ds_interleaved.schedule = Schedule::interleaved;
    CHECK(refused(ds_interleaved));
    Strategy mg_gpipe = layout(Framework::megatron, 16, 1, 2, 1, 16);
    mg_gpipe.schedule = Schedule::gpipe;
    CHECK(refused(mg_gpipe));
    Strategy mg_interleaved = layout(Framework::megatron, 16, 1, 2, 1, 16);
    mg_interleaved.vpp = 2;
    mg_interleaved.schedule = Schedule::interleaved;
    CHECK_FALSE(refused(mg_interleaved));
    // Megatron-FSDP is Megatron-Core's ZeRO-2/3; with a pipeline it is not modelled.
    CHECK_FALSE(refused(layout(Framework::megatron, 16, 1, 1, 2, 16)));
    CHECK_FALSE(refused(layout(Framework::megatron, 16, 2, 1, 3, 16)));
    CHECK(refused(layout(Framework::megatron, 16, 1, 2, 3, 16)));
    // HSDP: FSDP at ZeRO-2/3; DeepSpeed only at ZeRO-3 (MiCS); Megatron through Megatron-FSDP (ZeRO-2/3).
    Strategy hsdp = layout(Framework::deepspeed, 16, 1, 1, 2, 16);
    hsdp.hsdp = 8;
    CHECK(refused(hsdp));
    hsdp.zero = 3;
    CHECK_FALSE(refused(hsdp));
    hsdp.framework = Framework::fsdp;
    hsdp.zero = 2;
    CHECK_FALSE(refused(hsdp));
    hsdp.framework = Framework::megatron;
    CHECK_FALSE(refused(hsdp));
    hsdp.zero = 1;
    CHECK(refused(hsdp));
    // Offload: DeepSpeed (ZeRO-1..3) and Megatron (distributed optimizer); FSDP's CPU offload moves parameters too.
    Strategy off = layout(Framework::deepspeed, 16, 1, 1, 2, 16);
    off.offload_optimizer = true;
    CHECK_FALSE(refused(off));
    off.framework = Framework::fsdp;
    CHECK(refused(off));
    off.framework = Framework::megatron;
    off.zero = 1;
    off.precision = Precision::megatron_bf16;
    CHECK_FALSE(refused(off));
    // The reference loop is data-parallel only.
    CHECK(refused(layout(Framework::reference, 16, 2, 1, 3, 16)));
    CHECK_FALSE(refused(layout(Framework::reference, 16, 1, 1, 1, 16)));
    // predict refuses with the same reason (an InputError), and framework_runs agrees with framework_refusal.
    CHECK_THROWS_AS(predict(m, layout(Framework::fsdp, 16, 1, 2, 3, 16), c), InputError);
    for (Framework f : kRuntimes)
      for (int zero = 0; zero <= 3; ++zero)
        for (int64_t pp : {1, 2})
          for (int64_t tp : {1, 2}) {
            const Strategy s = layout(f, 16, tp, pp, zero, 16);
            CHECK(framework_runs(s) == !framework_refusal(s).has_value());
          }
  }

  TEST_CASE("plan never ranks or recommends a layout its framework cannot run") {
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    for (Framework f : kRuntimes) {
      CAPTURE(std::string(to_string(f)));
      SearchSpace sp;
      sp.base = layout(f, 64, 1, 1, 3, 256);
      sp.base.sp = false;
      sp.offload_optimizer = true;
      const SearchResult r = search_strategies(m, c, sp, 200);
      for (const Candidate& cand : r.ranked) CHECK(framework_runs(cand.strategy));
      for (const Candidate& cand : r.tight) CHECK(framework_runs(cand.strategy));
      for (const Candidate& cand : r.families) CHECK(framework_runs(cand.strategy));
      if (r.recommended) CHECK(framework_runs(r.recommended->strategy));
      const FrameworkSupport& fs = framework_support(f);
      // What it leaves out is said: a missing ZeRO-1 or pipeline appears in not_run.
      bool says_zero1 = false, says_pipeline = false;
      for (const NotRun& n : r.not_run) {
        says_zero1 |= n.what == "ZeRO-1";
        says_pipeline |= n.what == "pipeline parallelism";
        CHECK_FALSE(n.reason.empty());
      }
      CHECK(says_zero1 == !has(fs.zero_stages, 1));
      CHECK(says_pipeline == !fs.pipeline);
    }
    // A fixed dimension the framework refuses is refused up front, with its reason.
    SearchSpace fixed;
    fixed.base = layout(Framework::fsdp, 64, 1, 1, 3, 256);
    fixed.zero = 1;
    CHECK_THROWS_WITH_AS(search_strategies(m, c, fixed, 10), doctest::Contains("no optimizer-only sharding"), InputError);
    fixed.zero.reset();
    fixed.pp = 4;
    CHECK_THROWS_WITH_AS(search_strategies(m, c, fixed, 10), doctest::Contains("torchtitan"), InputError);
  }

  TEST_CASE("the search prices every pipeline schedule a runtime has, with the ZeRO stages it pipelines") {
    // The layout check once ran with the strategy's default ZeRO-3 before the search set the stage: Megatron (no
    // ZeRO-3) lost every interleaved layout, and `plan --framework megatron --vpp 2` failed with a ZeRO-3 error.
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    for (Framework f : kRuntimes) {
      const FrameworkSupport& fs = framework_support(f);
      if (!fs.pipeline) continue;
      CAPTURE(std::string(to_string(f)));
      SearchSpace sp;
      sp.base = layout(f, 64, 1, 1, 3, 256);
      sp.base.sp = false;
      sp.pp = 4;
      const SearchResult r = search_strategies(m, c, sp, 2000);
      std::set<Schedule> seen;
      for (const Candidate& cand : r.ranked) seen.insert(cand.strategy.schedule);
      for (const Candidate& cand : r.tight) seen.insert(cand.strategy.schedule);
      for (Schedule s : {Schedule::one_f_one_b, Schedule::interleaved, Schedule::gpipe, Schedule::zb_h1, Schedule::zbv,
                         Schedule::dualpipev}) {
        CAPTURE(std::string(to_string(s)));
        if (!has(fs.schedules, s)) CHECK(seen.count(s) == 0);
      }
      if (has(fs.schedules, Schedule::interleaved)) CHECK(seen.count(Schedule::interleaved) == 1);
    }
    SearchSpace megatron;
    megatron.base = layout(Framework::megatron, 64, 1, 1, 1, 256);
    megatron.vpp = 2;
    const SearchResult r = search_strategies(m, c, megatron, 10);
    REQUIRE(r.recommended);
    CHECK(r.recommended->strategy.vpp == 2);
    CHECK(r.recommended->strategy.zero <= 1);
    // What DeepSpeed's pipeline cannot run is refused for that reason, not for the default ZeRO-3 or a batch.
    SearchSpace ds;
    ds.base = layout(Framework::deepspeed, 64, 1, 1, 3, 256);
    ds.vpp = 2;
    CHECK_THROWS_WITH_AS(search_strategies(m, c, ds, 10), doctest::Contains("cannot run --vpp 2"), InputError);
    ds.vpp.reset();
    ds.pp = 4;
    ds.schedule = Schedule::interleaved;
    CHECK_THROWS_WITH_AS(search_strategies(m, c, ds, 10), doctest::Contains("cannot run --schedule interleaved"), InputError);
    ds.schedule.reset();
    CHECK(search_strategies(m, c, ds, 10).recommended);  // --pp 4 alone: ZeRO-0/1 pipelines
    // A given --hsdp is hybrid ZeRO-2/3 (predict refuses it with less): never dropped for a DDP or ZeRO-1 row.
    SearchSpace hybrid;
    hybrid.base = layout(Framework::torchtitan, 64, 1, 1, 3, 256);
    hybrid.hsdp = 8;
    const SearchResult h = search_strategies(m, c, hybrid, 50);
    REQUIRE(!h.ranked.empty());
    for (const Candidate& cand : h.ranked) CHECK(cand.strategy.hsdp == 8);
    hybrid.zero = 1;
    CHECK_THROWS_WITH_AS(search_strategies(m, c, hybrid, 10), doctest::Contains("--hsdp needs --zero 2 or 3"), InputError);
  }

  TEST_CASE("every layout the search offers is one predict accepts (dense, MoE, long context; every runtime)") {
    // The search and predict's validation (strategy.cpp) must agree: plan once ranked HSDP × EP layouts of
    // Qwen3-30B-A3B under torchtitan that predict then refused, failing on its own recommendation.
    const ClusterSpec c = presets().cluster("dgx-h100");
    struct Case {
      const char* model;
      int64_t gpus, global_batch, seq;
    };
    for (const Case& k : {Case{"llama3-8b", 64, 256, 8192}, Case{"llama3-8b", 16, 16, 65536},
                          Case{"qwen3-30b-a3b", 16, 128, 4096}, Case{"mixtral-8x7b", 64, 256, 4096},
                          Case{"deepseek-v3", 1024, 2048, 4096}}) {
      const ModelSpec m = presets().model(k.model);
      for (Framework f : kRuntimes) {
        CAPTURE(std::string(k.model) + " " + to_string(f) + " seq " + std::to_string(k.seq));
        SearchSpace sp;
        sp.base = layout(f, k.gpus, 1, 1, 3, k.global_batch);
        sp.base.seq = k.seq;
        sp.offload_optimizer = true;
        SearchResult r;
        try {
          r = search_strategies(m, c, sp, 100);
        } catch (const InputError&) {
          continue;  // nothing fits, or the runtime cannot run this model at all: said up front, not offered
        }
        std::vector<const Candidate*> offered;
        for (const Candidate& cand : r.ranked) offered.push_back(&cand);
        for (const Candidate& cand : r.tight) offered.push_back(&cand);
        for (const Candidate& cand : r.families) offered.push_back(&cand);
        if (r.recommended) offered.push_back(&*r.recommended);
        for (const Candidate* cand : offered) {
          const Strategy& st = cand->strategy;
          CAPTURE(fmt::format("tp {} pp {} cp {} ep {} dp {} zero {} hsdp {} vpp {} mb {}", st.tp, st.pp, st.cp, st.ep,
                              st.dp, st.zero, st.hsdp, st.vpp, st.micro_batch));
          CHECK_NOTHROW((void)predict(m, st, c));
        }
      }
    }
  }

  TEST_CASE("bad combinations are one error line and exit 2") {
    using test::is_one_error_line;
    using test::run_cli;
    for (const char* args : {"predict --preset 8b --gpus 8 --zero 1",
                             "predict --preset 8b --gpus 16 --cluster dgx-h100 --pp 2",
                             "predict --preset 8b --gpus 16 --cluster dgx-h100 --pp 2 --zero 2 --framework deepspeed",
                             "predict --preset 8b --gpus 16 --cluster dgx-h100 --pp 2 --vpp 2 --framework deepspeed --zero 1",
                             "predict --preset 8b --gpus 16 --cluster dgx-h100 --pp 2 --schedule gpipe --framework megatron",
                             "predict --preset 8b --gpus 16 --cluster dgx-h100 --pp 2 --framework megatron --zero 3",
                             "predict --preset 8b --gpus 8 --offload-optimizer --zero 3",
                             "predict --preset 8b --gpus 8 --framework fsdp3",
                             "predict --preset 8b --gpus 8 --tp 2 --tp-comm-overlap --framework megatron",
                             "plan --preset 8b --gpus 8 --zero 1", "plan --preset 8b --gpus 16 --pp 2 --framework fsdp1"}) {
      CAPTURE(args);
      const auto r = run_cli(args);
      CHECK(r.exit_code == 2);
      CHECK(is_one_error_line(r));
    }
    const auto ok = run_cli("predict --preset 8b --gpus 16 --cluster dgx-h100 --pp 2 --framework torchtitan");
    CHECK(ok.exit_code == 0);
  }
}

TEST_SUITE("framework behaviours") {
  TEST_CASE("DeepSpeed's pipeline reduces gradients once per batch, after its last backward") {
    // BLOOM-176B's layout scaled down: llama3-8b, TP 2 PP 4 DP 2 ZeRO-1, 32 micro-batches. Once per batch, the data-
    // parallel total is one step's worth whatever the accumulation; reducing every micro-batch would be 32×.
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    Strategy s = layout(Framework::deepspeed, 16, 2, 4, 1, 64);
    validate_strategy(s, m, c);
    CHECK(effective_grad_sync(s) == GradSync::per_step);
    const StepTime once = estimate_step_time(m, s, c);
    s.grad_sync = GradSync::per_micro;
    const StepTime every = estimate_step_time(m, s, c);
    // Once per batch: the gradient reduce-scatter of one step plus the parameter all-gather; every micro-batch: 32
    // reduce-scatters and the same gather.
    CHECK(every.dp_comm_total_s > 10 * once.dp_comm_total_s);
    // Not overlapped (ReduceGrads after the last backward): exposed whole.
    CHECK(once.exposed_dp_s == doctest::Approx(once.dp_comm_total_s).epsilon(1e-9));
    // DeepSpeed's ZeRO-2 without a pipeline reduces every micro-batch; ZeRO-1 at the boundary only.
    CHECK(effective_grad_sync(layout(Framework::deepspeed, 16, 1, 1, 2, 64)) == GradSync::per_micro);
    CHECK(effective_grad_sync(layout(Framework::deepspeed, 16, 1, 1, 1, 64)) == GradSync::per_step);
  }

  TEST_CASE("torchtitan under PP gathers each unit once per step and keeps the stage's parameters") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    const Strategy tt = layout(Framework::torchtitan, 32, 1, 4, 3, 64);  // dp 8, 8 micro-batches
    validate_strategy(tt, m, c);
    const Prediction p = predict(m, tt, c);
    // The stage's parameters stay gathered (2 B each), and its gradients stay unsharded until the last backward.
    const StageParams st = stage_params(m, tt, 0);
    bool kept = false;
    for (const MemoryItem& it : p.memory.stages[0].items)
      if (it.what.find("kept from the first forward") != std::string::npos) {
        kept = true;
        CHECK(it.bytes == doctest::Approx(2.0 * static_cast<double>(st.total())));
      }
    CHECK(kept);
    CHECK(effective_grad_sync(tt) == GradSync::per_step);
    // The data-parallel total is one gather of every unit and one reduce-scatter: less than FSDP2's ZeRO-3 per
    // micro-batch (2 gathers + 1 reduce-scatter per micro-batch) by far.
    Strategy regather = tt;
    regather.framework = Framework::fsdp;  // FSDP2's behaviour without torchtitan's PP policy (not runnable; priced)
    const FrameworkTraits fsdp2 = framework_traits(Framework::fsdp);
    const MicrobatchCosts costs = microbatch_costs(m, tt, c);
    const StepTime t_tt = step_time_from_costs(m, tt, c, framework_traits(Framework::torchtitan), costs);
    const StepTime t_fsdp = step_time_from_costs(m, regather, c, fsdp2, costs);
    CHECK(t_tt.dp_comm_total_s < 0.25 * t_fsdp.dp_comm_total_s);
  }

  TEST_CASE("FSDP1 SHARD_GRAD_OP under no_sync gathers once; FSDP2 gathers every micro-batch and copies") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("a800x8");
    Strategy s = layout(Framework::fsdp1, 8, 1, 1, 2, 64);  // 8 micro-batches
    s.grad_sync = GradSync::per_step;
    const StepTime fsdp1 = estimate_step_time(m, s, c);
    s.framework = Framework::fsdp;
    const StepTime fsdp2 = estimate_step_time(m, s, c);
    // FSDP2 gathers in all 8 forwards, FSDP1 in the first; both reduce-scatter fp32 gradients once. In bytes per
    // parameter on the wire: FSDP2 8 · 2 + 4 = 20, FSDP1 2 + 4 = 6 (FSDP2's copy-in beside its reduce-scatter only
    // adds to that).
    CHECK(fsdp2.dp_comm_total_s / fsdp1.dp_comm_total_s > 0.9 * 20.0 / 6.0);
    // FSDP2 pays the copy-out on the compute stream; FSDP1 does not.
    CHECK(fsdp2.compute_s > fsdp1.compute_s);
  }

  TEST_CASE("Megatron-Core's overlaps hide what Megatron-LM of 2021 exposed") {
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy s = layout(Framework::megatron, 256, 8, 4, 1, 128);  // dp 8, 16 micro-batches, SP
    validate_strategy(s, m, c);
    const StepTime today = estimate_step_time(m, s, c);
    s.overlap_grad_reduce = s.overlap_param_gather = s.tp_comm_overlap = false;
    const StepTime old = estimate_step_time(m, s, c);
    CHECK(today.exposed_tp_s < 0.8 * old.exposed_tp_s);
    CHECK(today.exposed_dp_s < old.exposed_dp_s);
    CHECK(today.step_s < old.step_s);
    // TP overlap needs sequence parallelism (Megatron-LM's check): without --sp nothing changes.
    Strategy no_sp = layout(Framework::megatron, 256, 8, 4, 1, 128);
    no_sp.sp = false;
    Strategy no_sp_off = no_sp;
    no_sp_off.tp_comm_overlap = false;
    CHECK(estimate_step_time(m, no_sp, c).exposed_tp_s ==
          doctest::Approx(estimate_step_time(m, no_sp_off, c).exposed_tp_s));
  }
}

TEST_SUITE("torch.compile") {
  TEST_CASE("--compile fuses eager PyTorch's elementwise work; the PyTorch runtimes only") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy s = layout(Framework::torchtitan, 8, 1, 1, 3, 8);
    s.seq = 8192;
    const MicrobatchCosts eager = microbatch_costs(m, s, c);
    s.compile = true;
    const MicrobatchCosts compiled = microbatch_costs(m, s, c);
    // Only the elementwise part moves: eager's 4× the fused traffic becomes 1.5× (a forward's elementwise time
    // shrinks by 1 − 1.5/4 = 62.5 %, and the GEMMs and attention are the same).
    CHECK(compiled.block_fwd_s < eager.block_fwd_s);
    CHECK(compiled.block_bwd_s < eager.block_bwd_s);
    CHECK(compiled.block_wgrad_s == eager.block_wgrad_s);
    CHECK(compiled.head_fwd_s == eager.head_fwd_s);
    // Megatron's kernels are fused already: the flag is refused there, with the reason.
    Strategy mg = layout(Framework::megatron, 8, 1, 1, 1, 8);
    mg.compile = true;
    REQUIRE(framework_refusal(mg));
    CHECK(framework_refusal(mg)->find("--compile") != std::string::npos);
    CHECK(test::run_cli("predict --preset 8b --gpus 8 --framework megatron --compile").exit_code == 2);
    CHECK(test::run_cli("predict --preset 8b --gpus 8 --compile --format json").exit_code == 0);
  }
}
