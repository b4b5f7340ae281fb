// Megatron-Core's --recompute-modules (planner/recompute_modules.hpp): which saved tensors each module drops, by hand
// for GPT-OSS 120B (layernorm, moe_act: Megatron-Bridge's recipe) and DeepSeek-V3 (mla_up_proj), what the recompute
// repeats, the launch flags, and the refusals Megatron-Core itself raises.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/error.hpp"
#include "planner/flops.hpp"
#include "planner/framework.hpp"
#include "planner/recompute_modules.hpp"
#include "planner/step_time.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}

// Megatron-Bridge's GPT-OSS 120B on 64 B300 (GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2: EP 8, MBS 4, GBS 1280).
Strategy gpt_oss_b300() {
  Strategy s;
  s.gpus = s.dp = 64;
  s.ep = 8;
  s.zero = 1;
  s.framework = Framework::megatron;
  s.precision = Precision::amp_bf16;
  s.micro_batch = 4;
  s.global_batch = 1280;
  s.seq = 4096;
  return s;
}

uint32_t mask(std::initializer_list<RecomputeModule> ms) {
  uint32_t out = 0;
  for (RecomputeModule m : ms) out |= static_cast<uint32_t>(m);
  return out;
}
}  // namespace

TEST_SUITE("recompute modules") {
  TEST_CASE("names: Megatron's spelling, comma-separated, round trip; an unknown one is named") {
    const auto m = parse_recompute_modules("layernorm,moe_act");
    REQUIRE(m);
    CHECK(*m == mask({RecomputeModule::layernorm, RecomputeModule::moe_act}));
    CHECK(recompute_modules_string(*m) == "layernorm,moe_act");
    std::string bad;
    CHECK_FALSE(parse_recompute_modules("mla_up_proj,attn", &bad));
    CHECK(bad == "attn");
    // Megatron's default under selective: core_attn; nothing without selective.
    Strategy s = gpt_oss_b300();
    s.recompute = Recompute::selective;
    CHECK(recompute_modules_in_force(s) == kDefaultRecomputeModules);
    s.recompute = Recompute::none;
    s.recompute_modules = *m;
    CHECK(recompute_modules_in_force(s) == 0);
  }

  TEST_CASE("GPT-OSS 120B, layernorm + moe_act: the pre-MLP norm's output and the experts' fc2 input are not kept") {
    const ModelSpec m = store().model("gpt-oss-120b");
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    Strategy s = gpt_oss_b300();
    const double tokens = 4.0 * 4096;
    s.recompute = Recompute::none;
    const double kept = block_activation_bytes(m, s, fw);
    // core_attn alone: flash attention keeps no s² tensor; Megatron checkpoints the fused core all the same, so its
    // fp32 log-sum-exp (4 B per head) is not kept either (attention.py _checkpointed_attention_forward).
    s.recompute = Recompute::selective;
    CHECK(kept - block_activation_bytes(m, s, fw) == doctest::Approx(tokens * 4.0 * 64));
    s.recompute_modules = mask({RecomputeModule::layernorm, RecomputeModule::moe_act});
    // Per token, bf16: the norm's output h = 2880 (2 B each) and the top-4 experts' activation outputs 4 × 2880.
    const double dropped = tokens * (2.0 * 2880 + 2.0 * 4 * 2880);
    CHECK(kept - block_activation_bytes(m, s, fw) == doctest::Approx(dropped));
    // "moe" drops the whole routed part (router, dispatched copies, expert intermediates, combine inputs), which
    // contains moe_act's share.
    Strategy whole = s;
    whole.recompute_modules = mask({RecomputeModule::moe});
    CHECK(block_activation_bytes(m, whole, fw) < block_activation_bytes(m, s, fw) + tokens * 2.0 * 2880);
    // The time: the recompute repeats the norm and the activation (memory-bound), "moe" the experts' GEMMs and the
    // two forward all-to-alls in backward.
    const ClusterSpec c = store().cluster("dgx-b300");
    Strategy plain = gpt_oss_b300();
    plain.recompute = Recompute::selective;
    const MicrobatchCosts base = microbatch_costs(m, plain, c);
    const MicrobatchCosts act = microbatch_costs(m, s, c);
    const MicrobatchCosts moe = microbatch_costs(m, whole, c);
    CHECK(base.block_recompute_s > 0);  // core_attn: Megatron checkpoints even the fused core, its forward again
    CHECK(act.block_recompute_s > 0);
    CHECK(moe.block_recompute_s > 10 * act.block_recompute_s);
    CHECK(moe.block_ep_total_s == doctest::Approx(base.block_ep_total_s * 6.0 / 4.0));
  }

  TEST_CASE("DeepSeek-V3, mla_up_proj: q, k and v are not kept, the latents are") {
    const ModelSpec m = store().model("deepseek-v3");
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    Strategy s;
    s.gpus = 256;
    s.pp = 16;
    s.dp = 16;
    s.ep = 8;
    s.zero = 1;
    s.framework = Framework::megatron;
    s.precision = Precision::amp_bf16;
    s.micro_batch = 1;
    s.global_batch = 4096;
    s.seq = 4096;
    s.recompute = Recompute::selective;
    const double kept = block_activation_bytes(m, s, fw);
    s.recompute_modules = mask({RecomputeModule::mla_up_proj});
    // 128 heads × (128 nope + 64 rope) for q and for k, v at the same width (activations.cpp kv_width_per_token), bf16;
    // without core_attn the fused kernel's fp32 log-sum-exp (4 B per head) is kept again.
    const double qkv = 3.0 * 128 * 192 * 2;
    CHECK(kept - block_activation_bytes(m, s, fw) == doctest::Approx(4096.0 * (qkv - 4.0 * 128)));
    // MLA's input norm is a module of its own (gpt_layer_specs.py): "layernorm" also drops its output, h wide.
    Strategy ln = s;
    ln.recompute_modules = mask({RecomputeModule::mla_up_proj, RecomputeModule::layernorm});
    CHECK(block_activation_bytes(m, s, fw) - block_activation_bytes(m, ln, fw) == doctest::Approx(4096.0 * 2 * (7168 + 7168)));
    const ClusterSpec c = store().cluster("dgx-b200");
    CHECK(microbatch_costs(m, s, c).block_recompute_s > 0);  // the up-projection GEMMs again

    // Hardware FLOPs count what the step repeats: the up-projections, 2 · tokens · layers · (1536 · 128 · 192 +
    // 512 · 128 · 256) more than the model's, not the attention core (flash attention: nothing repeated for it).
    const StepFlops f = step_flops(m, s);
    const double up = 1536.0 * 128 * 192 + 512.0 * 128 * 256;
    CHECK(f.hardware_flops - f.model_flops == doctest::Approx(2 * f.tokens * 61 * up).epsilon(1e-9));
    Strategy core = s;
    core.recompute_modules = 0;  // Megatron's default list, core_attn: it checkpoints even the fused kernel
    const StepFlops fc = step_flops(m, core);
    double core_forward = 0;
    for (const FlopsPart& p : fc.parts)
      if (std::string(p.name).rfind("attention scores", 0) == 0 || std::string(p.name).rfind("attention over", 0) == 0)
        core_forward += p.forward;
    CHECK(core_forward > 0);
    CHECK(fc.hardware_flops - fc.model_flops == doctest::Approx(core_forward).epsilon(1e-9));
  }

  TEST_CASE("the CLI: implied selective, echoed, emitted; refused as Megatron-Core refuses") {
    using shardplan::test::check_refused;
    const auto ok = shardplan::test::run_cli("predict --preset gpt-oss-120b --gpus 64 --cluster dgx-b300 --framework "
                                             "megatron --ep 8 --recompute-modules layernorm,moe_act --format json");
    CAPTURE(ok.err);
    REQUIRE(ok.exit_code == 0);
    const auto cfg = nlohmann::json::parse(ok.out)["config"];
    CHECK(cfg["recompute"] == "selective");
    CHECK(cfg["recompute_modules"] == "layernorm,moe_act");
    check_refused("predict --preset llama3-8b --gpus 8 --framework megatron --recompute-modules moe", "moe");
    check_refused("predict --preset llama3-8b --gpus 8 --framework fsdp --recompute-modules mlp", "--recompute-modules");
    check_refused("predict --preset llama3-8b --gpus 8 --framework megatron --recompute full --recompute-modules mlp",
                  "--recompute selective");
    check_refused("predict --preset llama3-8b --gpus 8 --framework megatron --recompute-modules mlp,attn", "attn");
    check_refused("predict --preset gpt-oss-120b --gpus 64 --framework megatron --ep 8 --recompute-modules mla_up_proj",
                  "mla_up_proj");
    check_refused("predict --preset gpt-oss-120b --gpus 64 --framework megatron --ep 8 --ep-comm-overlap "
                  "--recompute-modules moe",
                  "--ep-comm-overlap");
    check_refused("plan --preset llama3-8b --gpus 8 --framework megatron --recompute-modules moe_act", "moe_act");
    // plan keeps the list and prices selective only.
    const auto plan = shardplan::test::run_cli("plan --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework megatron "
                                               "--recompute-modules mlp --simulate-top 0 --format json");
    CAPTURE(plan.err);
    REQUIRE(plan.exit_code == 0);
    const nlohmann::json planned = nlohmann::json::parse(plan.out);  // kept alive: the loop reads into it
    REQUIRE(!planned["candidates"].empty());
    for (const auto& cand : planned["candidates"]) {
      CHECK(cand["config"]["recompute"] == "selective");
      CHECK(cand["config"]["recompute_modules"] == "mlp");
    }
  }
}
