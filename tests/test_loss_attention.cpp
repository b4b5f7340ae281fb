// Kernels a runtime picks that change memory and time: the fused cross-entropy (flash-attn's, llm-foundry's default),
// the Triton FlashAttention (llm-foundry's attn_impl 'triton'), and torchtitan's always sequence-parallel TP.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/compute_cost.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/memory_moments.hpp"
#include "planner/model.hpp"
#include "planner/partition.hpp"
#include "planner/predict.hpp"
#include "planner/step_time.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy fsdp_8b(LossKind loss) {
  Strategy s;
  s.framework = Framework::fsdp;
  s.gpus = s.dp = 8;
  s.zero = 3;
  s.micro_batch = 1;
  s.global_batch = 8;
  s.seq = 2048;
  s.loss = loss;
  return s;
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("fused cross-entropy: 4 B per logit at its backward (bf16 logits and bf16 gradient), not 12") {
    const ModelSpec m = presets().model("llama3-8b");
    // 2048 tokens × 128256 logits (vocab padded to itself) = 262,668,288 elements on the last stage.
    const double elements = 2048.0 * 128256.0;
    for (LossKind loss : {LossKind::standard, LossKind::fused}) {
      const Strategy s = fsdp_8b(loss);
      const StageParams st = stage_params(m, s, 0);
      const MomentParts p = moment_parts(m, s, framework_traits(s.framework), st);
      REQUIRE(p.applies);
      if (loss == LossKind::fused) {
        CHECK(p.logits_backward == doctest::Approx(elements * 4));  // 1,050,673,152 B
        CHECK(p.logits_forward == doctest::Approx(elements * 2));   // the bf16 logits alone
        CHECK(p.logits_cached == 0);                                // nothing of them freed early
      } else {
        CHECK(p.logits_backward == doctest::Approx(elements * 12));  // 3,152,019,456 B
        CHECK(p.logits_cached == doctest::Approx(elements * 2));
      }
    }
    // The peak falls by at most what the loss's backward held less (8 B per logit, plus the cached bf16 segment).
    const ClusterSpec c = presets().cluster("dgx-h100");
    const Prediction standard = predict(m, fsdp_8b(LossKind::standard), c);
    const Prediction fused = predict(m, fsdp_8b(LossKind::fused), c);
    CHECK(fused.peak_bytes() < standard.peak_bytes());
    CHECK(standard.peak_bytes() - fused.peak_bytes() <= elements * 10 + 1);
    // And the loss's passes read and write less: forward 2 B instead of 6, backward 4 instead of 10 per logit.
    const MicrobatchCosts a = microbatch_costs(m, fsdp_8b(LossKind::standard), c);
    const MicrobatchCosts b = microbatch_costs(m, fsdp_8b(LossKind::fused), c);
    CHECK(a.head_fwd_s - b.head_fwd_s == doctest::Approx(memory_bound_time_s(c.gpu, elements * 4)).epsilon(1e-6));
    CHECK(a.head_bwd_s - b.head_bwd_s == doctest::Approx(memory_bound_time_s(c.gpu, elements * 6)).epsilon(1e-6));
  }

  TEST_CASE("fused cross-entropy outside the FSDP moments: the compute-dtype copies the runtime's kernel keeps") {
    const ModelSpec m = presets().model("llama3-8b");
    Strategy s = fsdp_8b(LossKind::fused);
    s.framework = Framework::megatron;
    s.zero = 1;
    const Prediction p = predict(m, s, presets().cluster("dgx-h100"));
    // Megatron's own loss holds 6 B per logit (framework.cpp); fused, Transformer Engine's kernel writes the gradient
    // into the bf16 logits: 2 B = 525,336,576 B.
    CHECK(p.memory.peak_stage().peak.logits == doctest::Approx(2048.0 * 128256.0 * 2));
    // DeepSpeed runs flash-attn-style fusion: logits and gradient, 2 × 2 B.
    s.framework = Framework::deepspeed;
    CHECK(predict(m, s, presets().cluster("dgx-h100")).memory.peak_stage().peak.logits ==
          doctest::Approx(2048.0 * 128256.0 * 4));
  }

  TEST_CASE("the Triton FlashAttention runs at 1/1.3 of FlashAttention-2's rate (Dao 2023 §4.1, its small end)") {
    for (const char* gpu : {"a100-80g", "h100-sxm"}) {
      const GpuSpec g = presets().gpu(gpu);
      for (bool backward : {false, true}) {
        const double flash2 = flash_attention_efficiency(g, 4096, 128, backward, AttentionKernel::flash2);
        const double triton = flash_attention_efficiency(g, 4096, 128, backward, AttentionKernel::triton);
        CHECK(triton == doctest::Approx(flash2 / 1.3));
      }
    }
    // Through the CLI: the kernel is echoed, megatron's default is cuDNN's, and a slower kernel is a slower step.
    const auto flash = test::run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --seq 8192 --format json");
    const auto triton = test::run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --seq 8192 "
                                      "--attention-kernel triton --format json");
    const auto megatron = test::run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework megatron "
                                        "--format json");
    REQUIRE(flash.exit_code == 0);
    REQUIRE(triton.exit_code == 0);
    REQUIRE(megatron.exit_code == 0);
    const auto jf = nlohmann::json::parse(flash.out), jt = nlohmann::json::parse(triton.out);
    CHECK(jf["config"]["attention_kernel"] == "flash2");
    CHECK(jt["config"]["attention_kernel"] == "triton");
    CHECK(nlohmann::json::parse(megatron.out)["config"]["attention_kernel"] == "cudnn");
    CHECK(jt["time"]["step_s"].get<double>() > jf["time"]["step_s"].get<double>());
  }

  TEST_CASE("--attention-kernel and --loss refuse what they cannot mean, with one line") {
    test::check_refused("predict --preset 8b --gpus 8 --attention-kernel triton --no-flash-attn", "--attention-kernel");
    test::check_refused("predict --preset 8b --gpus 8 --attention-kernel fa9", "--attention-kernel");
    test::check_refused("predict --preset 8b --gpus 8 --loss fast", "--loss");
  }

  TEST_CASE("torchtitan's TP is always sequence-parallel: the CLI turns --sp on, a Strategy without it is refused") {
    const auto r = test::run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework torchtitan --tp 2 "
                                 "--format json");
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.out)["config"]["sp"] == true);
    Strategy s = fsdp_8b(LossKind::standard);
    s.framework = Framework::torchtitan;
    s.tp = 2;
    s.dp = 4;
    const auto why = framework_refusal(s);
    REQUIRE(why);
    CHECK(why->find("SequenceParallel") != std::string::npos);
    apply_framework_defaults(s, presets().model("llama3-8b"));
    CHECK(s.sp);
    CHECK_FALSE(framework_refusal(s));
  }
}
