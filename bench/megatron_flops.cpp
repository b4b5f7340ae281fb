#include "bench/megatron_flops.hpp"

#include <algorithm>

#include "planner/moe.hpp"

namespace shardplan::validation {

namespace {
// Forward + backward (wgrad and dgrad) and the multiply-add: training.py forward_backward_expansion_factor ×
// fma_expansion_factor.
constexpr double kPassesTimesFma = 3.0 * 2.0;
}  // namespace

double megatron_flops_per_token(const ModelSpec& m, int64_t seq, AttentionCount attention) {
  const double h = static_cast<double>(m.hidden), s = static_cast<double>(seq);
  const double layers = static_cast<double>(m.layers), mtp = static_cast<double>(m.mtp_layers);
  // transformer_flops: MTP modules count as layers of the last layer's kind.
  const double moe_in_layers = static_cast<double>(moe_layers_in(m, 0, m.layers));
  const bool last_is_moe = model_is_moe(m) && moe_layers_in(m, m.layers - 1, 1) == 1;
  const double moe_layers = moe_in_layers + (last_is_moe ? mtp : 0.0);
  const double dense_layers = layers - moe_in_layers + (last_is_moe ? 0.0 : mtp);
  const double all_layers = layers + mtp;
  const double ffn_matrices = m.mlp == MlpKind::swiglu ? 3.0 : 2.0;  // ffn_expansion_factor

  // MLP: dense layers' ffn, MoE layers' top-k routed experts and shared experts.
  double mlp = static_cast<double>(m.ffn_hidden) * ffn_matrices * dense_layers;
  if (model_is_moe(m)) {
    const double expert = static_cast<double>(m.expert_ffn_hidden) * ffn_matrices;
    mlp += expert * static_cast<double>(m.experts_per_token + m.shared_experts) * moe_layers;
  }
  double attention_linear = 0, attention_core = 0;  // per layer: × tokens, and × tokens · s
  if (model_has_mla(m)) {
    const double heads = static_cast<double>(m.heads), ql = static_cast<double>(m.q_lora_rank);
    const double kl = static_cast<double>(m.kv_lora_rank), rope = static_cast<double>(m.qk_rope_head_dim);
    const double nope = static_cast<double>(m.qk_nope_head_dim), v = static_cast<double>(m.v_head_dim);
    const double q_term = ql > 0 ? ql * (h + heads * (nope + rope) + 1) : h * heads * (nope + rope);
    attention_linear = q_term + kl * (h + heads * (nope + v) + 1) + h * rope + heads * v * h;
    attention_core = heads * (nope + rope) / 2 + heads * v / 2;  // causal: half of QKᵀ and of PV
  } else {
    const double q = static_cast<double>(model_q_width(m)), kv = static_cast<double>(model_kv_width(m));
    attention_linear = h * (q + 2 * kv) + q * h;
    attention_core = q;  // causal: q/2 for each of QKᵀ and PV
  }
  if (attention == AttentionCount::full) attention_core *= 2;
  // Each query of a windowed layer meets min(w, s) keys where a causal one meets s/2 on average.
  double core_layers_times_s = all_layers * s;
  if (attention == AttentionCount::causal_windowed && m.sliding_window > 0) {
    const double windowed = static_cast<double>(windowed_layers(m));
    const double keys = static_cast<double>(std::min<int64_t>(m.sliding_window, seq));
    core_layers_times_s = (all_layers - windowed) * s + windowed * 2 * keys;
  }
  const double vocab = static_cast<double>(model_padded_vocab(m));
  const double per_token = h * mlp + attention_linear * all_layers + mtp * (3 * h + 2 * h * h) + h * vocab * (mtp + 1);
  return kPassesTimesFma * (per_token + attention_core * core_layers_times_s);
}

}  // namespace shardplan::validation
