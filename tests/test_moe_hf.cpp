// `--hf-config` for the MoE families and the newer dense ones (issue 17, item 4): each family's config.json, as
// published (fields abridged to those that size the model), gives the preset's counts; windows are never dropped.
#include <doctest/doctest.h>

#include <string>

#include "io/hf_config.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/moe.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}
void same_counts(const std::string& json, const char* preset) {
  CAPTURE(preset);
  const ModelSpec hf = parse_hf_config(json, "config.json", "x").spec;
  const ModelSpec p = store().model(preset);
  const ParamCounts a = count_params(hf), b = count_params(p);
  CHECK(a.total == b.total);
  CHECK(a.active == b.active);
  CHECK(a.mtp == b.mtp);
  CHECK(hf.sliding_window == p.sliding_window);
  CHECK(hf.sliding_window_pattern == p.sliding_window_pattern);
}
std::string error_of(const std::string& json) {
  try {
    parse_hf_config(json, "config.json", "x");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// mistralai/Mixtral-8x7B-v0.1 config.json.
const char* kMixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
  "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "vocab_size": 32000})";
// deepseek-ai/DeepSeek-V3 config.json.
const char* kDeepSeekV3 = R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
  "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid", "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "v_head_dim": 128, "vocab_size": 129280})";
// moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2 with DeepseekV3Config's fields).
const char* kKimiK2 = R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
  "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 131072, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
  "n_group": 1, "n_routed_experts": 384, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 64,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "routed_scaling_factor": 2.827,
  "scoring_func": "sigmoid", "tie_word_embeddings": false, "topk_group": 1, "topk_method": "noaux_tc",
  "v_head_dim": 128, "vocab_size": 163840})";
// Qwen/Qwen3-30B-A3B config.json.
const char* kQwen3Moe = R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
  "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
  "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
  "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "sliding_window": null,
  "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936})";
// openai/gpt-oss-20b config.json (layer_types: 24 entries alternating from sliding).
std::string gpt_oss_20b(const std::string& last_type = "full_attention") {
  std::string types;
  for (int i = 0; i < 24; ++i) types += std::string(i ? ", " : "") + (i % 2 ? "\"full_attention\"" : "\"sliding_attention\"");
  if (last_type != "full_attention") types = types.substr(0, types.rfind(", ")) + ", \"" + last_type + "\"";
  return R"({"architectures": ["GptOssForCausalLM"], "attention_bias": true, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "intermediate_size": 2880, "layer_types": [)" + types + R"(], "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "num_local_experts": 32, "sliding_window": 128, "tie_word_embeddings": false,
    "vocab_size": 201088})";
}
// meta-llama/Llama-4-Scout-17B-16E config.json (text_config; vision_config left out).
const char* kScout = R"({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
  "text_config": {"attention_chunk_size": 8192, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
  "interleave_moe_layer_step": 1, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
  "max_position_embeddings": 10485760, "model_type": "llama4_text", "num_attention_heads": 40,
  "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
  "tie_word_embeddings": false, "use_qk_norm": true, "vocab_size": 202048}, "tie_word_embeddings": false})";
}  // namespace

