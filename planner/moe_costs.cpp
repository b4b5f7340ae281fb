#include "planner/moe_costs.hpp"

#include <algorithm>
#include <cmath>

#include "planner/comm_cost.hpp"
#include "planner/framework.hpp"
#include "planner/groups.hpp"
#include "planner/moe.hpp"
#include "planner/precision.hpp"
#include "planner/recompute_modules.hpp"
#include "planner/partial_recompute.hpp"

namespace shardplan {

namespace {

// The launch gap compute_cost.cpp adds to every GEMM (kKernelOverheadS, ~2 µs between back-to-back kernels): a grouped
// GEMM pays it once for all its groups.
constexpr double kLaunchGapS = 2e-6;

// The share of its generation's sustained rate the routed experts' grouped GEMMs keep against dense GEMMs of the same
// shapes (GpuSpec::grouped_gemm_ratio overrides). Fitted by build/bench/shardplan_accuracy with the host values below
// on the public MoE runs (all Megatron-Core: Transformer Engine's GroupedLinear), each source weighted equally: 0.804
// (reports/accuracy.md gives its leave-one-source-out values; 0.787 until Megatron-Bridge's Kimi-K2 row joined,
// 2026-12-07, predicted first at −6.6 %; 0.750 until attention had its own sustained share and
// Blackwell's dense fraction fell, 2026-12-07; 0.766 before GPT-OSS's expert bias was priced). Why a
// grouped GEMM runs slower than the dense GEMM of one expert's shape: Transformer Engine's grouped linear launches the
// experts' GEMMs over a few streams
// (general_grouped_gemm, multi-stream cuBLAS) with casts and splits around them, and its measured rate is well below
// dense GEMMs — NVIDIA/TransformerEngine#2939 (2026-04): GroupedLinear ~2× slower than a loop of F.linear over the same
// four experts on B300; #2151: bf16 grouped GEMMs slow further when the experts' row counts differ. torch._grouped_mm
// (torchtitan) is assumed alike (pytorch/pytorch#163425: at large sizes no faster than a loop of cuBLAS GEMMs).
constexpr double kGroupedOverDenseSustained = 0.804;

double grouped_gemm_ratio(const GpuSpec& g) {
  return g.grouped_gemm_ratio > 0 ? g.grouped_gemm_ratio : kGroupedOverDenseSustained;
}

// One linear layer of `groups` experts over `rows` tokens each: forward Y = X·W (rows × n × k), backward dX (rows × k
// × n) and dW (k × n × rows), each a grouped GEMM (Narayanan et al. 2021 §5.1: backward = two forward-sized GEMMs).
MoeGemmTime grouped_linear(const GpuSpec& g, DType d, int64_t groups, int64_t rows, int64_t n, int64_t k) {
  if (groups <= 0 || rows <= 0 || n <= 0) return {};
  const double dw = grouped_gemm_time_s(g, d, groups, {k, n, rows});
  return {grouped_gemm_time_s(g, d, groups, {rows, n, k}), grouped_gemm_time_s(g, d, groups, {rows, k, n}) + dw, dw};
}

MoeGemmTime plus(MoeGemmTime a, const MoeGemmTime& b) {
  a.fwd += b.fwd, a.bwd += b.bwd, a.wgrad += b.wgrad;
  return a;
}

MoeGemmTime scaled(MoeGemmTime a, double f) { return {a.fwd * f, a.bwd * f, a.wgrad * f}; }

// Tokens one rank routes: its sequence-parallel slice of the micro-batch (T/tp), or all T without SP (the TP ranks
// then hold the same tokens).
int64_t routed_tokens_per_rank(const Strategy& s) {
  const int64_t T = s.micro_batch * seq_per_rank(s);
  return s.sp ? T / std::max<int64_t>(s.tp, 1) : T;
}

// Tokens whose routed copies reach one rank's experts, before the split by expert: under SP the etp ranks that share an
// expert shard all-gather their slices after the dispatch (moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: the
// gather over the expert-TP group), T/tp · etp; without SP, all T.
int64_t expert_input_tokens(const Strategy& s) {
  return s.sp ? routed_tokens_per_rank(s) * expert_tensor_parallel(s) : s.micro_batch * seq_per_rank(s);
}

// Rows each local expert's GEMMs see per micro-batch. Balanced, dropless routing: T·k/E rows per expert, rounded up
// (the busiest expert sets the grouped kernel's end). With EP the rank runs E/ep local experts, each on the T·k/E rows
// of every one of its ep peers: T·k·ep/E rows (the same FLOPs per rank, larger and so more efficient GEMMs),
// × kExpertLoadImbalance; T as expert_input_tokens.
int64_t rows_per_local_expert(const ModelSpec& m, const Strategy& s) {
  // Token dropping with padding: every expert gets its capacity ⌈T_r·k/E · F⌉ from each of the etp·ep ranks that
  // dispatch to it (Megatron-Core moe/moe_utils.py get_capacity on the rank's own tokens; token_dispatcher.py
  // drop_and_pad: num_tokens_per_local_expert = capacity · tp_size · ep_size).
  if (s.moe_capacity_factor > 0) {
    const double capacity = std::ceil(static_cast<double>(routed_tokens_per_rank(s) * m.experts_per_token) /
                                      static_cast<double>(m.experts) * s.moe_capacity_factor);
    return static_cast<int64_t>(capacity) * expert_tensor_parallel(s) * std::max<int64_t>(s.ep, 1);
  }
  const int64_t T = expert_input_tokens(s), ep = std::max<int64_t>(s.ep, 1);
  const double routed = static_cast<double>(T * m.experts_per_token * ep) * kExpertLoadImbalance;
  return static_cast<int64_t>(std::ceil(routed / static_cast<double>(m.experts)));
}

}  // namespace

double grouped_gemm_time_s(const GpuSpec& g, DType d, int64_t groups, const GemmShape& each) {
  if (groups <= 0) return 0;
  const double one = gemm_time_s(g, d, each);
  if (!(one > 0)) return 0;
  return static_cast<double>(groups) * std::max(one - kLaunchGapS, 0.0) + kLaunchGapS;
}

MoeMlpTime moe_mlp_time(const ModelSpec& m, const Strategy& s, const GpuSpec& g, DType d) {
  MoeMlpTime out;
  const int64_t T = s.micro_batch * seq_per_rank(s), h = m.hidden, t = std::max<int64_t>(s.tp, 1);
  const int64_t et = expert_tensor_parallel(s), mats = model_mlp_matrices(m) - 1;
  const int64_t column = mats * m.expert_ffn_hidden / et;  // a routed expert's gate + up on one expert-TP rank
  const int64_t row = m.expert_ffn_hidden / et;
  const int64_t local = m.experts / std::max<int64_t>(s.ep, 1), rows = rows_per_local_expert(m, s);
  const DType lt = linear_gemm_dtype(s);
  const double f8 = fp8_gemm_time_factor(s);
  const double routed = f8 / grouped_gemm_ratio(g);
  out.up = scaled(grouped_linear(g, lt, local, rows, column, h), routed);
  out.down = scaled(grouped_linear(g, lt, local, rows, h, row), routed);
  // Shared experts see every token: one MLP of shared · f columns split by TP like a dense MLP (DeepSeekMoE §3.2;
  // Megatron SharedExpertMLP).
  if (m.shared_experts > 0) {
    const int64_t shared_column = mats * m.expert_ffn_hidden / t, shared_row = m.expert_ffn_hidden / t;
    out.up = plus(out.up, scaled(grouped_linear(g, lt, 1, T, m.shared_experts * shared_column, h), f8));
    out.down = plus(out.down, scaled(grouped_linear(g, lt, 1, T, h, m.shared_experts * shared_row), f8));
  }
  // Router: the rank's own tokens (its sequence-parallel slice) × E logits from × h, whole on every TP rank
  // (Megatron-Core moe/router.py TopKRouter.gating runs on the MoE layer's input before the dispatch).
  out.up = plus(out.up, grouped_linear(g, d, 1, routed_tokens_per_rank(s), m.experts, h));
  return out;
}

Fp8CastBytes moe_fp8_cast_bytes(const ModelSpec& m, const Strategy& s, double microbatches) {
  Fp8CastBytes out;
  if (!fp8_on(s) || !model_is_moe(m)) return out;
  const double T = static_cast<double>(s.micro_batch * seq_per_rank(s)), h = static_cast<double>(m.hidden);
  const double t = static_cast<double>(std::max<int64_t>(s.tp, 1));
  const double et = static_cast<double>(expert_tensor_parallel(s));
  const double column = static_cast<double>((model_mlp_matrices(m) - 1) * m.expert_ffn_hidden) / et;
  const double row = static_cast<double>(m.expert_ffn_hidden) / et;
  const double local = static_cast<double>(m.experts / std::max<int64_t>(s.ep, 1));
  const double rows = static_cast<double>(rows_per_local_expert(m, s));
  const double shared = static_cast<double>(m.shared_experts);
  auto add = [&](double count, double tokens, double k, double n) {
    const Fp8CastBytes c = fp8_linear_cast_bytes(s, tokens, k, n, microbatches);
    out.fwd += count * c.fwd, out.bwd += count * c.bwd;
  };
  add(local, rows, h, column);  // routed experts' gate/up, then down
  add(local, rows, row, h);
  if (shared > 0) {  // split by TP (moe_mlp_time)
    add(1, T, h, shared * column * et / t);
    add(1, T, shared * row * et / t, h);
  }
  return out;
}

double moe_all_to_all_bytes(const ModelSpec& m, const Strategy& s) {
  if (!model_is_moe(m) || s.ep <= 1) return 0;
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  const double tokens = static_cast<double>(routed_tokens_per_rank(s));
  // Padded to capacity: F times the balanced copies, whatever the routing (token_dispatcher.py num_out_tokens =
  // capacity · num_experts).
  const double load = s.moe_capacity_factor > 0 ? s.moe_capacity_factor : kExpertLoadImbalance;
  return tokens * static_cast<double>(m.experts_per_token * m.hidden) * a * load;
}

namespace {

// Chance that a token's top-k (k distinct of `experts`, uniform: balanced routing, and the benchmarks' forced balance
// draws random logits) picks at least one of the `held` experts of one rank or NVLink domain: 1 − C(E−e, k)/C(E, k).
double chance_token_reaches(int64_t experts, int64_t held, int64_t k) {
  double miss = 1;
  for (int64_t i = 0; i < k; ++i)
    miss *= std::max<double>(0.0, static_cast<double>(experts - held - i)) / static_cast<double>(experts - i);
  return 1 - miss;
}

// One dispatch (or combine) of DeepEP's normal kernels or HybridEP. Both send a token once to every rank that holds
// one of its experts, not once per expert (DeepEP Buffer.get_dispatch_layout: is_token_in_rank; Megatron-Core
// moe/fused_a2a.py), and across NVLink domains once per domain, over RDMA to one rank there, which forwards it over
// NVLink to the others (deepseek-ai/DeepEP csrc/kernels/internode.cu: one RDMA token carries SourceMeta's bitmask of
// the NVLink ranks it goes to; DeepSeek-V3 report §3.2.2; Hybrid-EP's "hierarchical communication", RDMA between
// nodes and NVLink inside). NCCL's all-to-all, the all-to-all dispatcher's, sends one copy per selected expert.
// The combine returns the same copies (summed inside the domain before the RDMA leg).
double flex_dispatch_time_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, double copies_bytes) {
  const GroupLayout g = ep_group(s, c);
  const int64_t ranks = std::max<int64_t>(g.size, 1), per_domain = std::clamp<int64_t>(g.ranks_per_node, 1, ranks);
  const int64_t domains = (ranks + per_domain - 1) / per_domain, k = m.experts_per_token;
  // Per token: copies_bytes / k is one copy of its hidden state.
  const double copy = copies_bytes / static_cast<double>(std::max<int64_t>(k, 1));
  const double rank_hit = chance_token_reaches(m.experts, m.experts / ranks, k);
  const double domain_hit = chance_token_reaches(m.experts, m.experts / domains, k);
  // Every other rank the token reaches receives it over NVLink once (from its source, or from the domain's receiving
  // rank); every other domain it reaches once over the network.
  const double nvlink = copy * static_cast<double>(ranks - 1) * rank_hit;
  const double net = copy * static_cast<double>(domains - 1) * domain_hit;
  return exchange_time_s(c, nvlink, net, g);
}

}  // namespace

