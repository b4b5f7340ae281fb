#include "planner/moe.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "planner/error.hpp"

namespace shardplan {

namespace {

// A norm over `width` elements: RMSNorm a gain; LayerNorm a gain and (usually) a bias.
int64_t norm_of(const ModelSpec& m, int64_t width) {
  return width * (m.norm == NormKind::layernorm && m.norm_bias ? 2 : 1);
}

// One MLP of intermediate width f: GELU up and down, SwiGLU gate, up and down (h×f each); with out_bias, biases of
// f on each column-parallel matrix and h on the down projection.
struct MlpParams {
  int64_t weights = 0, biases_split = 0, biases_replicated = 0;
  int64_t total() const { return weights + biases_split + biases_replicated; }
};
MlpParams mlp_of(const ModelSpec& m, int64_t f) {
  MlpParams p;
  p.weights = model_mlp_matrices(m) * m.hidden * f;
  if (m.out_bias) {
    p.biases_split = (model_mlp_matrices(m) - 1) * f;  // GPT-OSS gate_up_proj_bias: 2·f per expert
    p.biases_replicated = m.hidden;                   // down_proj_bias: h per expert
  }
  return p;
}

// MLA (DeepSeek-V2 §2.1, HF modeling_deepseek_v3.py DeepseekV3Attention): queries through a rank-q_lora latent
// (q_a_proj h×r_q, q_a_layernorm, q_b_proj r_q×heads·(nope+rope)) or directly (q_proj h×heads·(nope+rope));
// keys and values through one latent (kv_a_proj_with_mqa h×(r_kv+rope), kv_a_layernorm r_kv,
// kv_b_proj r_kv×heads·(nope+v)); o_proj heads·v×h. Megatron-Core (transformer/multi_latent_attention.py) keeps the
// down-projections and latent norms whole on every TP rank and splits the up-projections and o_proj by heads.
struct MlaParams {
  int64_t split = 0;       // q_b (or q), kv_b, o: divided by tp
  int64_t replicated = 0;  // q_a, kv_a: whole on each TP rank
  int64_t norms = 0;       // the two latent norms
};
MlaParams mla_of(const ModelSpec& m) {
  const int64_t h = m.hidden, a = m.heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  MlaParams p;
  if (m.q_lora_rank > 0) {
    p.replicated += h * m.q_lora_rank;
    p.split += m.q_lora_rank * a * qk;
    p.norms += norm_of(m, m.q_lora_rank);
  } else {
    p.split += h * a * qk;
  }
  p.replicated += h * (m.kv_lora_rank + m.qk_rope_head_dim);
  p.norms += norm_of(m, m.kv_lora_rank);
  p.split += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim);
  p.split += a * m.v_head_dim * h;
  return p;
}

// Q/K norms (Qwen3Attention q_norm, k_norm: RMSNorm over head_dim, one gain vector each, shared by all heads; OLMo 2's
// over the whole projections, olmo_core/nn/attention.py) and attention sinks (GPT-OSS GptOssAttention.sinks: one
// logit per head).
int64_t qk_norm_params(const ModelSpec& m) {
  if (!m.qk_norm) return 0;
  if (m.qk_norm_full_width) return norm_of(m, model_q_width(m)) + norm_of(m, m.kv_heads * model_head_dim(m));
  return 2 * norm_of(m, model_head_dim(m));
}
int64_t sink_params(const ModelSpec& m) { return m.attention_sinks ? m.heads : 0; }

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

}  // namespace

bool model_is_moe(const ModelSpec& m) { return m.experts > 0; }
bool model_has_mla(const ModelSpec& m) { return m.kv_lora_rank > 0; }

bool layer_is_moe(const ModelSpec& m, int64_t layer) {
  if (!model_is_moe(m) || layer < m.dense_layers) return false;
  // Llama 4's placement (Llama4TextConfig: moe_layers = step−1, 2·step−1, …), counted from the first layer after the
  // dense ones. Megatron-Core's moe_layer_freq N makes layer i MoE when i % N == 0 (one layer earlier): the same
  // count; only a pipeline split could tell them apart.
  const int64_t freq = std::max<int64_t>(m.moe_layer_freq, 1);
  return (layer - m.dense_layers) % freq == freq - 1;
}

