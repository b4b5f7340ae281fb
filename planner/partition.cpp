#include "planner/partition.hpp"

#include <algorithm>

#include "planner/moe.hpp"
#include "planner/pipeline_layout.hpp"

namespace shardplan {

int64_t block_params_per_tp_rank(const ModelSpec& m, int64_t tp, int64_t ep, int64_t etp) {
  const BlockParams whole = count_params(m).block;
  // Megatron-LM (Shoeybi et al. 2019, §3): column-parallel Q/K/V and MLP up, row-parallel outputs (moe.cpp: MLA,
  // experts).
  int64_t n = attention_params_per_tp_rank(m, tp);
  if (model_is_moe(m)) n += moe_mlp_params_per_tp_rank(m, tp, ep, etp);
  n += whole.mlp_weights / tp + whole.mlp_biases_split / tp + whole.mlp_biases_replicated;
  n += whole.norms;
  return n;
}

// 1-D parameters of one block on one TP rank (StageParams::vector_params): TP splits the column-parallel biases and
// the sinks with their heads (attention_params_per_tp_rank); norms stay whole.
static int64_t block_vector_params(const ModelSpec& m, const BlockParams& b, int64_t tp, bool moe_block) {
  int64_t n = b.norms + b.attn_biases_split / tp + b.attn_biases_replicated + b.attn_extra;
  if (moe_block) return n + (m.router_bias ? m.experts : 0);
  return n + b.mlp_biases_split / tp + b.mlp_biases_replicated;
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
  StageParams st;
  st.stage = stage;
  // The split's blocks on this rank, and whether it runs the first / last virtual stage (planner/pipeline_layout.cpp:
  // uneven first/last counts, embedding and loss weighed as layers, V-shaped schedules with both ends on rank 0).
  st.layers = rank_layers(m, s, stage);
  st.first = rank_holds_embedding(s, stage);
  st.last = rank_holds_head(s, stage);
  st.block_params = block_params_per_tp_rank(m, s.tp, s.ep, expert_tensor_parallel(s));
  st.blocks = st.layers * st.block_params;
  if (model_is_moe(m)) {
    // Which of the rank's blocks are MoE: those of each virtual stage it runs, by their place in the model.
    st.moe_layers = st.layers;
    if (m.dense_layers > 0 || m.moe_layer_freq > 1) {
      st.moe_layers = 0;
      for (int64_t c = 0; c < chunks_per_rank(s); ++c) {
        const int64_t k = virtual_stage_of(s, stage, c);
        int64_t first = 0;
        for (int64_t j = 0; j < k; ++j) first += virtual_stage_layers(m, s, j);
        st.moe_layers += moe_layers_in(m, first, virtual_stage_layers(m, s, k));
      }
    }
    const BlockParams& d = whole.dense_block;  // the same attention, the dense MLP
    const int64_t dense_block = attention_params_per_tp_rank(m, s.tp) + d.mlp_weights / s.tp +
                                d.mlp_biases_split / s.tp + d.mlp_biases_replicated + d.norms;
    st.blocks = st.moe_layers * st.block_params + (st.layers - st.moe_layers) * dense_block;
    st.block_routed = routed_expert_params_per_rank(m, expert_tensor_parallel(s), s.ep);
    st.routed_experts = st.moe_layers * st.block_routed;
  }
  const int64_t moe_vectors = block_vector_params(m, whole.block, s.tp, true);
  const int64_t dense_vectors = block_vector_params(m, whole.dense_block, s.tp, false);
  st.vector_params = model_is_moe(m) ? st.moe_layers * moe_vectors + (st.layers - st.moe_layers) * dense_vectors
                                     : st.layers * dense_vectors;
  if (st.first) st.embedding = vocab_rows + whole.position_embedding;
  if (st.last) {
    st.final_norm = whole.final_norm;
    st.vector_params += whole.final_norm;
    // Untied: the head is its own matrix. Tied with pp > 1: Megatron keeps a copy of the embedding on the
    // last stage and all-reduces their gradients (Narayanan et al. 2021, §2.2 "embedding group").
    // A V-shaped schedule puts the embedding and the head on the same rank: a tied head needs no copy there.
    if (!m.tied_embeddings || (s.pp > 1 && !st.first)) st.lm_head = vocab_rows;
    // MTP modules: their blocks split by TP like the others, the projection (2h×h, column-parallel in Megatron's
    // eh_proj) too; norms whole.
    if (m.mtp_layers > 0) {
      const int64_t h = m.hidden, mtp_block = model_is_moe(m) ? st.block_params : block_params_per_tp_rank(m, s.tp);
      st.mtp = m.mtp_layers * (2 * h * h / s.tp + 3 * whole.final_norm + mtp_block);
      st.vector_params += m.mtp_layers * (3 * whole.final_norm + (model_is_moe(m) ? moe_vectors : dense_vectors));
      st.routed_experts += m.mtp_layers * st.block_routed;  // the MTP block is an MoE block
    }
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
  // Among the middle stages (no embedding, no head) the first with the most blocks: the most blocks and, under every
  // schedule here, at least as many micro-batches in flight as any later stage.
  int64_t busiest = -1, most = -1;
  for (int64_t i = 1; i + 1 < s.pp; ++i) {
    const int64_t layers = rank_layers(m, s, i);
    if (layers > most) most = layers, busiest = i;
  }
  if (busiest > 0) out[n++] = busiest;
  if (s.pp > 1) out[n++] = s.pp - 1;
  return n;
}

}  // namespace shardplan
