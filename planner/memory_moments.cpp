#include "planner/memory_moments.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "planner/activations.hpp"
#include "planner/allocator_reserve.hpp"
#include "planner/attention_linears.hpp"
#include "planner/context_parallel.hpp"
#include "planner/fp8.hpp"
#include "planner/moment_sizes.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"

namespace shardplan::memory_detail {

namespace {

double tokens(const Strategy& s) { return static_cast<double>(seq_per_rank(s) * s.micro_batch); }  // seq / cp per rank
double seq_split(const Strategy& s) { return s.sp ? static_cast<double>(s.tp) : 1.0; }
// K (or V) as the attention kernel gets it on one rank: grouped, or copied to every query head
// (attention_linears.hpp attention_kv_heads_per_rank).
double kv_width(const ModelSpec& m, const Strategy& s) {
  return attention_kv_heads_per_rank(m, s) * static_cast<double>(model_head_dim(m));
}

// The attention half of a block's working set (what its recomputation saves again): norm, Q/K/V input, rotated q and k,
// v, the output and the fp32 log-sum-exp (flash attention; activations.cpp add_attention_terms).
double attention_working_set_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double a) {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m)) / static_cast<double>(s.tp);
  const double kv = kv_width(m, s), heads = static_cast<double>(m.heads) / static_cast<double>(s.tp);
  const double boundary = (norm_saved_bytes(m, fw, a) + a * h) / seq_split(s);
  const double outputs = cp_output_copied(s) ? 3 : 2;  // q and the output, and under torch's CP ring its copy
  return (boundary + a * (outputs * q + 2 * kv) + 4 * heads) * tokens(s);
}

// Gradients of the MLP's intermediates alive at its backward's peak (FrameworkTraits::block_backward_*_tensors).
double mlp_backward_temp_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double a) {
  const double f = static_cast<double>(m.ffn_hidden) / static_cast<double>(s.tp), h = static_cast<double>(m.hidden);
  return (fw.block_backward_f_tensors * a * f + fw.block_backward_h_tensors * a * h / seq_split(s)) * tokens(s);
}

// At the attention's backward: flash backward's dq, dk, dv (dk and dv at the query heads' width before the GQA sum,
// as the measured allocations show), the gradient of the attention output and of the block input.
double attention_backward_temp_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double a) {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(model_q_width(m)) / static_cast<double>(s.tp);
  const double kv = kv_width(m, s);
  const double gqa = kv < q ? 2 * q : 0;
  return (a * (2 * q + 2 * kv + gqa) + (1 + fw.block_backward_h_tensors) * a * h / seq_split(s)) * tokens(s);
}

// Model states every moment holds, and the gradients that exist before this micro-batch's backward. Returns the bytes
// of sharded gradients among them (add_reduce_stream_reserve).
double add_states(Ledger& l, const StageInputs& in, const Sizes& z, bool step) {
  if (in.state.master > 0)
    l.add(&MemoryComponents::master, "master", text("fp32 master weights (the parameter shards: FSDP keeps no bf16 copy between gathers)"),
          z.local * z.shard_b);
  else
    l.add(&MemoryComponents::params, "params", [&] { return fmt::format("parameter shards ({} B/param)", z.shard_b); },
          z.local * z.shard_b);
  l.add(&MemoryComponents::optimizer, "optimizer", text("Adam exp_avg and exp_avg_sq (fp32 shards)"),
        z.local * in.state.optimizer);
  if (in.keeps_unsharded_grads && !step) {
    // no_sync (set_requires_gradient_sync(False)): the unsharded gradients accumulate; FSDP2 upcasts them to the reduce
    // dtype (_fsdp_param.py FSDPParam.to_accumulated_grad_if_needed), FSDP1 keeps the parameter dtype.
    const double b = in.fw.framework == Framework::fsdp1 ? in.state.grads : z.reduce_b;
    // The first backward: at its first block (the stage's last in forward order) that block's and the LM head's so
    // far, at block k those of the blocks from k on, at its last (block 0) every block's.
    if (z.first_pass)
      l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("unsharded gradients of the first backward so far (no_sync, {} B/param)", b); },
            ((z.first_pass_end ? z.psi - z.root : z.block * z.first_pass_blocks) + z.head_grad_params) * b);
    else if (z.grad_share < 1)
      l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("unsharded gradients of the chunks between their first and last backward (no_sync, {} B/param)", b); },
            (z.root + (z.psi - z.root) * z.grad_share) * b);
    else
      l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("unsharded gradients accumulated across micro-batches (no_sync, {} B/param)", b); },
            z.psi * b);
    if (!z.first_pass)
      l.add(&MemoryComponents::grads, "grads",
            text("the embedding's gradient at full vocabulary on every TP rank (DTensor's embedding backward has no "
                 "row-wise strategy), kept with them"),
            z.embedding_grad_extra * b);
  } else if (step || z.accum > 1) {
    // zero_grad(set_to_none=True) (torch/optim/optimizer.py, the default) frees them after each step: during the first
    // micro-batch none exists; later micro-batches and the step hold every unit's.
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("sharded gradients ({} B/param{})", z.grad_shard_b, step ? "" : ", from the earlier micro-batches"); },
          z.local * z.grad_shard_b);
    return z.local * z.grad_shard_b;
  }
  return 0;
}