MoeAllToAll moe_all_to_all_time(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, double block_fwd_s,
                                double block_bwd_s) {
  MoeAllToAll out;
  const double bytes = moe_all_to_all_bytes(m, s);
  if (!(bytes > 0)) return out;
  const double one = s.moe_dispatcher == MoeDispatcher::alltoall
                         ? collective_time_s(c, Collective::all_to_all, bytes, ep_group(s, c))
                         : flex_dispatch_time_s(m, s, c, bytes);
  const double share = moe_layer_share(m);
  out.fwd = share * 2 * one;
  // Full recomputation (of the recomputed share of the blocks: partial_recompute.hpp), or Megatron's "moe" recompute
  // module, repeats the forward's two.
  const double repeated = recomputes(s, RecomputeModule::moe) ? 1.0 : recomputed_block_share(m, s);
  out.bwd = share * (2 + 2 * repeated) * one;
  out.total = out.fwd + out.bwd;
  // DualPipe, or Megatron-Core's batch-level EP overlap (one micro-batch's forward beside another's backward,
  // moe/README.md): the all-to-alls behind the other micro-batch's compute.
  const bool dualpipe = s.schedule == Schedule::dualpipev && s.pp > 1;
  if (dualpipe || effective_ep_comm_overlap(s, framework_traits(s.framework))) {
    const double exposed = std::max(0.0, out.total - (block_fwd_s + block_bwd_s));
    const double cost = exposed + overlap_compute_slowdown(c.gpu) * (out.total - exposed);
    out.fwd = cost * out.fwd / out.total;
    out.bwd = cost - out.fwd;
  }
  return out;
}

