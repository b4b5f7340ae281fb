#pragma once
// Internal to sim/schedule.cpp: the FSDP family's allocations (planner/memory_moments.hpp, StageCosts::moments) at
// the ops where PyTorch makes them, for one stage. The block's gradients and temporaries with its backward; each
// unit's reduce-scatter input (reduce dtype) and its sharded gradient when the unit's post-backward issues them (the
// next compute op: the allocation happens at issue, however long the reduce-scatter then queues); the input freed at
// the next unit's post-backward, which first waits for the previous reduce-scatter (_fsdp_param_group.py
// FSDPParamGroup.post_backward, reduce_scatter_state), so at most one is in flight; the root's bf16 gradients as the
// head's and the embedding's backward write them, its input through its own reduce-scatter, its shard after it.
#include <cstdint>
#include <vector>

#include "sim/engine.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

class FsdpMemory {
 public:
  FsdpMemory(Engine& e, const StageCosts& c, int32_t reduce_stream, bool no_sync)
      : e_(e), c_(c), reduce_(reduce_stream), no_sync_(no_sync),
        sharded_alive_(static_cast<size_t>(c.layers()) + 1, false) {}

  // A block's backward, ops [first, last]; `recomputed`: its forward runs again first (its working set held).
  void block_backward(int32_t first, int32_t last, bool recomputed) {
    post_backward(first);
    const double grads = recomputed ? c_.backward_grads : c_.backward_grads_kept;
    const double temps = recomputed ? c_.backward_temps : c_.backward_temps_kept;
    e_.alloc_at_start(first, MemKind::working_grads, grads);
    e_.alloc_at_start(first, MemKind::backward_temps, temps);
    e_.free_at_end(last, MemKind::working_grads, grads);
    e_.free_at_end(last, MemKind::backward_temps, temps);
    release_input(last);
  }

  // The embedding's backward (the root unit's last op): block 0's post-backward has issued its reduce-scatter.
  void embed_backward(int32_t op) {
    post_backward(op);
    if (embed_alive_ || no_sync_) return;
    e_.alloc_at_start(op, MemKind::working_grads, c_.embed_grads);
    embed_alive_ = true;
  }

  // Block `unit`'s reduce-scatter `rs`: its memory goes with the next compute op.
  void unit_reduced(int32_t rs, size_t unit) {
    issue(rs);  // several in a row (reductions after the last backward): each at its own op
    release_input(rs);
    pending_ = {c_.block_reduce_input, sharded_alive_[unit] ? 0.0 : c_.block_sharded_grads, rs};
    sharded_alive_[unit] = true;
    held_input_ = rs;
    held_bytes_ = c_.block_reduce_input;
  }

  // After the micro-batch's last backward op `last`: the last block's input goes at the root's post-backward.
  void micro_batch_end(int32_t last) {
    if (pending_.rs != kNone) issue(pending_.rs);  // no compute op followed it
    release_input(last);
  }

  // The [final norm, LM head] unit's post-backward after the LM head's backward (StageCosts::end_units): its
  // reduce-scatter input and shard with the norm's re-gathered op `norm`; the input freed once both the reduce-scatter
  // `rs` and `norm` have ended, which the next unit's backward waits for (the norm's post-backward waits:
  // reduce_scatter_max_input_buffers 1).
  void head_unit_reduced(int32_t norm, int32_t rs, int32_t mb) {
    e_.alloc_at_start(norm, MemKind::reduce_inputs, c_.head_unit_reduce_input);
    if (!head_sharded_alive_) shard_at_start(norm, c_.head_unit_sharded_grads), head_sharded_alive_ = true;
    const int32_t op = e_.add_op(reduce_, OpKind::release, 0, mb);
    e_.add_dep(op, rs);
    e_.add_dep(op, norm);
    e_.free_at_end(op, MemKind::reduce_inputs, c_.head_unit_reduce_input);
    wait_for_ = op;
  }

  // The root's reduce-scatter `rs` of micro-batch `mb`: its bf16 gradients freed, its input held through it, its
  // sharded gradient allocated after it (the measured root post-backward holds the blocks' shards only).
  void root_reduced(int32_t rs, int32_t mb) {
    if (!no_sync_) {
      e_.free_at_end(rs, MemKind::working_grads, (head_alive_ ? c_.head_grads : 0) + (embed_alive_ ? c_.embed_grads : 0));
      head_alive_ = embed_alive_ = false;
    }
    e_.alloc_at_start(rs, MemKind::reduce_inputs, c_.root_reduce_input);
    e_.free_at_end(rs, MemKind::reduce_inputs, c_.root_reduce_input);
    if (sharded_alive_.back()) return;
    const int32_t after = e_.add_op(reduce_, OpKind::release, 0, mb);
    e_.add_dep(after, rs);
    shard_at_start(after, c_.root_sharded_grads);
    sharded_alive_.back() = true;
  }

 private:
  static constexpr int32_t kNone = -1;

  // A unit's post-backward, before compute op `op`: wait for the previous reduce-scatter, write the LM head's
  // gradients (the first op after the loss's backward, which frees the logits first), allocate what it issued.
  void post_backward(int32_t op) {
    e_.add_dep(op, wait_for_);
    wait_for_ = kNone;
    if (c_.last && !head_alive_ && !no_sync_) {
      e_.alloc_at_start(op, MemKind::working_grads, c_.head_grads);
      head_alive_ = true;
    }
    issue(op);
  }

  void issue(int32_t op) {
    if (pending_.rs == kNone) return;
    e_.alloc_at_start(op, MemKind::reduce_inputs, pending_.input);
    shard_at_start(op, pending_.sharded);
    pending_ = {};
  }

  // A unit's gradient shard, in place of its share of the reduce-scatter stream's reserve (StageCosts).
  void shard_at_start(int32_t op, double bytes) {
    if (c_.shards_replace_reserve) e_.free_at_start(op, MemKind::cached_free, bytes);
    e_.alloc_at_start(op, MemKind::grads, bytes);
  }

  // Frees the reduce-scatter input held once both its reduce-scatter and `after` have ended; the next unit's
  // backward waits for that (after the free: its allocations come after it).
  void release_input(int32_t after) {
    if (held_input_ == kNone) return;
    const int32_t op = e_.add_op(reduce_, OpKind::release, 0);
    e_.add_dep(op, after);
    e_.add_dep(op, held_input_);
    e_.free_at_end(op, MemKind::reduce_inputs, held_bytes_);
    wait_for_ = op;
    held_input_ = kNone;
  }

  Engine& e_;
  const StageCosts& c_;
  int32_t reduce_;
  bool no_sync_;
  std::vector<bool> sharded_alive_;  // [block] (root last) whose sharded gradient exists this step
  bool head_alive_ = false, embed_alive_ = false;
  bool head_sharded_alive_ = false;  // StageCosts::end_units: the head unit's shard exists this step
  struct Pending {
    double input = 0, sharded = 0;
    int32_t rs = kNone;
  } pending_;                        // a reduce-scatter's memory, allocated with the next compute op
  int32_t held_input_ = kNone;       // the reduce-scatter whose input is still held
  double held_bytes_ = 0;
  int32_t wait_for_ = kNone;         // the release the next unit's backward waits for
};

}  // namespace shardplan::sim
