#include "planner/allocator_reserve.hpp"

#include <algorithm>

#include "planner/activations.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/precision.hpp"

namespace shardplan {

namespace {

// Tensors of `bytes` each, `count` of them: how many get a segment of their own.
int64_t own(double bytes, int64_t count) { return bytes >= kAllocatorMinLargeAlloc ? count : 0; }

// Parameter-shaped tensors of one stage's rank that have a segment of their own: the fp32 shard, Adam's m and v and
// the sharded gradient (4 per parameter tensor). FSDP2 shards each parameter (DTensor, dim 0); FSDP1 one FlatParameter
// per unit (_flat_param.py), so one tensor per unit and state.
int64_t state_segments(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const StageParams& st) {
  const double n = static_cast<double>(shard_degree(s)), tp = static_cast<double>(s.tp);
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m));
  const double kv = std::max<double>(static_cast<double>(m.kv_heads) / tp, 1.0) * static_cast<double>(model_head_dim(m));
  const double f = static_cast<double>(m.ffn_hidden);
  constexpr int64_t kStates = 4;
  const double b = 4;  // fp32 shards and states under amp (the largest)
  if (fw.framework == Framework::fsdp1) {
    const int64_t units = st.layers + (st.root_unit() > 0 ? 1 : 0);
    return kStates * (own(static_cast<double>(st.block_params) * b / n, st.layers) +
                      own(static_cast<double>(st.root_unit()) * b / n, units - st.layers));
  }
  // Matrices of a block on this rank, as elements.
  int64_t per_block = 0;
  if (fw.fused_qkv_projection) per_block += own(h * (q / tp + 2 * kv) * b / n, 1);
  else per_block += own(h * q / tp * b / n, 1) + own(h * kv * b / n, 2);
  per_block += own(q / tp * h * b / n, 1);
  per_block += own(h * f / tp * b / n, model_mlp_matrices(m));
  int64_t root = 0;
  if (st.embedding > 0) root += own(static_cast<double>(st.embedding) * b / n, 1);
  if (st.lm_head > 0) root += own(static_cast<double>(st.lm_head) * b / n, 1);
  return kStates * (per_block * st.layers + root);
}

}  // namespace

AllocatorReserve caching_allocator_reserve(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                                           const StageParams& st) {
  AllocatorReserve r;
  const double in_flight = in_flight_stage_microbatches(m, s, st.stage);
  // Saved activations: every tensor of every block held (full recompute: each block's input only).
  const int64_t per_block = block_saved_tensors_of_at_least(m, s, fw, kAllocatorMinLargeAlloc);
  int64_t stage_tensors = per_block * st.layers;
  if (partial_recompute(s)) {  // the blocks that do not recompute keep every tensor (partial_recompute.hpp)
    Strategy kept = s;
    kept.recompute = Recompute::none;
    const int64_t recomputed = stage_recomputed_blocks(m, s, st.stage);
    stage_tensors = per_block * recomputed +
                    block_saved_tensors_of_at_least(m, kept, fw, kAllocatorMinLargeAlloc) * (st.layers - recomputed);
  }
  const auto saved = static_cast<int64_t>(static_cast<double>(stage_tensors) * in_flight);
  // Per-unit buffers alive at once: the gathered root (or the embedding and head units of their own:
  // fsdp_end_units_split) and two blocks, a block's gradients, one reduce-scatter input.
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  const double block = static_cast<double>(st.block_params);
  const double root = static_cast<double>(st.root_unit()), embed = static_cast<double>(st.embedding);
  const int64_t ends = fsdp_end_units_split(s, fw, st) ? own(embed * a, 1) + own((root - embed) * a, 1)
                                                                            : own(root * a, 1);
  const int64_t units = own(block * a, 3) + own(block * 4, 1) + ends;
  r.own_segments = state_segments(m, s, fw, st) + saved + units;
  r.rounding = static_cast<double>(r.own_segments) * kAllocatorRoundLarge / 2;
  r.holes = block_working_set_bytes(m, s, fw);
  return r;
}

}  // namespace shardplan
