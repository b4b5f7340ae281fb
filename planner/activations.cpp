#include "planner/activations.hpp"

#include <algorithm>

#include "planner/attention_linears.hpp"
#include "planner/context_parallel.hpp"
#include "planner/fp8.hpp"
#include "planner/moe.hpp"
#include "planner/moe_costs.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "planner/precision.hpp"
#include "planner/recompute_modules.hpp"

namespace shardplan {

namespace {

constexpr double kMaskBytes = 1;  // dropout masks are stored as bytes (Korthikanti §4.1)

double split_divisor(const ActTerm& t, const Strategy& s) {
  if (t.split == ActSplit::tensor) return static_cast<double>(s.tp);
  if (t.split == ActSplit::replicated) return 1.0;
  return s.sp ? static_cast<double>(s.tp) : 1.0;
}

// Tokens of one micro-batch on this rank: context parallelism keeps seq / cp of each sequence (strategy.hpp).
double tokens_per_microbatch(const Strategy& s) { return static_cast<double>(seq_per_rank(s) * s.micro_batch); }

// Per-rank width of K (or V) under TP: Megatron keeps at least one K/V head per rank.
double kv_width_per_token(const ModelSpec& m, const Strategy& s) {
  const double heads_per_rank = std::max<double>(static_cast<double>(m.kv_heads) / s.tp, 1.0);
  return heads_per_rank * static_cast<double>(model_head_dim(m)) * s.tp;  // ×tp: terms are divided by tp later
}

// The K (or V) the attention kernel reads and saves: repeated to every query head where the model copies them
// (attention_linears.hpp attention_kv_heads_per_rank).
double attention_kv_width_per_token(const ModelSpec& m, const Strategy& s) {
  return attention_kv_heads_per_rank(m, s) * static_cast<double>(model_head_dim(m)) * s.tp;
}

}  // namespace

// What a norm keeps for its backward, per token: the input itself, or (eager RMSNorm) its fp32 upcast (legacy);
// transformers' LlamaRMSNorm the fp32 upcast, the normalised tensor in the input dtype and the fp32 rsqrt per row;
// a fused kernel (aten::_fused_rms_norm, native_layer_norm) its input and the fp32 rstd (LayerNorm: and mean).
double norm_saved_bytes(const ModelSpec& m, const FrameworkTraits& fw, double a) {
  const double h = static_cast<double>(m.hidden);
  const bool rms = m.norm == NormKind::rmsnorm;
  const double stats = rms ? 4.0 : 8.0;
  switch (fw.norm_impl) {
    case NormImpl::transformers_eager: return rms ? (std::max(a, 4.0) + a) * h + stats : a * h + stats;
    case NormImpl::fused: return a * h + stats;
    case NormImpl::legacy: break;
  }
  const bool fp32_copy = rms && fw.rmsnorm_saves_fp32_input;
  return (fp32_copy ? std::max(a, 4.0) : a) * h;
}

namespace {

double norm_input_bytes(const ModelSpec& m, const FrameworkTraits& fw, double a) { return norm_saved_bytes(m, fw, a); }

// A block's terms in fixed storage: the search's inner loop computes them without allocating.
struct TermList {
  ActTerm items[24];
  int n = 0;
  void push_back(const ActTerm& t) { items[n++] = t; }
  const ActTerm* begin() const { return items; }
  const ActTerm* end() const { return items + n; }
};

// Bytes per element of what a block's linear layers save as their inputs: 1 under --fp8 where the runtime keeps the
// FP8 cast (fp8_saves_quantized_linear_inputs), else the compute dtype's.
double linear_input_bytes(const Strategy& s, const FrameworkTraits& fw, double a) {
  if (s.fp8 == Fp8Recipe::off) return a;
  // torchtitan's float8 TP plan hands every TP linear an input already cast to FP8 (fp8.hpp torchao_float8_tp_plan),
  // and the linear saves what it is given (float8_linear.py matmul_with_hp_or_float8_args). Measured on PyTorch's own
  // saved tensors: reports/float8-tp-saved.json (bench/torch/float8_tp_saved.py).
  return fw.fp8_saves_quantized_linear_inputs || torchao_float8_tp_plan(s) ? 1.0 : a;
}

constexpr uint32_t module_bit(RecomputeModule r) { return static_cast<uint32_t>(r); }

// Megatron's MLA (multi_latent_attention.py): the down-projections' outputs after their norms, the latents the
// up-projections read and keep — q's (q_lora_rank; the hidden state itself without one), the KV latent and the shared
// RoPE key (kv_lora_rank + qk_rope_head_dim).
double mla_latent_width(const ModelSpec& m) {
  const double q = m.q_lora_rank > 0 ? static_cast<double>(m.q_lora_rank) : 0.0;
  return q + static_cast<double>(m.kv_lora_rank + m.qk_rope_head_dim);
}

void add_attention_terms(TermList& out, const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                         double a) {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m));
  const double kv = attention_kv_width_per_token(m, s);  // SDPA saves the K and V it is given
  const double heads = static_cast<double>(m.heads), seq = static_cast<double>(s.seq);
  // Korthikanti Table 1 / §4.1, attention block: 11sbh + 5as²b, plus its LayerNorm's 2sbh.
  // transformers' eager RMSNorm keeps two large tensors (fp32 upcast, normalised bf16) and the small rsqrt.
  const int norm_tensors = fw.norm_impl == NormImpl::transformers_eager && m.norm == NormKind::rmsnorm ? 2 : 1;
  out.push_back({"norm1 input", norm_input_bytes(m, fw, a), ActSplit::sequence, false, norm_tensors});
  const double li = linear_input_bytes(s, fw, a);
  // Megatron's input norm is a module of its own only under MLA (gpt_layer_specs.py: otherwise fused into the QKV
  // linear, TELayerNormColumnParallelLinear): there "layernorm" recomputes its output, the down-projections' input.
  const bool mla = model_has_mla(m);
  const uint32_t ln = mla ? module_bit(RecomputeModule::layernorm) : 0;
  const ActSplit qkv_split = fw.tp_saves_gathered_inputs ? ActSplit::replicated : ActSplit::sequence;
  out.push_back({"qkv input", li * h, qkv_split, false, 1, ln});
  // Under MLA, q, k and v are the up-projections' outputs with RoPE applied, which "mla_up_proj" recomputes from the
  // latents (kept by the up-projections, replicated across TP like their inputs).
  const uint32_t up = mla ? module_bit(RecomputeModule::mla_up_proj) : 0;
  if (mla) out.push_back({"MLA latents (up-projection inputs)", a * mla_latent_width(m), ActSplit::replicated, false, 2});
  out.push_back({"q, k (for q·kᵀ)", a * (q + kv), ActSplit::tensor, false, 2, up});
  out.push_back({"v", a * kv, ActSplit::tensor, false, 1, up});
  // A runtime that checkpoints even a fused attention core under "core_attn" (FrameworkTraits::
  // core_attn_recompute_repeats_fused) keeps none of the kernel's own saved tensors then.
  const bool fused_core_checkpointed = fw.core_attn_recompute_repeats_fused;
  if (s.flash_attn) {
    // Flash attention (Dao et al. 2022, §3.1) saves the output and the fp32 log-sum-exp per row, no s² tensor.
    out.push_back({"softmax log-sum-exp (fp32)", 4 * heads, ActSplit::tensor, fused_core_checkpointed});
  } else {
    out.push_back({"softmax output", a * heads * seq, ActSplit::tensor, true});
    if (m.dropout) {
      out.push_back({"attention dropout mask", kMaskBytes * heads * seq, ActSplit::tensor, true});
      out.push_back({"attention dropout output", a * heads * seq, ActSplit::tensor, true});
    }
  }
  // The out-projection's input: the attention output, which a flash kernel also keeps for its own backward (Dao et
  // al. 2022 Alg. 2 reads O); where the linear keeps an FP8 cast instead, both are saved (Transformer Engine's
  // FusedAttnFunc saves out beside q, k, v).
  // Under torch's CP ring the out-projection's bf16 input is a copy of the ring's output (context_parallel.hpp
  // cp_output_copied): both kept.
  out.push_back({"attention output (out-proj input)", li * q, ActSplit::tensor, false, 1});
  if (s.flash_attn && (li < a || cp_output_copied(s)))
    out.push_back({"attention output (the fused kernel's own)", a * q, ActSplit::tensor, fused_core_checkpointed, 1});
  if (m.dropout) out.push_back({"attention residual dropout mask", kMaskBytes * h, ActSplit::sequence, false});
}