// The model's ends gathered at a moment. In the root (not split) they are gathered together or not at all: the root
// is never resharded after forward (_fsdp_state.py FSDPState._lazy_init leaves the root's post_forward_mesh_info
// None), so every moment but the root's post-backward has it. As units of their own (Sizes::split) each is gathered
// by its own hooks.
struct Ends {
  bool embed = false, head = false;
};

// Gathered compute-dtype parameters: the ends (Ends) and `blocks` block units.
void add_gathered(Ledger& l, const StageInputs& in, const Sizes& z, double blocks, Ends ends) {
  if (z.keep_all_gathered) {
    l.add(&MemoryComponents::params, "params", [&] { return fmt::format("gathered stage parameters, kept from the first forward to the last backward{}", z.block_gather_b < z.a ? " (blocks in FP8)" : ""); },
          z.root * z.a + (z.psi - z.root) * z.gathered_share * z.block_gather_b);
    return;
  }
  if (!z.split && (ends.embed || ends.head) && in.fw.zero3_root_stays_gathered)
    l.add(&MemoryComponents::params, "params", text("gathered root unit (embedding, final norm, LM head; bf16)"), z.root * z.a);
  if (z.split && ends.embed)
    l.add(&MemoryComponents::params, "params", text("gathered embedding unit (bf16)"), z.embed_unit * z.a);
  if (z.split && ends.head)
    l.add(&MemoryComponents::params, "params", text("gathered final norm and LM head unit (bf16)"), z.head_unit * z.a);
  l.add(&MemoryComponents::params, "params", [&] { return fmt::format("gathered block parameters ({:.0f} of the stage's {:.0f} blocks, {})", blocks, z.layers, z.block_gather_b < z.a ? "FP8" : "bf16"); },
        blocks * z.block * z.block_gather_b);
}

void add_rope_caches(Ledger& l, const StageInputs& in) {
  const ModelSpec& m = in.model;
  if (in.fw.rope_tables == RopeTables::none || m.position != PositionKind::rotary) return;
  // A complex64 [seq, head_dim / 2] table of the training length (torchtitan models/common/rope.py ComplexRoPE
  // _precompute_cache over max_context_length), whole on every CP rank: CP shards the positions that index it
  // (distributed/context_parallel/api.py prepare_context_parallel_input, since f1d41a117, 2025-12-09; before, torch's
  // context_parallel sharded the table itself and kept the whole one to restore after the step). One per attention
  // layer since 02d24f017 (2026-06-05), one for the model before (Strategy::rope_cache_per_layer).
  const double table = static_cast<double>(in.strategy.seq) * static_cast<double>(model_head_dim(m)) / 2 * 8;
  if (in.strategy.rope_cache_per_layer.value_or(in.fw.rope_tables == RopeTables::per_layer))
    l.add(&MemoryComponents::buffers, "buffers", text("RoPE caches (complex64, one per attention layer)"),
          table * static_cast<double>(in.stage.layers));
  else
    l.add(&MemoryComponents::buffers, "buffers", text("RoPE table (complex64, one for the model)"), table);
}

// Under partial recomputation (partial_recompute.hpp; Sizes::partial) the blocks of the micro-batch in backward are its
// first ones in forward order, each as it saves (activations.hpp saved_first_blocks_bytes, from Sizes' figures); under
// interleaving, where they span chunks, the stage's mean block.
double micro_blocks_bytes(const StageInputs& in, const Sizes& z, double blocks) {
  const Strategy& s = in.strategy;
  if (s.vpp > 1 || z.layers <= 0) return z.layers > 0 ? z.saved_stage / z.layers * blocks : 0.0;
  const auto layers = static_cast<int64_t>(z.layers);
  const auto first = std::clamp<int64_t>(static_cast<int64_t>(blocks), 0, layers);
  const auto recomputed = static_cast<double>(recomputed_among_first(s, first, layers));
  return z.saved_recomputed * recomputed + z.saved_kept * (static_cast<double>(first) - recomputed);
}

// Whether block k of the stage (forward order over its chunks) recomputes its forward in backward. Under the
// interleaved hold, block layers − 1 stands for the worst backward's moment, in block z.hold_block.
bool block_recomputes(const StageInputs& in, const Sizes& z, double k) {
  const bool held = z.interleaved_hold && k == z.layers - 1 && z.hold_block >= 0;
  const auto block = held ? z.hold_block : static_cast<int64_t>(k);
  return stage_block_recomputes(in.model, in.strategy, in.stage.stage, block);
}

