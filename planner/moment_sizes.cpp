// The sizes the FSDP memory moments share (moment_sizes.hpp), from a stage's inputs and the framework's traits.
#include "planner/moment_sizes.hpp"

#include <algorithm>

#include "planner/activations.hpp"
#include "planner/fp8.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"

namespace shardplan::memory_detail {

namespace {

// torch.distributed.pipelining's interleaved order (InterleavedOrder, as Megatron's). A chunk's parameters stay
// gathered and its gradients
// unsharded from its first backward to its last, after which REDUCE_GRAD reshards both (schedules.py
// _add_reduce_grad, stage.py perform_reduce_grad). At each backward's start: the blocks held for activations (as
// in_flight_stage_microbatches), gathered and with unsharded gradients; the worst backward sets the shares.
void interleaved_hold(const StageInputs& in, Sizes& z) {
  const Strategy& s = in.strategy;
  constexpr int64_t kMax = InterleavedOrder::kMaxChunks;
  if (s.schedule != Schedule::interleaved || s.vpp < 2 || s.vpp > kMax || z.layers <= 0) return;
  const int64_t p = s.pp, v = s.vpp, m = static_cast<int64_t>(z.accum), total = m * v;
  int64_t size[kMax], first_b[kMax], last_b[kMax];
  for (int64_t c = 0; c < v; ++c) size[c] = chunk_layers(in.model, s, in.stage.stage, c), first_b[c] = total, last_b[c] = -1;
  const InterleavedOrder o{p, v};
  for (int64_t k = 0; k < total; ++k) {
    const int64_t c = o.backward_chunk(k);
    first_b[c] = std::min(first_b[c], k), last_b[c] = std::max(last_b[c], k);
  }
  const double per_block = (z.psi - z.root) / z.layers;
  const double act_b = block_activation_bytes(in.model, s, in.fw);
  // What a chunk's blocks save for one micro-batch: under partial recomputation (Sizes::partial) its recomputed blocks
  // their input and the others their working set, so chunks of one size may differ.
  double chunk_bytes[kMax];
  for (int64_t c = 0; c < v; ++c)
    chunk_bytes[c] = z.partial ? z.saved_recomputed * static_cast<double>(recomputed_blocks(s, size[c])) +
                                     z.saved_kept * static_cast<double>(size[c] - recomputed_blocks(s, size[c]))
                               : act_b * static_cast<double>(size[c]);
  const double gather_b = per_block * z.block_gather_b;
  const double grad_b = per_block * (in.fw.framework == Framework::fsdp1 ? in.state.grads : z.reduce_b);
  const int64_t warmup = std::min(o.warmup(in.stage.stage, total), total - 1);
  // The first stage's embedding saves its dropout mask in chunk 0 only, from that chunk's forward to its embedding's
  // backward, after the chunk's last block (sim/stage_builder.cpp alike): micro-batches of chunk 0 held, apart.
  const double mask_b = in.stage.first ? first_stage_extra_bytes(in.model, s) : 0;
  double held = 0;  // saved bytes of the chunks whose activations are held
  int64_t held_first = 0;  // micro-batches of chunk 0 held
  for (int64_t k = 0; k <= warmup; ++k) held += chunk_bytes[o.forward_chunk(k)], held_first += o.forward_chunk(k) == 0;
  double best = -1, best_acts = 0, best_gathered = 0, best_grads = 0, best_first = 0;
  int64_t best_block = -1;
  // The last stage's loss backward starts a last-chunk backward (schedules.py: the loss is the last chunk's output,
  // its backward that chunk's first): the worst such start, apart, for loss_backward.
  const bool loss_here = in.stage.last;
  double loss_best = -1, loss_acts = 0, loss_first = 0, loss_gathered = 0, loss_grads = 0;
  // A candidate moment: `block` of the stage (forward order) in backward, `working_set` the bytes its recomputation
  // adds (ranked with the rest; block_backward adds them where that block recomputes).
  auto consider = [&](double acts, int64_t gathered, int64_t grads, int64_t block, double working_set) {
    const double bytes = acts + static_cast<double>(held_first) * mask_b + static_cast<double>(gathered) * gather_b +
                         static_cast<double>(grads) * grad_b + working_set;
    if (bytes <= best) return;
    best = bytes, best_acts = acts, best_gathered = static_cast<double>(gathered),
    best_grads = static_cast<double>(grads), best_first = static_cast<double>(held_first), best_block = block;
  };
  // Under partial recomputation the blocks of a pass differ: each block of the chunk in backward is a moment of its
  // own, the blocks after it (forward order) through their backward and their gradients written (on the chunk's first
  // backward), its working set there if it recomputes.
  auto consider_pass = [&](double acts, int64_t gathered, int64_t grads, int64_t chunk, int64_t chunk_start,
                           bool chunk_first_backward) {
    for (int64_t i = size[chunk] - 1, done = 0; i >= 0; --i, ++done) {
      const bool recomputes = recomputes_block(s, i, size[chunk]);
      consider(acts, gathered, grads + (chunk_first_backward ? done : 0), chunk_start + i, recomputes ? z.saved_kept : 0.0);
      acts -= recomputes ? z.saved_recomputed : z.saved_kept;
    }
  };
  for (int64_t k = 0; k < total; ++k) {
    if (k > 0) {
      if (warmup + k < total)
        held += chunk_bytes[o.forward_chunk(warmup + k)], held_first += o.forward_chunk(warmup + k) == 0;
      held -= chunk_bytes[o.backward_chunk(k - 1)], held_first -= o.backward_chunk(k - 1) == 0;
    }
    // Backward k frees its chunk's activations as it writes the chunk's gradients (on its first backward, from
    // none): the two ends of the pass bound it.
    const int64_t now = o.backward_chunk(k);
    int64_t gathered = 0, grads_before = 0;
    for (int64_t c = 0; c < v; ++c) {
      if (last_b[c] >= k) gathered += size[c];
      if (first_b[c] < k && k <= last_b[c]) grads_before += size[c];
    }
    const int64_t grads_after = grads_before + (first_b[now] == k ? size[now] : 0);
    int64_t chunk_start = 0;  // the chunk's first block in the stage (forward order)
    for (int64_t c = 0; c < now; ++c) chunk_start += size[c];
    if (z.partial)
      consider_pass(held, gathered, grads_before, now, chunk_start, first_b[now] == k);
    else
      consider(held, gathered, grads_before, chunk_start + size[now] - 1, 0.0);
    const double at_start = held + static_cast<double>(held_first) * mask_b +
                            static_cast<double>(gathered) * gather_b + static_cast<double>(grads_before) * grad_b;
    if (loss_here && now == v - 1 && at_start > loss_best)
      loss_best = at_start, loss_acts = held, loss_first = static_cast<double>(held_first),
      loss_gathered = static_cast<double>(gathered), loss_grads = static_cast<double>(grads_before);
    consider(held - chunk_bytes[now], gathered, grads_after, chunk_start, 0.0);
  }
  // In micro-batches of the stage's blocks: add_block_activations multiplies back by one micro-batch's bytes.
  const double stage_bytes = z.partial ? z.saved_stage : act_b * z.layers;
  z.in_flight = stage_bytes > 0 ? best_acts / stage_bytes : 0.0;
  z.first_chunk_in_flight = best_first;
  z.gathered_share = best_gathered / z.layers;
  z.grad_share = best_grads / z.layers;
  z.interleaved_hold = true;
  z.hold_block = best_block;
  if (loss_best >= 0) {
    z.loss_hold = true;
    z.loss = {stage_bytes > 0 ? loss_acts / stage_bytes : 0.0, loss_first, loss_gathered / z.layers,
              loss_grads / z.layers};
  }
}

}  // namespace

Sizes at_loss(const Sizes& z) {
  if (!z.loss_hold) return z;
  Sizes out = z;
  out.in_flight = z.loss.in_flight, out.first_chunk_in_flight = z.loss.first_chunk_in_flight;
  out.gathered_share = z.loss.gathered_share, out.grad_share = z.loss.grad_share;
  return out;
}

Sizes sizes_of(const StageInputs& in) {
  const Strategy& s = in.strategy;
  const StageParams& st = in.stage;
  Sizes z;
  z.n = in.shard;
  z.psi = in.psi;
  z.local = in.local_psi;
  z.block_local = in.block_local;
  z.block = static_cast<double>(st.block_params);
  z.root = static_cast<double>(st.root_unit());
  z.layers = static_cast<double>(st.layers);
  z.a = in.compute_bytes;
  // torchao's FP8 all-gather keeps the gathered linear weights in FP8: fsdp_post_all_gather wraps the all-gather
  // output (1 B/param) in a Float8Tensor that is the unsharded parameter until reshard (torchao/float8/fsdp_utils.py
  // WeightWithDynamicFloat8CastTensor.fsdp_post_all_gather); the root unit (embedding, LM head) is not converted.
  z.block_gather_b = gathered_block_param_bytes(s);
  // FSDP2 keeps no low-precision shard: the sharded parameter is the original (fp32 under amp), cast to param_dtype
  // only inside the all-gather (_fsdp_param.py FSDPParam._init_sharded_param, all_gather_inputs); FSDP1's bf16
  // _mp_shard lives only around the all-gather (_flat_param.py _use_low_precision_shard /
  // _free_low_precision_sharded_param). Under amp that shard is the master copy.
  z.shard_b = in.state.master > 0 ? in.state.master : in.state.params;
  z.grad_shard_b = std::max(in.state.grads, z.shard_b);
  z.reduce_b = static_cast<double>(dtype_bytes(precision_grad_reduce_dtype(s.precision, in.fw.amp_grads_reduced_in_fp32)));
  z.accum = static_cast<double>(grad_accum_steps(s));
  z.in_flight = in_flight_stage_microbatches(in.model, s, st.stage);
  // no_sync: the unsharded gradients are whole from the second micro-batch's backward on, when at most accum − 1
  // micro-batches still hold activations (1F1B: min(p − i, m − j) at backward j); the first backward is its own
  // candidate (peak_moment).
  if (in.keeps_unsharded_grads) z.in_flight = std::min(z.in_flight, std::max(1.0, z.accum - 1));
  if (st.last) z.head_grad_params = static_cast<double>(st.lm_head > 0 ? st.lm_head : st.embedding);
  z.split = fsdp_end_units_split(s, in.fw, st);
  if (z.split) z.embed_unit = static_cast<double>(st.embedding), z.head_unit = z.root - z.embed_unit;
  if (z.split && in.fw.torchtitan_mtp && st.mtp > 0) {
    z.mtp_unit = static_cast<double>(st.mtp);
    z.head_unit -= z.mtp_unit;
    if (st.first) z.mtp_embed_grad = z.embed_unit * z.a;
  }
  // FrameworkTraits::embedding_grad_full_vocab_under_tp: the first stage's accumulated embedding gradient holds every
  // TP rank's rows, tp times its own shard (learned positions are replicated anyway).
  if (st.first && s.tp > 1 && in.keeps_unsharded_grads && in.fw.embedding_grad_full_vocab_under_tp)
    z.embedding_grad_extra = static_cast<double>(st.embedding - (in.model.position == PositionKind::learned
                                                                      ? in.model.seq * in.model.hidden
                                                                      : 0)) *
                             static_cast<double>(s.tp - 1);
  z.down_params = static_cast<double>(in.model.ffn_hidden * in.model.hidden / s.tp) + (in.model.out_bias ? static_cast<double>(in.model.hidden) : 0);
  z.zero3 = s.zero >= 3;
  // FSDP1 SHARD_GRAD_OP under no_sync frees no unit after backward until the micro-batch that syncs
  // (_runtime_utils.py _should_free_in_backward): all stay gathered, as under torchtitan's PP.
  z.keep_all_gathered = (s.pp > 1 && in.fw.pp_keeps_params_gathered) ||
                        (s.zero == 2 && in.keeps_unsharded_grads && in.fw.zero2_keeps_params_under_no_sync);
  z.reduce_after_last = s.pp > 1 && in.fw.pp_reduces_after_last_backward;
  if (partial_recompute(s)) {
    z.partial = true;
    z.saved_recomputed = block_activation_bytes(in.model, s, in.fw);
    z.saved_kept = block_working_set_bytes(in.model, s, in.fw);
    const auto recomputed = static_cast<double>(stage_recomputed_blocks(in.model, s, st.stage));
    z.saved_stage = z.saved_recomputed * recomputed + z.saved_kept * (z.layers - recomputed);
  }
  if (z.keep_all_gathered && z.reduce_after_last && in.keeps_unsharded_grads) interleaved_hold(in, z);
  if (st.last && !z.loss_hold) {
    // Interleaved without that hold: the loss still starts a last-chunk backward, not the stage's worst.
    double at = stage_activation_hold(in.model, s, in.fw, st.stage, true).in_flight;
    if (in.keeps_unsharded_grads) at = std::min(at, std::max(1.0, z.accum - 1));
    if (at < z.in_flight) z.loss_hold = true, z.loss = {at, z.first_chunk_in_flight, z.gathered_share, z.grad_share};
  }
  z.reserve = caching_allocator_reserve(in.model, s, in.fw, st);
  if (in.fw.sharded_grads_on_reduce_stream) z.reduce_stream_shards = z.local * z.grad_shard_b;
  return z;
}

}  // namespace shardplan::memory_detail