TEST_SUITE("moe hf config") {
  TEST_CASE("Mixtral, DeepSeek-V3, Kimi K2, Qwen3-MoE, GPT-OSS and Llama 4 configs give their presets' counts") {
    same_counts(kMixtral, "mixtral-8x7b");
    same_counts(kDeepSeekV3, "deepseek-v3");
    same_counts(kKimiK2, "kimi-k2");  // model_type kimi_k2 read as DeepSeek-V3's fields
    // Kimi K2.5 (moonshotai/Kimi-K2.5 config.json, vision_config left out): K2's language model under text_config.
    const std::string k25 = std::string(R"({"architectures": ["KimiK25ForConditionalGeneration"], )") +
                            R"("model_type": "kimi_k25", "text_config": )" + kKimiK2 + "}";
    same_counts(k25, "kimi-k2");
    CHECK(parse_hf_config(k25, "config.json", "x").spec.description.find("vision tower is not") != std::string::npos);
    same_counts(kQwen3Moe, "qwen3-30b-a3b");
    same_counts(gpt_oss_20b(), "gpt-oss-20b");
    same_counts(kScout, "llama4-scout");
    CHECK(count_params(parse_hf_config(kMixtral, "config.json", "x").spec).total == 46'702'792'704);
    const HfModel scout = parse_hf_config(kScout, "config.json", "x");
    bool chunk_noted = false;
    for (const std::string& n : scout.notes) chunk_noted |= n.find("attention_chunk_size 8192") != std::string::npos;
    CHECK(chunk_noted);
  }

  TEST_CASE("sliding windows are read, never dropped: Mistral v0.1, Phi-3, GPT-OSS layer_types, Qwen's flag") {
    const std::string mistral = R"({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": 4096,
      "vocab_size": 32000})";
    CHECK(parse_hf_config(mistral, "config.json", "x").spec.sliding_window == 4096);
    const std::string phi3 = R"({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "sliding_window": 2047,
      "vocab_size": 32064})";
    CHECK(parse_hf_config(phi3, "config.json", "x").spec.sliding_window == 2047);
    // Phi-3-mini: 32 × (4·3072² + 3·3072·8192 + 2·3072) + 2·32064·3072 + 3072 = 3,821,079,552 (the card's 3.8B).
    CHECK(count_params(parse_hf_config(phi3, "config.json", "x").spec).total == 3'821'079'552);
    const std::string broken = gpt_oss_20b("sliding_attention");
    CHECK(error_of(broken).find("layer_types[23]") != std::string::npos);
    std::string qwen = kQwen3Moe;
    qwen.replace(qwen.find("\"use_sliding_window\": false"), 27, "\"use_sliding_window\": true");
    CHECK(error_of(qwen).find("use_sliding_window") != std::string::npos);
  }

  TEST_CASE("Gemma 2 and 3: four norms per layer, windows alternating or every sixth layer global") {
    // google/gemma-2-9b: 42 × (q 3584·4096 + k, v 3584·2048 + o 4096·3584 + 3·3584·14336 + 4·3584)
    // + 256000·3584 (tied) + 3584 = 9,241,705,984 (the safetensors total).
    const std::string g2 = R"({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "head_dim": 256,
      "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
      "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
      "sliding_window": 4096, "vocab_size": 256000})";
    const ModelSpec m2 = parse_hf_config(g2, "config.json", "x").spec;
    CHECK(count_params(m2).total == 9'241'705'984);
    CHECK(windowed_layers(m2) == 21);
    // google/gemma-3-1b-pt (gemma3_text): 26 × (2,949,120 attention + 512 Q/K norms + 3·1152·6912 + 4·1152)
    // + 262144·1152 + 1152 = 999,885,952.
    const std::string g3 = R"({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "head_dim": 256,
      "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768, "num_attention_heads": 4,
      "num_hidden_layers": 26, "num_key_value_heads": 1, "sliding_window": 512, "sliding_window_pattern": 6,
      "vocab_size": 262144})";
    const ModelSpec m3 = parse_hf_config(g3, "config.json", "x").spec;
    CHECK(count_params(m3).total == 999'885'952);
    CHECK(windowed_layers(m3) == 22);  // global layers 5, 11, 17, 23
  }

  TEST_CASE("bad MoE fields name the field") {
    std::string ds = kDeepSeekV3;
    ds.replace(ds.find("\"first_k_dense_replace\": 3"), 26, "\"first_k_dense_replace\": -1");
    CHECK(error_of(ds).find("first_k_dense_replace") != std::string::npos);
    std::string mix = kMixtral;
    mix.replace(mix.find("\"num_experts_per_tok\": 2"), 24, "\"num_experts_per_tok\": 9");
    CHECK(error_of(mix).find("experts_per_token") != std::string::npos);
    std::string q = kQwen3Moe;
    q.replace(q.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [5]");
    CHECK(error_of(q).find("mlp_only_layers") != std::string::npos);
  }
}