void add_block_activations(Ledger& l, const StageInputs& in, const Sizes& z, double blocks_this_micro) {
  const Strategy& s = in.strategy;
  const double per_block = z.partial ? 0.0 : block_activation_bytes(in.model, s, in.fw);
  const double full_micro = z.partial ? z.saved_stage : per_block * z.layers;
  const double blocks = (z.in_flight - 1) * z.layers + blocks_this_micro;
  l.add(&MemoryComponents::activations, "activations", [&] {
          return partial_recompute(s)
                     ? fmt::format("{:.0f} blocks × 1 micro-batches in flight, {} of each micro-batch's {:.0f} recomputed",
                                   blocks, stage_recomputed_blocks(in.model, s, in.stage.stage), z.layers)
                     : fmt::format("{:.0f} blocks × 1 micro-batches in flight, recompute {}", blocks, to_string(s.recompute)); },
        full_micro * (z.in_flight - 1) + (z.partial ? micro_blocks_bytes(in, z, blocks_this_micro) : per_block * blocks_this_micro));
  if (in.stage.first)
    l.add(&MemoryComponents::activations, "activations", text("embedding dropout mask"),
          first_stage_extra_bytes(in.model, s) * (z.interleaved_hold ? z.first_chunk_in_flight : z.in_flight));
}

// `attention`: a moment inside a block's attention, where context parallelism's K/V buffers exist (the ring gathers
// them for each attention call and frees them after it: torch _templated_ring_attention's rotater, measured in
// reports/cp-memory.md; at the loss's backward none is held).
void add_common(Ledger& l, const StageInputs& in, const Sizes& z, bool attention = false) {
  add_rope_caches(l, in);
  add_parallel_buffers(l, in, attention);
  add_runtime(l, in);
  l.add(&MemoryComponents::fragmentation, "fragmentation", [&] { return fmt::format("caching allocator: {} segments of their own × 1 MiB unused on average (kRoundLarge 2 MiB)", z.reserve.own_segments); },
        z.reserve.rounding);
  l.add(&MemoryComponents::fragmentation, "fragmentation", text("caching allocator: one block's working set left in split segments (its temporaries' holes)"),
        z.reserve.holes);
}

// FrameworkTraits::sharded_grads_on_reduce_stream: the shards not yet allocated at this moment (`present` are) will be
// allocated on the reduce-scatter stream, whose pool the compute stream's cached blocks are not in; so the step's
// reserve (max_memory_reserved) is this moment's plus them.
void add_reduce_stream_reserve(Ledger& l, const Sizes& z, double present) {
  l.add(&MemoryComponents::fragmentation, "fragmentation",
        text("caching allocator: the gradient shards still to come this step, on FSDP's reduce-scatter stream (the "
             "compute stream's cached blocks cannot hold them)"),
        std::max(0.0, z.reduce_stream_shards - present));
}

// FrameworkTraits::torchtitan_mtp: from the MTP modules' backward on, the embedding's gradient from their use waits
// for the main use's (autograd sums a parameter's gradients before accumulating them; MTPDecoder.forward calls
// tok_embeddings twice), and FSDP2 keeps the unit gathered until its post-backward (add_gathered's ends).
void add_mtp_embedding_grad(Ledger& l, const Sizes& z) {
  l.add(&MemoryComponents::grads, "grads",
        text("the embedding's gradient from the MTP modules' use, held until the main use's is added to it (bf16)"),
        z.mtp_embed_grad);
}

// What the loss's forward holds per logit: the compute-dtype logits, under an eager loss also the fp32 upcast (none
// for fp32 logits: .float() returns them) and log_softmax's output (10 B for bf16, reports/fsdp2-memory.md); a fused
// loss the logits alone (strategy.hpp LossKind).
double loss_forward_bytes_per_logit(bool fused, double a) { return fused ? a : a + (a < 4 ? 4 : 0) + 4; }

