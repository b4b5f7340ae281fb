#pragma once
// Time of an MoE layer's MLP on one rank. Without expert parallelism (EP = 1) every rank holds every expert (split by
// TP like a dense MLP) and runs the experts its tokens are routed to; with --ep N (issue 17) it holds E/N experts and
// receives, through an all-to-all over the EP group, the tokens of its N EP peers routed to them (Megatron-Core
// moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: token_permutation / token_unpermutation).
//
// Assumptions, named:
//   * balanced routing: each of the E experts receives T·k/E of the micro-batch's T tokens (the load-balancing loss,
//     Fedus et al. 2022 §2.2, or DeepSeek-V3's bias-based balancing, §2.1.2, aim at this); kExpertLoadImbalance (1:
//     the balanced case) scales the busiest EP rank's tokens, its GEMM rows and its all-to-all bytes;
//   * dropless: no capacity factor, no dropped or padded tokens (Megatron-Core --moe-token-dispatcher-type alltoall
//     without --moe-expert-capacity-factor; MegaBlocks, Gale et al. 2023);
//   * grouped GEMM: the E expert GEMMs of one projection run as one kernel (Megatron-Core TEGroupedMLP / GroupedMLP,
//     --moe-grouped-gemm; torchtitan's grouped_mm): each expert's GEMM at the efficiency of its own m = T·k/E rows
//     (planner/compute_cost.hpp: tile and wave quantisation), one launch for the group.
#include "planner/compute_cost.hpp"
#include "planner/fp8.hpp"
#include "planner/framework.hpp"
#include "planner/model.hpp"
#include "planner/step_time.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Tokens the busiest EP rank receives relative to the balanced T·k. Named assumption: 1 (balanced). DeepSeek-V3 §2.1.2
// reports its auxiliary-loss-free balancing keeps the load "balanced throughout training" without dropping tokens;
// a measured imbalance would enter here.
constexpr double kExpertLoadImbalance = 1.0;

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

// One MoE layer's GEMMs for one micro-batch of T = micro_batch · seq tokens on one rank (tp splits each expert). The
// routed and shared experts' GEMMs run in the blocks' linear dtype (FP8 under --fp8: Transformer Engine's
// TEGroupedLinear, torchao's scaled grouped GEMM), the router in the compute dtype `d` (DeepSeek-V3 report §3.3.1
// keeps "MoE gating modules" in their original precision; Megatron-Core's TopKRouter is a plain linear).
MoeMlpTime moe_mlp_time(const ModelSpec& m, const Strategy& s, const GpuSpec& g, DType d);

// Bytes the FP8 casts of one MoE layer's expert GEMMs move per micro-batch (planner/fp8.hpp per linear: each local
// expert's rows and weights, the shared experts' T rows); zero without --fp8.
Fp8CastBytes moe_fp8_cast_bytes(const ModelSpec& m, const Strategy& s, double microbatches);

// Expert-parallel all-to-all (issue 17). One MoE layer's dispatch (or combine) moves each rank's T·k routed token
// copies of h activations, T = the rank's tokens (T/tp under sequence parallelism: each TP rank dispatches its own
// slice, moe/token_dispatcher.py), (ep−1)/ep of them to other EP ranks: the collective's S (comm_cost.hpp).
double moe_all_to_all_bytes(const ModelSpec& m, const Strategy& s);
// The all-to-alls one block adds to the critical path, per micro-batch: forward dispatch + combine, backward their two
// gradients (4 per MoE layer; full recomputation repeats the forward's two), averaged over the model's blocks by the
// share of MoE layers (the block costs are per block: microbatch_costs.cpp prices every block's MLP as the MoE one).
// Overlap: DualPipe (DeepSeek-V3 report §3.2.1) runs the all-to-all of one micro-batch's forward (backward) chunk
// behind the other's backward (forward) compute; so does Megatron's batch-level EP overlap (--ep-comm-overlap:
// --overlap-moe-expert-parallel-comm with --delay-wgrad-compute, MCore v0.14, moe/README.md; off by default). Under
// either only what exceeds the block's forward + backward compute is exposed, plus overlap_compute_slowdown of the
// hidden part. Megatron's shared-expert overlap (--moe-shared-expert-overlap: the shared experts' GEMMs beside the
// dispatch, moe/shared_experts.py) is not modelled.
struct MoeAllToAll {
  double fwd = 0, bwd = 0;      // exposed on the critical path
  double total = 0;             // the collectives' own time, fwd + bwd, hidden or not
};
MoeAllToAll moe_all_to_all_time(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, double block_fwd_s,
                                double block_bwd_s);

