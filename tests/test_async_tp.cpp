// PyTorch's async TP (framework.hpp TpOverlapKind::micro_pipeline; microbatch_costs.cpp async_tp_comm): which of a
// block's TP collectives Inductor's micro-pipeline pass fuses with a matmul, which runtimes can ask for it, and the
// published speedups it should reproduce.
#include <doctest/doctest.h>

#include <string>

#include "io/preset_store.hpp"
#include "planner/comm_cost.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/groups.hpp"
#include "planner/predict.hpp"
#include "planner/step_time.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

// torchtitan's Llama 3 70B layout of its async-TP benchmark: FSDP 32 × TP 8 on 256 H100, local batch 16, full AC.
Strategy titan_70b(bool async_tp) {
  Strategy s;
  s.framework = Framework::torchtitan;
  s.gpus = 256;
  s.tp = 8;
  s.dp = 32;
  s.sp = true;
  s.zero = 3;
  s.recompute = Recompute::full;
  s.micro_batch = 16;
  s.global_batch = 512;
  s.seq = 8192;
  s.compile = true;
  if (async_tp) s.tp_comm_overlap = true;
  return s;
}

}  // namespace

TEST_SUITE("async_tp") {
  TEST_CASE("only the collectives a single matmul meets are hidden") {
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("grand-teton-h100");
    const Strategy plain = titan_70b(false), async = titan_70b(true);
    const MicrobatchCosts a = microbatch_costs(m, plain, c), b = microbatch_costs(m, async, c);
    // One all-gather or reduce-scatter of the T·h bf16 activations (T = 16 · 8192 tokens) on the 8 NVLink ranks.
    const double bytes = 16.0 * 8192 * 8192 * 2;
    const GroupLayout g = tp_group(plain, c);
    const double gather = collective_time_s(c, Collective::all_gather, bytes, g);
    const double scatter = collective_time_s(c, Collective::reduce_scatter, bytes, g);
    // Without overlap: 2 all-gathers + 2 reduce-scatters per forward, the same in backward, and the forward's 4 again
    // under full recomputation — which also re-gathers the linear inputs that DTensor saves whole, so nothing more
    // (framework.hpp tp_saves_gathered_inputs; Megatron re-gathers 2 more).
    CHECK(a.block_tp_fwd_s == doctest::Approx(2 * gather + 2 * scatter));
    CHECK(a.block_tp_bwd_s == doctest::Approx(4 * gather + 4 * scatter));
    // Async TP: forward (and its recomputation) pipelined, so far below the plain cost but not free: the first of 8
    // chunks of each collective waits alone (1/8).
    CHECK(b.block_tp_fwd_s < 0.5 * a.block_tp_fwd_s);
    CHECK(b.block_tp_fwd_s > (2 * gather + 2 * scatter) / 8);
    // Backward: SwiGLU's gate and up dgrads are summed before their reduce-scatter (not one matmul: unfused);
    // torchtitan's fused QKV projection and the row-parallel all-gathers are pipelined.
    const double unfused = scatter;
    CHECK(b.block_tp_bwd_s > unfused);
    CHECK(b.block_tp_bwd_s < unfused + b.block_tp_fwd_s + 0.5 * (scatter + 2 * gather));
    // The GEMMs are the same: only the communication moved.
    CHECK(b.block_fwd_s == doctest::Approx(a.block_fwd_s));
  }

  TEST_CASE("the speedup is of the size torchtitan measured") {
    // benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: Llama 3 70B bf16, 597.3 → 652.4 tokens/s/GPU (1.09×).
    const ModelSpec m = presets().model("llama3-70b");
    const ClusterSpec c = presets().cluster("grand-teton-h100");
    const double plain = predict(m, titan_70b(false), c).time.step_s;
    const double async = predict(m, titan_70b(true), c).time.step_s;
    const double speedup = plain / async;
    CHECK(speedup > 1.04);
    CHECK(speedup < 1.20);
  }

  TEST_CASE("without torch.compile, or in a runtime without it, async TP is refused") {
    Strategy s = titan_70b(true);
    CHECK(framework_runs(s));
    s.compile = false;
    CHECK_FALSE(framework_runs(s));
    REQUIRE(framework_refusal(s));
    CHECK(framework_refusal(s)->find("--compile") != std::string::npos);
    for (const Framework f : {Framework::deepspeed, Framework::fsdp1}) {  // (the reference loop has no TP at all)
      Strategy o = titan_70b(true);
      o.framework = f;
      o.compile = f == Framework::fsdp1;  // FSDP1 compiles, but has no async TP in shardplan
      CAPTURE(to_string(f));
      CHECK_FALSE(framework_runs(o));
      REQUIRE(framework_refusal(o));
      CAPTURE(*framework_refusal(o));
      CHECK(framework_refusal(o)->find("--tp-comm-overlap") != std::string::npos);
    }
    // Megatron-Core's userbuffers need no compile.
    Strategy mc = titan_70b(true);
    mc.framework = Framework::megatron;
    mc.compile = false;
    mc.zero = 1;
    CHECK(framework_runs(mc));
  }

  TEST_CASE("the CLI names the missing flag") {
    using shardplan::test::check_refused;
    check_refused("predict --preset llama3-70b --gpus 16 --tp 8 --framework torchtitan --tp-comm-overlap",
                  "--compile");
    check_refused("predict --preset llama3-70b --gpus 16 --tp 8 --sp --framework deepspeed --zero 1 --tp-comm-overlap",
                  "--tp-comm-overlap");
    const auto ok = shardplan::test::run_cli(
        "predict --preset llama3-70b --gpus 16 --tp 8 --framework torchtitan --compile --tp-comm-overlap --format json");
    CAPTURE(ok.err);
    CHECK(ok.exit_code == 0);
  }
}