void add_mlp_terms(TermList& out, const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double a) {
  const double h = static_cast<double>(m.hidden), f = mlp_width_per_token(m);  // MoE: k + shared experts
  const double li = linear_input_bytes(s, fw, a);
  const bool moe = model_is_moe(m);
  // Megatron's recompute modules (recompute_modules.hpp): a dense MLP is "mlp" whole; an MoE layer's routed part
  // "moe", its experts' activation "moe_act", its shared experts "shared_experts", its pre-MLP norm (a module of its
  // own in MoE layers only: gpt_layer_specs.py) "layernorm".
  const uint32_t mlp_module = module_bit(moe ? RecomputeModule::moe : RecomputeModule::mlp);
  // Korthikanti §4.1, MLP block: 19sbh for a 4h GELU MLP, plus its LayerNorm's 2sbh.
  const int norm_tensors = fw.norm_impl == NormImpl::transformers_eager && m.norm == NormKind::rmsnorm ? 2 : 1;
  out.push_back({"norm2 input", norm_input_bytes(m, fw, a), ActSplit::sequence, false, norm_tensors});
  // An MoE layer's fc1 input is the dispatched copies (below); the router reads the norm's output in bf16, or saves
  // its fp32 upcast where the runtime's gate runs under an fp32 autocast (FrameworkTraits::moe_router_input_bytes).
  const double mlp_in = moe ? (fw.moe_router_input_bytes > 0 ? fw.moe_router_input_bytes : a) : li;
  const ActSplit in_split = fw.tp_saves_gathered_inputs ? ActSplit::replicated : ActSplit::sequence;
  out.push_back({"mlp input", mlp_in * h, in_split, false, 1,
                 moe ? module_bit(RecomputeModule::layernorm) : module_bit(RecomputeModule::mlp)});
  if (m.mlp == MlpKind::gelu || m.mlp == MlpKind::squared_relu) {
    // Either activation keeps one ffn-wide tensor for its backward: GELU its input; squared ReLU (Megatron-LM
    // megatron/core/activations.py squared_relu = pow(relu(x), 2)) relu's output, which both relu and pow save.
    const char* name = m.mlp == MlpKind::gelu ? "GELU input" : "squared-ReLU saved relu(x)";
    out.push_back({name, a * f, ActSplit::tensor, false, 1, mlp_module});
    out.push_back({"activation output (down-proj input)", li * f, ActSplit::tensor, false, 1, mlp_module});
  } else if (!moe) {
    // SwiGLU (Shazeer 2020): gate, up, their product (the down projection's input, in FP8 where the runtime keeps
    // the cast); eager PyTorch also keeps SiLU(gate).
    const double n = static_cast<double>(fw.swiglu_saved_intermediates);
    out.push_back({"SwiGLU intermediates", ((n - 1) * a + li) * f, ActSplit::tensor, false, static_cast<int>(n), mlp_module});
  } else {
    // The routed experts' and the shared experts' SwiGLU apart: fc1's output (gate and up) and the activation's output
    // (fc2's input), which "moe_act" recomputes from fc1's (moe/experts.py TEGroupedMLP: activation checkpoint).
    const double n = static_cast<double>(fw.swiglu_saved_intermediates);
    const double ef = static_cast<double>(m.expert_ffn_hidden);
    const double routed = static_cast<double>(m.experts_per_token) * ef, shared = static_cast<double>(m.shared_experts) * ef;
    const uint32_t act = module_bit(RecomputeModule::moe_act) | mlp_module;
    out.push_back({"expert fc1 outputs", (n - 1) * a * routed, ActSplit::tensor, false, static_cast<int>(n - 1), mlp_module});
    out.push_back({"expert activation outputs (fc2 input)", li * routed, ActSplit::tensor, false, 1, act});
    if (shared > 0)
      out.push_back({"shared-expert SwiGLU intermediates", ((n - 1) * a + li) * shared, ActSplit::tensor, false,
                     static_cast<int>(n), module_bit(RecomputeModule::shared_experts)});
  }
  if (m.dropout) out.push_back({"mlp residual dropout mask", kMaskBytes * h, ActSplit::sequence, false});
  // Gemma 2/3's post-attention and post-feedforward norms (Gemma2DecoderLayer) save their inputs too.
  if (m.block_norms > 2)
    out.push_back({"extra norm inputs", static_cast<double>(m.block_norms - 2) * norm_input_bytes(m, fw, a),
                   ActSplit::sequence, false, static_cast<int>(m.block_norms - 2)});
  if (moe) {
    // MoE (issue 17): the router's fp32 probabilities over E and the top-k weights (Megatron-Core moe/router.py,
    // saved for the score function's backward), the k permuted copies of each token (the experts' fc1 input) and the
    // experts' k outputs kept for the probability-weighted combine (moe_utils.py permute / unpermute). Counted like
    // the MLP input (split by TP only under SP): an approximation where Megatron's dispatcher gathers tokens over TP.
    const double k = static_cast<double>(m.experts_per_token), e = static_cast<double>(m.experts);
    out.push_back({"router probabilities and top-k weights (fp32)", 4 * (e + k), ActSplit::sequence, false, 1, mlp_module});
    // Token dropping pads every expert to its capacity: F × the k copies (strategy.hpp moe_capacity_factor).
    const double copies = k * (s.moe_capacity_factor > 0 ? s.moe_capacity_factor : 1.0);
    out.push_back({"tokens dispatched to k experts", copies * li * h, ActSplit::sequence, false, 1, mlp_module});
    // The combine's product with the probabilities saves the k expert outputs where the probabilities are applied
    // there; applied in the experts' activation, the activation's saved input (fc1's output, above) serves instead.
    if (effective_moe_probs(s, fw) == MoeProbs::combine) {
      const double saved = fw.moe_combine_saved_bytes > 0 ? fw.moe_combine_saved_bytes : a;
      out.push_back({"k expert outputs for the combine", copies * saved * h, ActSplit::sequence, false, 1, mlp_module});
    }
  }
}

