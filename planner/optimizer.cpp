#include "planner/optimizer.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "planner/comm_cost.hpp"
#include "planner/compute_cost.hpp"
#include "planner/groups.hpp"
#include "planner/moe.hpp"

namespace shardplan {

double newton_schulz_flops(int64_t rows, int64_t cols, int steps) {
  const double m = static_cast<double>(std::min(rows, cols)), n = static_cast<double>(std::max(rows, cols));
  return static_cast<double>(steps) * (4 * m * m * n + 2 * m * m * m);
}

namespace {

// Megatron-Core's fused MLP input projection: gate and up in one [2f, h] weight for SwiGLU (mlp.py linear_fc1), [f, h]
// otherwise; the output projection [h, f].
void add_mlp(std::vector<MuonMatrix>& out, const ModelSpec& m, int64_t f, double count, int64_t split, bool expert) {
  if (count <= 0) return;
  const int64_t h = m.hidden;
  out.push_back({(model_mlp_matrices(m) - 1) * f, h, count, split, expert, true});  // column-parallel fc1
  out.push_back({h, f, count, split, expert, false});                               // row-parallel fc2
}

// The attention's matrices of `count` blocks. Megatron-Core's MLA (multi_latent_attention.py): the down projections
// whole on every TP rank, the up and output projections split (moe.cpp mla_of says the same for the counts).
void add_attention(std::vector<MuonMatrix>& out, const ModelSpec& m, double count, int64_t tp) {
  if (count <= 0) return;
  const int64_t h = m.hidden;
  if (model_has_mla(m)) {
    const int64_t a = m.heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    if (m.q_lora_rank > 0) {
      out.push_back({m.q_lora_rank, h, count, 1, false});
      out.push_back({a * qk, m.q_lora_rank, count, tp, false});
    } else {
      out.push_back({a * qk, h, count, tp, false});
    }
    out.push_back({m.kv_lora_rank + m.qk_rope_head_dim, h, count, 1, false});
    out.push_back({a * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, count, tp, false});
    out.push_back({h, a * m.v_head_dim, count, tp, false, false});  // row-parallel output projection
    return;
  }
  // linear_qkv split into Q, K and V (emerging_optimizers.py TensorParallelMuon.orthogonalize with split_qkv).
  const int64_t q = model_q_width(m), kv = model_kv_width(m);
  out.push_back({q, h, count, tp, false});
  out.push_back({kv, h, count, tp, false});
  out.push_back({kv, h, count, tp, false});
  out.push_back({h, q, count, tp, false, false});  // row-parallel output projection
}

// A block's MLP part: dense, or an MoE layer's router (whole on every TP rank), its shared experts (one MLP of
// shared × expert width: moe/shared_experts.py SharedExpertMLP) and this rank's routed experts (experts / ep of them,
// each split over the expert-TP group: moe/experts.py TEGroupedMLP, one weight per expert).
void add_block_mlp(std::vector<MuonMatrix>& out, const ModelSpec& m, const Strategy& s, double count, bool moe) {
  if (count <= 0) return;
  if (!moe) return add_mlp(out, m, m.ffn_hidden, count, s.tp, false);
  out.push_back({m.experts, m.hidden, count, 1, false});
  add_mlp(out, m, m.shared_experts * m.expert_ffn_hidden, m.shared_experts > 0 ? count : 0, s.tp, false);
  const double local_experts = static_cast<double>(m.experts / std::max<int64_t>(s.ep, 1));
  add_mlp(out, m, m.expert_ffn_hidden, count * local_experts, expert_tensor_parallel(s), true);
}

// The ranks that share a stage's optimizer states (and, for Muon, its matrices): under ZeRO-1 and above dp·cp, the
// routed experts' the expert-data-parallel group; without it every rank holds all of them.
struct StateOwners {
  double dense = 1, expert = 1;
};

StateOwners state_owners(const Strategy& s) {
  if (s.zero < 1) return {};
  return {static_cast<double>(shard_degree(s)), static_cast<double>(std::max<int64_t>(expert_data_parallel(s), 1))};
}

// The shape one rank's Newton–Schulz iterates on: X with m rows (the side A = X·Xᵀ spans) and n columns on this rank,
// and whether each step all-reduces A over the TP group (muon_utils.py newton_schulz_tp).
struct LocalShape {
  int64_t m = 0, n = 0;
  bool reduces_gram = false;
};

LocalShape local_shape(const MuonMatrix& x, MuonTpMode mode) {
  const int64_t k = std::max<int64_t>(x.split, 1);
  if (k == 1 || mode == MuonTpMode::duplicated)  // whole (gathered first when split)
    return {std::min(x.rows, x.cols), std::max(x.rows, x.cols), false};
  const int64_t rows = x.rows_split ? x.rows / k : x.rows, cols = x.rows_split ? x.cols : x.cols / k;
  if (mode == MuonTpMode::blockwise) return {std::min(rows, cols), std::max(rows, cols), false};
  // distributed: transposed so that the split dimension is X's columns (partition_dim 0 → transpose), whichever side
  // is the shorter ("runs Newton-Schulz along the long dimension which wastes compute" otherwise: its docstring).
  return x.rows_split ? LocalShape{x.cols, rows, true} : LocalShape{x.rows, cols, true};
}

// One matrix's time on its owner: the Newton–Schulz GEMMs in bf16 (muon_utils.py newton_schulz casts X to bf16 under
// the default --muon-fp32-matmul-prec medium) on its local shape, what the TP mode communicates, and the elementwise
// passes over the local elements: the norm and the division (12 B an element), the casts to bf16 and back (12 B), the
// update's scale (8 B), and the concatenation of the gathered shards under the duplicated mode (8 B).
double matrix_time_s(const MuonMatrix& x, const Strategy& s, const ClusterSpec& c, const GpuSpec& device) {
  const LocalShape l = local_shape(x, s.muon_tp_mode);
  const double gemms = gemm_time_s(device, DType::bf16, {l.m, l.m, l.n}) +
                       gemm_time_s(device, DType::bf16, {l.m, l.m, l.m}) + gemm_time_s(device, DType::bf16, {l.m, l.n, l.m});
  const double elements = static_cast<double>(l.m) * static_cast<double>(l.n);
  const bool gathers = x.split > 1 && s.muon_tp_mode == MuonTpMode::duplicated;
  double t = kMuonNewtonSchulzSteps * gemms + memory_bound_time_s(c.gpu, elements * (gathers ? 40 : 32));
  if (!gathers && !l.reduces_gram) return t;
  Strategy split = s;
  split.tp = x.split;
  const GroupLayout tp = tp_group(split, c);
  if (gathers) t += collective_time_s(c, Collective::all_gather, elements * 4, tp);
  // distributed: the bf16 Gram matrix all-reduced in every step, and the norm's fp32 sum once (distributed_normalize_p2)
  if (l.reduces_gram)
    t += kMuonNewtonSchulzSteps * collective_time_s(c, Collective::all_reduce, 2.0 * static_cast<double>(l.m * l.m), tp) +
         collective_time_s(c, Collective::all_reduce, 4, tp);
  return t;
}

}  // namespace

std::vector<MuonMatrix> muon_stage_matrices(const ModelSpec& m, const Strategy& s, const StageParams& st) {
  std::vector<MuonMatrix> out;
  const bool moe = model_is_moe(m);
  const double layers = static_cast<double>(st.layers), moe_layers = static_cast<double>(st.moe_layers);
  add_attention(out, m, layers, s.tp);
  add_block_mlp(out, m, s, layers - moe_layers, false);
  add_block_mlp(out, m, s, moe_layers, true);
  if (st.mtp > 0) {
    // Each MTP module: its projection of [embedding; hidden] (eh_proj, [h, 2h], column-parallel) and one block.
    const double mtp = static_cast<double>(m.mtp_layers);
    out.push_back({m.hidden, 2 * m.hidden, mtp, s.tp, false});
    add_attention(out, m, mtp, s.tp);
    add_block_mlp(out, m, s, mtp, moe);
  }
  return out;
}

double muon_matrix_params(const StageParams& st) {
  return static_cast<double>(st.total() - st.embedding - st.lm_head - st.vector_params);
}

double stage_optimizer_state_bytes(const StageParams& st, const Strategy& s, const StateBytes& b) {
  const double routed = static_cast<double>(st.routed_experts), dense = static_cast<double>(st.total()) - routed;
  const StateOwners n = state_owners(s);
  if (s.optimizer == OptimizerKind::adamw) return dense * b.optimizer / n.dense + routed * b.optimizer / n.expert;
  const double dense_matrices = muon_matrix_params(st) - routed;
  return (dense_matrices * kMuonMomentumBytes + (dense - dense_matrices) * b.optimizer) / n.dense +
         routed * kMuonMomentumBytes / n.expert;
}

double muon_step_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const StageParams& st) {
  if (s.optimizer != OptimizerKind::muon) return 0;
  const GpuSpec device = training_device(c.gpu);
  // Each matrix has one owner among the state owners under the layer-wise distributed optimizer; every rank without it.
  const StateOwners owners = state_owners(s);
  double sum[2] = {0, 0}, largest[2] = {0, 0};
  for (const MuonMatrix& x : muon_stage_matrices(m, s, st)) {
    const double t = matrix_time_s(x, s, c, device);
    sum[x.expert] += x.count * t;
    largest[x.expert] = std::max(largest[x.expert], t);
  }
  return std::max(sum[0] / owners.dense, largest[0]) + std::max(sum[1] / owners.expert, largest[1]);
}

