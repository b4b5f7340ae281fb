// `--hf-config` for the mixture-of-experts families and the newer dense ones (issue 17, item 4). Each reader names
// the transformers class whose parameters it counts; what the planner cannot represent is an error or a note, never
// silently dropped (sliding windows above all).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "io/hf_config_families.hpp"
#include "planner/error.hpp"

namespace shardplan {

namespace {

using hf::describe;
using hf::Fields;
using hf::json;

// The sliding window of models that use it on every layer (Mistral-7B-v0.1 sliding_window 4096, Phi-3 2047;
// MistralAttention / Phi3Attention pass it to the kernel). Qwen2/Qwen3 declare a window that only applies with
// use_sliding_window (Qwen2Config), and then only from max_window_layers on: refused, not approximated.
void read_uniform_window(const Fields& f, HfModel& out) {
  if (f.has("use_sliding_window")) {
    if (f.boolean_or("use_sliding_window", false))
      throw InputError(fmt::format("{}: 'use_sliding_window' is true: Qwen's window applies from layer "
                                   "max_window_layers on, which shardplan does not model; describe the model with "
                                   "--model FILE.yaml (sliding_window, sliding_window_pattern) instead",
                                   f.origin()));
    return;  // the window is declared but unused
  }
  if (!f.has("sliding_window")) return;
  out.spec.sliding_window = f.integer({"sliding_window"});
  out.notes.push_back(fmt::format("sliding_window {} on every layer", out.spec.sliding_window));
}

// GPT-OSS layer_types (and Gemma-style configs): a list of "sliding_attention" / "full_attention" per layer. The
// planner represents a periodic pattern whose last layer is global (sliding_window_pattern N); anything else is
// refused with the layer that breaks it.
int64_t window_pattern_from_layer_types(const Fields& f, int64_t layers) {
  const json& types = f.raw().at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
    throw InputError(fmt::format("{}: 'layer_types' must list one entry per layer ({}), got {}", f.origin(), layers,
                                 describe(types)));
  int64_t period = 0;
  for (int64_t i = 0; i < layers; ++i) {
    const json& t = types.at(static_cast<size_t>(i));
    if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
      throw InputError(fmt::format("{}: 'layer_types[{}]' must be \"sliding_attention\" or \"full_attention\", got {}",
                                   f.origin(), i, describe(t)));
    if (period == 0 && t == "full_attention") period = i + 1;
  }
  if (period == 0) return 1;  // every layer windowed
  for (int64_t i = 0; i < layers; ++i) {
    const bool global = (i + 1) % period == 0;
    if ((types.at(static_cast<size_t>(i)) == "full_attention") != global)
      throw InputError(fmt::format("{}: 'layer_types[{}]' breaks the pattern of one full-attention layer every {}; "
                                   "shardplan models only that pattern — describe the model with --model FILE.yaml",
                                   f.origin(), i, period));
  }
  return period;
}

// A count that may be 0 (first_k_dense_replace, num_nextn_predict_layers); absent or null = 0.
int64_t non_negative(const Fields& f, const char* key) {
  if (!f.has(key)) return 0;
  const json& v = f.raw().at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 20))
    throw InputError(fmt::format("{}: '{}' must be a non-negative integer, got {}", f.origin(), key, describe(v)));
  return v.get<int64_t>();
}

// Mixtral (MixtralSparseMoeBlock): Mistral's attention, num_local_experts SwiGLU experts of intermediate_size, a
// bias-free gate of hidden × experts, top num_experts_per_tok.
void read_mixtral(const Fields& f, HfModel& out) {
  read_llama_like(f, out);
  ModelSpec& m = out.spec;
  m.experts = f.integer({"num_local_experts"});
  m.experts_per_token = f.integer({"num_experts_per_tok"});
  m.expert_ffn_hidden = m.ffn_hidden;
}

