// config.json: the model for transformers' AutoConfig, so that MODEL can be the emit folder. The --hf-config file
// itself when one was given; else written from the preset when its architecture is one transformers class without
// guessing (model_family). Field names as each config class spells them (transformers 5: configuration_llama.py,
// configuration_qwen2.py, configuration_qwen3.py, configuration_mixtral.py, configuration_qwen3_moe.py,
// configuration_deepseek_v3.py, configuration_gpt_oss.py); io/hf_config*.cpp reads them back into the same counts
// (tests/test_emit.cpp checks every MoE preset that way).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/emit_launch.hpp"
#include "io/input_file.hpp"
#include "planner/error.hpp"
#include "planner/moe.hpp"

namespace shardplan::cli {

namespace {

bool every_layer_moe(const ModelSpec& m) {
  for (int64_t i = 0; i < m.layers; ++i)
    if (!layer_is_moe(m, i)) return false;
  return true;
}

// The MoE family from the experts' layout; unknown when no one class matches.
ModelFamily moe_family(const ModelSpec& m) {
  if (model_has_mla(m)) {
    // DeepseekV3: MoE from layer first_k_dense_replace on, every layer (no frequency), no window or Q/K norms.
    const bool moe_after_dense = m.moe_layer_freq == 1;
    return moe_after_dense && !m.qk_norm && m.sliding_window == 0 && !m.attention_sinks && !m.qkv_bias && !m.out_bias
               ? ModelFamily::deepseek_v3
               : ModelFamily::unknown;
  }
  if (m.mtp_layers > 0) return ModelFamily::unknown;
  if (m.attention_sinks)
    // GptOss: biases everywhere, a router bias, experts as wide as intermediate_size, MoE on every layer.
    return m.qkv_bias && m.out_bias && m.router_bias && m.shared_experts == 0 && m.expert_ffn_hidden == m.ffn_hidden &&
                   every_layer_moe(m) && !m.qk_norm
               ? ModelFamily::gpt_oss
               : ModelFamily::unknown;
  if (m.qkv_bias || m.out_bias || m.router_bias) return ModelFamily::unknown;
  if (m.shared_experts == 1 && !m.qk_norm && m.sliding_window == 0 && m.dense_layers == 0)
    return ModelFamily::llama4;  // Llama4TextMoe: one shared expert, MoE every interleave_moe_layer_step-th layer
  if (m.shared_experts > 0) return ModelFamily::unknown;
  if (m.qk_norm) {
    // Qwen3MoeSparseMoeBlock on layer i when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers:
    // with dense first layers that matches the planner's placement only at step 1.
    const bool placement = m.dense_layers == 0 || m.moe_layer_freq == 1;
    return placement && m.sliding_window == 0 ? ModelFamily::qwen3_moe : ModelFamily::unknown;
  }
  // MixtralSparseMoeBlock on every layer, experts of intermediate_size; a window (Mixtral's sliding_window) on all.
  return every_layer_moe(m) && m.expert_ffn_hidden == m.ffn_hidden && m.sliding_window_pattern == 1
             ? ModelFamily::mixtral
             : ModelFamily::unknown;
}

}  // namespace

ModelFamily model_family(const ModelSpec& m) {
  // Every family here: RMSNorm, a gated SiLU MLP, rotary positions, no dropout, two norms per block.
  if (m.norm != NormKind::rmsnorm || m.mlp != MlpKind::swiglu || m.position != PositionKind::rotary || m.dropout ||
      m.block_norms != 2)
    return ModelFamily::unknown;
  if (model_is_moe(m)) return moe_family(m);
  if (model_has_mla(m) || m.mtp_layers > 0 || m.sliding_window > 0 || m.attention_sinks) return ModelFamily::unknown;
  // Qwen3's Q/K norms are per head; OLMo 2's span the whole projections (model.hpp qk_norm_full_width): no family.
  if (m.qk_norm) return m.qkv_bias || m.out_bias || m.qk_norm_full_width ? ModelFamily::unknown : ModelFamily::qwen3;
  if (m.out_bias) return ModelFamily::unknown;
  return m.qkv_bias ? ModelFamily::qwen2 : ModelFamily::llama;
}

const char* to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::llama: return "llama";
    case ModelFamily::qwen2: return "qwen2";
    case ModelFamily::qwen3: return "qwen3";
    case ModelFamily::mixtral: return "mixtral";
    case ModelFamily::qwen3_moe: return "qwen3_moe";
    case ModelFamily::deepseek_v3: return "deepseek_v3";
    case ModelFamily::gpt_oss: return "gpt_oss";
    case ModelFamily::llama4: return "llama4";
    case ModelFamily::unknown: break;
  }
  return "";
}

