#pragma once
// The optimizer beyond the precision policy's bytes per parameter: Muon (strategy.hpp OptimizerKind::muon) as
// Megatron-Core runs it (megatron/core/optimizer/emerging_optimizers.py TensorParallelMuon, layer_wise_optimizer.py
// LayerWiseDistributedOptimizer, on NVIDIA-NeMo/Emerging-Optimizers' muon_utils.py newton_schulz). Adam(W) needs
// nothing here: precision.hpp's StateBytes is all of it.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/partition.hpp"
#include "planner/precision.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Bytes of one Muon momentum: fp32, shaped like the fp32 main parameter it updates (emerging_optimizers
// orthogonalized_optimizer.py: the momentum buffer is zeros_like(p), p the main parameter of Megatron's Float16
// optimizer).
constexpr double kMuonMomentumBytes = 4;
// Newton–Schulz iterations per update: Megatron's --muon-num-ns-steps default, with the quintic coefficients
// (optimizer_config.py muon_num_ns_steps = 5, muon_coefficient_type = "quintic").
constexpr int kMuonNewtonSchulzSteps = 5;

// FLOPs of the Newton–Schulz iterations on one rows × cols matrix: each step is A = X·Xᵀ (2m²n), B = bA + cA·A
// (2m³) and X = aX + B·X (2m²n) on X transposed to m = min(rows, cols) rows (muon_utils.py newton_schulz_step).
double newton_schulz_flops(int64_t rows, int64_t cols, int steps = kMuonNewtonSchulzSteps);

// One kind of weight matrix Muon orthogonalizes on a stage: its whole shape, how many of them one rank of the stage
// holds, over which ranks TP splits it (1: whole on each) and along which dimension (Megatron's partition_dim: 0 for
// column-parallel layers, whose output rows TP splits; 1 for row-parallel ones). --muon-tp-mode says what Muon does
// with the split (strategy.hpp MuonTpMode).
struct MuonMatrix {
  int64_t rows = 0, cols = 0;
  double count = 0;
  int64_t split = 1;       // tp, or etp for a routed expert's
  bool expert = false;     // a routed expert's: owned within the expert-data-parallel group
  bool rows_split = true;  // partition_dim 0 (column-parallel); false: 1 (row-parallel)
};

// The matrices Muon takes on one rank of a stage: every 2-D weight but the embedding and the output layer
// (emerging_optimizers.py _is_nonlinear_or_embedding), the fused Q/K/V weight as its three parts (--muon-split-qkv,
// default on; _get_qkv_split_shapes), MLA's projections unsplit (its QKV split is "TODO(deyuf): support MLA").
std::vector<MuonMatrix> muon_stage_matrices(const ModelSpec& m, const Strategy& s, const StageParams& st);

// Parameters of one stage's TP rank that Muon updates (the rest go to Adam): all but the embedding, the output layer
// and the 1-D parameters (StageParams::vector_params).
double muon_matrix_params(const StageParams& st);

// Optimizer-state bytes of one rank of a stage: Adam's `b.optimizer` per parameter, or under Muon one fp32 momentum
// per matrix parameter and Adam's for the rest; ZeRO-1 and above shard them over dp·cp, the routed experts' over the
// expert-data-parallel group (LayerWiseDistributedOptimizer's layout has the same total, in whole matrices).
double stage_optimizer_state_bytes(const StageParams& st, const Strategy& s, const StateBytes& b);

// Time of the Muon-specific work of one rank's step (0 for Adam): the Newton–Schulz GEMMs of the matrices it owns,
// what its TP mode communicates (duplicated: an fp32 all-gather of each split matrix; distributed: an all-reduce of
// the Gram matrix per step) and their elementwise passes. With the layer-wise distributed
// optimizer (--zero 1) each data-parallel rank owns whole matrices, balanced by Newton–Schulz cost
// (layer_wise_optimizer.py _compute_per_buffer_param_layout); a rank is never faster than its costliest matrix.
double muon_step_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const StageParams& st);

// The Newton–Schulz workspace of the largest matrix a rank orthogonalizes, at its most (muon_utils.py
// newton_schulz_tp and newton_schulz: under the duplicated mode the gathered shards and their concatenation in fp32;
// the normalised copy and its bf16 cast, A and B, the next X, the fp32 result): 0 for Adam.
double muon_workspace_bytes(const ModelSpec& m, const Strategy& s, const StageParams& st);

// Why this strategy cannot run Muon, or "".
std::string muon_refusal(const Strategy& s);

}  // namespace shardplan