int64_t moe_layers_in(const ModelSpec& m, int64_t first, int64_t count) {
  if (!model_is_moe(m)) return 0;
  int64_t n = 0;
  for (int64_t i = first; i < first + count; ++i) n += layer_is_moe(m, i) ? 1 : 0;
  return n;
}

double moe_layer_share(const ModelSpec& m) {
  if (!model_is_moe(m) || m.layers <= 0) return 0.0;
  return static_cast<double>(moe_layers_in(m, 0, m.layers)) / static_cast<double>(m.layers);
}

int64_t expert_params(const ModelSpec& m) { return model_is_moe(m) ? mlp_of(m, m.expert_ffn_hidden).total() : 0; }

int64_t router_params(const ModelSpec& m) {
  if (!model_is_moe(m)) return 0;
  return m.hidden * m.experts + (m.router_bias ? m.experts : 0);
}

void count_attention(const ModelSpec& m, BlockParams& b) {
  if (model_has_mla(m)) {
    const MlaParams p = mla_of(m);
    b.attn_weights = p.split + p.replicated;
    b.attn_extra = p.norms;
  } else {
    const int64_t h = m.hidden, q = model_q_width(m), kv = model_kv_width(m);
    // W_q (h×q), W_k and W_v (h×kv each), W_o (q×h). GQA (Ainslie et al. 2023) shrinks K and V.
    b.attn_weights = h * q + 2 * h * kv + q * h;
    if (m.qkv_bias) b.attn_biases_split = q + 2 * kv;
  }
  if (m.out_bias) b.attn_biases_replicated = m.hidden;
  b.attn_extra += qk_norm_params(m) + sink_params(m);
}

void count_moe_mlp(const ModelSpec& m, BlockParams& b) {
  b.experts = m.experts * expert_params(m);
  b.shared_experts = m.shared_experts * expert_params(m);
  b.router = router_params(m);
}

int64_t attention_params_per_tp_rank(const ModelSpec& m, int64_t tp) {
  int64_t n = 0;
  if (model_has_mla(m)) {
    const MlaParams p = mla_of(m);
    n = p.split / tp + p.replicated + p.norms;
  } else {
    const int64_t h = m.hidden, d = model_head_dim(m);
    const int64_t q = model_q_width(m) / tp;
    const int64_t kv = std::max<int64_t>(m.kv_heads / tp, 1) * d;
    // Megatron-LM (Shoeybi et al. 2019, §3): column-parallel Q/K/V, row-parallel output. When tp exceeds kv_heads
    // each rank keeps one K/V head (Megatron replicates them).
    n = h * q + 2 * h * kv + q * h;
    if (m.qkv_bias) n += q + 2 * kv;
  }
  if (m.out_bias) n += m.hidden;
  return n + qk_norm_params(m) + sink_params(m) / tp;  // sinks go with their heads
}

int64_t routed_expert_params_per_rank(const ModelSpec& m, int64_t etp, int64_t ep) {
  if (!model_is_moe(m)) return 0;
  // Megatron-Core splits every expert over the expert tensor-parallel group as it splits a dense MLP (moe/experts.py
  // TEGroupedMLP fc1 column-, fc2 row-parallel over expt_tp) and gives each EP rank num_moe_experts / ep of them
  // (moe/moe_layer.py BaseMoELayer num_local_experts, local_expert_indices).
  const MlpParams e = mlp_of(m, m.expert_ffn_hidden);
  const int64_t t = std::max<int64_t>(etp, 1);
  const int64_t per_expert = e.weights / t + e.biases_split / t + e.biases_replicated;
  return m.experts / std::max<int64_t>(ep, 1) * per_expert;
}

