// A stage's passes as ops: forward, backward (whole, or the B pass of a zero-bubble schedule) and W, with the
// gathers, critical-path collectives, ring attention and transfers around them (sim/stage_builder.hpp).
#include "sim/stage_builder.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "planner/pipeline_layout.hpp"

namespace shardplan::sim {

StageBuilder::StageBuilder(const StepPlan& plan, int64_t stage, Engine& e, const StageStreams& st)
    : plan_(plan), c_(plan.stages[static_cast<size_t>(stage)]), e_(e), st_(st), stage_(stage),
      fsdp_(e, c_, st.reduce, plan.keeps_unsharded_grads) {
  const auto passes = static_cast<size_t>(plan.micro_batches * plan.vpp);
  grads_done_.assign(static_cast<size_t>(plan.micro_batches), 0);
  ops_.fwd_entry.assign(passes, kNone);
  ops_.bwd_entry.assign(passes, kNone);
  ops_.bwd_entry_gather.assign(passes, kNone);
  ops_.send_act.assign(passes, kNone);
  ops_.send_grad.assign(passes, kNone);
  chunk_offset_.assign(c_.chunk_layers.size() + 1, 0);
  for (size_t k = 0; k < c_.chunk_layers.size(); ++k) chunk_offset_[k + 1] = chunk_offset_[k] + c_.chunk_layers[k];
  const auto layers = static_cast<size_t>(c_.layers());
  grads_alive_.assign(layers + 1, false);
  if (plan.dp_mode == DpMode::buckets && c_.buckets > 0) {
    const double total = c_.root_params + c_.block_params * static_cast<double>(c_.layers());
    bucket_params_ = total / static_cast<double>(c_.buckets);
    if (plan.overlap_param_gather && c_.param_gather > 0) {
      // The previous step's parameter all-gather, bucket by bucket, waited for by this step's first forward
      // (Megatron-Core overlap_param_gather: param_and_grad_buffer.py dispatches each bucket's gather ahead of the
      // forward that needs it). The same bytes as a gather after the optimizer, on the same stream.
      for (int64_t b = 0; b < c_.buckets; ++b)
        param_gathers_.push_back(
            e_.add_op(st_.bucket, OpKind::param_gather, c_.param_gather / static_cast<double>(c_.buckets)));
      last_gather_ = param_gathers_.back();
    }
  }
}

int32_t StageBuilder::add_optimizer(int32_t grad_norm) {
  const int32_t opt = e_.add_op(st_.compute, OpKind::optimizer, c_.optimizer);
  e_.add_dep(opt, grad_norm);
  e_.alloc_at_start(opt, MemKind::optimizer_temps, c_.optimizer_temps);
  e_.free_at_end(opt, MemKind::optimizer_temps, c_.optimizer_temps);
  if (c_.param_gather <= 0 || !param_gathers_.empty()) return opt;
  const int32_t g = e_.add_op(st_.bucket, OpKind::param_gather, c_.param_gather);
  e_.add_dep(g, opt);
  return g;
}

// A module gathered only while its pass runs (DeepSpeed's embedding and LM head), from op `first` to op `last`.
void StageBuilder::module_gathered(int32_t first, int32_t last, double bytes) {
  if (bytes <= 0) return;
  e_.alloc_at_start(first, MemKind::gathered_block, bytes);
  e_.free_at_end(last, MemKind::gathered_block, bytes);
}

// The overlapped parameter gather (param_gathers_) that holds the parameters before `params` in forward order.
int32_t StageBuilder::param_gather_for(double params_before) const {
  if (param_gathers_.empty()) return kNone;
  const double total = c_.root_params + c_.block_params * static_cast<double>(c_.layers());
  const auto n = static_cast<double>(param_gathers_.size());
  const auto i = static_cast<size_t>(std::clamp(std::floor(params_before / total * n), 0.0, n - 1));
  return param_gathers_[i];
}

// A collective on the critical path (TP, EP): on its own stream after `after`, and the next compute waits for it.
int32_t StageBuilder::critical_comm(int32_t after, int32_t stream, OpKind kind, double work, int32_t mb, int32_t chunk,
                                    int32_t layer) {
  const int32_t op = e_.add_op(stream, kind, work, mb, chunk, layer);
  e_.add_dep(op, after);
  gate_ = op;
  return op;
}

// One block's ring attention (planner/context_parallel.hpp CpRing): its slices on the compute stream, each
// transfer on the cp stream issued as the slice before it starts (it waits for the previous transfer and for the
// compute before that slice), each slice after the transfer it needs; the tail after the last slice gates what
// follows. Returns the pass's last op.
int32_t StageBuilder::ring(const CpRing& r, OpKind kind, int32_t mb, int32_t chunk, int32_t layer) {
  int32_t comm = kNone, out = kNone;
  for (int64_t k = 0; k < r.steps; ++k) {
    const int32_t issued_after = last_compute_;
    const double slowdown = k == r.steps - 1 ? r.slowdown_s : 0;  // the hidden traffic's cost (overlap slowdown)
    const int32_t slice = compute(kind == OpKind::cp_fwd ? OpKind::forward : OpKind::backward, r.slice_s + slowdown, mb,
                                  chunk, layer);
    e_.add_dep(slice, comm);
    out = slice;
    if (k + 1 < r.steps) {
      const double seconds = k == 0 ? r.first_s : r.step_s;
      if (seconds > 0) {
        comm = e_.add_op(st_.cp, kind, seconds, mb, chunk, layer);
        e_.add_dep(comm, issued_after);
      } else {
        comm = kNone;
      }
    }
  }
  if (r.tail_s > 0) {
    out = e_.add_op(st_.cp, kind, r.tail_s, mb, chunk, layer);
    e_.add_dep(out, last_compute_);
    gate_ = out;
  }
  return out;
}

// A compute op that waits for the gate (the last TP collective or blocking transfer) before it starts.
int32_t StageBuilder::compute(OpKind kind, double seconds, int32_t mb, int32_t chunk, int32_t layer) {
  const int32_t op = e_.add_op(st_.compute, kind, seconds, mb, chunk, layer);
  e_.add_dep(op, gate_);
  gate_ = kNone;
  last_compute_ = op;
  return op;
}

// An all-gather of the next gathered unit, at most prefetch_units ahead of the unit computing (FSDP's
// limit_all_gathers: pytorch PR #98354; FSDP2 keeps current + prefetch).
int32_t StageBuilder::gather(OpKind kind, double seconds, double bytes, int32_t mb, int32_t chunk, int32_t layer) {
  const int32_t op = e_.add_op(st_.gather, kind, seconds, mb, chunk, layer);
  const auto k = static_cast<int64_t>(gathered_compute_.size());
  const int64_t free_slot = k - 1 - plan_.prefetch_units;
  if (free_slot >= 0) e_.add_dep(op, gathered_compute_[static_cast<size_t>(free_slot)]);
  e_.alloc_at_start(op, block_kind(), bytes);
  last_gather_ = op;
  return op;
}

void StageBuilder::send(bool activation, int32_t mb, int32_t chunk, int32_t after) {
  // A V-shaped schedule's turn (last rank, chunk 0 → chunk 1) stays on the rank: no transfer (torch
  // schedules.py, "V-schedule special case"); the next chunk waits for the op itself.
  if (schedule_is_v_shaped(plan_.schedule) && stage_ == plan_.pp - 1 && chunk == (activation ? 0 : 1)) {
    (activation ? ops_.send_act : ops_.send_grad)[pass_index(mb, chunk)] = after;
    return;
  }
  const int32_t op = e_.add_op(st_.pp, activation ? OpKind::send_act : OpKind::send_grad, plan_.send, mb, chunk);
  e_.add_dep(op, after);
  (activation ? ops_.send_act : ops_.send_grad)[pass_index(mb, chunk)] = op;
  gate_ = op;  // Megatron's p2p is blocking: the rank waits for its transfer (send_forward_recv_backward)
}

void StageBuilder::forward(int32_t mb, int32_t chunk) {
  const bool first_chunk = c_.first && chunk == 0;
  const bool last_chunk = c_.last && chunk == plan_.vpp - 1;
  const bool gathering = units() && gathers_in(mb);
  const bool root_gathered = gathering && chunk == 0 && has_root();
  // The pass's first all-gather is issued by its first pre-forward hook, after the host has issued what came before
  // it on this rank (the previous pass's backward): its buffer is allocated in that order, so a ZeRO-2 unit kept
  // from the previous forward is not gathered again before its backward has freed it.
  const int32_t issued_after = last_compute_;
  // ... and after the previous backward's wait for its reductions, which freed their inputs (framework.hpp
  // backward_end_waits_for_reduce).
  const int32_t waited = std::exchange(reduce_waited_, kNone);
  if (root_gathered) {
    // FSDP's root unit is gathered as the forward starts and stays gathered until the backward ends.
    root_gather_ = e_.add_op(st_.gather, OpKind::gather_root, c_.gather_root, mb);
    e_.add_dep(root_gather_, issued_after);
    e_.add_dep(root_gather_, waited);
    e_.alloc_at_start(root_gather_, root_kind(), c_.gathered_root);
  }
  // FSDP2 copies a gathered unit out into its parameters on the compute stream before using it.
  double root_copy = root_gathered ? c_.copy_root : 0;
  int32_t entry = kNone;
  if (first_chunk) {
    entry = compute(OpKind::embed_fwd, c_.embed_fwd + root_copy, mb, chunk, -1);
    root_copy = 0;
    if (units()) e_.add_dep(entry, root_gather_);
    if (mb == 0) e_.add_dep(entry, param_gather_for(0));
    e_.alloc_at_start(entry, MemKind::boundary_activations, c_.first_extra);
    module_gathered(entry, c_.gathered_embed);
    // The ends as units of their own (StageCosts::end_units): the embedding unit reshards after its forward (ZeRO-3).
    if (root_gathered && c_.end_units && c_.reshard_after_forward) e_.free_at_end(entry, root_kind(), c_.gathered_root);
  }
  int32_t out = entry;
  for (int64_t l = chunk_offset_[static_cast<size_t>(chunk)]; l < chunk_offset_[static_cast<size_t>(chunk) + 1]; ++l) {
    const auto layer = static_cast<int32_t>(l);
    int32_t ag = kNone;
    if (gathering) ag = gather(OpKind::gather_fwd, c_.gather_block, c_.gathered_block, mb, chunk, layer);
    if (l == chunk_offset_[static_cast<size_t>(chunk)] && !root_gathered)
      e_.add_dep(ag, issued_after), e_.add_dep(ag, waited);
    const double copy = (gathering ? c_.copy_block : 0) + root_copy;
    root_copy = 0;
    // Under TP the block runs as two halves, attention and MLP, each followed by its TP collectives (Korthikanti
    // §4.2.2: an all-gather before and a reduce-scatter after each; planner/microbatch_costs.cpp block_tp_comm), so
    // the waits sit inside the block as in the runtime, not after all of its compute.
    const double fwd_s = c_.block_fwd - ring_slices(c_.cp_fwd) + copy;
    const double parts = c_.tp_fwd > 0 ? 2 : 1;
    const int32_t op = compute(OpKind::forward, fwd_s / parts, mb, chunk, layer);
    if (entry == kNone) entry = op;
    e_.add_dep(op, ag);
    if (mb == 0) e_.add_dep(op, param_gather_for(c_.embed_params + static_cast<double>(l) * c_.block_params));
    e_.alloc_at_start(op, MemKind::activations, c_.saved_by_block(l));
    int32_t last = op;
    if (parts > 1) {
      critical_comm(op, st_.tp, OpKind::tp_fwd, c_.tp_fwd / parts, mb, chunk, layer);
      last = compute(OpKind::forward, fwd_s / parts, mb, chunk, layer);
    }
    if (gathering) {
      gathered_compute_.push_back(last);
      // Reshard after forward, unless the unit stays gathered to its last backward.
      if (!plan_.gathers_once && c_.reshard_after_forward) e_.free_at_end(last, block_kind(), c_.gathered_block);
    }
    if (offloaded(l - offload_lag())) e_.free_at_end(last, MemKind::activations, c_.saved_by_block(l));
    out = last;
    if (c_.cp_fwd.steps > 1) out = ring(c_.cp_fwd, OpKind::cp_fwd, mb, chunk, layer);
    if (c_.tp_fwd > 0) out = critical_comm(out, st_.tp, OpKind::tp_fwd, c_.tp_fwd / parts, mb, chunk, layer);
    if (c_.ep_fwd > 0) out = critical_comm(out, st_.ep, OpKind::ep_fwd, c_.ep_fwd, mb, chunk, layer);
  }
  if (last_chunk) {
    // The [final norm, LM head] unit of its own (StageCosts::end_units): gathered as its forward's pre-hook runs,
    // behind the blocks' all-gathers on their stream, and kept gathered after its forward.
    int32_t head_gather = kNone;
    if (gathering && c_.end_units) {
      head_gather = e_.add_op(st_.gather, OpKind::gather_root, c_.gather_head_unit, mb);
      e_.alloc_at_start(head_gather, root_kind(), c_.gathered_head_unit);
      root_copy += c_.copy_head_unit;
    }
    const int32_t op = compute(OpKind::head_fwd, c_.head_fwd + root_copy, mb, chunk, -1);
    head_fwd_ = op;
    if (entry == kNone) entry = op;
    e_.add_dep(op, head_gather);
    if (units()) e_.add_dep(op, root_gather_);
    if (mb == 0) e_.add_dep(op, param_gather_for(c_.embed_params + static_cast<double>(c_.layers()) * c_.block_params));
    e_.alloc_at_start(op, MemKind::boundary_activations, c_.last_extra);
    e_.alloc_at_start(op, MemKind::logits, c_.logits);
    e_.alloc_at_start(op, root_kind(), c_.gathered_mtp_unit);  // the MTP layers run with the head (ZeRO-2: kept)
    module_gathered(op, c_.gathered_head);
    out = op;
  }
  ops_.fwd_entry[pass_index(mb, chunk)] = entry;
  if (!last_chunk) send(true, mb, chunk, out);
}

// A backward pass: whole, or (input_only) the B pass of a zero-bubble schedule, whose block weight gradients,
// activation frees and gradient reductions wait for its W pass (weight_pass).
void StageBuilder::backward(int32_t mb, int32_t chunk, bool input_only) {
  const bool first_chunk = c_.first && chunk == 0;
  const bool last_chunk = c_.last && chunk == plan_.vpp - 1;
  const bool sync = syncs(mb);
  int32_t entry = kNone, out = kNone;
  if (last_chunk) {
    const auto [a, b] = backward_compute(OpKind::head_bwd, c_.head_bwd, c_.head_params, mb, chunk, -1);
    entry = a;
    out = b;
    e_.free_at_end(b, MemKind::boundary_activations, c_.last_extra);
    // The loss's backward holds more per logit than its forward (planner/memory_moments.cpp loss_backward).
    e_.alloc_at_start(a, MemKind::logits, c_.logits_bwd_extra);
    e_.free_at_end(b, MemKind::logits, c_.logits + c_.logits_bwd_extra);
    e_.alloc_at_start(a, MemKind::cached_free, c_.logits_cached);
    e_.free_at_end(b, MemKind::cached_free, c_.logits_cached);
    alloc_root_grads(a);
    e_.free_at_end(b, root_kind(), c_.gathered_mtp_unit);  // resharded at the MTP layers' post-backward
    module_gathered(a, b, c_.gathered_head);
    if (c_.transient_root_grads > 0) e_.alloc_at_start(a, MemKind::root_grads, c_.transient_root_grads);
    if (units() && c_.end_units) out = head_unit_backward(b, mb, chunk, sync);
    // The MTP layers' backward (inside the head's) reaches the embedding: its gradient from that use waits for the main
    // use's, and under ZeRO-3 the unit is gathered again now, not at block 0 (StageCosts::mtp_embed_grad).
    if (holds_mtp_embedding()) {
      e_.alloc_at_start(out, root_kind(), c_.mtp_embed_gathered);
      e_.alloc_at_start(out, MemKind::working_grads, c_.mtp_embed_grad);
    }
  }
  int32_t embed_gather = kNone;  // the embedding unit gathered again for its backward (StageCosts::end_units)
  int32_t unit_grads_before = kNone;  // transient_unit_grads: the previous block's bucket, freed with this block
  int32_t issued_after = kNone;  // moments: the compute op the previous block's backward began after
  for (int64_t l = chunk_offset_[static_cast<size_t>(chunk) + 1] - 1; l >= chunk_offset_[static_cast<size_t>(chunk)]; --l) {
    const auto layer = static_cast<int32_t>(l);
    int32_t ag = kNone;
    const bool regather = units() && c_.gather_block_bwd > 0;
    if (regather) {
      ag = gather(OpKind::gather_bwd, c_.gather_block_bwd, c_.gathered_block, mb, chunk, layer);
      // The pass's first all-gather is issued when the backward reaches the unit (FSDP's pre-backward hook fires
      // on the gradient of its output): after the incoming gradient, or after the head's backward.
      if (l == chunk_offset_[static_cast<size_t>(chunk) + 1] - 1) {
        if (entry == kNone) ops_.bwd_entry_gather[pass_index(mb, chunk)] = ag;
        // A loss inside the root's forward runs the root's pre-backward, which prefetches this unit, first.
        // (A root without parameters, the ends being units of their own, has no parameter group to prefetch with.)
        else e_.add_dep(ag, plan_.prefetch_before_loss && c_.moments && !c_.end_units && head_fwd_ != kNone ? head_fwd_ : out);
      } else if (c_.moments) {
        // FSDP2 prefetches unit l at unit l + 1's pre-backward (_fsdp_param_group.py _backward_prefetch).
        e_.add_dep(ag, issued_after);
      }
    }
    issued_after = last_compute_;
    // Block 0's pre-backward prefetches the embedding unit, resharded after its forward (StageCosts::end_units).
    if (first_chunk && l == 0 && units() && c_.end_units && c_.reshard_after_forward) {
      embed_gather = e_.add_op(st_.gather, OpKind::gather_root, c_.gather_root, mb);
      e_.add_dep(embed_gather, issued_after);
      if (!holds_mtp_embedding()) e_.alloc_at_start(embed_gather, root_kind(), c_.gathered_root);
    }
    const double copy = regather ? c_.copy_block : 0;
    // Two halves under TP, each followed by its TP collectives (as the forward); the weight gradients come in both.
    const double parts = c_.tp_bwd > 0 ? 2 : 1;
    const double bwd_s = (input_only ? c_.block_bwd - c_.block_wgrad : c_.block_bwd) - ring_slices(c_.cp_bwd) + copy;
    auto half = [&]() {
      if (!input_only)
        return backward_compute(OpKind::backward, bwd_s / parts, c_.block_params / parts, mb, chunk, layer);
      const int32_t op = compute(OpKind::backward, bwd_s / parts, mb, chunk, layer);
      return std::pair{op, op};
    };
    const int32_t a = half().first;
    int32_t b = last_compute_;
    if (parts > 1) {
      critical_comm(b, st_.tp, OpKind::tp_bwd, c_.tp_bwd / parts, mb, chunk, layer);
      b = half().second;
    }
    if (entry == kNone) entry = a;
    e_.add_dep(a, ag);
    if (regather) gathered_compute_.push_back(b);
    if (regather || (units() && plan_.gathers_once && frees_after_backward(mb)))
      e_.free_at_end(b, block_kind(), c_.gathered_block);
    else if (units() && !c_.reshard_after_forward && !plan_.gathers_once)
      e_.free_at_end(b, block_kind(), c_.gathered_block);  // SHARD_GRAD_OP: resharded at the unit's post-backward
    if (offloaded(l - offload_lag())) e_.alloc_at_start(a, MemKind::activations, c_.saved_by_block(l));
    if (!input_only) e_.free_at_end(b, MemKind::activations, c_.saved_by_block(l));
    if (c_.transient_unit_grads > 0) {
      e_.alloc_at_start(a, MemKind::unit_grads, c_.transient_unit_grads);
      if (unit_grads_before != kNone) e_.free_at_end(b, MemKind::unit_grads, c_.transient_unit_grads);
      unit_grads_before = b;
    }
    const double working_set = c_.block_recomputes(l) ? c_.recompute_working_set : 0.0;
    e_.alloc_at_start(a, MemKind::recompute_working_set, working_set);
    if (c_.moments && !input_only) fsdp_.block_backward(a, b, c_.block_recomputes(l));
    e_.free_at_end(b, MemKind::recompute_working_set, working_set);
    out = b;
    if (units() && !input_only) unit_gradients(a, b, mb, chunk, layer, sync);
    if (c_.cp_bwd.steps > 1) out = ring(c_.cp_bwd, OpKind::cp_bwd, mb, chunk, layer);
    if (c_.tp_bwd > 0) out = critical_comm(out, st_.tp, OpKind::tp_bwd, c_.tp_bwd / parts, mb, chunk, layer);
    if (c_.ep_bwd > 0) out = critical_comm(out, st_.ep, OpKind::ep_bwd, c_.ep_bwd, mb, chunk, layer);
  }
  if (first_chunk) {
    const double embed_copy = embed_gather != kNone ? c_.copy_root : 0;
    const auto [a, b] = backward_compute(OpKind::embed_bwd, c_.embed_bwd + embed_copy, c_.embed_params, mb, chunk, -1);
    e_.add_dep(a, embed_gather);
    if (entry == kNone) entry = a;
    e_.free_at_end(b, MemKind::boundary_activations, c_.first_extra);
    if (!c_.last) alloc_root_grads(a);
    module_gathered(a, b, c_.gathered_embed);
    if (c_.moments) fsdp_.embed_backward(a);
    if (holds_mtp_embedding()) {
      // The two uses' gradients summed (under no_sync the new one is a temporary too), the held one freed after.
      const double sum = c_.mtp_embed_grad * (plan_.keeps_unsharded_grads ? 2 : 1);
      e_.alloc_at_start(a, MemKind::working_grads, sum);
      e_.free_at_end(b, MemKind::working_grads, sum + c_.mtp_embed_grad);
    }
    out = b;
  }
  if (unit_grads_before != kNone) e_.free_at_end(out, MemKind::unit_grads, c_.transient_unit_grads);
  if (c_.transient_root_grads > 0 && last_chunk) e_.free_at_end(out, MemKind::root_grads, c_.transient_root_grads);
  ops_.bwd_entry[pass_index(mb, chunk)] = entry;
  // DeepSpeed allocates its IPG bucket at the pass's first gradient and frees it in the pass's epilogue
  // (stage_1_and_2.py / stage3.py independent_gradient_partition_epilogue → _release_ipg_buffers).
  if (c_.backward_bucket > 0) {
    e_.alloc_at_start(entry, MemKind::reduce_buffers, c_.backward_bucket);
    e_.free_at_end(out, MemKind::reduce_buffers, c_.backward_bucket);
  }
  if (!input_only) gradients_complete(mb, out, sync);
  if (!first_chunk) send(false, mb, chunk, out);
}

// FSDP2's post-backward of the [final norm, LM head] unit runs after the LM head's backward (fully_shard([norm, lm_head])
// registers it on each module's inputs): it reshards the unit and reduce-scatters the head's gradients; the norm's
// pre-backward then all-gathers the unit again, whose copy-out the norm's backward waits for, and the norm's
// post-backward reshards it and waits for that reduce-scatter (planner/memory_moments.cpp head_post_backward).
int32_t StageBuilder::head_unit_backward(int32_t head_bwd, int32_t mb, int32_t chunk, bool sync) {
  const int32_t ag = e_.add_op(st_.gather, OpKind::gather_root, c_.gather_head_unit, mb);
  e_.add_dep(ag, head_bwd);
  // The moment's allocations go with the norm's op (its all-gather output beside the unit's parameters again, the
  // reduce-scatter input and shard), which names the moment (sim/simulate.cpp name_moment).
  const int32_t norm = compute(OpKind::head_regather, c_.copy_head_unit, mb, chunk, -1);
  e_.add_dep(norm, ag);
  e_.alloc_at_start(norm, root_kind(), c_.gathered_head_unit);
  e_.free_at_end(norm, root_kind(), 2 * c_.gathered_head_unit);
  if (sync) {
    const int32_t rs = e_.add_op(st_.reduce, OpKind::reduce_unit, c_.reduce_head_unit, mb);
    e_.add_dep(rs, head_bwd);
    last_reduce_ = rs;
    if (c_.moments) fsdp_.head_unit_reduced(norm, rs, mb);
  }
  return norm;
}

// The W pass of a zero-bubble schedule: each block's weight-gradient GEMMs, in backward order; the block's saved
// activations are freed and its gradients reduced here (Qi et al. 2024 §2: W needs the input and the output grad).
void StageBuilder::weight_pass(int32_t mb, int32_t chunk) {
  const bool sync = syncs(mb);
  int32_t out = kNone;
  for (int64_t l = chunk_offset_[static_cast<size_t>(chunk) + 1] - 1; l >= chunk_offset_[static_cast<size_t>(chunk)]; --l) {
    const auto layer = static_cast<int32_t>(l);
    const auto [a, b] = backward_compute(OpKind::backward_weight, c_.block_wgrad, c_.block_params, mb, chunk, layer);
    e_.free_at_end(b, MemKind::activations, c_.saved_by_block(l));
    if (units()) unit_gradients(a, b, mb, chunk, layer, sync);
    out = b;
  }
  if (out == kNone) out = last_compute_;
  gradients_complete(mb, out, sync);
}

}  // namespace shardplan::sim