// Whether selective recomputation drops a term: the s² attention terms under "core_attn" (every runtime's selective
// recomputation; Korthikanti §5), the terms of the other Megatron modules in force.
bool dropped(const ActTerm& t, uint32_t modules) {
  return (t.dropped_by_selective && (modules & module_bit(RecomputeModule::core_attn))) || (t.module & modules) != 0;
}

double sum_terms(const TermList& terms, const Strategy& s, bool skip_selective) {
  const uint32_t modules = skip_selective ? recompute_modules_in_force(s) : 0;
  double per_token = 0;
  for (const ActTerm& t : terms) {
    if (skip_selective && dropped(t, modules)) continue;
    per_token += t.bytes_per_token / split_divisor(t, s);
  }
  return per_token * tokens_per_microbatch(s);
}

double activation_dtype_bytes(const Strategy& s) {
  return static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
}

TermList block_terms(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  const double a = activation_dtype_bytes(s);
  TermList terms;
  add_attention_terms(terms, m, s, fw, a);
  add_mlp_terms(terms, m, s, fw, a);
  return terms;
}

}  // namespace

std::vector<ActTerm> block_activation_terms(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  const TermList terms = block_terms(m, s, fw);
  return {terms.begin(), terms.end()};
}

int64_t block_saved_tensors_of_at_least(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double bytes) {
  if (s.recompute == Recompute::full) return block_activation_bytes(m, s, fw) >= bytes ? 1 : 0;
  int64_t n = 0;
  const uint32_t modules = recompute_modules_in_force(s);  // 0 unless selective
  for (const ActTerm& t : block_terms(m, s, fw)) {
    if (dropped(t, modules)) continue;
    // A term of several tensors, split evenly (q and k under GQA differ; the even split is close enough for 1 MiB each).
    const double each = t.bytes_per_token / split_divisor(t, s) * tokens_per_microbatch(s) / t.tensors;
    if (each >= bytes) n += t.tensors;
  }
  return n;
}

