#include "planner/model.hpp"

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/moe.hpp"

namespace shardplan {

// MLA: the query/key head width the attention kernel sees (qk_nope + qk_rope; DeepSeek-V2 §2.1.3); values are
// narrower (v_head_dim), which the activation and time models round up to this width.
int64_t model_head_dim(const ModelSpec& m) {
  if (m.kv_lora_rank > 0) return m.qk_nope_head_dim + m.qk_rope_head_dim;
  return m.head_dim > 0 ? m.head_dim : m.hidden / m.heads;
}
int64_t model_q_width(const ModelSpec& m) { return m.heads * model_head_dim(m); }
int64_t model_kv_width(const ModelSpec& m) { return m.kv_heads * model_head_dim(m); }
int64_t model_mlp_matrices(const ModelSpec& m) { return m.mlp == MlpKind::swiglu ? 3 : 2; }

int64_t model_padded_vocab(const ModelSpec& m) {
  const int64_t pad = m.vocab_pad_to > 0 ? m.vocab_pad_to : 1;
  return (m.vocab + pad - 1) / pad * pad;
}

int64_t BlockParams::total() const {
  return attn_weights + attn_biases_split + attn_biases_replicated + mlp_weights + mlp_biases_split +
         mlp_biases_replicated + norms + experts + shared_experts + router + attn_extra;
}

// Parameters of one norm: RMSNorm has a gain only; LayerNorm a gain and (usually) a bias.
static int64_t norm_params(const ModelSpec& m) {
  const bool has_bias = m.norm == NormKind::layernorm && m.norm_bias;
  return m.hidden * (has_bias ? 2 : 1);
}

// One block; `moe` replaces the dense MLP by the experts and router (planner/moe.cpp).
static BlockParams count_block(const ModelSpec& m, bool moe) {
  const int64_t h = m.hidden, f = m.ffn_hidden;
  BlockParams b;
  count_attention(m, b);  // MHA/GQA or MLA, biases, Q/K norms, sinks
  if (moe) {
    count_moe_mlp(m, b);
  } else {
    // MLP: GELU has up (h×f) and down (f×h); SwiGLU (Shazeer 2020) adds a gate matrix (h×f).
    const int64_t column_parallel = model_mlp_matrices(m) - 1;  // up (and gate)
    b.mlp_weights = model_mlp_matrices(m) * h * f;
    if (m.out_bias) {
      b.mlp_biases_split = column_parallel * f;
      b.mlp_biases_replicated = h;
    }
  }
  b.norms = m.block_norms * norm_params(m);  // 2, or Gemma 2/3's 4
  return b;
}

ParamCounts count_params(const ModelSpec& m) {
  ParamCounts p;
  p.dense_block = count_block(m, false);
  p.moe_layers = moe_layers_in(m, 0, m.layers);
  p.block = p.moe_layers > 0 ? count_block(m, true) : p.dense_block;
  p.blocks = (m.layers - p.moe_layers) * p.dense_block.total() + p.moe_layers * p.block.total();
  p.embedding = model_padded_vocab(m) * m.hidden;
  if (m.position == PositionKind::learned) p.position_embedding = m.seq * m.hidden;
  p.final_norm = norm_params(m);
  p.lm_head = m.tied_embeddings ? 0 : model_padded_vocab(m) * m.hidden;
  p.total = p.blocks + p.embedding + p.position_embedding + p.final_norm + p.lm_head;
  p.mtp = mtp_params(m, p);
  p.active = active_params(m, p);
  return p;
}

static void require_positive(const std::string& where, int64_t value, const char* key) {
  if (value <= 0) throw InputError(fmt::format("{}: '{}' must be a positive integer, got {}", where, key, value));
}

void validate_model(const ModelSpec& m) {
  const std::string where = m.name.empty() ? std::string("model") : fmt::format("model '{}'", m.name);
  require_positive(where, m.layers, "layers");
  require_positive(where, m.hidden, "hidden");
  require_positive(where, m.heads, "heads");
  require_positive(where, m.kv_heads, "kv_heads");
  require_positive(where, m.ffn_hidden, "ffn_hidden");
  require_positive(where, m.vocab, "vocab");
  require_positive(where, m.seq, "seq");
  if (m.head_dim < 0) throw InputError(fmt::format("{}: head_dim must be positive, got {}", where, m.head_dim));
  if (m.vocab_pad_to <= 0)
    throw InputError(fmt::format("{}: vocab_pad_to must be a positive integer, got {}", where, m.vocab_pad_to));
  if (m.head_dim == 0 && m.hidden % m.heads != 0)
    throw InputError(fmt::format("{}: hidden ({}) is not divisible by heads ({}); set head_dim explicitly or fix "
                                 "heads",
                                 where, m.hidden, m.heads));
  if (m.heads % m.kv_heads != 0)
    throw InputError(fmt::format("{}: kv_heads ({}) must divide heads ({}) — grouped-query attention shares each "
                                 "K/V head among heads/kv_heads query heads",
                                 where, m.kv_heads, m.heads));
  // Beyond any model ever trained by orders of magnitude: a typo, and a risk of overflow further on.
  if (m.hidden > (int64_t{1} << 20) || m.layers > (int64_t{1} << 16) || m.vocab > (int64_t{1} << 26) ||
      m.ffn_hidden > (int64_t{1} << 22) || m.seq > (int64_t{1} << 26) || m.heads > m.hidden)
    throw InputError(fmt::format("{}: sizes are implausible (layers {}, hidden {}, heads {}, ffn_hidden {}, vocab "
                                 "{}, seq {}); check the values",
                                 where, m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab, m.seq));
  // The same for the optional sizes (issue 19, item 19: 2^60 reached "needs 1e+25 bytes", naming neither key).
  if (m.head_dim > (int64_t{1} << 16))
    throw InputError(fmt::format("{}: head_dim {} is implausible (at most 65536; models use 64 to 256); check the value",
                                 where, m.head_dim));
  if (m.vocab_pad_to > (int64_t{1} << 20))
    throw InputError(fmt::format("{}: vocab_pad_to {} is implausible (at most 1048576; Megatron pads to 128·tp); check "
                                 "the value",
                                 where, m.vocab_pad_to));
  validate_moe(m, where);
}

std::string seq_refusal(const ModelSpec& m, int64_t seq) {
  if (m.position != PositionKind::learned || seq <= m.seq) return "";
  return fmt::format("--seq {} is longer than the learned position table of model '{}' ({} positions, one row each): "
                     "use --seq {} or less, or a model with rotary positions",
                     seq, m.name, m.seq, m.seq);
}

std::string format_param_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f} K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

const char* to_string(MlpKind k) {
  switch (k) {
    case MlpKind::swiglu: return "swiglu";
    case MlpKind::squared_relu: return "squared-relu";
    case MlpKind::gelu: return "gelu";
  }
  return "gelu";
}
const char* to_string(NormKind k) { return k == NormKind::rmsnorm ? "rmsnorm" : "layernorm"; }
const char* to_string(PositionKind k) {
  switch (k) {
    case PositionKind::rotary: return "rotary";
    case PositionKind::learned: return "learned";
    case PositionKind::alibi: return "alibi";
    case PositionKind::none: return "none";
  }
  return "?";
}

}  // namespace shardplan