void loss_backward(Ledger& l, const StageInputs& in, const Sizes& z) {
  const ModelSpec& m = in.model;
  const Strategy& s = in.strategy;
  const double shards = add_states(l, in, z, false);
  // ZeRO-3: the root, and the last block when the root's pre-backward (which prefetches it:
  // _fsdp_param_group.py FSDPParamGroup._backward_prefetch) ran before the loss's backward. ZeRO-2 (reshard_after_forward
  // False): every unit stays gathered until its post-backward. Ends of their own: the head unit is not resharded
  // after forward, the embedding is under ZeRO-3 (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder); the root then
  // holds no parameter, has no parameter group and prefetches nothing.
  const double prefetched = in.fw.loss_inside_root_forward && !z.split && z.layers > 0 ? 1 : 0;
  add_gathered(l, in, z, z.zero3 ? prefetched : z.layers, {!z.split || !z.zero3, true});
  // The MTP layers' units (torchtitan_mtp), kept gathered from their forward to their backward under ZeRO-2.
  if (!z.zero3)
    l.add(&MemoryComponents::params, "params", text("gathered MTP layers (bf16)"), z.mtp_unit * z.a);
  add_block_activations(l, in, z, z.layers);
  l.add(&MemoryComponents::activations, "activations", head_inputs_text(m, in.fw, s),
        last_stage_extra_bytes(m, s, in.fw));
  const double chunks = s.loss == LossKind::chunked ? static_cast<double>(in.fw.loss_chunks) : 1.0;
  const double elements = tokens(s) * static_cast<double>(model_padded_vocab(m)) / static_cast<double>(s.tp) / chunks;
  const bool fused = s.loss == LossKind::fused;
  const double logits = elements * (fused ? 2 * z.a : loss_backward_bytes_per_logit(s, in.fw));
  // torchtitan's MTP (FrameworkTraits::torchtitan_mtp): the loss's forward at its last depth can hold more than the
  // backward (every output's logits kept by `pred`); the moment is then that forward (moment_parts' logits_forward).
  const double mtp_saved = mtp_loss_saved_bytes(m, s, in.fw);
  const double forward = elements * loss_forward_bytes_per_logit(fused, z.a) + mtp_loss_forward_bytes(m, s, in.fw);
  const bool forward_peaks = in.fw.torchtitan_mtp && m.mtp_layers > 0 && forward > logits + mtp_saved;
  if (forward_peaks)
    l.add(&MemoryComponents::logits, "logits", [&] { return fmt::format("the loss's forward at the last of the {} MTP depths: every output's logits (`pred`), the earlier cross-entropies' saved {}", m.mtp_layers, fused ? "logits" : "fp32 log-softmax and the last one's fp32 upcast"); },
          forward);
  else if (fused)
    l.add(&MemoryComponents::logits, "logits", [&] { return fmt::format("fused cross-entropy backward: the logits and their gradient ({:g} B/element, compute dtype)", 2 * z.a); },
          logits);
  else
    l.add(&MemoryComponents::logits, "logits", [&] { return fmt::format("cross-entropy backward logits ({:g} B/element: fp32 log_softmax output, nll_loss_backward's gradient, _log_softmax_backward_data's result{})",
                      loss_backward_bytes_per_logit(s, in.fw), s.loss == LossKind::chunked ? fmt::format("; 1/{} at a time", in.fw.loss_chunks) : ""); },
          logits);
  if (!forward_peaks) add_mtp_loss_saved(l, m, s, mtp_saved);
  add_common(l, in, z);
  // The bf16 logits' block, freed before the loss's backward (torchtitan `del pred`; transformers drops the output):
  // too small for the fp32 [T, V] tensors allocated then, it stays cached in its own segment (reserved, though an
  // allocation that would fail first releases it: release_cached_blocks). fp32 logits fit the fp32 gradients: reused.
  // A fused loss keeps its logits alive to the end of its backward: nothing of them is freed early.
  l.add(&MemoryComponents::fragmentation, "fragmentation", text("caching allocator: the freed bf16 logits' segment, too small for the loss's fp32 gradients"),
        z.a < 4 && !fused ? elements * z.a : 0);
  add_reduce_stream_reserve(l, z, shards);
}