double block_working_set_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  return sum_terms(block_terms(m, s, fw), s, false);
}

// The reference loop's backward scratch (reference/README.md, "Memory accounting"): one set reused by every block.
double block_backward_scratch_bytes(const ModelSpec& m, const Strategy& s) {
  const double a = activation_dtype_bytes(s);
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m));
  const double kv = attention_kv_width_per_token(m, s), f = mlp_width_per_token(m);  // MoE: k + shared experts
  const double mlp_in = static_cast<double>(model_mlp_matrices(m) - 1) * f;  // fc1 output: 2f SwiGLU, f GELU
  TermList terms;
  terms.push_back({"∂ residual stream and block scratch", a * 2 * h, ActSplit::sequence, false});
  terms.push_back({"∂ MLP input and activation output", a * (mlp_in + f), ActSplit::tensor, false});
  terms.push_back({"∂ attention output and q, k, v", a * (2 * q + 2 * kv), ActSplit::tensor, false});
  return sum_terms(terms, s, false);
}

namespace {

// torchtitan's op-level policy as it counts (distributed/activation_checkpoint.py SelectiveAC _get_custom_policy):
// within each block's forward, the 1st, 3rd, ... aten.mm / aten.linear are saved and the others recomputed, as is
// everything elementwise; SDPA's output and log-sum-exp are saved; the checkpoint keeps the block input. A biased
// projection dispatches aten.addmm (at::linear's fused path for contiguous input), which the policy saves whole
// (_get_default_save_ops: the partitioner's compute_intensive_ops, addmm among them) without counting it among the
// alternating matmuls (reports/fsdp2-memory-outside.md, Qwen2.5 7B: 0.98 GiB of q/k/v outputs at 16 ranks).
// torchtitan 9dec370 (2024-12) neither saved nor counted it: its _save_list held aten.mm only, and its models had
// no biases. Matmuls in forward order: q, k, v (or one fused qkv), out; gate, up, down (GELU: fc1, fc2).
double odd_matmul_selective_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  const double a = activation_dtype_bytes(s);
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m));
  const double kv = kv_width_per_token(m, s), f = mlp_width_per_token(m);  // MoE: k + shared experts
  struct Mm {
    double width;
    ActSplit split;
    bool biased;
  };
  Mm mms[8];
  int n = 0;
  if (fw.fused_qkv_projection) mms[n++] = {q + 2 * kv, ActSplit::tensor, m.qkv_bias};
  else mms[n++] = {q, ActSplit::tensor, m.qkv_bias}, mms[n++] = {kv, ActSplit::tensor, m.qkv_bias},
       mms[n++] = {kv, ActSplit::tensor, m.qkv_bias};
  // A row-parallel projection's output under DTensor TP is the Partial local product, [T, h] whole on every rank
  // until its reduce-scatter (tensor/parallel/style.py RowwiseParallel: the redistribute to Shard(1) runs after the
  // linear), and that is what the policy saves (reports/tp-memory.md: 4,096 B a token more at 8B, TP 2).
  const ActSplit row_out = fw.tp_saves_gathered_inputs ? ActSplit::replicated : ActSplit::sequence;
  mms[n++] = {h, row_out, m.out_bias};
  for (int64_t i = 0; i + 1 < model_mlp_matrices(m); ++i) mms[n++] = {f, ActSplit::tensor, m.out_bias};
  mms[n++] = {h, row_out, m.out_bias};
  TermList terms;
  terms.push_back({"block input", a * h, ActSplit::sequence, false});
  terms.push_back({"attention output and log-sum-exp", a * q + 4 * static_cast<double>(m.heads), ActSplit::tensor, false});
  int counted = 0;
  for (int i = 0; i < n; ++i)
    if (mms[i].biased) terms.push_back({"saved biased matmul output (addmm)", a * mms[i].width, mms[i].split, false});
    else if (counted++ % 2 == 0) terms.push_back({"saved matmul output", a * mms[i].width, mms[i].split, false});
  return sum_terms(terms, s, false);
}