double moe_dispatch_bytes_per_token(const ModelSpec& m, const Strategy& s, double a) {
  const double h = static_cast<double>(m.hidden), k = static_cast<double>(m.experts_per_token);
  const double e = static_cast<double>(m.experts);
  // Router: logits written (a·E), read and written again in fp32 by the score function and top-k (8·E);
  // permute: read h, write k·h; unpermute with the probabilities: read k·h, write h (Megatron moe_utils.py).
  // Per token of the micro-batch: under sequence parallelism a TP rank routes its T/tp slice (router.py runs on the
  // sequence-parallel input: routed_tokens_per_rank), and sorts what its expert-TP group gathered after the
  // all-to-all (expert_input_tokens).
  const double T = static_cast<double>(s.micro_batch * seq_per_rank(s));
  const double routed_share = static_cast<double>(routed_tokens_per_rank(s)) / T;
  const double sorted_share = static_cast<double>(expert_input_tokens(s)) / T;
  const double first = routed_share * (a * e + 8 * e + a * 2 * (h + k * h));
  // The all-to-all dispatcher's second permutation: read and write the k·h received copies before the experts, and
  // again after them (a copy even where one source rank sent everything: the condition is num_local_experts > 1). The
  // flex dispatchers permute once, into expert order, after their dispatch (fused_a2a.py), which the first term counts.
  const bool sorts = s.moe_dispatcher == MoeDispatcher::alltoall && m.experts / std::max<int64_t>(s.ep, 1) > 1;
  return first + (sorts ? sorted_share * a * 4 * k * h : 0.0);
}

