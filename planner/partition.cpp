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

std::vector<StageParams> partition_stages(const ModelSpec& m, const Strategy& s) {
  const ParamCounts whole = count_params(m);
  const int64_t block = block_params_per_tp_rank(m, s.tp);
  const int64_t vocab_rows = model_padded_vocab(m) * m.hidden / s.tp;  // vocab-parallel embedding / head
  const std::vector<int64_t> layers = stage_layers(m.layers, s.pp);
  std::vector<StageParams> stages;
  for (int64_t i = 0; i < s.pp; ++i) {
    StageParams st;
    st.stage = i;
    st.layers = layers[static_cast<size_t>(i)];
    st.first = i == 0;
    st.last = i == s.pp - 1;
    st.block_params = block;
    st.blocks = st.layers * block;
    if (st.first) st.embedding = vocab_rows + whole.position_embedding;
    if (st.last) {
      st.final_norm = whole.final_norm;
      // Untied: the head is its own matrix. Tied with pp > 1: Megatron keeps a copy of the embedding on the
      // last stage and all-reduces their gradients (Narayanan et al. 2021, §2.2 "embedding group").
      if (!m.tied_embeddings || s.pp > 1) st.lm_head = vocab_rows;
    }
    stages.push_back(st);
  }
  return stages;
}

}  // namespace shardplan