// Op-level selective checkpointing (torchtitan's "op" policy): the block input, the attention output and its
// log-sum-exp, and the outputs of the GEMMs it does not recompute; everything elementwise is recomputed.
double op_level_selective_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  const double a = activation_dtype_bytes(s);
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m));
  const double kv = kv_width_per_token(m, s), f = mlp_width_per_token(m);  // MoE: k + shared experts
  if (fw.selective_saves_odd_matmuls) return odd_matmul_selective_bytes(m, s, fw);
  const double kept = 1 - fw.selective_recompute_gemm_share;
  // GEMM outputs of a block: q, k, v, attention projection (h, a sequence-boundary tensor), up (and gate),
  // down (h).
  const double split_outputs = q + 2 * kv + static_cast<double>(model_mlp_matrices(m) - 1) * f;
  const double boundary_outputs = 2 * h;
  TermList terms;
  terms.push_back({"block input", a * h, ActSplit::sequence, false});
  terms.push_back({"attention output and log-sum-exp", a * q + 4 * static_cast<double>(m.heads), ActSplit::tensor, false});
  terms.push_back({"kept GEMM outputs (tensor-parallel)", kept * a * split_outputs, ActSplit::tensor, false});
  terms.push_back({"kept GEMM outputs (block boundary)", kept * a * boundary_outputs, ActSplit::sequence, false});
  return sum_terms(terms, s, false);
}

}  // namespace

double block_activation_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  switch (s.recompute) {
    case Recompute::none: return block_working_set_bytes(m, s, fw);
    case Recompute::selective:
      if (fw.selective_recompute_gemm_share > 0 || fw.selective_recomputes_elementwise)
        return std::min(op_level_selective_bytes(m, s, fw), block_working_set_bytes(m, s, fw));
      return sum_terms(block_terms(m, s, fw), s, true);
    case Recompute::full: {
      // Korthikanti §4.2: full recomputation keeps only the block input, 2sbh (divided by t under SP).
      const ActTerm input{"block input", activation_dtype_bytes(s) * static_cast<double>(m.hidden),
                          ActSplit::sequence, false};
      return input.bytes_per_token / split_divisor(input, s) * tokens_per_microbatch(s);
    }
  }
  return 0;
}

double saved_first_blocks_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t first,
                                int64_t chunk_blocks) {
  const double per_block = block_activation_bytes(m, s, fw);
  if (!partial_recompute(s)) return per_block * static_cast<double>(std::max<int64_t>(first, 0));
  first = std::clamp<int64_t>(first, 0, chunk_blocks);
  const int64_t recomputed = recomputed_among_first(s, first, chunk_blocks);
  return per_block * static_cast<double>(recomputed) +
         block_working_set_bytes(m, s, fw) * static_cast<double>(first - recomputed);
}

