// The attention's GEMM shapes on one TP rank (planner/attention_linears.hpp): hand-computed shapes for GQA and MLA, and
// the invariant that the ranks' GEMMs add up to the FLOP count of the whole model (planner/flops.cpp).
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/attention_linears.hpp"
#include "planner/context_parallel.hpp"
#include "planner/flops.hpp"
#include "planner/framework.hpp"
#include "planner/predict.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}
Strategy megatron_tp(int64_t tp, bool sp, int64_t seq) {
  Strategy s;
  s.framework = Framework::megatron;
  s.gpus = tp;
  s.tp = tp;
  s.sp = sp;
  s.zero = 1;
  s.micro_batch = 1;
  s.global_batch = 1;
  s.seq = seq;
  return s;
}
// Forward FLOPs of one rank's attention linears.
double rank_flops(const AttentionLinears& a) {
  double f = 2.0 * static_cast<double>(a.out.tokens * a.out.n * a.out.k);
  for (int i = 0; i < a.count; ++i) f += 2.0 * static_cast<double>(a.in[i].tokens * a.in[i].n * a.in[i].k);
  return f;
}
// Forward FLOPs of the attention projections per token and layer, as planner/flops.cpp counts them for the model.
double model_projection_flops_per_token(const ModelSpec& m, const Strategy& s) {
  const StepFlops f = step_flops(m, s);
  double fwd = 0;
  for (const FlopsPart& p : f.parts)
    if (p.name == "attention q/k/v projections" || p.name == "attention output projection") fwd += p.forward;
  return fwd / (f.tokens * static_cast<double>(m.layers));
}
}  // namespace