// Block k of the stage (0 = first in forward order) during its backward; sub 0: the MLP's backward (its output
// projection's weight gradient written, the MLP's intermediate gradients alive), sub 1: the attention's backward (the
// block's whole gradient written).
void block_backward(Ledger& l, const StageInputs& in, const Sizes& z_in, double k, int sub) {
  const ModelSpec& m = in.model;
  const Strategy& s = in.strategy;
  Sizes z = z_in;
  if (z.first_pass && !z.first_pass_end) z.first_pass_blocks = z.layers - k;
  const double shards = add_states(l, in, z, false);
  // ZeRO-3: block k and the block prefetched for the next backward (after block 0: the root, gathered already, or the
  // embedding unit); ZeRO-2: units reshard at their post-backward (_fsdp_param_group.py FSDPParamGroup.post_backward →
  // reshard), the head unit of its own right after its backward.
  const bool mtp_hold = z.mtp_embed_grad > 0;
  add_gathered(l, in, z, z.zero3 ? (k > 0 ? 2 : 1) : k + 1, {!z.split || !z.zero3 || k == 0 || mtp_hold, !z.split});
  add_mtp_embedding_grad(l, z);
  const bool fresh = !in.keeps_unsharded_grads && z.accum <= 1;
  const double head_shard = z.split ? (z.head_unit + z.mtp_unit) / z.n * z.grad_shard_b : 0;  // reduced before the blocks
  const double reduced = fresh ? (z.layers - 1 - k) * z.block_local * z.grad_shard_b + head_shard : 0;
  if (fresh)
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("sharded gradients of the {:.0f} blocks{} reduced ({} B/param)", z.layers - 1 - k, z.split ? " and the head unit" : "", z.grad_shard_b); },
          reduced);
  if (!in.keeps_unsharded_grads && !z.split)
    l.add(&MemoryComponents::grads, "grads", text("LM head gradients (bf16, written first in backward; the root is reduced last)"),
          z.head_grad_params * z.a);
  if (!in.keeps_unsharded_grads) {
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("block gradients ({}, bf16)", sub == 0 ? "the MLP output projection's" : "the whole block's"); },
          (sub == 0 ? z.down_params : z.block) * z.a);
  }
  // _fsdp_collectives.py foreach_reduce allocates the reduce-scatter input in reduce_dtype and copies the gradients in
  // (foreach_reduce_scatter_copy_in); FSDPParamGroup.post_backward keeps one until the next unit's post-backward.
  if (k < z.layers - 1 && !z.reduce_after_last)
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("the next block's gradients as reduce-scatter input in flight ({} B/param)", z.reduce_b); },
          z.block * z.reduce_b);
  add_block_activations(l, in, z, k + 1);
  const bool full = block_recomputes(in, z, k);
  if (sub == 0) {
    if (full)
      l.add(&MemoryComponents::activations, "activations", text("the block's working set, recomputed for its backward"),
            block_working_set_bytes(m, s, in.fw));
    l.add(&MemoryComponents::activations, "activations", text("the MLP's backward temporaries"),
          mlp_backward_temp_bytes(m, s, in.fw, z.a));
  } else {
    if (full)
      l.add(&MemoryComponents::activations, "activations", text("the attention's working set, recomputed for its backward"),
            attention_working_set_bytes(m, s, in.fw, z.a));
    l.add(&MemoryComponents::activations, "activations", text("the attention's backward temporaries"),
          attention_backward_temp_bytes(m, s, in.fw, z.a));
  }
  add_common(l, in, z, sub == 1);
  add_reduce_stream_reserve(l, z, shards + reduced);
}

// The root's post-backward, or with ends of their own the embedding unit's (the last to reduce).
void root_post_backward(Ledger& l, const StageInputs& in, const Sizes& z) {
  const double shards = add_states(l, in, z, false);
  const double last = z.last_unit();
  const double blocks_reduced = !in.keeps_unsharded_grads && z.accum <= 1 ? (z.local - last / z.n) * z.grad_shard_b : 0;
  if (blocks_reduced > 0)
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("sharded gradients of every block{} ({} B/param)", z.split ? " and the head unit" : "", z.grad_shard_b); },
          blocks_reduced);
  const char* unit = z.split ? "embedding unit" : "root unit";
  if (z.mtp_embed_grad > 0) {
    // MTP's use (torchtitan_mtp): the embedding's backward ends by adding its two gradients, the held one, the new
    // one and their sum alive together with the gathered unit, before its post-backward reshards it and copies the sum
    // into the reduce-scatter input (less than this); block 0's reduce-scatter input is still in flight.
    l.add(&MemoryComponents::params, "params", text("gathered embedding unit (bf16)"), z.embed_unit * z.a);
    l.add(&MemoryComponents::grads, "grads",
          text("the embedding's gradients from the MTP modules' use and the main one, and their sum (bf16)"),
          3 * z.mtp_embed_grad);
    if (!in.keeps_unsharded_grads)
      l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("the first block's gradients as reduce-scatter input in flight ({} B/param)", z.reduce_b); },
            z.block * z.reduce_b);
    if (z.in_flight > 1) add_block_activations(l, in, z, 0);
    add_common(l, in, z);
    add_reduce_stream_reserve(l, z, shards + blocks_reduced);
    return;
  }
  if (!in.keeps_unsharded_grads)
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("{} gradients (bf16)", unit); }, last * z.a);
  l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("{} gradients as reduce-scatter input ({} B/param)", unit, z.reduce_b); },
        last * z.reduce_b);
  // Under a pipeline the other micro-batches in flight keep their activations.
  if (z.in_flight > 1) add_block_activations(l, in, z, 0);
  add_common(l, in, z);
  add_reduce_stream_reserve(l, z, shards + blocks_reduced);
}

