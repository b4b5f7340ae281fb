// Mixture-of-experts, MLA, MTP and sliding-window models (issue 17, item 1): parameter counts against published
// totals, active parameters, FLOPs per token, and the model-YAML keys.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/flops.hpp"
#include "planner/moe.hpp"
#include "planner/partition.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}
ParamCounts counts(const char* name) { return count_params(store().model(name)); }

// A Mixtral-shaped model YAML with `extra` lines appended.
std::string moe_yaml(const std::string& extra) {
  return "name: m\nlayers: 4\nhidden: 256\nheads: 4\nkv_heads: 2\nffn_hidden: 512\nvocab: 1000\nseq: 128\n"
         "mlp: swiglu\nnorm: rmsnorm\ntied_embeddings: false\n" + extra;
}
}  // namespace

TEST_SUITE("moe params") {
  TEST_CASE("Mixtral 8x7B: 46,702,792,704 total (safetensors index), 12.9B active (Jiang et al. 2024 §2)") {
    const ParamCounts p = counts("mixtral-8x7b");
    // Per layer: attention 2·4096² + 2·4096·1024 = 41,943,040; 8 experts × 3·4096·14336 = 1,409,286,144; router
    // 8·4096 = 32,768; norms 8192 → 1,451,270,144; × 32 = 46,440,644,608; + 2 × 32000·4096 + 4096.
    CHECK(p.block.total() == 1'451'270'144);
    CHECK(p.total == 46'702'792'704);
    // Active: less 32 layers × 6 idle experts × 176,160,768 = 33,822,867,456.
    CHECK(p.active == 12'879'925'248);
    CHECK(static_cast<double>(p.active) == doctest::Approx(12.9e9).epsilon(0.004));
    CHECK(p.mtp == 0);
  }

  TEST_CASE("DeepSeek-V3: 671B main model, 37B active (report §1), MTP module (§2.2)") {
    const ModelSpec m = store().model("deepseek-v3");
    const ParamCounts p = count_params(m);
    // MLA per layer: q_a 7168·1536 + norm 1536 + q_b 1536·128·192 + kv_a 7168·576 + norm 512 + kv_b 512·128·256
    // + o 128·128·7168 = 11,010,048 + 1536 + 37,748,736 + 4,128,768 + 512 + 16,777,216 + 117,440,512.
    CHECK(p.block.attn_weights + p.block.attn_extra == 187'107'328);
    // MoE MLP: 257 experts × 3·7168·2048 (44,040,192) + router 256·7168 + correction bias 256.
    CHECK(p.block.experts + p.block.shared_experts + p.block.router == 11'320'164'608);
    CHECK(p.moe_layers == 58);
    CHECK(p.dense_block.total() == 583'483'392);  // 187,107,328 + 3·7168·18432 + 2·7168
    CHECK(p.total == 671'026'419'200);             // "671B total parameters"
    CHECK(static_cast<double>(p.total) == doctest::Approx(671e9).epsilon(0.0001));
    // Active: 58 layers × 248 idle experts × 44,040,192 less: 37.55 B, published "37B activated".
    CHECK(p.active == 37'552'297'472);
    CHECK(p.active > 37e9);
    CHECK(p.active < 38e9);
    // MTP: eh_proj 2·7168² + 3 norms + one MoE block = 102,760,448 + 21,504 + 11,507,286,272. The checkpoint's
    // layer 61 also stores copies of the embedding and head (2 × 926,679,040): 13.46 B, the README's "14B".
    CHECK(p.mtp == 11'610'068'224);
    CHECK(static_cast<double>(p.mtp + 2 * p.embedding) == doctest::Approx(13.46e9).epsilon(0.001));
  }

  TEST_CASE("Kimi K2: DeepSeek-V3's blocks at 64 heads and 384 experts, 1 dense layer, no MTP (model card: 1T, 32B)") {
    const ParamCounts p = counts("kimi-k2");
    // MLA at 64 heads: q_a 7168·1536 + norm 1536 + q_b 1536·64·192 + kv_a 7168·576 + norm 512 + kv_b 512·64·256
    // + o 64·128·7168 = 11,010,048 + 1536 + 18,874,368 + 4,128,768 + 512 + 8,388,608 + 58,720,256.
    CHECK(p.block.attn_weights + p.block.attn_extra == 101'124'096);
    // 385 experts × 3·7168·2048 (44,040,192) + router 384·7168 + correction bias 384.
    CHECK(p.block.experts + p.block.shared_experts + p.block.router == 16'958'226'816);
    CHECK(p.moe_layers == 60);
    CHECK(p.dense_block.total() == 497'500'160);  // 101,124,096 + 3·7168·18432 + 2·7168
    // 60 × 17,059,365,248 + 497,500,160 + embedding and head 2 × 163840·7168 + final norm 7168.
    CHECK(p.total == 1'026'408'232'448);
    CHECK(static_cast<double>(p.total) == doctest::Approx(1e12).epsilon(0.03));  // the card's "1T"
    // Active: less 60 layers × 376 idle experts × 44,040,192: 32.86 B, the card's "32B activated".
    CHECK(p.active == 32'861'500'928);
    CHECK(static_cast<double>(p.active) == doctest::Approx(32e9).epsilon(0.03));
    CHECK(p.mtp == 0);
  }

  TEST_CASE("Qwen3 MoE: 30.5B / 3.3B and 235B / 22B (model cards), Q/K norms counted") {
    const ParamCounts small = counts("qwen3-30b-a3b");
    CHECK(small.total == 30'532'122'624);
    CHECK(small.total - small.embedding - small.lm_head == 29'909'792'768);  // "29.9B non-embedding"
    CHECK(static_cast<double>(small.active) == doctest::Approx(3.3e9).epsilon(0.02));
    CHECK(small.block.attn_extra == 2 * 128);  // q_norm and k_norm over head_dim
    const ParamCounts big = counts("qwen3-235b-a22b");
    CHECK(big.total == 235'093'634'560);
    CHECK(static_cast<double>(big.active) == doctest::Approx(22e9).epsilon(0.01));
  }

  TEST_CASE("GPT-OSS: biases, sinks and router bias give the model card's Table 1 (20.91B/3.61B, 116.83B/5.13B)") {
    const ModelSpec m20 = store().model("gpt-oss-20b");
    const ParamCounts p20 = count_params(m20);
    // Attention: q 2880·4096 + 4096, k and v 2880·512 + 512 each, o 4096·2880 + 2880, sinks 64 = 26,550,144.
    CHECK(p20.block.attn_weights + p20.block.attn_biases_split + p20.block.attn_biases_replicated +
              p20.block.attn_extra == 26'550'144);
    // One expert: gate_up 2880·5760 + 5760, down 2880·2880 + 2880 = 24,891,840.
    CHECK(expert_params(m20) == 24'891'840);
    CHECK(p20.total == 20'914'757'184);
    // The card counts active parameters without the input embedding (a lookup): 3.61 B.
    CHECK(active_params_excluding_embedding(m20, p20) == 3'608'307'264);
    const ModelSpec m120 = store().model("gpt-oss-120b");
    const ParamCounts p120 = count_params(m120);
    CHECK(p120.total == 116'829'156'672);
    CHECK(static_cast<double>(p120.total) == doctest::Approx(116.83e9).epsilon(0.00005));
    CHECK(static_cast<double>(active_params_excluding_embedding(m120, p120)) == doctest::Approx(5.13e9).epsilon(0.001));
    // Alternating windows: 18 of the 36 layers attend within 128 tokens.
    CHECK(windowed_layers(m120) == 18);
  }

  TEST_CASE("Mixtral 8x22B, Llama 4 Scout and Maverick (language models)") {
    CHECK(counts("mixtral-8x22b").total == 140'630'071'296);  // "141B"
    CHECK(static_cast<double>(counts("mixtral-8x22b").active) == doctest::Approx(39e9).epsilon(0.005));
    const ParamCounts scout = counts("llama4-scout");
    CHECK(scout.total == 107'769'861'120);  // the published 109B adds the vision encoder
    CHECK(static_cast<double>(scout.active) == doctest::Approx(17e9).epsilon(0.015));  // "17B active"
    const ParamCounts maverick = counts("llama4-maverick");
    CHECK(maverick.moe_layers == 24);  // interleave_moe_layer_step 2
    CHECK(maverick.total == 400'711'848'960);  // "400B" with the vision encoder
    CHECK(static_cast<double>(maverick.active) == doctest::Approx(17e9).epsilon(0.015));
  }

  TEST_CASE("FLOPs per token: 6 × active matmul parameters plus attention (MLA widths, windows, router)") {
    Strategy s;
    s.seq = 4096;
    s.global_batch = 1;
    const ModelSpec mix = store().model("mixtral-8x7b");
    const StepFlops f = step_flops(mix, s);
    // Matmul weights one token uses: 32 × (41,943,040 + 2 × 176,160,768 + router 32,768) + head 131,072,000;
    // attention 32 layers × 2 (scores, values) × 2·4096·4096 per token forward.
    const double matmul = 32.0 * (41'943'040 + 2 * 176'160'768.0 + 32'768) + 131'072'000;
    const double attention = 32.0 * 2 * 2 * 4096.0 * 4096;
    CHECK(f.model_flops_per_token() == doctest::Approx(3 * (2 * matmul + attention)));
    // DeepSeek-V3: scores at 128 heads × 192, values at 128 × 128, full s.
    ModelSpec ds = store().model("deepseek-v3");
    ds.mtp_layers = 0;
    const StepFlops fd = step_flops(ds, s);
    double scores = 0, values = 0;
    for (const FlopsPart& p : fd.parts) {
      if (p.name == "attention scores q·kᵀ") scores = p.forward;
      if (p.name == "attention over values") values = p.forward;
    }
    CHECK(scores == doctest::Approx(61.0 * 4096 * 2 * 4096 * 128 * 192));
    CHECK(values == doctest::Approx(61.0 * 4096 * 2 * 4096 * 128 * 128));
    // GPT-OSS-20B at 4096 tokens: 12 windowed layers score 128 keys, 12 score 4096.
    const StepFlops fo = step_flops(store().model("gpt-oss-20b"), s);
    for (const FlopsPart& p : fo.parts)
      if (p.name == "attention scores q·kᵀ") CHECK(p.forward == doctest::Approx(4096.0 * 2 * 64 * 64 * (12 * 128 + 12 * 4096.0)));
    // The MTP module adds its projection, one block and the head for every token.
    const StepFlops with_mtp = step_flops(store().model("deepseek-v3"), s);
    CHECK(with_mtp.model_flops > fd.model_flops * 1.03);
  }

  TEST_CASE("TP and PP shards of an MoE model sum to the whole") {
    const ModelSpec m = store().model("deepseek-v3");
    const ParamCounts whole = count_params(m);
    Strategy s;
    s.tp = 1;
    s.pp = 4;
    s.gpus = 4;
    s.seq = 4096;
    int64_t sum = 0, moe = 0;
    for (const StageParams& st : partition_stages(m, s)) sum += st.total(), moe += st.moe_layers;
    CHECK(moe == 58);
    CHECK(sum == whole.total + whole.mtp);
    // 61 layers over 4 stages: 15, 15, 15, 16 (the extra on the last); the 3 dense ones all on stage 0.
    const std::vector<StageParams> stages = partition_stages(m, s);
    CHECK(stages[0].moe_layers == 12);
    CHECK(stages[3].moe_layers == 16);
    CHECK(stages[3].mtp == whole.mtp);
    // Maverick alternates: 6 MoE layers among each stage's 12.
    for (const StageParams& st : partition_stages(store().model("llama4-maverick"), s)) CHECK(st.moe_layers == 6);
    // TP 8: routed experts split by 8 (each an MLP), router and MLA down-projections whole.
    const int64_t per_rank = block_params_per_tp_rank(m, 8);
    const int64_t expected = 187'107'328 - (37'748'736 + 16'777'216 + 117'440'512) * 7 / 8 +
                             int64_t{257} * 44'040'192 / 8 + 256 * 7168 + 256 + 2 * 7168;
    CHECK(per_rank == expected);
  }

  TEST_CASE("model YAML: MoE keys read, bad ones refused naming the key") {
    const ModelSpec m = parse_model_yaml(moe_yaml("experts: 4\nexperts_per_token: 2\nexpert_ffn_hidden: 128\n"), "t.yaml");
    CHECK(m.experts == 4);
    CHECK(count_params(m).moe_layers == 4);
    auto refused = [](const std::string& text, const char* key) {
      try {
        parse_model_yaml(text, "t.yaml");
      } catch (const InputError& e) {
        const std::string what = e.what();
        return what.find("t.yaml") != std::string::npos && what.find(key) != std::string::npos;
      }
      return false;
    };
    CHECK(refused(moe_yaml("experts: 4\nexperts_per_token: 5\nexpert_ffn_hidden: 128\n"), "experts_per_token"));
    CHECK(refused(moe_yaml("experts_per_token: 2\n"), "experts_per_token"));
    CHECK(refused(moe_yaml("experts: 4\nexperts_per_token: 2\n"), "expert_ffn_hidden"));
    CHECK(refused(moe_yaml("experts: 4\nexperts_per_token: 2\nexpert_ffn_hidden: 8\ndense_layers: 4\n"), "dense_layers"));
    CHECK(refused(moe_yaml("kv_lora_rank: 64\n"), "qk_rope_head_dim"));
    CHECK(refused(moe_yaml("q_lora_rank: 64\n"), "q_lora_rank"));
    CHECK(refused(moe_yaml("sliding_window: -1\n"), "sliding_window"));
    CHECK(refused(moe_yaml("sliding_window_pattern: 2\n"), "sliding_window_pattern"));
    CHECK(refused(moe_yaml("num_experts: 8\n"), "num_experts"));  // unknown keys stay errors
  }

  TEST_CASE("CLI: presets show and predict print total and active parameters; bad MoE YAML exits 2") {
    using shardplan::test::run_cli;
    const auto shown = run_cli("presets show mixtral-8x7b");
    CHECK(shown.exit_code == 0);
    CHECK(shown.out.find("# parameters (computed): 46,702,792,704 total, 12,879,925,248 active") != std::string::npos);
    const auto json = run_cli("predict --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --format json");
    CHECK(json.exit_code == 0);
    CHECK(json.out.find("\"params\": 46702792704") != std::string::npos);
    CHECK(json.out.find("\"active_params\": 12879925248") != std::string::npos);
    const std::string path = std::filesystem::temp_directory_path() / "shardplan_bad_moe.yaml";
    std::ofstream(path) << moe_yaml("experts: 4\nexperts_per_token: 9\nexpert_ffn_hidden: 128\n");
    const auto bad = run_cli("predict --model " + path + " --gpus 8 --gpu h100-sxm");
    CHECK(shardplan::test::is_one_error_line(bad));
    CHECK(bad.err.find("experts_per_token") != std::string::npos);
    std::filesystem::remove(path);
  }
}