double stage_saved_block_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t rank) {
  const int64_t layers = rank_layers(m, s, rank);
  if (!partial_recompute(s)) return block_activation_bytes(m, s, fw) * static_cast<double>(layers);
  const int64_t recomputed = stage_recomputed_blocks(m, s, rank);
  return block_activation_bytes(m, s, fw) * static_cast<double>(recomputed) +
         block_working_set_bytes(m, s, fw) * static_cast<double>(layers - recomputed);
}

double stage_mean_block_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t rank) {
  if (!partial_recompute(s)) return block_activation_bytes(m, s, fw);
  const int64_t layers = rank_layers(m, s, rank);
  return layers > 0 ? stage_saved_block_bytes(m, s, fw, rank) / static_cast<double>(layers) : 0.0;
}

double in_flight_microbatches(const Strategy& s, int64_t stage) {
  const double p = static_cast<double>(s.pp);
  const double m = static_cast<double>(grad_accum_steps(s));
  const double i = static_cast<double>(stage);
  if (s.pp == 1) return 1;
  switch (s.schedule) {
    case Schedule::gpipe: return m;
    case Schedule::one_f_one_b: return std::min(p - i, m);
    case Schedule::interleaved: {
      // Megatron's interleaved schedule warms up (p − i − 1)·2 + (v − 1)·p model chunks, then holds one more;
      // each chunk is 1/v of the stage's layers.
      const double v = static_cast<double>(s.vpp);
      const double chunks = std::min((p - i - 1) * 2 + (v - 1) * p + 1, m * v);
      return chunks / v;
    }
    // ZB-H1, ZB-V, DualPipeV: a micro-batch's activations live until its W pass (planner/pipeline_schedule.hpp).
    case Schedule::zb_h1:
    case Schedule::zbv:
    case Schedule::dualpipev: return split_backward_in_flight(s, stage);
  }
  return 1;
}

namespace {

// The interleaved order's worst backward start on a stage (InterleavedOrder): after the warm-up each forward is
// followed by a backward, so at backward j's start forwards 0..warmup + j are held less backwards 0..j − 1. What the
// chunks then held weigh (`weight[c]` for one micro-batch of chunk c: its blocks, or their saved bytes), at the worst
// such start, and the first backward in time that starts with it; `loss_chunk_only`: over the backwards of the last
// chunk only, which the last stage's loss starts (schedules.py: the loss is the last chunk's output). held < 0 where
// the schedule is not interleaved. In bytes (`fw`), a backward that starts by recomputing its block holds that
// block's working set too, which ranks the starts (not in `held`: memory_backward.cpp adds it).
struct InterleavedWorst {
  double held = -1, whole = 0;  // the worst, and one micro-batch of every chunk
  int64_t block = -1;           // the stage's block (forward order) whose backward starts then: its chunk's last
};

bool walks_interleaved(const ModelSpec& m, const Strategy& s, int64_t stage) {
  return s.pp > 1 && s.schedule == Schedule::interleaved && s.vpp >= 2 && s.vpp <= InterleavedOrder::kMaxChunks &&
         rank_layers(m, s, stage) > 0;
}

InterleavedWorst interleaved_worst_backward(const ModelSpec& m, const Strategy& s, const FrameworkTraits* fw,
                                            int64_t stage, bool loss_chunk_only) {
  InterleavedWorst out;
  if (!walks_interleaved(m, s, stage)) return out;
  const int64_t p = s.pp, v = s.vpp, total = grad_accum_steps(s) * v;
  int64_t size[InterleavedOrder::kMaxChunks];
  double weight[InterleavedOrder::kMaxChunks], start_extra[InterleavedOrder::kMaxChunks];
  const double working_set = fw && s.recompute == Recompute::full ? block_working_set_bytes(m, s, *fw) : 0.0;
  for (int64_t c = 0; c < v; ++c) {
    size[c] = chunk_layers(m, s, stage, c);
    weight[c] = fw ? saved_first_blocks_bytes(m, s, *fw, size[c], size[c]) : static_cast<double>(size[c]);
    start_extra[c] = size[c] > 0 && recomputes_block(s, size[c] - 1, size[c]) ? working_set : 0.0;
    out.whole += weight[c];
  }
  const InterleavedOrder o{p, v};
  const int64_t warmup = std::min(o.warmup(stage, total), total - 1);
  double held = 0;
  for (int64_t k = 0; k <= warmup; ++k) held += weight[o.forward_chunk(k)];
  int64_t chunk = 0;
  double worst = -1;
  const int64_t steady = std::min(total - 1 - warmup, 2 * p * v);  // the pattern repeats every p·v passes
  for (int64_t j = 0; j <= steady; ++j) {
    if (j > 0) held += weight[o.forward_chunk(warmup + j)] - weight[o.backward_chunk(j - 1)];
    const int64_t now = o.backward_chunk(j);
    const double ranked = held + (loss_chunk_only ? 0.0 : start_extra[now]);
    if ((loss_chunk_only && now != v - 1) || ranked <= worst) continue;
    worst = ranked, out.held = held, chunk = now;
  }
  for (int64_t c = 0; c <= chunk; ++c) out.block += size[c];
  return out;
}

}  // namespace