double muon_workspace_bytes(const ModelSpec& m, const Strategy& s, const StageParams& st) {
  if (s.optimizer != OptimizerKind::muon) return 0;
  double most = 0;
  for (const MuonMatrix& x : muon_stage_matrices(m, s, st)) {
    const LocalShape l = local_shape(x, s.muon_tp_mode);
    const double mn = static_cast<double>(l.m) * static_cast<double>(l.n), mm = static_cast<double>(l.m * l.m);
    // newton_schulz: the fp32 normalised X and its bf16 cast (6 B an element), then in each step the old and new X
    // in bf16 with A and B (m × m, bf16), and at the end the bf16 X and its fp32 copy (6 B). newton_schulz_tp's
    // duplicated mode holds the gathered shards and their concatenation (fp32, 8 B an element) throughout.
    const double gathered = x.split > 1 && s.muon_tp_mode == MuonTpMode::duplicated ? 8 * mn : 0;
    most = std::max(most, gathered + std::max(6 * mn, 4 * mn + 4 * mm));
  }
  return most;
}

std::string muon_refusal(const Strategy& s) {
  if (s.optimizer != OptimizerKind::muon)
    return s.muon_tp_mode == MuonTpMode::duplicated
               ? ""
               : fmt::format("--muon-tp-mode {} without --optimizer muon: it says how Muon orthogonalizes TP-split "
                             "matrices; add --optimizer muon or drop it",
                             to_string(s.muon_tp_mode));
  if (s.framework != Framework::megatron)
    return fmt::format("--optimizer muon is priced as Megatron-Core runs it (--optimizer muon: emerging_optimizers.py "
                       "TensorParallelMuon, layer_wise_optimizer.py); --framework {} has none priced: use --framework "
                       "megatron or --optimizer adamw",
                       to_string(s.framework));
  if (s.zero >= 2)
    return fmt::format("--optimizer muon with --zero {}: Megatron-Core's \"Emerging optimizer does not support "
                       "Megatron-FSDP\" (megatron/training/arguments.py); use --zero 1 (its layer-wise distributed "
                       "optimizer) or --zero 0",
                       s.zero);
  if (s.precision == Precision::pure_fp16 || s.precision == Precision::amp_fp16 ||
      s.precision == Precision::megatron_fp16)
    return fmt::format("--optimizer muon with --precision {}: Megatron-Core refuses \"emerging optimizer with fp16\" "
                       "(megatron/core/optimizer/__init__.py); use a bf16 or fp32 precision",
                       to_string(s.precision));
  if (s.offload_optimizer)
    return "--optimizer muon with --offload-optimizer: Megatron-Core's optimizer offload is Adam's "
           "(HybridDeviceOptimizer); drop one of them";
  if (s.precision_aware_optimizer || s.bf16_adam_moments)
    return "--optimizer muon with --precision-aware-optimizer or --adam-moments bf16: shardplan prices those as "
           "Transformer Engine's FusedAdam over every parameter, which Muon's matrices do not use; drop them";
  return "";
}

}  // namespace shardplan