MoeBiasBytes moe_expert_bias_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double a) {
  if (!model_is_moe(m) || !m.out_bias || !fw.moe_expert_bias_per_expert || s.cuda_graphs == CudaGraphs::full)
    return {};
  // Per routed copy of h values (t: the fc2 output in the activation dtype a; b·p and what follows in fp32):
  // forward  b·p (write 4h), t + b·p (read a·h + 4h, write 4h), cat (read and write 4h), cast (read 4h, write a·h);
  // backward the cast's gradient up (read a·h, write 4h), the add's gradient to t down (read 4h, write a·h), the mul's
  // two gradients, grad·p summed over the rows for b and grad·b summed over h for p (each: read 4h, write 4h, read 4h).
  const double copies = static_cast<double>(expert_input_tokens(s)) * static_cast<double>(m.experts_per_token) *
                        kExpertLoadImbalance;
  const double h = static_cast<double>(m.hidden);
  const double fwd = (4 + (a + 8) + 8 + (4 + a)) * h, bwd = ((a + 4) + (4 + a) + 2 * 12) * h;
  return {copies * fwd, copies * bwd};
}

void add_mtp_costs(const ModelSpec& m, const Strategy& s, const GpuSpec& g, MicrobatchCosts& out) {
  if (m.mtp_layers <= 0) return;
  const int64_t T = s.micro_batch * seq_per_rank(s), h = m.hidden, t = std::max<int64_t>(s.tp, 1);
  const DType d = precision_compute_dtype(s.precision);
  // eh_proj: [T × 2h] · [2h × h/t] (Megatron-Core multi_token_prediction.py: column-parallel eh_proj).
  const MoeGemmTime proj = grouped_linear(g, d, 1, T, h / t, 2 * h);
  const double n = static_cast<double>(m.mtp_layers);
  const double head_fwd = out.head_fwd_s, head_bwd = out.head_bwd_s;
  out.head_fwd_s += n * (proj.fwd + out.block_fwd_s + out.block_tp_fwd_s + out.block_ep_fwd_s + head_fwd);
  out.head_bwd_s +=
      n * (proj.bwd + out.block_bwd_s + out.block_recompute_s + out.block_tp_bwd_s + out.block_ep_bwd_s + head_bwd);
}