// Ends of their own (Sizes::split): the head unit gathered again for the final norm's backward. fully_shard([norm,
// lm_head]) registers its post-backward on each module's inputs (each pre_forward finds the group IDLE after the
// other's post_forward: _fsdp_param_group.py FSDPParamGroup.pre_forward/post_forward), so it runs after the LM head's
// backward: the LM head's gradients go into their reduce-scatter input (foreach_reduce) and the unit reshards; the
// norm's pre-backward then all-gathers the whole unit again, its all-gather output and unsharded parameters alive
// together through the copy-out (PyTorch 2.15's allocations: reports/fsdp2-memory-wrap.md). The reduce-scatter input
// stays until the norm's own post-backward (reduce_scatter_max_input_buffers 1); every block still holds its
// activations; nothing is prefetched yet.
void head_post_backward(Ledger& l, const StageInputs& in, const Sizes& z) {
  const double shards = add_states(l, in, z, false);
  add_gathered(l, in, z, z.zero3 ? 0 : z.layers, {!z.zero3 || z.mtp_embed_grad > 0, false});
  add_mtp_embedding_grad(l, z);
  l.add(&MemoryComponents::params, "params", text("final norm and LM head unit gathered again for the norm's backward: all-gather output and unsharded parameters (bf16)"),
        2 * z.head_unit * z.a);
  const bool fresh = !in.keeps_unsharded_grads && z.accum <= 1;
  // The MTP layers' units (torchtitan_mtp) ran their backward and post-backward between the LM head's and the
  // norm's: their shards exist, and their reduce-scatter input is the one in flight (its post-backward waited for the
  // head's and released that input).
  const double head_shard = fresh ? (z.head_unit + z.mtp_unit) / z.n * z.grad_shard_b : 0;
  l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("final norm and LM head{} sharded gradients ({} B/param)", z.mtp_unit > 0 ? " and MTP layers'" : "", z.grad_shard_b); },
        head_shard);
  l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("{} gradients as reduce-scatter input ({} B/param)", z.mtp_unit > 0 ? "the MTP layers'" : "LM head", z.reduce_b); },
        (z.mtp_unit > 0 ? z.mtp_unit : z.head_unit) * z.reduce_b);
  add_block_activations(l, in, z, z.layers);
  add_common(l, in, z);
  add_reduce_stream_reserve(l, z, shards + head_shard);
}

void optimizer_step(Ledger& l, const StageInputs& in, const Sizes& z) {
  add_states(l, in, z, true);
  // torch/optim/adam.py _multi_tensor_adam (foreach, PyTorch's CUDA default): torch._foreach_sqrt(exp_avg_sq) makes one
  // temporary per parameter in the state dtype.
  l.add(&MemoryComponents::buffers, "buffers", text("optimizer-step temporaries"),
        z.local * in.fw.optimizer_temp_bytes_per_param);
  add_common(l, in, z);
}

}  // namespace

// Over one rank too where the runtime still works unit by unit (FrameworkTraits::units_on_one_rank: FSDP2, which
// torchtitan applies at any degree, models/llama3/parallelize.py apply_fsdp_to_decoder "with shard_degree=1");
// PyTorch's allocations at TP 8 on 8 ranks agree (reports/tp-memory.md).
bool moments_apply(const Strategy& s, const FrameworkTraits& fw, int64_t shard) {
  return fw.memory_moments && s.zero >= 2 && (shard > 1 || fw.units_on_one_rank) && !s.offload_optimizer;
}

bool uses_moments(const StageInputs& in) { return moments_apply(in.strategy, in.fw, in.shard); }

bool keeps_unsharded_grads(const Strategy& s, const FrameworkTraits& fw, int64_t shard) {
  return s.zero >= 2 && (shard > 1 || fw.units_on_one_rank) && grad_accum_steps(s) > 1 &&
         effective_grad_sync(s, fw) == GradSync::per_step;
}

namespace {

MomentLedger moment_with(const StageInputs& in, const Sizes& z, MemoryPhase phase, int64_t block, int sub, bool record) {
  MomentLedger out{Ledger(record), phase, block};
  switch (phase) {
    case MemoryPhase::loss_backward: loss_backward(out.ledger, in, at_loss(z)); break;
    case MemoryPhase::block_backward: block_backward(out.ledger, in, z, static_cast<double>(block), sub); break;
    case MemoryPhase::root_post_backward: root_post_backward(out.ledger, in, z); break;
    case MemoryPhase::head_post_backward: head_post_backward(out.ledger, in, z); break;
    case MemoryPhase::optimizer_step:
    case MemoryPhase::forward_backward: out.phase = MemoryPhase::optimizer_step; optimizer_step(out.ledger, in, z); break;
  }
  return out;
}

}  // namespace

MomentLedger moment_at(const StageInputs& in, MemoryPhase phase, int64_t block, int sub, bool record) {
  return moment_with(in, sizes_of(in), phase, block, sub, record);
}

