#include "planner/partition.hpp"

#include <algorithm>

namespace shardplan {

int64_t block_params_per_tp_rank(const ModelSpec& m, int64_t tp) {
  const BlockParams whole = count_params(m).block;
  const int64_t h = m.hidden, d = model_head_dim(m);
  const int64_t q = model_q_width(m) / tp;
  const int64_t kv = std::max<int64_t>(m.kv_heads / tp, 1) * d;
  // Megatron-LM (Shoeybi et al. 2019, §3): column-parallel Q/K/V and MLP up, row-parallel outputs.
  int64_t n = h * q + 2 * h * kv + q * h;
  if (m.qkv_bias) n += q + 2 * kv;
  n += whole.attn_biases_replicated;
  n += whole.mlp_weights / tp + whole.mlp_biases_split / tp + whole.mlp_biases_replicated;
  n += whole.norms;
  return n;
}

std::vector<int64_t> stage_layers(int64_t layers, int64_t pp) {
  std::vector<int64_t> out(static_cast<size_t>(pp), layers / pp);
  const int64_t extra = layers % pp;
  for (int64_t i = 0; i < extra; ++i) out[static_cast<size_t>(pp - 1 - i)] += 1;
  return out;
}

StageParams stage_params(const ModelSpec& m, const Strategy& s, int64_t stage) {
  const ParamCounts whole = count_params(m);
  const int64_t vocab_rows = model_padded_vocab(m) * m.hidden / s.tp;  // vocab-parallel embedding / head
  const int64_t extra = m.layers % s.pp;
  StageParams st;
  st.stage = stage;
  st.layers = m.layers / s.pp + (stage >= s.pp - extra ? 1 : 0);  // as stage_layers()
  st.first = stage == 0;
  st.last = stage == s.pp - 1;
  st.block_params = block_params_per_tp_rank(m, s.tp);
  st.blocks = st.layers * st.block_params;
  if (st.first) st.embedding = vocab_rows + whole.position_embedding;
  if (st.last) {
    st.final_norm = whole.final_norm;
    // Untied: the head is its own matrix. Tied with pp > 1: Megatron keeps a copy of the embedding on the
    // last stage and all-reduces their gradients (Narayanan et al. 2021, §2.2 "embedding group").
    if (!m.tied_embeddings || s.pp > 1) st.lm_head = vocab_rows;
  }
  return st;
}

std::vector<StageParams> partition_stages(const ModelSpec& m, const Strategy& s) {
  std::vector<StageParams> stages;
  for (int64_t i = 0; i < s.pp; ++i) stages.push_back(stage_params(m, s, i));
  return stages;
}

int candidate_peak_stages(const ModelSpec& m, const Strategy& s, int64_t out[3]) {
  int n = 0;
  out[n++] = 0;
  const int64_t first_extra = s.pp - m.layers % s.pp;
  if (first_extra > 0 && first_extra < s.pp - 1) out[n++] = first_extra;
  if (s.pp > 1) out[n++] = s.pp - 1;
  return n;
}

}  // namespace shardplan
