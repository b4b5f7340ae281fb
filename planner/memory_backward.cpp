// The first backward of a stage against its loss (memory_ledger.hpp LossOrBackward): what appears once the loss has
// freed its logits, and what the blocks already through their backward have freed by then; and the loss side's item
// for the MTP modules' saved cross-entropies, which both memory paths add.
#include <algorithm>

#include <fmt/format.h>

#include "planner/activations.hpp"
#include "planner/fp8.hpp"
#include "planner/framework.hpp"
#include "planner/memory_ledger.hpp"
#include "planner/partial_recompute.hpp"

namespace shardplan::memory_detail {

namespace {

// ZeRO-2/3 without no_sync: the unsharded gradients of the units whose reduce-scatter has not finished (the unit in
// backward and the one being reduced; FrameworkTraits::unsharded_grad_units). They appear with the first block's
// backward. DeepSpeed's ZeRO-2 reduces through its IPG bucket instead (memory.cpp add_reduction_buffers).
double unit_grads_awaiting_reduce(const StageInputs& in) {
  const Strategy& s = in.strategy;
  if (in.keeps_unsharded_grads) return 0;
  const bool zero3 = s.zero == 3 && in.shard > 1;
  const bool zero2 = s.zero == 2 && (in.shard > 1 || grad_reduce_degree(s) > 1) && in.fw.reduce_bucket_elements == 0;
  if (!zero3 && !zero2) return 0;
  return static_cast<double>(in.fw.unsharded_grad_units) * static_cast<double>(in.stage.block_params) * in.state.grads;
}

}  // namespace

// ZeRO-3's gathered block units (current + prefetch): resharded after each forward, gathered again from the first
// block's backward on, after the loss (its pre-backward hook fires on that block's output gradient). DeepSpeed's
// module-by-module fetch holds the LM head at the loss instead (memory.cpp add_zero3_working_set), and torchtitan
// under PP keeps every unit: both are held at either moment.
double gathered_units_for_backward(const StageInputs& in) {
  const Strategy& s = in.strategy;
  if (s.zero != 3 || in.shard <= 1 || (s.pp > 1 && in.fw.pp_keeps_params_gathered) || in.fw.zero3_prefetch_elements > 0)
    return 0;
  const double units = 1.0 + static_cast<double>(in.fw.zero3_prefetch_units);
  return units * static_cast<double>(in.stage.block_params) *
         (fp8_params_only(s) ? fp8_cached_weight_bytes_per_param(s) : in.compute_bytes);
}

double freed_last_blocks_bytes(const StageInputs& in, int64_t done) {
  const Strategy& s = in.strategy;
  const auto n = static_cast<double>(done);
  if (!partial_recompute(s)) return n * block_activation_bytes(in.model, s, in.fw);
  if (s.vpp > 1) return n * stage_mean_block_bytes(in.model, s, in.fw, in.stage.stage);
  return stage_saved_block_bytes(in.model, s, in.fw, in.stage.stage) -
         saved_first_blocks_bytes(in.model, s, in.fw, in.stage.layers - done, in.stage.layers);
}

LossOrBackward loss_or_backward(const StageInputs& in) {
  LossOrBackward out;
  // The main loss's logits and, beside them, what the MTP modules' cross-entropies saved (activations.hpp).
  out.logits = in.stage.last ? loss_logits_bytes(in.model, in.strategy, in.fw) : 0;
  out.head_inputs = in.stage.last ? last_stage_extra_bytes(in.model, in.strategy) : 0;
  out.scratch = in.fw.block_backward_scratch ? block_backward_scratch_bytes(in.model, in.strategy) : 0;
  out.gathered_units = gathered_units_for_backward(in);
  out.backward_hold = stage_activation_hold(in.model, in.strategy, in.fw, in.stage.stage, false);
  out.loss_hold = in.stage.last ? stage_activation_hold(in.model, in.strategy, in.fw, in.stage.stage, true)
                                : out.backward_hold;
  // The block whose backward it is recomputes (partial_recompute.hpp: under partial recomputation perhaps not; set
  // below once that block is known): the stage's last, or the one the awaiting gradients wait at.
  const double working_set = in.strategy.recompute == Recompute::full ? block_working_set_bytes(in.model, in.strategy, in.fw) : 0;
  auto working_set_at = [&](int64_t done_blocks) {
    const int64_t k = out.backward_hold.block - done_blocks;
    return stage_block_recomputes(in.model, in.strategy, in.stage.stage, k) ? working_set : 0.0;
  };
  out.working_set = working_set_at(0);
  const double all = unit_grads_awaiting_reduce(in);
  if (all <= 0) return out;
  // The first backward holds its own unit's gradients; the unsharded_grad_units-th holds all of them, the blocks after
  // it in forward order being through their backward (autograd has freed what they saved for this micro-batch).
  const int64_t units = std::max<int64_t>(in.fw.unsharded_grad_units, 1);
  const int64_t resident = in.stage.layers - std::min(in.strategy.offload_activation_layers, in.stage.layers);
  const int64_t done = std::clamp<int64_t>(units - 1, 0, resident);
  const double freed = freed_last_blocks_bytes(in, done);
  const double first = all / static_cast<double>(units);
  if (all - freed > first) {
    out.unit_grads = all;
    out.grad_units = units;
    out.done_blocks = done;
    out.freed_activations = freed;
    out.working_set = working_set_at(done);
  } else {
    out.unit_grads = first;
    out.grad_units = 1;
  }
  return out;
}

void add_mtp_loss_saved(Ledger& l, const ModelSpec& m, const Strategy& s, double bytes) {
  l.add(&MemoryComponents::logits, "logits", [&] {
        return fmt::format("the {} MTP module{} cross-entropy, saved for {} backward ({:g} B/element: {}{})",
                           m.mtp_layers, m.mtp_layers == 1 ? "'s" : "s'", m.mtp_layers == 1 ? "its" : "their",
                           mtp_loss_saved_bytes_per_logit(s),
                           s.loss == LossKind::fused ? "the logits" : "the fp32 (log-)softmax",
                           s.loss == LossKind::chunked ? ", 1/chunks of it" : "");
      },
      bytes);
}

}  // namespace shardplan::memory_detail