double in_flight_stage_microbatches(const ModelSpec& m, const Strategy& s, int64_t stage) {
  const InterleavedWorst w = interleaved_worst_backward(m, s, nullptr, stage, false);
  return w.held < 0 ? in_flight_microbatches(s, stage) : w.held / w.whole;
}

StageActivationHold stage_activation_hold(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                                          int64_t stage, bool at_loss) {
  StageActivationHold out;
  const InterleavedWorst w = interleaved_worst_backward(m, s, &fw, stage, at_loss);
  if (w.held < 0) {
    out.in_flight = in_flight_microbatches(s, stage);
    out.bytes = out.in_flight * stage_saved_block_bytes(m, s, fw, stage);
    out.block = rank_layers(m, s, stage) - 1;
    return out;
  }
  out.bytes = w.held;
  out.in_flight = w.whole > 0 ? w.held / w.whole : 0.0;
  out.block = w.block;
  return out;
}

double stage_boundary_bytes(const ModelSpec& m, const Strategy& s) {
  return static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision))) * tokens_per_microbatch(s) *
         static_cast<double>(m.hidden) / static_cast<double>(s.sp ? s.tp : 1);
}

double sp_gather_output_bytes(const ModelSpec& m, const Strategy& s) {
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  // The MLP's gathered input: the largest, and in an MoE block the dispatcher's bf16 gather.
  return stage_boundary_bytes(m, s) * static_cast<double>(s.tp) *
         tp_gather_bytes_per_element(m, s, a, TpGatherSite::mlp) / a;
}

double pipeline_buffer_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t stage,
                             bool first, bool last) {
  if (s.pp <= 1) return 0;
  const double boundary = stage_boundary_bytes(m, s);
  if (!fw.pp_buffers_per_microbatch) return 2 * boundary;
  const double chunks = static_cast<double>(std::max<int64_t>(s.vpp, 1));
  const double micro = static_cast<double>(grad_accum_steps(s));
  const double in_flight = in_flight_microbatches(s, stage) * chunks;  // micro-batches × chunks with saved activations
  // args_recv_info: every chunk but the pipeline's first receives its input; the first block of an in-flight
  // micro-batch saves that buffer as its input, which the activations already count.
  const double inputs = std::max(0.0, chunks * micro - (first ? micro : 0.0) - in_flight);
  // grad_recv_info: every chunk but the pipeline's last receives its output's gradient.
  const double output_grads = chunks * micro - (last ? micro : 0.0);
  // fwd_cache: an in-flight micro-batch's stage output (on the last chunk the logits, which the loss counts).
  const double outputs = last ? in_flight * (chunks - 1) / chunks : in_flight;
  return (inputs + output_grads + outputs) * boundary;
}

double first_stage_extra_bytes(const ModelSpec& m, const Strategy& s) {
  if (!m.dropout) return 0;
  // Embedding dropout mask (Korthikanti §4.3): sbh bytes, divided by t under SP.
  const double per_token = kMaskBytes * static_cast<double>(m.hidden) / (s.sp ? s.tp : 1);
  return per_token * tokens_per_microbatch(s);
}

namespace {
// Multi-token prediction modules (DeepSeek-V3 §2.2), alive with the main model's activations until their backward,
// which runs first: per module its block's saved tensors (under the same recomputation), the enorm/hnorm inputs (h
// each), the eh_proj input (2h), its final norm and head inputs (2h). Issue 17.
double mtp_extra_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  if (m.mtp_layers <= 0) return 0;
  const double per_token = 6 * activation_dtype_bytes(s) * static_cast<double>(m.hidden) / (s.sp ? s.tp : 1);
  // Megatron-Core's block method leaves the MTP layer unrecomputed (partial_recompute.hpp); torchtitan checkpoints
  // model.layers only, never its MTP layers (FrameworkTraits::torchtitan_mtp).
  const bool kept = partial_recompute(s) || (fw.torchtitan_mtp && s.recompute != Recompute::none);
  const double block = kept ? block_working_set_bytes(m, s, fw) : block_activation_bytes(m, s, fw);
  return static_cast<double>(m.mtp_layers) * (per_token * tokens_per_microbatch(s) + block);
}
}  // namespace