// Memory-bound bytes per token of an MoE layer's forward besides its activation function: the router's scores
// (softmax or sigmoid, top-k) and the permutation of the k routed copies of each token into expert order and back
// (Megatron-Core moe/moe_utils.py permute / unpermute: read and write k·h each way); with the all-to-all dispatcher and
// more than one local expert, the second permutation that sorts the received copies by local expert after the
// all-to-all and restores their order before the combine (token_dispatcher.py MoEAlltoAllTokenDispatcher
// dispatch_postprocess / combine_preprocess: sort_chunks_by_idxs, or a transpose copy under padded dropping). Per token
// of the micro-batch on one rank: under sequence parallelism a TP rank routes T/tp of them.
double moe_dispatch_bytes_per_token(const ModelSpec& m, const Strategy& s, double activation_bytes);

// Bytes the routed experts' output bias moves in one MoE layer per micro-batch on one rank, where the runtime adds it
// outside the grouped GEMM (FrameworkTraits::moe_expert_bias_per_expert): Megatron-Core's eager path adds b·p to each
// local expert's rows in fp32 (the probabilities are fp32: the router's softmax in moe_utils.py
// topk_routing_with_score_function; HybridEP and DeepEP require them so), concatenates the pieces and casts them
// back. Full-iteration CUDA
// graphs need the graph-safe packed bias (or the TE op fuser's scale_bias), which is fused: zero there, and zero
// without expert biases.
struct MoeBiasBytes {
  double fwd = 0, bwd = 0;
};
MoeBiasBytes moe_expert_bias_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                                   double activation_bytes);

// Multi-token prediction (DeepSeek-V3 §2.2): each module runs, on the last stage after the main head, its h×2h
// projection, one more block and the shared head with its loss. Adds them to out.head_* from the block and head costs
// already in `out` (call after those are set); the extra block's activations are not in the memory model.
void add_mtp_costs(const ModelSpec& m, const Strategy& s, const GpuSpec& g, MicrobatchCosts& out);

// Host-bound launch gaps of one MoE layer per micro-batch, seconds: GPU time lost waiting for the host to launch the
// layer's kernels. An eager MoE layer launches many small kernels (router, permutation, a GEMM and its casts per local
// expert in Transformer Engine's grouped linear) and its dropless all-to-all dispatcher synchronises the host with the
// GPU once per layer to size the all-to-all (Megatron-Core moe/token_dispatcher.py _maybe_dtoh_and_synchronize), so the
// queue drains every layer and the host's launch time shows; Megatron-Core's MoE README names it ("CPU Overhead
// Bottleneck": gaps between GPU kernels; fixes: CUDA graphs, larger micro-batches). Priced as a fixed stall per layer
// plus a host time per local expert (ClusterSpec::moe_host_layer_s / moe_host_local_expert_s, or the values fitted on
// the public MoE runs: moe_costs.cpp), added to the layer's forward. The stall is paid only by an eager layer whose
// dispatcher syncs: not under CUDA graphs of the static parts (--cuda-graphs partial) nor with padded token dropping
// (--moe-capacity-factor: sizes known on the host), and a flex dispatcher (--moe-dispatcher deepep|hybridep) keeps a
// fitted share of it (ClusterSpec::moe_host_fused_dispatch_share); full-iteration graphs leave nothing; a runtime whose
// experts run as one grouped kernel has no per-expert part (framework.hpp moe_launches_per_expert). Zero for a dense
// model.
double moe_host_gap_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c);

// The fitted defaults (the accuracy bench refits them: bench/sustained_fit.hpp).
double moe_host_layer_default_s();
double moe_host_local_expert_default_s();
double moe_host_fused_dispatch_share_default();

// Whether a block's MLP half meets tensor-parallel collectives (sequence parallelism's all-gather before it and
// reduce-scatter after it, or the all-reduce without SP): always for a dense MLP; for an MoE layer only when its shared
// experts (TP-split like a dense MLP) or its routed experts (expert TP > 1: the gather over the expert-TP group after
// the dispatch, moe/token_dispatcher.py) need them. With expert TP 1 and no shared experts the dispatch and combine
// all-to-alls take the sequence-parallel slices as they are (MoE Parallel Folding, arXiv 2504.14960 §3).
bool mlp_meets_tp_collectives(const ModelSpec& m, const Strategy& s);

// The intermediate width one token passes through in an MoE layer, (k + shared) · expert_ffn_hidden, or ffn_hidden
// for a dense model: what the activation memory and elementwise traffic of the MLP scale with.
double mlp_width_per_token(const ModelSpec& m);

}  // namespace shardplan