// Qwen3 (dense) and Qwen3-MoE: Llama's layout plus q_norm/k_norm over head_dim (Qwen3Attention), no biases unless
// attention_bias. Qwen3MoeSparseMoeBlock: num_experts of moe_intermediate_size, top num_experts_per_tok, no shared
// expert; layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers.
void read_qwen3(const Fields& f, HfModel& out, bool moe) {
  read_llama_like(f, out);
  ModelSpec& m = out.spec;
  if (m.head_dim == 0) m.head_dim = f.integer_or({"head_dim"}, 0);
  m.qk_norm = true;
  if (!moe) return;
  m.experts = f.integer({"num_experts"});
  m.experts_per_token = f.integer({"num_experts_per_tok"});
  m.expert_ffn_hidden = f.integer({"moe_intermediate_size"});
  m.moe_layer_freq = f.integer_or({"decoder_sparse_step"}, 1);
  if (f.has("mlp_only_layers")) {
    const json& dense = f.raw().at("mlp_only_layers");
    if (!dense.is_array())
      throw InputError(fmt::format("{}: 'mlp_only_layers' must be a list of layer indices, got {}", f.origin(),
                                   describe(dense)));
    // The planner's dense layers are the first N: accept 0, 1, …, N−1 only.
    for (size_t i = 0; i < dense.size(); ++i)
      if (!dense.at(i).is_number_integer() || dense.at(i).get<int64_t>() != static_cast<int64_t>(i))
        throw InputError(fmt::format("{}: 'mlp_only_layers' {} is not a run of first layers (0, 1, …); shardplan's "
                                     "dense_layers are the first N — describe the model with --model FILE.yaml",
                                     f.origin(), describe(dense)));
    m.dense_layers = static_cast<int64_t>(dense.size());
  }
}

// DeepSeek-V2/V3 (DeepseekV3Attention: MLA; DeepseekV3MoE: n_routed_experts of moe_intermediate_size, n_shared_experts
// as one MLP, a gate with e_score_correction_bias when topk_method is noaux_tc; first_k_dense_replace dense layers of
// intermediate_size; num_nextn_predict_layers MTP modules, DeepSeek-V3 report §2.2).
void read_deepseek(const Fields& f, HfModel& out) {
  read_llama_like(f, out);
  ModelSpec& m = out.spec;
  m.kv_heads = m.heads;  // MLA: every head has its own key and value
  m.head_dim = 0;
  m.experts = f.integer({"n_routed_experts"});
  m.experts_per_token = f.integer({"num_experts_per_tok"});
  m.shared_experts = f.integer_or({"n_shared_experts"}, 0);
  m.expert_ffn_hidden = f.integer({"moe_intermediate_size"});
  m.dense_layers = non_negative(f, "first_k_dense_replace");
  if (m.dense_layers >= m.layers)
    throw InputError(fmt::format("{}: 'first_k_dense_replace' must be between 0 and num_hidden_layers − 1, got {}",
                                 f.origin(), m.dense_layers));
  m.moe_layer_freq = f.integer_or({"moe_layer_freq"}, 1);
  if (m.moe_layer_freq > 1)
    out.notes.push_back("moe_layer_freq > 1: DeepSeek's MoE layers are those with i % freq == 0; counted the same, "
                        "placed one layer later (planner/moe.cpp)");
  m.router_bias = f.string_or("topk_method", "greedy") == "noaux_tc";
  m.q_lora_rank = f.integer_or({"q_lora_rank"}, 0);  // null in DeepSeek-V2-Lite: queries projected directly
  m.kv_lora_rank = f.integer({"kv_lora_rank"});
  m.qk_rope_head_dim = f.integer({"qk_rope_head_dim"});
  m.qk_nope_head_dim = f.integer({"qk_nope_head_dim"});
  m.v_head_dim = f.integer({"v_head_dim"});
  m.mtp_layers = non_negative(f, "num_nextn_predict_layers");
}

// GPT-OSS (GptOssAttention: q/k/v/o with biases, sinks per head; GptOssMLP: a router with bias, num_local_experts
// experts whose gate_up_proj (h × 2f) and down_proj (f × h) carry biases; layer_types sliding/full).
void read_gpt_oss(const Fields& f, HfModel& out) {
  read_llama_like(f, out);
  ModelSpec& m = out.spec;
  m.experts = f.integer({"num_local_experts"});
  m.experts_per_token = f.integer({"num_experts_per_tok", "experts_per_token"});
  m.expert_ffn_hidden = m.ffn_hidden;
  m.qkv_bias = f.boolean_or("attention_bias", true);
  m.out_bias = true;  // the experts' biases (always present) and o_proj's (with attention_bias)
  if (!m.qkv_bias) out.notes.push_back("attention_bias false: an o_proj bias (hidden per layer) is still counted");
  m.router_bias = true;
  m.attention_sinks = true;
  if (m.sliding_window > 0 && f.has("layer_types")) {
    m.sliding_window_pattern = window_pattern_from_layer_types(f, m.layers);
    out.notes.back() =  // replaces read_llama_like's last note, "sliding_window N on every layer"
        fmt::format("sliding_window {} on {} of every {} layers", m.sliding_window,
                                   m.sliding_window_pattern - 1, m.sliding_window_pattern);
  }
}