// Fitted by build/bench/shardplan_accuracy on the public MoE runs (Megatron-Bridge's tables, 25.09–26.08: eager
// all-to-all rows, partial and full CUDA graphs, token-dropping rows, DeepEP and HybridEP rows; Megatron-LM's MoE
// recipe table of 2026-06, MLM-MOE-2606, joined 2026-12-06 after it was predicted: the fit did not move), each source
// weighted equally, the dense fit held fixed; reports/accuracy.md gives the fit and its leave-one-source-out error.
// The fixed part is the all-to-all dispatcher's host synchronisation stall: its dropless path copies the split sizes to
// the host once per layer (token_dispatcher.py MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize) and the GPU
// idles while the host launches what follows. Token dropping with padding never syncs (preprocess: the drop_and_pad
// branch returns capacity-sized counts built on the host), so it pays only the per-expert part — which fits the
// token-dropping rows better than the stall does (MoE rows 24.1 → 21.6 %). 5.02 ms + 0.111 ms until the sixteenth
// session priced the all-to-all dispatcher's second permutation (moe_dispatch_bytes_per_token) and the grouped GEMMs'
// share of the dense rate (kGroupedOverDenseSustained), GPU time the stall had stood in for, and counted the router
// and permutations on a TP rank's sequence-parallel slice; 3.972 ms + 0.0758 ms until Blackwell Ultra had its own
// dense fraction (2026-12-07): its MoE rows then ran faster on the GPU and the refit gave the host more; 4.370 ms +
// 0.0623 ms until GPT-OSS's expert bias (moe_expert_bias_bytes) took GPU time the per-expert part had stood in for;
// 4.469 ms + 0.0498 ms until attention had its own sustained share (kAttentionSustained, 2026-12-07); 4.519 ms +
// 0.0548 ms until Megatron-Bridge's Kimi-K2 row joined (2026-12-07; its objective is flat: one row moves it).
constexpr double kMoeHostLayerS = 4.429e-3;
constexpr double kMoeHostLocalExpertS = 0.0602e-3;
// The flex dispatchers' share of the fixed part, fitted the same way: 0.566 (0.569 before the Kimi-K2 row; 0.574
// before attention's own sustained share; 0.547 before GPT-OSS's expert bias was
// priced; 0.525 before Blackwell Ultra's own fraction; 0.384 before the sixteenth session's GPU terms; 0.41 before the
// dense fractions it is fitted beside moved with OLMo-core's rows, 2026-12-06). Both wait on the host once per layer
// to size their output (_HybridEPManager.dispatch without a rank capacity factor: "CPU sync in dispatch";
// _DeepepManager.get_permuted_hidden_states_by_experts: tokens_per_expert.sum().item()), but compute the dispatch
// layout in one kernel (moe/fused_a2a.py fused_dispatch: buffer.get_dispatch_layout; HybridEP inside its dispatch
// call) where the all-to-all dispatcher runs a chain of small kernels and an all-gather of the splits over the EP·TP
// group before its sync (MoEAlltoAllTokenDispatcher.preprocess, dispatch_preprocess): less to launch around the
// stall. While their traffic was priced as NCCL's all-to-all (one copy per expert), this share fitted 0: the
// overpriced traffic stood in for the stall. With the deduplicated dispatch (flex_dispatch_time_s) it fitted 0.41, its
// leave-one-source-out values 0.30–0.51 (reports/accuracy.md); pinned at 1 the MoE rows fit worse.
constexpr double kMoeHostFusedDispatchShare = 0.566;

