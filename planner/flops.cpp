#include "planner/flops.hpp"

namespace shardplan {

StepFlops step_flops(const ModelSpec& m, const Strategy& s) {
  StepFlops out;
  out.tokens = static_cast<double>(s.global_batch) * static_cast<double>(s.seq);
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m));
  const double kv = static_cast<double>(model_kv_width(m)), f = static_cast<double>(m.ffn_hidden);
  const double seq = static_cast<double>(s.seq), layers = static_cast<double>(m.layers);
  const double vocab = static_cast<double>(model_padded_vocab(m));
  const double per_layer_tokens = out.tokens * layers;

  // A matmul of (tokens × k) by (k × n) costs 2·tokens·k·n FLOPs forward; its backward computes the input
  // gradient and the weight gradient, 2× forward (Narayanan et al. 2021, §5.1).
  auto part = [&](const char* name, double forward_per_token, double tokens, bool is_block, bool selective) {
    FlopsPart p{name, forward_per_token * tokens, 2 * forward_per_token * tokens, 0};
    if (is_block && s.recompute == Recompute::full) p.recompute = p.forward;
    // Selective recomputation repeats the attention core: q·kᵀ, softmax and attention·v (Korthikanti §5).
    if (selective && s.recompute == Recompute::selective) p.recompute = p.forward;
    out.parts.push_back(p);
  };
  part("attention q/k/v projections", 2 * h * (q + 2 * kv), per_layer_tokens, true, false);
  part("attention scores q·kᵀ", 2 * seq * q, per_layer_tokens, true, true);
  part("attention over values", 2 * seq * q, per_layer_tokens, true, true);
  part("attention output projection", 2 * q * h, per_layer_tokens, true, false);
  part("mlp", 2 * static_cast<double>(model_mlp_matrices(m)) * h * f, per_layer_tokens, true, false);
  part("lm head", 2 * h * vocab, out.tokens, false, false);

  for (const FlopsPart& p : out.parts) {
    out.model_flops += p.forward + p.backward;
    out.hardware_flops += p.forward + p.backward + p.recompute;
  }
  return out;
}

}  // namespace shardplan
