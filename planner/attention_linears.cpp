#include "planner/attention_linears.hpp"

#include <algorithm>

#include "planner/moe.hpp"

namespace shardplan {

namespace {
// Megatron-Core gathers MLA's latents for the up-projections; torchtitan gathers the block input (below).
bool megatron_gathers_latents(const Strategy& s) { return s.framework == Framework::megatron; }
}  // namespace

// Multi-head (GQA) attention: one column-parallel QKV projection (h → q + 2·kv; each rank keeps at least one K/V
// head) and the row-parallel output projection (Shoeybi et al. 2019, §3).
// MLA (DeepSeek-V2 §2.1): down-projections of h to the query latent (q_lora_rank) and to the K/V latent plus the
// shared RoPE key (kv_lora_rank + rope), then column-parallel up-projections to the heads (q: nope + rope; k and v:
// nope + v_head_dim), and the output projection from heads · v_head_dim. Megatron-Core builds the down-projections as
// TELinear with parallel_mode "duplicated" — whole on every TP rank, run on its sequence-parallel slice — and the
// up-projections as column-parallel layers that gather their latent inputs (megatron/core/transformer/
// multi_latent_attention.py MLASelfAttention.__init__, _qkv_down_projection, get_query_key_value_tensors). torchtitan
// gathers the block input instead and runs the replicated down-projections on all of it
// (models/deepseek_v3/sharding.py _set_deepseek_v3_layer_sharding: "x is gathered to Replicate"; wkv_a, wq_a
// replicated, wkv_b, wq_b colwise).
AttentionLinears attention_linears(const ModelSpec& m, const Strategy& s, int64_t tokens) {
  AttentionLinears a;
  const int64_t T = tokens, h = m.hidden, tp = std::max<int64_t>(s.tp, 1), heads_r = m.heads / tp;
  if (!model_has_mla(m)) {
    const int64_t q_r = model_q_width(m) / tp, kv_r = std::max<int64_t>(m.kv_heads / tp, 1) * model_head_dim(m);
    a.in[a.count++] = {T, q_r + 2 * kv_r, h};
    a.out = {T, h, q_r};
    return a;
  }
  const int64_t sliced = s.sp && megatron_gathers_latents(s) ? T / tp : T;  // a duplicated layer's tokens
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  if (m.q_lora_rank > 0) {
    a.in[a.count++] = {sliced, m.q_lora_rank, h};                 // linear_q_down_proj
    a.in[a.count++] = {T, heads_r * qk, m.q_lora_rank};           // linear_q_up_proj
  } else {
    a.in[a.count++] = {T, heads_r * qk, h};                       // linear_q_proj
  }
  a.in[a.count++] = {sliced, m.kv_lora_rank + m.qk_rope_head_dim, h};                     // linear_kv_down_proj
  a.in[a.count++] = {T, heads_r * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank};  // linear_kv_up_proj
  a.out = {T, h, heads_r * m.v_head_dim};                                                 // linear_proj
  return a;
}

// Grouped-query attention hands each K/V head to its query group inside the kernel (FlashAttention-2 GQA; SDPA
// enable_gqa; Transformer Engine's fused attention takes num_gqa_groups). Models that call the kernel with one K/V per
// query head copy them first: torchtitan's Llama before 2026-01-27 (torchtitan/models/llama/model.py Attention.forward:
// repeat_kv(xk, self.n_rep) before F.scaled_dot_product_attention; removed by ff0829c, "GQA without kv repeats"), and
// transformers' sdpa_attention_forward where it cannot pass enable_gqa (integrations/sdpa_attention.py repeat_kv).
double attention_kv_heads_per_rank(const ModelSpec& m, const Strategy& s) {
  const double tp = static_cast<double>(std::max<int64_t>(s.tp, 1));
  if (s.kv_repeated) return static_cast<double>(m.heads) / tp;
  return std::max(static_cast<double>(m.kv_heads) / tp, 1.0);
}

// Under Megatron's MLA the gathered inputs are q's latent (or h without q_lora_rank), the K/V latent, and the RoPE key
// (get_query_key_value_tensors: gather_from_sequence_parallel_region of k_pos_emb).
double attention_gathered_width(const ModelSpec& m, const Strategy& s) {
  if (!model_has_mla(m) || !megatron_gathers_latents(s)) return static_cast<double>(m.hidden);
  const int64_t q_in = m.q_lora_rank > 0 ? m.q_lora_rank : m.hidden;
  return static_cast<double>(q_in + m.kv_lora_rank + m.qk_rope_head_dim);
}

}  // namespace shardplan
