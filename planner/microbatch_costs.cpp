// Costs of one micro-batch on one rank: every GEMM of a block at its own shape, attention, memory-bound work,
// and the tensor-parallel collectives on the critical path.
#include <algorithm>
#include <array>
#include <vector>

#include "planner/activations.hpp"
#include "planner/attention_linears.hpp"
#include "planner/comm_cost.hpp"
#include "planner/fp8.hpp"
#include "planner/framework.hpp"
#include "planner/compute_cost.hpp"
#include "planner/groups.hpp"
#include "planner/moe.hpp"
#include "planner/moe_costs.hpp"
#include "planner/precision.hpp"
#include "planner/recompute_modules.hpp"
#include "planner/step_time.hpp"
#include "planner/partial_recompute.hpp"

namespace shardplan {

namespace {

struct Dims {
  double tokens;       // T = micro_batch · seq
  double h, f, vocab;  // hidden, ffn, padded vocab (whole)
  int64_t t;           // tensor-parallel degree
  int64_t q_r, kv_r;   // query and key/value widths on one TP rank
  int64_t heads_r, head_dim;
  double a;            // bytes per activation element
};

Dims dims_of(const ModelSpec& m, const Strategy& s) {
  Dims d{};
  d.tokens = static_cast<double>(s.micro_batch * seq_per_rank(s));  // seq / cp under context parallelism
  d.h = static_cast<double>(m.hidden);
  d.f = static_cast<double>(m.ffn_hidden);
  d.vocab = static_cast<double>(model_padded_vocab(m));
  d.t = s.tp;
  d.head_dim = model_head_dim(m);
  d.heads_r = m.heads / s.tp;
  d.q_r = model_q_width(m) / s.tp;
  d.kv_r = std::max<int64_t>(m.kv_heads / s.tp, 1) * d.head_dim;
  d.a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  return d;
}

// Forward Y[m×n] = X[m×k]·W[k×n]; backward dX = dY·Wᵀ (m×k×n) and dW = Xᵀ·dY (k×n×m) (Narayanan et al. 2021,
// §5.1: backward is two GEMMs of the forward's size).
struct LinearTime {
  double fwd = 0, bwd = 0;
  double wgrad = 0;  // the dW part of bwd (the zero-bubble schedules' W pass)
};
LinearTime linear_time(const GpuSpec& g, DType dt, int64_t m, int64_t n, int64_t k) {
  const double dw = gemm_time_s(g, dt, {k, n, m});
  return {gemm_time_s(g, dt, {m, n, k}), gemm_time_s(g, dt, {m, k, n}) + dw, dw};
}

// The model's attention time relative to every layer attending causally to the whole sequence. A windowed layer
// does s·w − w²/2 of the s²/2 score blocks (moe.hpp attention_work_fraction), and each query's inner loop visits
// only min(s, w) keys, so it runs at the kernel's efficiency for that length (compute_cost.hpp
// flash_attention_efficiency's ramp), not the sequence's: its fixed per-row work (loading the query tile, writing
// dQ and the output) does not shrink with the window. cuDNN's SDPA backward at s 4096, head_dim 64 takes 171 µs at
// window 511 and 277 µs at 1023 against 558 µs causal (cudnn-frontend PR #505, 2026-08): a straight line with ~66 µs
// at window 0, where the work fraction alone gives 0.
double windowed_attention_share(const ModelSpec& m, const GpuSpec& g, int64_t seq, int64_t head_dim,
                                AttentionKernel kernel) {
  const double windowed = static_cast<double>(windowed_layers(m));
  const double layers = static_cast<double>(std::max<int64_t>(m.layers, 1));
  if (windowed <= 0 || seq <= 0) return attention_work_fraction(m, seq);
  const int64_t keys = std::min(seq, m.sliding_window);
  const double slower = flash_attention_efficiency(g, seq, head_dim, false, kernel) /
                        flash_attention_efficiency(g, keys, head_dim, false, kernel);
  return (windowed * windowed_layer_work(m, seq) * slower + (layers - windowed)) / layers;
}

// Attention core (scores, softmax, weighted values) for one micro-batch on one rank.
LinearTime attention_time(const ModelSpec& m, const GpuSpec& g, DType dt, const Strategy& s, const FrameworkTraits& fw,
                          const Dims& d, bool dropout) {
  const int64_t b = s.micro_batch, seq = s.seq;
  if (s.flash_attn) {
    const AttentionKernel kernel = s.attention_kernel.value_or(fw.attention_kernel);
    // Sliding windows: the kernel skips the blocks outside the window, at the window's efficiency
    // (windowed_attention_share).
    // Context parallelism: each rank's queries are 2 of the sequence's 2·cp chunks, chunks i and 2cp−1−i, so every
    // rank does 1/cp of the causal work (Megatron-Core get_batch_on_this_cp_rank, megatron/core/utils.py; torch
    // _HeadTailLoadBalancer): the whole sequence's attention of this rank's heads, divided by cp. (CP needs a fused
    // kernel: strategy.cpp validate_context_parallel.)
    // MLA's scores run at the q/k width (nope + rope) and its weighted values at v_head_dim: the kernel's work is
    // that of their mean width (DeepSeek-V2 §2.1.3).
    const int64_t width = (attention_qk_head_dim(m) + attention_v_head_dim(m)) / 2;
    const double share =
        windowed_attention_share(m, g, seq, width, kernel) / static_cast<double>(std::max<int64_t>(s.cp, 1));
    return {share * flash_attention_forward_s(g, dt, b, seq, d.heads_r, width, true, kernel),
            share * flash_attention_backward_s(g, dt, b, seq, d.heads_r, width, true, kernel)};
  }
  // Unfused (Megatron without flash): batched q·kᵀ and softmax·v over the full s×s (the causal mask is applied
  // to it, not skipped), softmax (+ dropout) over b·heads·s² elements read and written.
  const int64_t rows = b * d.heads_r * seq;
  const int64_t qk = attention_qk_head_dim(m), v = attention_v_head_dim(m);
  LinearTime scores{gemm_time_s(g, dt, {rows, seq, qk}), 2 * gemm_time_s(g, dt, {rows, seq, qk})};
  LinearTime values{gemm_time_s(g, dt, {rows, v, seq}), 2 * gemm_time_s(g, dt, {rows, v, seq})};
  const double elements = static_cast<double>(rows) * static_cast<double>(seq);
  const double passes_fwd = dropout ? 4.5 : 2.0;  // softmax read+write; dropout read+write+mask
  const double softmax_fwd = memory_bound_time_s(g, elements * d.a * passes_fwd);
  return {scores.fwd + values.fwd + softmax_fwd, scores.bwd + values.bwd + 1.5 * softmax_fwd};
}

// Elementwise work of a block's forward, bytes moved per token: two norms (read + write h), two residual adds
// (read 2h, write h), the MLP activation (GELU: read + write f/t; SwiGLU: read 2f/t, write f/t), rotary
// embedding of q and k, dropout. Norms run on T/t tokens under sequence parallelism.
double block_elementwise_bytes(const ModelSpec& m, const Strategy& s, const Dims& d) {
  const double norm_share = s.sp ? 1.0 / static_cast<double>(d.t) : 1.0;
  double per_token = 2 * 2 * d.h * norm_share + 2 * 3 * d.h * norm_share;
  const double f_r = mlp_width_per_token(m) / static_cast<double>(d.t);  // MoE: k + shared experts (moe_costs.hpp)
  per_token += m.mlp == MlpKind::swiglu ? 3 * f_r : 2 * f_r;
  if (model_is_moe(m)) per_token += moe_dispatch_bytes_per_token(m, s, d.a) / d.a;  // router, permute (×a below)
  if (m.position == PositionKind::rotary) per_token += 2 * static_cast<double>(d.q_r + d.kv_r);
  per_token *= d.a;
  if (m.dropout) per_token += 2 * (2 * d.h * d.a + d.h) * norm_share;
  return per_token * d.tokens;
}

// torch.compile's Inductor fuses each chain of pointwise ops and reductions into one generated kernel (Ansel et al.
// 2024, "PyTorch 2", §4–5), which reads and writes each tensor about once, as Megatron's fused kernels do: the fused
// stack's factor (framework.cpp megatron_traits, 1.5) in place of eager PyTorch's 4.
constexpr double kCompiledElementwiseTrafficFactor = 1.5;
double elementwise_traffic_factor(const Strategy& s, const FrameworkTraits& fw) {
  return s.compile ? std::min(fw.elementwise_traffic_factor, kCompiledElementwiseTrafficFactor) : fw.elementwise_traffic_factor;
}

// The four GEMMs that meet a TP collective: QKV and MLP-up consume the all-gathered input, the attention and MLP
// output projections produce what is reduce-scattered (Korthikanti §4.2.2).
struct TpGemms {
  LinearTime qkv, proj, up, down;
};

// The forward work Megatron's --recompute-modules repeat in backward, per block (recompute_modules.hpp), beyond the
// attention core (core_attn, priced by the caller): each module's GEMMs at their shapes and its memory-bound work at
// the runtime's elementwise traffic; MoE-only modules weighted by the MoE layers' share, "mlp" by the dense layers'.
struct ModuleRecomputeInputs {
  double elementwise_factor;  // elementwise_traffic_factor
  double moe_mlp_fwd;         // the MoE layer's expert, shared-expert and router GEMMs (moe_mlp_time), and the
                              // experts' output bias where it is its own ops (moe_expert_bias_bytes)
  double host_gap;            // an MoE layer's host launch gap (moe_host_gap_s)
};
double module_recompute_s(const ModelSpec& m, const Strategy& s, const GpuSpec& g, const Dims& d,
                          const ModuleRecomputeInputs& in) {
  if (s.recompute != Recompute::selective || s.recompute_modules == 0) return 0;
  const double moe_share = moe_layer_share(m);
  const double dense_share = 1 - moe_share;
  const DType lt = linear_gemm_dtype(s);
  const double f8 = fp8_gemm_time_factor(s);
  const auto T = static_cast<int64_t>(d.tokens);
  const double t = static_cast<double>(d.t), norm_share = s.sp ? 1.0 / t : 1.0;
  auto mem = [&](double bytes_per_token) {
    return memory_bound_time_s(g, in.elementwise_factor * bytes_per_token * d.a * d.tokens);
  };
  double out = 0;
  // layernorm: the norms that are modules of their own — an MoE layer's pre-MLP norm, MLA's input norm (read h,
  // write h).
  if (recomputes(s, RecomputeModule::layernorm))
    out += mem(2 * d.h * norm_share) * (moe_share + (model_has_mla(m) ? 1.0 : 0.0));
  // mla_up_proj: q's up-projection (q_lora_rank → heads·(nope + rope)) and K/V's (kv_lora_rank → heads·(nope + v)),
  // split by TP, and RoPE on q and k (multi_latent_attention.py MLASelfAttention.get_query_key_value_tensors).
  if (recomputes(s, RecomputeModule::mla_up_proj) && model_has_mla(m)) {
    const int64_t heads_r = m.heads / s.tp;
    const int64_t q_in = m.q_lora_rank > 0 ? m.q_lora_rank : m.hidden;
    const int64_t q_out = heads_r * (m.qk_nope_head_dim + m.qk_rope_head_dim);
    const int64_t kv_out = heads_r * (m.qk_nope_head_dim + m.v_head_dim);
    out += f8 * (gemm_time_s(g, lt, {T, q_out, q_in}) + gemm_time_s(g, lt, {T, kv_out, m.kv_lora_rank}));
    out += mem(2 * static_cast<double>(2 * q_out));
  }
  // mlp: a dense layer's MLP (up and down GEMMs, the activation).
  if (recomputes(s, RecomputeModule::mlp) && dense_share > 0) {
    const int64_t f_r = m.ffn_hidden / s.tp, up_n = (model_mlp_matrices(m) - 1) * f_r;
    const double gemms = f8 * (gemm_time_s(g, lt, {T, up_n, m.hidden}) + gemm_time_s(g, lt, {T, m.hidden, f_r}));
    out += dense_share * (gemms + mem(3 * static_cast<double>(f_r)));
  }
  const double routed_r = static_cast<double>(m.experts_per_token * m.expert_ffn_hidden) / t;
  // moe: the whole routed layer again — GEMMs, router, permutation, the host's launches (its all-to-alls:
  // moe_all_to_all_time); moe_act then has nothing left to add.
  if (recomputes(s, RecomputeModule::moe)) {
    out += moe_share * (in.moe_mlp_fwd + mem(3 * routed_r) + mem(moe_dispatch_bytes_per_token(m, s, d.a) / d.a) + in.host_gap);
  } else if (recomputes(s, RecomputeModule::moe_act)) {
    out += moe_share * mem(3 * routed_r);  // the experts' activation: read gate and up, write the product
  }
  // shared_experts: the shared experts' MLP (split by TP like a dense MLP).
  if (recomputes(s, RecomputeModule::shared_experts) && !recomputes(s, RecomputeModule::moe) && m.shared_experts > 0) {
    const int64_t sf_r = m.shared_experts * m.expert_ffn_hidden / s.tp;
    const int64_t up_n = (model_mlp_matrices(m) - 1) * sf_r;
    out += moe_share * (f8 * (gemm_time_s(g, lt, {T, up_n, m.hidden}) + gemm_time_s(g, lt, {T, m.hidden, sf_r})) +
                        mem(3 * static_cast<double>(sf_r)));
  }
  return out;
}

// One block: forward, backward and what recomputation repeats.
TpGemms block_compute(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const GpuSpec& g,
                      const FrameworkTraits& fw, const Dims& d, MicrobatchCosts& out) {
  const DType dt = precision_compute_dtype(s.precision);
  const auto T = static_cast<int64_t>(d.tokens);
  const auto h = m.hidden;
  const int64_t f_r = m.ffn_hidden / s.tp;
  // The linear layers' GEMMs in FP8 under --fp8 (planner/fp8.hpp), the attention core in the compute dtype.
  const DType lt = linear_gemm_dtype(s);
  const int64_t up_n = (model_mlp_matrices(m) - 1) * f_r;
  const double f8 = fp8_gemm_time_factor(s);
  auto scaled = [f8](LinearTime l) { return LinearTime{l.fwd * f8, l.bwd * f8, l.wgrad * f8}; };
  const AttentionLinears attn = attention_linears(m, s, T);
  LinearTime qkv;
  for (int i = 0; i < attn.count; ++i) {
    const LinearTime one = scaled(linear_time(g, lt, attn.in[i].tokens, attn.in[i].n, attn.in[i].k));
    qkv.fwd += one.fwd, qkv.bwd += one.bwd, qkv.wgrad += one.wgrad;
  }
  const LinearTime proj = scaled(linear_time(g, lt, attn.out.tokens, attn.out.n, attn.out.k));
  LinearTime up = scaled(linear_time(g, lt, T, up_n, h));
  LinearTime down = scaled(linear_time(g, lt, T, h, f_r));
  double moe_mlp_fwd = 0;
  if (model_is_moe(m)) {  // issue 17: grouped expert GEMMs (FP8 under --fp8), shared experts, router (moe_costs.hpp)
    const MoeMlpTime e = moe_mlp_time(m, s, g, dt);
    up = {e.up.fwd, e.up.bwd, e.up.wgrad};
    down = {e.down.fwd, e.down.bwd, e.down.wgrad};
    moe_mlp_fwd = e.up.fwd + e.down.fwd;
  }
  LinearTime core = attention_time(m, g, dt, s, fw, d, m.dropout);
  // Context parallelism: torch's merge of each step's partial output (memory-bound, inside the slices), then the K/V
  // ring around the attention slices (planner/context_parallel.hpp).
  const CpMergeBytes merge = cp_merge_bytes(m, s);
  core.fwd += memory_bound_time_s(g, merge.fwd);
  core.bwd += memory_bound_time_s(g, merge.bwd);
  out.cp = cp_rings(m, s, c, core.fwd, core.bwd);
  out.block_cp_fwd_s = out.cp.fwd.exposed();
  out.block_cp_bwd_s = out.cp.bwd.exposed();
  const double elementwise = memory_bound_time_s(g, elementwise_traffic_factor(s, fw) * block_elementwise_bytes(m, s, d));
  // K and V copied to every query head (attention_linears.hpp attention_kv_heads_per_rank): one copy kernel reads
  // them and writes them q-wide; backward sums the copies' gradients back, the same bytes.
  const double kv_repeat =
      s.kv_repeated ? memory_bound_time_s(g, 2 * d.tokens * static_cast<double>(d.q_r + d.kv_r) * d.a) : 0.0;
  // FP8 casts of each linear layer's operands (planner/fp8.cpp), memory-bound.
  Fp8CastBytes casts;
  if (fp8_on(s)) {
    const double mb = static_cast<double>(grad_accum_steps(s));
    const double Td = d.tokens, hd = static_cast<double>(h), fd = static_cast<double>(f_r);
    // (tokens, k, n) of each FP8 linear layer.
    std::vector<std::array<double, 3>> linears;
    for (int i = 0; i < attn.count; ++i)
      linears.push_back({static_cast<double>(attn.in[i].tokens), static_cast<double>(attn.in[i].k),
                         static_cast<double>(attn.in[i].n)});
    linears.push_back({static_cast<double>(attn.out.tokens), static_cast<double>(attn.out.k),
                       static_cast<double>(attn.out.n)});
    if (!model_is_moe(m)) linears.insert(linears.end(), {{Td, hd, static_cast<double>(up_n)}, {Td, fd, hd}});
    for (const auto& [tokens, k, n] : linears) {
      const Fp8CastBytes c = fp8_linear_cast_bytes(s, tokens, k, n, mb);
      casts.fwd += c.fwd;
      casts.bwd += c.bwd;
    }
    const Fp8CastBytes experts = moe_fp8_cast_bytes(m, s, mb);  // the MoE MLP's grouped GEMMs (zero for dense)
    casts.fwd += experts.fwd;
    casts.bwd += experts.bwd;
  }
  const double cast_fwd = memory_bound_time_s(g, casts.fwd), cast_bwd = memory_bound_time_s(g, casts.bwd);
  const double gemm_fwd = qkv.fwd + proj.fwd + up.fwd + down.fwd;
  // The experts' output bias where the runtime adds it per expert (moe_costs.hpp moe_expert_bias_bytes), in the bytes
  // its own ops move, averaged over the blocks by the MoE share.
  const double moe_share = moe_layer_share(m);
  const MoeBiasBytes bias = moe_expert_bias_bytes(m, s, fw, d.a);
  const double bias_fwd = moe_share * memory_bound_time_s(g, bias.fwd);
  const double bias_bwd = moe_share * memory_bound_time_s(g, bias.bwd);
  // Eager MoE layers wait for the host (moe_costs.hpp moe_host_gap_s), averaged over the blocks by the MoE share.
  const double gpu_fwd = gemm_fwd + core.fwd + elementwise + kv_repeat + cast_fwd + bias_fwd;
  const double gpu_bwd =
      qkv.bwd + proj.bwd + up.bwd + down.bwd + core.bwd + 2 * elementwise + kv_repeat + cast_bwd + bias_bwd;
  out.block_host_gap_s = model_is_moe(m) ? moe_host_gap_s(m, s, c) * moe_share : 0.0;
  out.block_fwd_s = gpu_fwd + out.block_host_gap_s;
  out.block_bwd_s = gpu_bwd;
  // CPU activation offloading (strategy.hpp offload_activation_layers): each offloaded layer's saved tensors go to
  // the host on a copy stream behind the next layer's forward and come back behind the previous layer's backward
  // (Transformer Engine cpu_offload.py); only what outlasts a layer's compute shows, averaged over the layers.
  if (s.offload_activation_layers > 0) {
    const double link = (g.host_link_gbps > 0 ? g.host_link_gbps : g.pcie_gbps) * kGB;
    const double copy = link > 0 ? block_activation_bytes(m, s, fw) / link : 0.0;
    const double share = static_cast<double>(s.offload_activation_layers) / static_cast<double>(std::max<int64_t>(m.layers, 1));
    out.block_offload_fwd_s = share * std::max(0.0, copy - gpu_fwd);
    out.block_offload_bwd_s = share * std::max(0.0, copy - gpu_bwd);
    out.block_fwd_s += out.block_offload_fwd_s;
    out.block_bwd_s += out.block_offload_bwd_s;
  }
  out.block_wgrad_s = qkv.wgrad + proj.wgrad + up.wgrad + down.wgrad;
  switch (s.recompute) {
    case Recompute::none: out.block_recompute_s = 0; break;
    // Korthikanti §5: selective recomputation repeats the attention core's forward; with a fused kernel only where
    // the runtime checkpoints it anyway (FrameworkTraits::core_attn_recompute_repeats_fused), elsewhere the kernel's
    // saved output and statistics serve its backward. Frameworks with op-level policies repeat more (framework.hpp).
    case Recompute::selective:
      out.block_recompute_s = (!recomputes(s, RecomputeModule::core_attn) ||
                                       (s.flash_attn && !fw.core_attn_recompute_repeats_fused)
                                   ? 0
                                   : core.fwd) +
                              fw.selective_recompute_gemm_share * gemm_fwd +
                              (fw.selective_recomputes_elementwise ? elementwise + kv_repeat : 0) +
                              module_recompute_s(m, s, g, d,
                                                 {elementwise_traffic_factor(s, fw),
                                                  moe_mlp_fwd + memory_bound_time_s(g, bias.fwd),
                                                  moe_host_gap_s(m, s, c)});
      break;
    // Per block: the recomputed share of the blocks' forward (partial_recompute.hpp; 1 under plain full recompute).
    case Recompute::full: out.block_recompute_s = recomputed_block_share(m, s) * out.block_fwd_s; break;
  }
  return {qkv, proj, up, down};
}

// Time a TP collective adds to the critical path when Transformer Engine's userbuffers overlap it with a GEMM; the
// hidden part still costs k = overlap_compute_slowdown of itself (SMs and HBM shared with the GEMM).
//   pipelined: split into one chunk per TP rank, each chunk's exchange behind the previous chunk's GEMM — the
//              first chunk waits alone, later ones only where they outlast their share of the GEMM;
//   bulk: issued beside an independent GEMM in one piece (ub_bulk_dgrad / ub_bulk_wgrad).
double hidden_cost(double comm, double exposed, double k) { return exposed + k * (comm - exposed); }
double pipelined_tp_collective(double comm, double gemm, int64_t chunks, double k) {
  const double n = static_cast<double>(chunks);
  return hidden_cost(comm, comm / n + (n - 1) * std::max(0.0, comm / n - gemm / n), k);
}
double bulk_tp_collective(double comm, double gemm, double k) {
  return hidden_cost(comm, std::max(0.0, comm - gemm), k);
}

// All-gathers of a block's two linear inputs that sequence parallelism repeats in backward for the weight
// gradients: Megatron-Core re-gathers the scattered inputs it saved (Korthikanti §4.2.2); DTensor saved them whole
// (framework.hpp tp_saves_gathered_inputs) unless selective recomputation recomputes them — torchtitan's op-level
// policy saves matmuls, attention and reduce-scatters, not all-gathers (torchtitan/distributed/
// activation_checkpoint.py _op_sac_save_list). Full recomputation's are in its repeated forward.
double sp_regathers(const Strategy& s, const FrameworkTraits& fw) {
  if (!s.sp) return 0;
  if (!fw.tp_saves_gathered_inputs) return 2;
  return s.recompute == Recompute::selective ? 2 : 0;
}

// One block's TP collectives: of T·h activations, and at the attention's input of T × attention_gathered_width (the
// same under multi-head attention).
struct TpCollectives {
  double gather = 0, scatter = 0;        // all-gather, reduce-scatter of T·h (the MLP's)
  double gather_out = 0;                 // the attention output projection's output-gradient all-gather of T·h
  double gather_in = 0, scatter_in = 0;  // the same at the attention's input
};

// PyTorch's async TP (framework.hpp TpOverlapKind::micro_pipeline): Inductor replaces an all-gather whose result
// feeds matmuls as their left operand by fused_all_gather_matmul, and a reduce-scatter whose input is one matmul's
// output (and nothing else's) by fused_matmul_reduce_scatter, each split into one chunk per TP rank
// (torch/_inductor/fx_passes/micro_pipeline_tp.py fuse_all_gather_matmul, _find_consumer_matmuls,
// fuse_matmul_reduce_scatter: `len(rs_input.users) != 1` and a non-matmul input return unfused). Per block:
//   forward, and the forward that full recomputation repeats: the all-gathers before QKV and MLP-up and the
//     reduce-scatters after the output projections all match (pipelined as with userbuffers);
//   backward: a row-parallel layer's output-gradient all-gather feeds its dgrad matmul (fused); a column-parallel
//     layer's input-gradient reduce-scatter sums the dgrads of every matmul reading that input — Q, K and V unless
//     one fused projection (framework.hpp fused_qkv_projection), gate and up of a gated MLP — so it matches only
//     for a single matmul; sequence parallelism's re-gathers for the weight gradients stay as they are.
// The symmetric-memory copies run on copy engines, not SMs; the hidden part still shares HBM
// (k, overlap_compute_slowdown).
void async_tp_comm(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const TpGemms& gemms,
                   const TpCollectives& tc, double k, MicrobatchCosts& out) {
  auto piped = [&](double comm, double gemm) { return pipelined_tp_collective(comm, gemm, s.tp, k); };
  const double mlp = mlp_meets_tp_collectives(m, s) ? 1 : 0;  // an MoE MLP with expert TP 1 has none (moe_costs.hpp)
  const double forward = piped(tc.gather_in, gemms.qkv.fwd) + piped(tc.scatter, gemms.proj.fwd) +
                         mlp * (piped(tc.gather, gemms.up.fwd) + piped(tc.scatter, gemms.down.fwd));
  auto dgrad = [](const LinearTime& l) { return l.bwd - l.wgrad; };
  const bool qkv_one_matmul = fw.fused_qkv_projection && !model_has_mla(m);
  const bool up_one_matmul = model_mlp_matrices(m) == 2;  // GELU: one up matmul; SwiGLU: gate and up
  const double column = (qkv_one_matmul ? piped(tc.scatter_in, dgrad(gemms.qkv)) : tc.scatter_in) +
                        mlp * (up_one_matmul ? piped(tc.scatter, dgrad(gemms.up)) : tc.scatter);
  const double row = piped(tc.gather_out, dgrad(gemms.proj)) + mlp * piped(tc.gather, dgrad(gemms.down));
  out.block_tp_fwd_s = forward;
  out.block_tp_bwd_s = row + column + sp_regathers(s, fw) / 2 * (tc.gather_in + mlp * tc.gather) +
                       recomputed_block_share(m, s) * forward;
}

// Tensor-parallel collectives of one block (Shoeybi et al. 2019, §3; Korthikanti §4.2.2): two all-reduces of
// T·h activations in forward and two in backward; with sequence parallelism an all-gather and a reduce-scatter
// in their place (same bytes). Full recomputation repeats the forward ones.
void block_tp_comm(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const FrameworkTraits& fw, const Dims& d,
                   const TpGemms& gemms, MicrobatchCosts& out) {
  if (s.tp <= 1) return;
  const GroupLayout g = tp_group(s, c);
  const double bytes = d.tokens * d.h * d.a, in_bytes = d.tokens * attention_gathered_width(m, s) * d.a;
  // The all-gathers move FP8 under --fp8 where the runtime casts first (planner/fp8.hpp tp_gather_bytes_per_element).
  auto gather_scale = [&](TpGatherSite site) { return tp_gather_bytes_per_element(m, s, d.a, site) / d.a; };
  const double mlp_scale = gather_scale(TpGatherSite::mlp);
  const double out_scale = gather_scale(TpGatherSite::attention_output_grad);
  const double in_scale = gather_scale(TpGatherSite::attention_input);
  auto all_gather = [&](double b) { return collective_time_s(c, Collective::all_gather, b, g); };
  TpCollectives tc;
  tc.gather = all_gather(mlp_scale * bytes);
  tc.scatter = collective_time_s(c, Collective::reduce_scatter, bytes, g);
  // Priced again only where the bytes differ: MLA's gathered width, an MoE block's bf16 MLP beside FP8 attention.
  const bool same = in_bytes == bytes;
  tc.gather_out = out_scale == mlp_scale ? tc.gather : all_gather(out_scale * bytes);
  tc.gather_in = same && in_scale == mlp_scale ? tc.gather : all_gather(in_scale * in_bytes);
  tc.scatter_in = same ? tc.scatter : collective_time_s(c, Collective::reduce_scatter, in_bytes, g);
  const double gather = tc.gather, scatter = tc.scatter;
  // Collectives of the attention half, and of the MLP half when it meets them (an MoE MLP with expert TP 1 and no
  // shared experts does not: moe_costs.hpp mlp_meets_tp_collectives).
  const double mlp = mlp_meets_tp_collectives(m, s) ? 1 : 0;
  const double k = overlap_compute_slowdown(c.gpu);
  if (effective_tp_comm_overlap(s, fw) && fw.tp_overlap_kind == TpOverlapKind::micro_pipeline) {
    async_tp_comm(m, s, fw, gemms, tc, k, out);
    return;
  }
  if (effective_tp_comm_overlap(s, fw)) {
    // Forward: the all-gathers pipelined with the QKV and MLP-up GEMMs that consume them, the reduce-scatters with
    // the output projections that produce them. Backward (each linear's backward is a dgrad and a wgrad GEMM of
    // equal size): a column-parallel layer (QKV, up) re-gathers its input beside its dgrad and reduce-scatters the
    // input gradient beside its wgrad, both in bulk; a row-parallel layer (proj, down) all-gathers the output
    // gradient pipelined with its dgrad (transformer_engine/pytorch/module/layernorm_linear.py and linear.py: ub_bulk_*,
    // ub_overlap_ag/rs). The same six collectives as without overlap.
    auto fwd = [&](double comm, const LinearTime& l) { return pipelined_tp_collective(comm, l.fwd, s.tp, k); };
    const double forward = fwd(tc.gather_in, gemms.qkv) + fwd(scatter, gemms.proj) +
                           mlp * (fwd(gather, gemms.up) + fwd(scatter, gemms.down));
    auto column = [&](double ag, double rs, const LinearTime& l) {
      return bulk_tp_collective(ag, l.bwd / 2, k) + bulk_tp_collective(rs, l.bwd / 2, k);
    };
    auto row = [&](double ag, const LinearTime& l) { return pipelined_tp_collective(ag, l.bwd / 2, s.tp, k); };
    out.block_tp_fwd_s = forward;
    out.block_tp_bwd_s = column(tc.gather_in, tc.scatter_in, gemms.qkv) + row(tc.gather_out, gemms.proj) +
                         mlp * (column(gather, scatter, gemms.up) + row(gather, gemms.down)) +
                         recomputed_block_share(m, s) * forward;
    return;
  }
  // Forward: the attention's input gathered and its output reduce-scattered (or the output all-reduced without SP);
  // backward the mirror image: the output gradient gathered, the input gradient reduced.
  const double all_reduce = s.sp ? 0.0 : collective_time_s(c, Collective::all_reduce, bytes, g);
  const double all_reduce_in = s.sp || same ? all_reduce : collective_time_s(c, Collective::all_reduce, in_bytes, g);
  const double attn_fwd = s.sp ? tc.gather_in + scatter : all_reduce;
  const double attn_bwd = s.sp ? tc.gather_out + tc.scatter_in : all_reduce_in;
  const double mlp_one = s.sp ? gather + scatter : all_reduce;
  out.block_tp_fwd_s = attn_fwd + mlp * mlp_one;
  // Sequence parallelism keeps the layer inputs scattered and (Megatron) all-gathers them again for the weight
  // gradients (Korthikanti §4.2.2; sp_regathers).
  out.block_tp_bwd_s = attn_bwd + mlp * mlp_one + sp_regathers(s, fw) / 2 * (tc.gather_in + mlp * gather) +
                       recomputed_block_share(m, s) * out.block_tp_fwd_s;
}

// Final norm, LM head and cross-entropy on the last stage; token embedding on the first.
void ends_compute(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const GpuSpec& g, const Dims& d,
                  MicrobatchCosts& out) {
  const DType dt = precision_compute_dtype(s.precision);
  const auto T = static_cast<int64_t>(d.tokens);
  const auto vocab_r = static_cast<int64_t>(d.vocab) / s.tp;
  const LinearTime head = linear_time(g, dt, T, vocab_r, m.hidden);
  // Cross-entropy over T·V/t logits: read logits, write fp32 probabilities, read them back for the gradient and
  // write it (≈ 14 bytes per element over forward and backward).
  const double logits = d.tokens * static_cast<double>(vocab_r);
  const double norm = memory_bound_time_s(g, 2 * d.tokens * d.h * d.a);
  // A fused loss reads the logits once forward, and reads them and writes their gradient backward (strategy.hpp).
  const bool fused = s.loss == LossKind::fused;
  out.head_fwd_s = head.fwd + memory_bound_time_s(g, logits * (fused ? d.a : d.a + 4)) + norm;
  out.head_bwd_s = head.bwd + memory_bound_time_s(g, logits * (fused ? 2 * d.a : 4 + 4 + d.a)) + 2 * norm;
  if (s.tp > 1) {
    // The head's input gradient is all-reduced across TP (vocab-parallel loss adds three T-float all-reduces).
    const GroupLayout tp = tp_group(s, c);
    out.head_fwd_s += 3 * collective_time_s(c, Collective::all_reduce, d.tokens * 4, tp);
    out.head_bwd_s += collective_time_s(c, Collective::all_reduce, d.tokens * d.h * d.a, tp);
  }
  // Embedding: gather T rows forward; scatter-add their gradients (fp32 accumulate) backward.
  out.embed_fwd_s = memory_bound_time_s(g, 2 * d.tokens * d.h * d.a);
  out.embed_bwd_s = memory_bound_time_s(g, d.tokens * d.h * (d.a + 8));
}

}  // namespace

MicrobatchCosts microbatch_costs(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  const Dims d = dims_of(m, s);
  MicrobatchCosts out;
  const FrameworkTraits fw = framework_traits(s.framework);
  // GEMMs and attention at what a training run sustains (compute_cost.hpp training_device).
  const GpuSpec device = training_device(c.gpu);
  const TpGemms gemms = block_compute(m, s, c, device, fw, d, out);
  block_tp_comm(m, s, c, fw, d, gemms, out);
  // Expert-parallel dispatch and combine (planner/moe_costs.hpp; issue 17).
  const MoeAllToAll a2a = moe_all_to_all_time(m, s, c, out.block_fwd_s, out.block_bwd_s + out.block_recompute_s);
  out.block_ep_fwd_s = a2a.fwd;
  out.block_ep_bwd_s = a2a.bwd;
  out.block_ep_total_s = a2a.total;
  ends_compute(m, s, c, device, d, out);
  add_mtp_costs(m, s, device, out);  // DeepSeek-V3's MTP modules on the last stage (planner/moe_costs.hpp; issue 17)
  return out;
}

}  // namespace shardplan
