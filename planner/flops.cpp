#include "planner/flops.hpp"

#include <algorithm>

#include "planner/framework.hpp"
#include "planner/moe.hpp"
#include "planner/recompute_modules.hpp"
#include "planner/partial_recompute.hpp"

namespace shardplan {

StepFlops step_flops(const ModelSpec& m, const Strategy& s) {
  StepFlops out;
  out.tokens = static_cast<double>(s.global_batch) * static_cast<double>(s.seq);
  const double h = static_cast<double>(m.hidden);
  const double layers = static_cast<double>(m.layers);
  const double vocab = static_cast<double>(model_padded_vocab(m));
  const double per_layer_tokens = out.tokens * layers;
  const ParamCounts pc = count_params(m);

  // A matmul of (tokens × k) by (k × n) costs 2·tokens·k·n FLOPs forward; its backward computes the input
  // gradient and the weight gradient, 2× forward (Narayanan et al. 2021, §5.1).
  // `selective`: the share of the part's forward that selective recomputation repeats, as the step time prices it
  // (microbatch_costs.cpp): the attention core without flash attention (Korthikanti §5; a flash kernel recomputes its
  // scores inside its own backward whatever the policy), and the GEMMs of Megatron's recompute modules.
  const double recomputed_share = recomputed_block_share(m, s);
  auto part = [&](const char* name, double forward_per_token, double tokens, bool is_block, double selective) {
    FlopsPart p{name, forward_per_token * tokens, 2 * forward_per_token * tokens, 0};
    // Partial recomputation repeats the forward of its share of the blocks (partial_recompute.hpp).
    if (is_block && s.recompute == Recompute::full) p.recompute = recomputed_share * p.forward;
    if (s.recompute == Recompute::selective) p.recompute = selective * p.forward;
    out.parts.push_back(p);
  };
  const bool selective = s.recompute == Recompute::selective;
  // The attention core's forward again: unfused, or fused where the runtime checkpoints it anyway
  // (FrameworkTraits::core_attn_recompute_repeats_fused).
  const bool core_again = !s.flash_attn || framework_traits(s.framework).core_attn_recompute_repeats_fused;
  const double core_repeated = selective && core_again && recomputes(s, RecomputeModule::core_attn) ? 1.0 : 0.0;
  // Attention projections: every weight matrix once per token (MLA: its down- and up-projections, DeepSeek-V2
  // §2.1.2; Megatron-LM training.py num_floating_point_operations counts MLA the same way).
  const double heads = static_cast<double>(m.heads);
  const double out_proj = heads * static_cast<double>(attention_v_head_dim(m)) * h;
  const double in_proj = static_cast<double>(pc.block.attn_weights) - out_proj;
  // Scores and values: per query, keys × heads × width (q/k: MLA's nope + rope, DeepSeek-V2 §2.1.3; values v_head_dim).
  // Windowed layers score min(window, s) keys (moe.hpp attention_keys_per_query), global ones s.
  const double windowed = static_cast<double>(windowed_layers(m));
  const double keys = (windowed * attention_keys_per_query(m, s.seq, true) +
                       (layers - windowed) * attention_keys_per_query(m, s.seq, false)) / layers;
  const double qk = heads * static_cast<double>(attention_qk_head_dim(m));
  const double v = heads * static_cast<double>(attention_v_head_dim(m));
  // mla_up_proj repeats MLA's up-projections (q: q_lora_rank → heads·(nope + rope); k, v: kv_lora_rank → heads·(nope
  // + v)), a share of the input projections' weights.
  double up_share = 0;
  if (selective && model_has_mla(m) && recomputes(s, RecomputeModule::mla_up_proj) && in_proj > 0) {
    const double q_in = static_cast<double>(m.q_lora_rank > 0 ? m.q_lora_rank : m.hidden);
    const double up = q_in * heads * static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim) +
                      static_cast<double>(m.kv_lora_rank) * heads * static_cast<double>(m.qk_nope_head_dim + m.v_head_dim);
    up_share = std::min(1.0, up / in_proj);
  }
  part("attention q/k/v projections", 2 * in_proj, per_layer_tokens, true, up_share);
  part("attention scores q·kᵀ", 2 * keys * qk, per_layer_tokens, true, core_repeated);
  part("attention over values", 2 * keys * v, per_layer_tokens, true, core_repeated);
  part("attention output projection", 2 * out_proj, per_layer_tokens, true, 0);
  const double matrices = static_cast<double>(model_mlp_matrices(m));
  const double moe_layers = static_cast<double>(pc.moe_layers);
  const double dense_mlp = 2 * matrices * h * static_cast<double>(m.ffn_hidden);
  // An MoE layer runs k routed and the shared experts for each token (Shazeer et al. 2017 §2; DeepSeekMoE §3), and its
  // router, an h×E GEMM (softmax/sigmoid and top-k are memory-bound, priced in moe_costs).
  const double active_experts = static_cast<double>(m.experts_per_token + m.shared_experts);
  const double expert_mlp = 2 * matrices * h * static_cast<double>(m.expert_ffn_hidden);
  const double router = 2 * h * static_cast<double>(m.experts);
  part("mlp", dense_mlp, out.tokens * (layers - moe_layers), true, selective && recomputes(s, RecomputeModule::mlp) ? 1 : 0);
  if (moe_layers > 0) {
    const double moe_repeated = selective && recomputes(s, RecomputeModule::moe) ? 1 : 0;
    part("moe experts (active)", active_experts * expert_mlp, out.tokens * moe_layers, true, moe_repeated);
    part("moe router", router, out.tokens * moe_layers, true, moe_repeated);
  }
  part("lm head", 2 * h * vocab, out.tokens, false, 0);
  if (m.mtp_layers > 0) {
    // Each MTP module runs its projection (2h×h), one block and the shared head on every token (DeepSeek-V3 §2.2).
    const double block = 2 * in_proj + 2 * keys * (qk + v) + 2 * out_proj +
                         (moe_layers > 0 ? active_experts * expert_mlp + router : dense_mlp);
    part("mtp modules", 2 * 2 * h * h + block + 2 * h * vocab, out.tokens * static_cast<double>(m.mtp_layers), true, 0);
  }

  for (const FlopsPart& p : out.parts) {
    out.model_flops += p.forward + p.backward;
    out.hardware_flops += p.forward + p.backward + p.recompute;
  }
  return out;
}

}  // namespace shardplan