// Llama 4 (Llama4TextMoe: num_local_experts of intermediate_size, top num_experts_per_tok, one shared expert of the
// same width, a bias-free router; dense layers Llama4TextMLP of intermediate_size_mlp; MoE every
// interleave_moe_layer_step-th layer; use_qk_norm is a weightless L2 norm). The multimodal config keeps these under
// text_config; the vision encoder is not planned.
void read_llama4(const Fields& f, HfModel& out) {
  read_llama_like(f, out);
  ModelSpec& m = out.spec;
  m.ffn_hidden = f.integer({"intermediate_size_mlp"});
  m.experts = f.integer({"num_local_experts"});
  m.experts_per_token = f.integer({"num_experts_per_tok"});
  m.shared_experts = 1;
  m.expert_ffn_hidden = f.integer({"intermediate_size"});
  m.moe_layer_freq = f.integer_or({"interleave_moe_layer_step"}, 1);
  if (f.has("attention_chunk_size")) {
    const int64_t chunk = f.integer({"attention_chunk_size"});
    // Chunked attention (each token sees its own chunk) on the RoPE layers: exact as full causal attention up to
    // one chunk; beyond it the attention work is over-counted. Said, not hidden.
    out.notes.push_back(fmt::format("attention_chunk_size {}: chunked attention is costed as full causal attention "
                                    "(exact up to --seq {})", chunk, chunk));
  }
}

// Gemma 2 and 3 (Gemma2DecoderLayer / Gemma3DecoderLayer): four RMSNorms per layer (input, post-attention,
// pre- and post-feedforward), GeGLU, tied embeddings, an explicit head_dim; Gemma 3 adds q_norm/k_norm. Windows:
// Gemma 2 alternates from a windowed layer 0 (is_sliding = not layer_idx % 2), Gemma 3 makes every
// sliding_window_pattern-th layer global (is_sliding = (layer_idx + 1) % pattern != 0); newer configs spell the same
// as layer_types.
void read_gemma2_3(const Fields& f, HfModel& out) {
  read_llama_like(f, out);
  ModelSpec& m = out.spec;
  m.block_norms = 4;
  const bool gemma3 = out.family == "gemma3";
  m.qk_norm = gemma3;
  if (m.sliding_window <= 0) return;
  if (f.has("layer_types")) m.sliding_window_pattern = window_pattern_from_layer_types(f, m.layers);
  else m.sliding_window_pattern = gemma3 ? f.integer_or({"sliding_window_pattern"}, 6) : 2;
  out.notes.back() =  // replaces read_llama_like's last note, "sliding_window N on every layer"
      fmt::format("sliding_window {} on {} of every {} layers", m.sliding_window, m.sliding_window_pattern - 1,
                  m.sliding_window_pattern);
}

// OLMo 2: Llama's layout with the norms after attention and MLP (post_attention_layernorm,
// post_feedforward_layernorm: two per block all the same) and RMSNorms over the whole query and key projections
// (transformers models/olmo2/modeling_olmo2.py Olmo2Attention: q_norm of num_attention_heads × head_dim, k_norm of
// num_key_value_heads × head_dim).
void read_olmo2(const Fields& f, HfModel& out) {
  read_llama_like(f, out);
  out.spec.qk_norm = out.spec.qk_norm_full_width = true;
}

constexpr const char* kMoeFileFamilies[] = {"mixtral", "qwen3",  "qwen3_moe", "deepseek_v2", "deepseek_v3",
                                            "gpt_oss", "llama4", "phi3",      "gemma2",      "gemma3", "olmo2"};

}  // namespace

void read_sliding_window(const Fields& f, HfModel& out) { read_uniform_window(f, out); }

bool is_moe_file_family(const std::string& family) {
  for (const char* name : kMoeFileFamilies)
    if (family == name) return true;
  return false;
}

void read_moe_file_family(const Fields& f, HfModel& out) {
  const std::string& family = out.family;
  if (family == "mixtral") read_mixtral(f, out);
  else if (family == "qwen3") read_qwen3(f, out, false);
  else if (family == "qwen3_moe") read_qwen3(f, out, true);
  else if (family == "deepseek_v2" || family == "deepseek_v3") read_deepseek(f, out);
  else if (family == "gpt_oss") read_gpt_oss(f, out);
  else if (family == "llama4") read_llama4(f, out);
  else if (family == "gemma2" || family == "gemma3") read_gemma2_3(f, out);
  else if (family == "olmo2") read_olmo2(f, out);
  else read_llama_like(f, out);  // phi3: fused qkv_proj and gate_up_proj hold Llama's matrices; its window read there
}

}  // namespace shardplan