double last_stage_extra_bytes(const ModelSpec& m, const Strategy& s) {
  // Final norm input and LM head input (Korthikanti §4.3: 4sbh/t with SP), 2 activation tensors of width h.
  const double per_token = 2 * activation_dtype_bytes(s) * static_cast<double>(m.hidden) / (s.sp ? s.tp : 1);
  const double mtp = m.mtp_layers > 0 ? mtp_extra_bytes(m, s, framework_traits(s.framework)) : 0;
  return per_token * tokens_per_microbatch(s) + mtp;
}

double last_stage_extra_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  if (fw.norm_impl == NormImpl::legacy) return last_stage_extra_bytes(m, s);
  // The final norm's saved tensors (norm_saved_bytes) and the LM head's input, sequence-split under SP.
  const double a = activation_dtype_bytes(s);
  const double per_token = (norm_saved_bytes(m, fw, a) + a * static_cast<double>(m.hidden)) / (s.sp ? s.tp : 1);
  return per_token * tokens_per_microbatch(s) + mtp_extra_bytes(m, s, fw);
}

namespace {
// One micro-batch's logits on one rank: its tokens × the padded vocabulary, vocabulary-parallel over TP.
double logit_elements(const ModelSpec& m, const Strategy& s) {
  return tokens_per_microbatch(s) * static_cast<double>(model_padded_vocab(m)) / static_cast<double>(s.tp);
}
}  // namespace

double logits_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  const double elements = logit_elements(m, s);
  // A fused cross-entropy holds the logits and their gradient, both in the compute dtype, or the logits alone where
  // the gradient overwrites them (strategy.hpp LossKind; framework.hpp fused_loss_copies).
  double bytes = s.loss == LossKind::fused
                     ? elements * fw.fused_loss_copies * activation_dtype_bytes(s)
                     : elements * (fw.logits_bytes_per_element + fw.logits_compute_dtype_copies * activation_dtype_bytes(s));
  // A chunked loss materialises the logits one chunk of tokens at a time.
  if (s.loss == LossKind::chunked) bytes /= static_cast<double>(fw.loss_chunks);
  return bytes;
}

// Each MTP module computes its own logits with the shared head and its own cross-entropy in the forward, which keep
// their saved tensors until the backward reaches them, so they coexist with the main loss's backward:
//   Megatron-Core: process_mtp_loss (megatron/core/transformer/multi_token_prediction.py) runs output_layer and
//     compute_language_model_loss per depth in the forward, attaching each loss to the hidden states through
//     MTPLossAutoScaler, whose backward comes after the main head's; the unfused vocab-parallel cross-entropy saves its
//     fp32 softmax (4 B), Transformer Engine's fused one the bf16 logits and per-row statistics (framework.cpp
//     megatron_traits: the compute dtype).
//   torchtitan: MTPDecoder.forward returns the main and every depth's logits and MTPLoss sums their cross-entropies
//     (torchtitan/models/deepseek_v3/mtp.py); the eager loss saves log_softmax's fp32 output (4 B: the bf16 logits are
//     released with `pred`), the compiled (fused) one its compute-dtype logits.
// A chunked loss keeps 1/chunks of it, as the main one materialises its logits.
double mtp_loss_saved_bytes_per_logit(const Strategy& s) {
  return s.loss == LossKind::fused ? activation_dtype_bytes(s) : 4.0;
}

double mtp_loss_saved_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  if (m.mtp_layers <= 0) return 0;
  double bytes = static_cast<double>(m.mtp_layers) * logit_elements(m, s) * mtp_loss_saved_bytes_per_logit(s);
  if (s.loss == LossKind::chunked) bytes /= static_cast<double>(fw.loss_chunks);
  return bytes;
}

double mtp_loss_forward_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  if (m.mtp_layers <= 0 || !fw.torchtitan_mtp) return 0;
  // Each depth's logits (the compute dtype) and, eager, its loss's saved fp32 log-softmax (torchtitan refuses the
  // chunked loss with MTP: framework_support.cpp mtp_runs).
  const double per_logit = activation_dtype_bytes(s) + (s.loss == LossKind::fused ? 0.0 : 4.0);
  return static_cast<double>(m.mtp_layers) * logit_elements(m, s) * per_logit;
}

double loss_logits_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  return logits_bytes(m, s, fw) + mtp_loss_saved_bytes(m, s, fw);
}

}  // namespace shardplan