TEST_SUITE("attention linears") {
  TEST_CASE("GQA: one fused QKV projection and the output projection, split by TP") {
    const ModelSpec m = store().model("llama3-8b");  // 32 heads of 128, 8 K/V heads, h 4096
    const AttentionLinears a = attention_linears(m, megatron_tp(2, true, 8192), 8192);
    REQUIRE(a.count == 1);
    CHECK(a.in[0].tokens == 8192);
    CHECK(a.in[0].n == (4096 + 2 * 1024) / 2);
    CHECK(a.in[0].k == 4096);
    CHECK(a.out.n == 4096);
    CHECK(a.out.k == 2048);
    CHECK(attention_gathered_width(m, megatron_tp(2, true, 8192)) == doctest::Approx(4096));
  }

  TEST_CASE("MLA: down-projections whole on the rank's slice, up-projections and output split by TP") {
    // DeepSeek-V3: h 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk nope 128 + rope 64, v 128.
    const ModelSpec m = store().model("deepseek-v3");
    const AttentionLinears a = attention_linears(m, megatron_tp(2, true, 4096), 4096);
    REQUIRE(a.count == 4);
    CHECK((a.in[0].tokens == 2048 && a.in[0].n == 1536 && a.in[0].k == 7168));      // q down, SP slice
    CHECK((a.in[1].tokens == 4096 && a.in[1].n == 64 * 192 && a.in[1].k == 1536));  // q up, 64 heads per rank
    CHECK((a.in[2].tokens == 2048 && a.in[2].n == 512 + 64 && a.in[2].k == 7168));  // K/V latent + RoPE key
    CHECK((a.in[3].tokens == 4096 && a.in[3].n == 64 * 256 && a.in[3].k == 512));   // k nope and v
    CHECK((a.out.tokens == 4096 && a.out.n == 7168 && a.out.k == 64 * 128));
    CHECK(attention_gathered_width(m, megatron_tp(2, true, 4096)) == doctest::Approx(1536 + 512 + 64));
    // torchtitan gathers the block input and runs the down-projections on all of it.
    Strategy titan = megatron_tp(2, true, 4096);
    titan.framework = Framework::torchtitan;
    CHECK(attention_linears(m, titan, 4096).in[0].tokens == 4096);
    CHECK(attention_gathered_width(m, titan) == doctest::Approx(7168));
    // Without SP every rank runs the down-projections on all its tokens.
    const AttentionLinears no_sp = attention_linears(m, megatron_tp(2, false, 4096), 4096);
    CHECK(no_sp.in[0].tokens == 4096);
  }

  TEST_CASE("the TP ranks' attention GEMMs add up to the model's projection FLOPs (sequence parallel)") {
    for (const std::string name : {"llama3-8b", "deepseek-v3", "qwen3-30b-a3b"}) {
      CAPTURE(name);
      const ModelSpec m = store().model(name);
      for (const int64_t tp : {1, 2, 4}) {
        CAPTURE(tp);
        const Strategy s = megatron_tp(tp, tp > 1, 4096);
        const double ranks = static_cast<double>(tp) * rank_flops(attention_linears(m, s, 4096));
        CHECK(ranks == doctest::Approx(4096 * model_projection_flops_per_token(m, s)).epsilon(1e-9));
      }
    }
  }

  TEST_CASE("repeated K/V: one K/V head per query head reaches the kernel; the projections stay grouped") {
    const ModelSpec m = store().model("llama3-8b");  // 32 query heads, 8 K/V heads of 128
    Strategy s = megatron_tp(1, false, 8192);
    s.framework = Framework::torchtitan;
    CHECK(attention_kv_heads_per_rank(m, s) == doctest::Approx(8));
    const AttentionLinears grouped = attention_linears(m, s, 8192);
    s.kv_repeated = true;
    CHECK(attention_kv_heads_per_rank(m, s) == doctest::Approx(32));
    CHECK(attention_linears(m, s, 8192).in[0].n == grouped.in[0].n);  // the K/V projections are not repeated
    // TP beyond the K/V heads: Megatron keeps one per rank; repeated, each rank has its query heads' worth.
    s.tp = 16;
    CHECK(attention_kv_heads_per_rank(m, s) == doctest::Approx(2));
    s.kv_repeated = false;
    CHECK(attention_kv_heads_per_rank(m, s) == doctest::Approx(1));
  }

  TEST_CASE("repeated K/V: SDPA saves the copies (a·T·2·(q − kv) more per block) and context parallelism moves them") {
    const ModelSpec m = store().model("llama3-8b");
    Strategy s = megatron_tp(1, false, 8192);
    s.framework = Framework::torchtitan;
    s.recompute = Recompute::none;
    const FrameworkTraits fw = framework_traits(s.framework);
    const double grouped = block_activation_bytes(m, s, fw);
    s.kv_repeated = true;
    const double repeated = block_activation_bytes(m, s, fw);
    CHECK(repeated - grouped == doctest::Approx(2.0 * 8192 * 2 * (4096 - 1024)));  // bf16 K and V, q-wide
    // CP's K/V: the local share of a sequence at every query head, 4× the grouped one here.
    s.cp = 4;
    s.seq = 32768;
    const double kv_repeated = cp_local_kv_bytes(m, s);
    s.kv_repeated = false;
    CHECK(kv_repeated == doctest::Approx(4 * cp_local_kv_bytes(m, s)));
    CHECK(cp_local_kv_bytes(m, s) == doctest::Approx(2.0 * 8192 * 1024 * 2));  // K and V of 8192 tokens
  }

  TEST_CASE("--attention-kv: echoed in the JSON config, slower under CP when repeated, bad values refused") {
    const std::string base = "predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework torchtitan --cp 4 "
                             "--seq 131072 --recompute full --format json";
    const auto grouped = test::run_cli(base);
    const auto repeated = test::run_cli(base + " --attention-kv repeated");
    REQUIRE(grouped.exit_code == 0);
    REQUIRE(repeated.exit_code == 0);
    const auto jg = nlohmann::json::parse(grouped.out), jr = nlohmann::json::parse(repeated.out);
    CHECK(jg["config"]["attention_kv"] == "grouped");
    CHECK(jr["config"]["attention_kv"] == "repeated");
    CHECK(jr["time"]["step_s"].get<double>() > jg["time"]["step_s"].get<double>());
    CHECK(jr["memory"]["peak_bytes"].get<double>() > jg["memory"]["peak_bytes"].get<double>());
    test::check_refused("predict --preset 8b --gpus 8 --attention-kv tiled", "--attention-kv");
  }
}