int64_t moe_mlp_params_per_tp_rank(const ModelSpec& m, int64_t tp, int64_t ep, int64_t etp) {
  // Shared experts are a dense MLP on every EP rank (moe/shared_experts.py SharedExpertMLP, TP-split); the router
  // stays whole.
  const MlpParams e = mlp_of(m, m.expert_ffn_hidden);
  const int64_t per_expert = e.weights / tp + e.biases_split / tp + e.biases_replicated;
  return routed_expert_params_per_rank(m, etp > 0 ? etp : tp, ep) + m.shared_experts * per_expert + router_params(m);
}

int64_t mtp_params(const ModelSpec& m, const ParamCounts& p) {
  if (m.mtp_layers <= 0) return 0;
  const int64_t h = m.hidden;
  const int64_t block = model_is_moe(m) ? p.block.total() : p.dense_block.total();
  return m.mtp_layers * (2 * h * h + 3 * norm_of(m, h) + block);
}

int64_t active_params(const ModelSpec& m, const ParamCounts& p) {
  if (!model_is_moe(m)) return p.total;
  const int64_t idle = m.experts - m.experts_per_token;
  return p.total - p.moe_layers * idle * expert_params(m);
}

int64_t active_params_excluding_embedding(const ModelSpec& m, const ParamCounts& p) {
  return active_params(m, p) - p.embedding - p.position_embedding;
}

int64_t attention_qk_head_dim(const ModelSpec& m) {
  return model_has_mla(m) ? m.qk_nope_head_dim + m.qk_rope_head_dim : model_head_dim(m);
}
int64_t attention_v_head_dim(const ModelSpec& m) { return model_has_mla(m) ? m.v_head_dim : model_head_dim(m); }

int64_t windowed_layers(const ModelSpec& m) {
  if (m.sliding_window <= 0) return 0;
  const int64_t n = std::max<int64_t>(m.sliding_window_pattern, 1);
  // Of every n layers the last is global (Gemma3 sliding_window_pattern: layer i global when (i + 1) % n == 0;
  // GPT-OSS layer_types alternate sliding_attention, full_attention starting with sliding).
  return n == 1 ? m.layers : m.layers - m.layers / n;
}

double attention_keys_per_query(const ModelSpec& m, int64_t seq, bool windowed) {
  const double s = static_cast<double>(seq);
  if (!windowed || m.sliding_window <= 0) return s;
  return std::min(s, static_cast<double>(m.sliding_window));
}

double windowed_layer_work(const ModelSpec& m, int64_t seq) {
  if (m.sliding_window <= 0 || seq <= 0) return 1;
  const double s = static_cast<double>(seq), w = std::min(s, static_cast<double>(m.sliding_window));
  return (s * w - w * w / 2) / (s * s / 2);
}

double attention_work_fraction(const ModelSpec& m, int64_t seq) {
  const double windowed = static_cast<double>(windowed_layers(m));
  if (windowed <= 0 || seq <= 0) return 1;
  const double layers = static_cast<double>(m.layers);
  return (windowed * windowed_layer_work(m, seq) + (layers - windowed)) / layers;
}

const char* first_extended_feature(const ModelSpec& m) {
  if (model_is_moe(m)) return "experts";
  if (model_has_mla(m)) return "kv_lora_rank";
  if (m.mtp_layers > 0) return "mtp_layers";
  if (m.sliding_window > 0) return "sliding_window";
  if (m.qk_norm) return "qk_norm";
  if (m.attention_sinks) return "attention_sinks";
  if (m.block_norms != 2) return "block_norms";
  if (m.mlp == MlpKind::squared_relu) return "mlp: squared-relu";  // the reference loop has GELU and SwiGLU kernels
  return "";
}