double moe_host_layer_default_s() { return kMoeHostLayerS; }
double moe_host_local_expert_default_s() { return kMoeHostLocalExpertS; }
double moe_host_fused_dispatch_share_default() { return kMoeHostFusedDispatchShare; }

double moe_host_gap_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  if (!model_is_moe(m) || s.cuda_graphs == CudaGraphs::full) return 0;
  const double layer = c.moe_host_layer_s > 0 ? c.moe_host_layer_s : kMoeHostLayerS;
  const double expert = c.moe_host_local_expert_s > 0 ? c.moe_host_local_expert_s : kMoeHostLocalExpertS;
  const double share = s.moe_dispatcher == MoeDispatcher::alltoall ? 1.0
                       : c.moe_host_fused_dispatch_share > 0     ? c.moe_host_fused_dispatch_share
                                                                 : kMoeHostFusedDispatchShare;  // 0 = none
  const double local = framework_traits(s.framework).moe_launches_per_expert
                           ? static_cast<double>(m.experts / std::max<int64_t>(s.ep, 1))
                           : 0.0;
  // The stall: an eager dispatcher that syncs (padded dispatch has none). Graphs of the static parts keep the sync:
  // with moe_preprocess captured, the splits' device-to-host copy moves to "before_ep_alltoall" and the host still
  // waits there (token_dispatcher.py MoEAlltoAllTokenDispatcher.__init__ cuda_dtoh_point; transformer_config.py refuses
  // to capture a preprocess that syncs). What they remove is the host's launches of the pre-sync part (norm,
  // attention, router), and the rows say that is nearly all of the stall: a fitted share kept under them came out
  // 0.11 (leave-one-source-out 0.00-0.72; MoE rows 13.9 -> 13.7 %, leave-one-source-out 14.3 % either way, nineteenth
  // session), so none is priced.
  const bool stalls = s.cuda_graphs == CudaGraphs::none && s.moe_capacity_factor <= 0;
  return (stalls ? share * layer : 0.0) + local * expert;
}

bool mlp_meets_tp_collectives(const ModelSpec& m, const Strategy& s) {
  return !model_is_moe(m) || m.shared_experts > 0 || expert_tensor_parallel(s) > 1;
}

double mlp_width_per_token(const ModelSpec& m) {
  if (!model_is_moe(m)) return static_cast<double>(m.ffn_hidden);
  return static_cast<double>((m.experts_per_token + m.shared_experts) * m.expert_ffn_hidden);
}

}  // namespace shardplan