namespace {

// The transformers class of each family a config.json is written for (Llama 4's is multimodal: not written).
const char* causal_lm_class(ModelFamily family) {
  switch (family) {
    case ModelFamily::llama: return "LlamaForCausalLM";
    case ModelFamily::qwen2: return "Qwen2ForCausalLM";
    case ModelFamily::qwen3: return "Qwen3ForCausalLM";
    case ModelFamily::mixtral: return "MixtralForCausalLM";
    case ModelFamily::qwen3_moe: return "Qwen3MoeForCausalLM";
    case ModelFamily::deepseek_v3: return "DeepseekV3ForCausalLM";
    case ModelFamily::gpt_oss: return "GptOssForCausalLM";
    case ModelFamily::llama4:
    case ModelFamily::unknown: break;
  }
  return nullptr;
}

// The keys every family shares (LlamaConfig's names), then each family's own.
nlohmann::ordered_json family_config(const ModelSpec& m, ModelFamily family) {
  nlohmann::ordered_json c = {{"architectures", {causal_lm_class(family)}},
                              {"model_type", to_string(family)},
                              {"hidden_size", m.hidden},
                              {"intermediate_size", m.ffn_hidden},
                              {"num_hidden_layers", m.layers},
                              {"num_attention_heads", m.heads},
                              {"num_key_value_heads", m.kv_heads},
                              {"vocab_size", m.vocab},
                              {"max_position_embeddings", m.seq},
                              {"hidden_act", "silu"},
                              {"rms_norm_eps", m.norm_eps},
                              {"rope_theta", m.rotary_base},
                              {"tie_word_embeddings", m.tied_embeddings}};
  if (family != ModelFamily::deepseek_v3) c["head_dim"] = model_head_dim(m);
  switch (family) {
    case ModelFamily::llama:
      c["attention_bias"] = false, c["mlp_bias"] = false;
      break;
    case ModelFamily::qwen3:
      c["attention_bias"] = false;
      break;
    case ModelFamily::mixtral:
      c["num_local_experts"] = m.experts;
      c["num_experts_per_tok"] = m.experts_per_token;
      c["sliding_window"] = m.sliding_window > 0 ? nlohmann::ordered_json(m.sliding_window) : nullptr;
      break;
    case ModelFamily::qwen3_moe: {
      c["attention_bias"] = false;
      c["num_experts"] = m.experts;
      c["num_experts_per_tok"] = m.experts_per_token;
      c["moe_intermediate_size"] = m.expert_ffn_hidden;
      c["decoder_sparse_step"] = m.moe_layer_freq;
      nlohmann::ordered_json dense = nlohmann::ordered_json::array();
      for (int64_t i = 0; i < m.dense_layers; ++i) dense.push_back(i);
      c["mlp_only_layers"] = dense;
      break;
    }
    case ModelFamily::deepseek_v3:
      c["n_routed_experts"] = m.experts;
      c["n_shared_experts"] = m.shared_experts;
      c["num_experts_per_tok"] = m.experts_per_token;
      c["moe_intermediate_size"] = m.expert_ffn_hidden;
      c["first_k_dense_replace"] = m.dense_layers;
      c["topk_method"] = m.router_bias ? "noaux_tc" : "greedy";
      // Group-limited routing (n_group, topk_group) changes which experts, not how many: one group, so that any
      // expert count is valid (DeepseekV3TopkRouter splits the experts into n_group groups).
      c["n_group"] = 1, c["topk_group"] = 1;
      c["q_lora_rank"] = m.q_lora_rank > 0 ? nlohmann::ordered_json(m.q_lora_rank) : nullptr;
      c["kv_lora_rank"] = m.kv_lora_rank;
      c["qk_rope_head_dim"] = m.qk_rope_head_dim;
      c["qk_nope_head_dim"] = m.qk_nope_head_dim;
      c["v_head_dim"] = m.v_head_dim;
      c["num_nextn_predict_layers"] = m.mtp_layers;
      break;
    case ModelFamily::gpt_oss: {
      c["num_local_experts"] = m.experts;
      c["num_experts_per_tok"] = m.experts_per_token;
      c["attention_bias"] = true;
      c["sliding_window"] = m.sliding_window;
      nlohmann::ordered_json types = nlohmann::ordered_json::array();
      const int64_t period = std::max<int64_t>(m.sliding_window_pattern, 1);
      for (int64_t i = 0; i < m.layers; ++i)
        types.push_back(period > 1 && (i + 1) % period == 0 ? "full_attention" : "sliding_attention");
      c["layer_types"] = types;
      break;
    }
    case ModelFamily::qwen2:
    case ModelFamily::llama4:
    case ModelFamily::unknown: break;
  }
  return c;
}

}  // namespace

bool emits_model_config(const LaunchPlan& plan) {
  return plan.hf.has_value() || causal_lm_class(model_family(plan.prediction.model)) != nullptr;
}

std::optional<EmittedFile> emit_model_config(const LaunchPlan& plan) {
  if (plan.hf) {
    // The file given, as given: AutoConfig.from_pretrained(folder) looks for folder/config.json, and
    // `--hf-config dir/x.json` has no such file beside it.
    std::string text;
    const std::string why = io::read_file_bounded(plan.hf->source_path, text, std::size_t{64} << 20);
    if (!why.empty()) throw InputError(fmt::format("--hf-config {}: {}", plan.hf->source_path, why));
    return EmittedFile{"config.json", text, false, {}};
  }
  const ModelSpec& m = plan.prediction.model;
  const ModelFamily family = model_family(m);
  const char* cls = causal_lm_class(family);
  if (cls == nullptr) return std::nullopt;
  EmittedFile file{"config.json", family_config(m, family).dump(2) + "\n", false, {}};
  file.notes.push_back(fmt::format("written from the {} preset as a {} config; the weights are random (train from "
                                   "scratch or point MODEL at a checkpoint)", m.name, cls));
  if (m.mtp_layers > 0)
    file.notes.push_back(fmt::format("transformers' {} does not build the {} multi-token-prediction module(s) that "
                                     "num_nextn_predict_layers names: train_fsdp2.py trains the main model only",
                                     cls, m.mtp_layers));
  return file;
}

}  // namespace shardplan::cli
