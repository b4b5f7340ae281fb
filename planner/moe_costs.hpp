#pragma once
// Time of an MoE layer's MLP on one rank without expert parallelism (EP = 1): every rank holds every expert (split by
// TP like a dense MLP) and runs the experts its tokens are routed to.
//
// Assumptions, named:
//   * balanced routing: each of the E experts receives T·k/E of the micro-batch's T tokens (the load-balancing loss,
//     Fedus et al. 2022 §2.2, or DeepSeek-V3's bias-based balancing, §2.1.2, aim at this; imbalance makes the busiest
//     expert slower and is not priced);
//   * dropless: no capacity factor, no dropped or padded tokens (Megatron-Core --moe-token-dispatcher-type alltoall
//     without --moe-expert-capacity-factor; MegaBlocks, Gale et al. 2023);
//   * grouped GEMM: the E expert GEMMs of one projection run as one kernel (Megatron-Core TEGroupedMLP / GroupedMLP,
//     --moe-grouped-gemm; torchtitan's grouped_mm): each expert's GEMM at the efficiency of its own m = T·k/E rows
//     (planner/compute_cost.hpp: tile and wave quantisation), one launch for the group.
#include "planner/compute_cost.hpp"
#include "planner/model.hpp"
#include "planner/step_time.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Forward, backward (input + weight gradients) and the weight-gradient part, as microbatch_costs.cpp's LinearTime.
struct MoeGemmTime {
  double fwd = 0, bwd = 0, wgrad = 0;
};

struct MoeMlpTime {
  MoeGemmTime up;      // routed experts' gate/up (fc1) + shared experts' + the router GEMM (h × E)
  MoeGemmTime down;    // routed experts' down (fc2) + shared experts'
};

// `groups` GEMMs of shape `each`, as one grouped kernel: groups × (one GEMM's time − the launch gap) + one launch.
double grouped_gemm_time_s(const GpuSpec& g, DType d, int64_t groups, const GemmShape& each);

// One MoE layer's GEMMs for one micro-batch of T = micro_batch · seq tokens on one rank (tp splits each expert).
MoeMlpTime moe_mlp_time(const ModelSpec& m, const Strategy& s, const GpuSpec& g, DType d);

// Memory-bound bytes per token of an MoE layer's forward besides its activation function: the router's scores
// (softmax or sigmoid, top-k) and the permutation of the k routed copies of each token into expert order and back
// (Megatron-Core moe/moe_utils.py permute / unpermute: read and write k·h each way).
double moe_dispatch_bytes_per_token(const ModelSpec& m, double activation_bytes);

// Multi-token prediction (DeepSeek-V3 §2.2): each module runs, on the last stage after the main head, its h×2h
// projection, one more block and the shared head with its loss. Adds them to out.head_* from the block and head costs
// already in `out` (call after those are set); the extra block's activations are not in the memory model.
void add_mtp_costs(const ModelSpec& m, const Strategy& s, const GpuSpec& g, MicrobatchCosts& out);

// The intermediate width one token passes through in an MoE layer, (k + shared) · expert_ffn_hidden, or ffn_hidden
// for a dense model: what the activation memory and elementwise traffic of the MLP scale with.
double mlp_width_per_token(const ModelSpec& m);

}  // namespace shardplan