MomentLedger peak_moment(const StageInputs& in, bool record, bool by_allocation) {
  const int64_t layers = in.stage.layers;
  struct Candidate {
    MemoryPhase phase;
    int64_t block;
    int sub;
  };
  Candidate cands[32];
  int n = 0;
  if (in.stage.last) cands[n++] = {MemoryPhase::loss_backward, -1, 0};
  // Within the blocks every term is linear in k, so the ends and their neighbours (where the prefetch and the
  // reduce-scatter input in flight start or stop) bound the maximum; under partial recomputation also the first and
  // the last recomputed block and the block after it (the recomputed working set comes and goes there).
  const Sizes z = sizes_of(in);
  int64_t ks[7] = {layers - 1, layers - 2, 1, 0, -1, -1, -1};
  // Under the interleaved hold, block layers − 1 stands for the worst moment of every pass (interleaved_hold walks
  // each block of a pass, and nothing else in a block's moment depends on which): the others would only mix the
  // stage's blocks with one pass's.
  int nk = z.interleaved_hold ? 1 : 4;
  if (partial_recompute(in.strategy) && !z.interleaved_hold) {
    int64_t first = -1, last = -1;
    for (int64_t k = 0; k < layers; ++k)
      if (stage_block_recomputes(in.model, in.strategy, in.stage.stage, k)) last = k, first = first < 0 ? k : first;
    if (last >= 0) ks[nk++] = first, ks[nk++] = last, ks[nk++] = last + 1;
  }
  // Both sub-moments of each distinct block among ks[from, nk) from block lo to hi.
  auto add_blocks = [&](int from, int64_t lo, int64_t hi) {
    for (int i = from; i < nk; ++i) {
      const int64_t k = ks[i];
      bool seen = k < lo || k > hi;
      for (int j = from; j < i; ++j) seen = seen || ks[j] == k;
      if (seen) continue;
      cands[n++] = {MemoryPhase::block_backward, k, 0};
      cands[n++] = {MemoryPhase::block_backward, k, 1};
    }
  };
  add_blocks(0, 0, layers - 1);
  if (in.stage.root_unit() > 0) cands[n++] = {MemoryPhase::root_post_backward, -1, 0};
  cands[n++] = {MemoryPhase::optimizer_step, -1, 0};
  if (z.split) cands[n++] = {MemoryPhase::head_post_backward, -1, 0};
  // no_sync where the stage holds every micro-batch at its first backward: that backward's first block.
  Sizes first = z;
  first.first_pass = true;
  first.in_flight = in_flight_stage_microbatches(in.model, in.strategy, in.stage.stage);
  Sizes first_end = first;  // the same pass at its last block: every block's gradients, one block's activations left
  first_end.first_pass_end = true;
  const int firsts = n;
  int first_ends = n;
  if (in.keeps_unsharded_grads && !z.interleaved_hold && first.in_flight > z.in_flight && layers > 0) {
    cands[n++] = {MemoryPhase::block_backward, layers - 1, 0};
    cands[n++] = {MemoryPhase::block_backward, layers - 1, 1};
    // Inside that backward, under partial recomputation: the recomputed blocks' working sets (ks[4..6] above).
    add_blocks(4, 1, layers - 2);
    first_ends = n;
    if (layers > 1) {
      cands[n++] = {MemoryPhase::block_backward, 0, 0};
      cands[n++] = {MemoryPhase::block_backward, 0, 1};
    }
  }
  auto sizes_for = [&](int i) -> const Sizes& { return i >= first_ends ? first_end : i >= firsts ? first : z; };
  auto key = [&](const MomentLedger& m) {
    return m.ledger.parts_.total() - (by_allocation ? m.ledger.parts_.fragmentation : 0.0);
  };
  int best = 0;
  MomentLedger peak = moment_with(in, sizes_for(0), cands[0].phase, cands[0].block, cands[0].sub, false);
  for (int i = 1; i < n; ++i) {
    MomentLedger m = moment_with(in, sizes_for(i), cands[i].phase, cands[i].block, cands[i].sub, false);
    if (key(m) > key(peak)) peak = std::move(m), best = i;
  }
  // Interleaved (interleaved_hold): the bytes are the worst backward's whatever block stands for it; name its block.
  const bool renamed = z.interleaved_hold && peak.phase == MemoryPhase::block_backward && peak.block == layers - 1;
  if (renamed) peak.block = z.hold_block;
  if (!record) return peak;
  MomentLedger out = moment_with(in, sizes_for(best), cands[best].phase, cands[best].block, cands[best].sub, true);
  if (renamed) out.block = z.hold_block;
  return out;
}

}  // namespace shardplan::memory_detail