void validate_moe(const ModelSpec& m, const std::string& where) {
  for (const auto& [value, key] : {std::pair{m.experts, "experts"}, {m.experts_per_token, "experts_per_token"},
                                   {m.shared_experts, "shared_experts"}, {m.expert_ffn_hidden, "expert_ffn_hidden"},
                                   {m.dense_layers, "dense_layers"}, {m.q_lora_rank, "q_lora_rank"},
                                   {m.kv_lora_rank, "kv_lora_rank"}, {m.qk_rope_head_dim, "qk_rope_head_dim"},
                                   {m.qk_nope_head_dim, "qk_nope_head_dim"}, {m.v_head_dim, "v_head_dim"},
                                   {m.mtp_layers, "mtp_layers"}, {m.sliding_window, "sliding_window"}})
    require(value >= 0 && value <= (int64_t{1} << 22),
            fmt::format("{}: '{}' must be between 0 and 4194304, got {}", where, key, value));
  require(m.block_norms >= 1 && m.block_norms <= 8,
          fmt::format("{}: 'block_norms' must be between 1 and 8, got {}", where, m.block_norms));
  require(m.moe_layer_freq >= 1 && m.moe_layer_freq <= m.layers,
          fmt::format("{}: 'moe_layer_freq' must be between 1 and layers ({}), got {}", where, m.layers, m.moe_layer_freq));
  require(m.sliding_window_pattern >= 1 && m.sliding_window_pattern <= m.layers,
          fmt::format("{}: 'sliding_window_pattern' must be between 1 and layers ({}), got {}", where, m.layers,
                      m.sliding_window_pattern));
  if (m.experts == 0) {
    for (const auto& [set, key] : {std::pair{m.experts_per_token > 0, "experts_per_token"},
                                   {m.shared_experts > 0, "shared_experts"}, {m.expert_ffn_hidden > 0, "expert_ffn_hidden"},
                                   {m.dense_layers > 0, "dense_layers"}, {m.moe_layer_freq != 1, "moe_layer_freq"},
                                   {m.router_bias, "router_bias"}})
      require(!set, fmt::format("{}: '{}' is set but 'experts' is not; add 'experts: N' (routed experts per MoE layer) "
                                "or remove '{}'", where, key, key));
  } else {
    require(m.experts >= 2 && m.experts <= 4096,
            fmt::format("{}: 'experts' must be between 2 and 4096, got {}", where, m.experts));
    require(m.experts_per_token >= 1 && m.experts_per_token <= m.experts,
            fmt::format("{}: 'experts_per_token' (top-k) must be between 1 and experts ({}), got {}", where, m.experts,
                        m.experts_per_token));
    require(m.expert_ffn_hidden >= 1,
            fmt::format("{}: 'expert_ffn_hidden' (one expert's MLP width) is required with 'experts'", where));
    require(m.dense_layers < m.layers,
            fmt::format("{}: 'dense_layers' ({}) must be fewer than layers ({}), or the model has no MoE layer", where,
                        m.dense_layers, m.layers));
  }
  if (m.kv_lora_rank == 0) {
    for (const auto& [value, key] : {std::pair{m.q_lora_rank, "q_lora_rank"}, {m.qk_rope_head_dim, "qk_rope_head_dim"},
                                     {m.qk_nope_head_dim, "qk_nope_head_dim"}, {m.v_head_dim, "v_head_dim"}})
      require(value == 0, fmt::format("{}: '{}' is a multi-head latent attention size but 'kv_lora_rank' is not set; "
                                      "add 'kv_lora_rank' or remove '{}'", where, key, key));
  } else {
    for (const auto& [value, key] : {std::pair{m.qk_rope_head_dim, "qk_rope_head_dim"},
                                     {m.qk_nope_head_dim, "qk_nope_head_dim"}, {m.v_head_dim, "v_head_dim"}})
      require(value > 0, fmt::format("{}: '{}' is required with 'kv_lora_rank' (multi-head latent attention)", where, key));
    require(m.kv_heads == m.heads, fmt::format("{}: multi-head latent attention has one key/value head per query head: "
                                               "set kv_heads ({}) to heads ({})", where, m.kv_heads, m.heads));
  }
  require(m.mtp_layers <= 16, fmt::format("{}: 'mtp_layers' {} is implausible (DeepSeek-V3 has 1); at most 16", where,
                                          m.mtp_layers));
  require(m.sliding_window_pattern == 1 || m.sliding_window > 0,
          fmt::format("{}: 'sliding_window_pattern' is set but 'sliding_window' is not; add the window or remove the "
                      "pattern", where));
}

}  // namespace shardplan