namespace shardplan {

MomentParts moment_parts(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const StageParams& st) {
  using namespace memory_detail;
  const StageInputs in = stage_inputs(m, s, fw, st);
  MomentParts p;
  p.applies = uses_moments(in);
  if (!p.applies) return p;
  const Sizes z = sizes_of(in);
  (in.state.master > 0 ? p.shard_master : p.shard_params) = z.local * z.shard_b;
  p.optimizer = z.local * in.state.optimizer;
  {
    Ledger l(false);
    add_rope_caches(l, in);
    p.model_buffers = l.parts_.buffers;
  }
  if (st.last) {
    const double elements = tokens(s) * static_cast<double>(model_padded_vocab(m)) / static_cast<double>(s.tp);
    // fp32 logits' freed block serves the fp32 gradients: only bf16 logits leave a segment cached.
    const bool fused = s.loss == LossKind::fused;
    p.logits_forward = elements * loss_forward_bytes_per_logit(fused, z.a);
    p.logits_backward = elements * loss_backward_bytes_per_logit(s, fw);
    p.logits_cached = z.a < 4 ? elements * z.a : 0;
    if (fused) {  // the logits and their gradient backward (strategy.hpp)
      p.logits_backward = elements * 2 * z.a;
      p.logits_cached = 0;
    }
    if (s.loss == LossKind::chunked) {
      const double chunks = static_cast<double>(fw.loss_chunks);
      p.logits_forward /= chunks, p.logits_backward /= chunks, p.logits_cached /= chunks;
    }
    // The MTP modules' cross-entropies keep theirs from the forward to the backward (activations.hpp); under
    // torchtitan's MTP the forward holds every depth's logits too.
    const double mtp = mtp_loss_saved_bytes(m, s, fw);
    p.logits_forward += fw.torchtitan_mtp ? mtp_loss_forward_bytes(m, s, fw) : mtp;
    p.logits_backward += mtp;
    p.last_extra = last_stage_extra_bytes(m, s, fw);
  }
  // Under keep_all_gathered the simulator gathers each unit at its first forward and keeps it (StepPlan::gathers_once).
  p.gathered_block = z.block * z.block_gather_b;
  if (fw.zero3_root_stays_gathered || z.keep_all_gathered) p.gathered_root = z.last_unit() * z.a;
  p.reshard_after_forward = z.zero3;
  // The block's backward: the larger of its two sub-moments (block_backward's sub 0 and 1), the rest being equal.
  const double own_grads_mlp = in.keeps_unsharded_grads ? 0 : z.down_params * z.a;
  const double own_grads_attn = in.keeps_unsharded_grads ? 0 : z.block * z.a;
  // A recomputed block holds its working set again; under partial recomputation the others do not
  // (backward_*_kept, partial_recompute.hpp).
  auto sub_moment = [&](bool full, double& grads, double& temps) {
    const double mlp = (full ? block_working_set_bytes(m, s, fw) : 0) + mlp_backward_temp_bytes(m, s, fw, z.a);
    // The CP ring's K/V buffers during the attention's backward (add_common's `attention`).
    const double attn = (full ? attention_working_set_bytes(m, s, fw, z.a) : 0) +
                        attention_backward_temp_bytes(m, s, fw, z.a) + (s.cp > 1 ? cp_kv_buffer_bytes(m, s) : 0);
    const bool mlp_wins = mlp + own_grads_mlp >= attn + own_grads_attn;
    grads = mlp_wins ? own_grads_mlp : own_grads_attn;
    temps = mlp_wins ? mlp : attn;
  };
  sub_moment(s.recompute == Recompute::full, p.backward_grads, p.backward_temps);
  sub_moment(s.recompute == Recompute::full && !partial_recompute(s), p.backward_grads_kept, p.backward_temps_kept);
  if (in.keeps_unsharded_grads) {
    const double b = fw.framework == Framework::fsdp1 ? in.state.grads : z.reduce_b;
    p.accumulated_block = z.block * b;
    p.accumulated_root = (z.root + z.embedding_grad_extra) * b;
  } else {
    p.head_grads = z.split ? 0 : z.head_grad_params * z.a;
    p.embed_grads = (z.split ? z.embed_unit : z.root - z.head_grad_params) * z.a;
  }
  const double last = z.last_unit();
  p.block_reduce_input = z.block * z.reduce_b;
  p.root_reduce_input = last * z.reduce_b;
  p.block_sharded_grads = z.block_local * z.grad_shard_b;
  p.root_sharded_grads = last * z.grad_shard_b / z.n;
  p.end_units = z.split;
  if (z.split) {
    p.gathered_head_unit = z.head_unit * z.a;
    // The MTP layers' units reduce right after the head unit, before the norm's backward (head_post_backward).
    p.head_unit_reduce_input = (z.mtp_unit > 0 ? z.mtp_unit : z.head_unit) * z.reduce_b;
    p.head_unit_sharded_grads = (z.head_unit + z.mtp_unit) * z.grad_shard_b / z.n;
    p.mtp_embed_grad = z.mtp_embed_grad;
    p.gathered_mtp_unit = z.zero3 ? 0 : z.mtp_unit * z.a;
    p.mtp_embed_gathered = z.mtp_embed_grad > 0 && z.zero3 ? z.embed_unit * z.a : 0;
  }
  p.optimizer_temps = z.local * fw.optimizer_temp_bytes_per_param;
  p.allocator_reserve = z.reserve.total();
  p.reduce_stream_reserve = z.reduce_stream_shards;
  return p;
}

}  // namespace shardplan
