// A stage's gradient reductions as ops: DDP-style buckets filled by the backward, FSDP's per-unit and root
// reduce-scatters, no_sync's kept gradients, and what the next pass waits for (sim/stage_builder.hpp).
#include "sim/stage_builder.hpp"

#include <algorithm>

namespace shardplan::sim {

// A backward compute op that produces `params` gradients; under DDP-style buckets with overlap it is split at
// bucket boundaries and each filled bucket is reduced at once. Returns {first, last} op.
std::pair<int32_t, int32_t> StageBuilder::backward_compute(OpKind kind, double seconds, double params, int32_t mb, int32_t chunk,
                                                           int32_t layer) {
  if (plan_.dp_mode != DpMode::buckets || !plan_.overlap_buckets || !syncs(mb) || bucket_params_ <= 0 ||
      params <= 0) {
    const int32_t op = compute(kind, seconds, mb, chunk, layer);
    return {op, op};
  }
  int32_t first = kNone, last = kNone;
  double left = params;
  while (left > 0) {
    const double room = bucket_params_ - bucket_fill_;
    const double take = std::min(room, left);
    last = compute(kind, seconds * take / params, mb, chunk, layer);
    if (first == kNone) first = last;
    left -= take;
    bucket_fill_ += take;
    if (bucket_fill_ >= bucket_params_ * (1 - 1e-9)) reduce_bucket(last, mb), bucket_fill_ = 0;
  }
  return {first, last};
}

void StageBuilder::reduce_bucket(int32_t after, int32_t mb) {
  const int32_t op = e_.add_op(st_.bucket, OpKind::reduce_bucket, c_.reduce_bucket, mb);
  e_.add_dep(op, after);
  last_reduce_ = op;
}

// After every chunk of a micro-batch has its gradients on this stage (its last backward or W pass).
void StageBuilder::gradients_complete(int32_t mb, int32_t last, bool sync) {
  // torch.distributed.pipelining reduces each virtual stage right after its last backward (schedules.py
  // _add_reduce_grad: REDUCE_GRAD once a stage index has seen n_microbatches backwards; stage.py
  // perform_reduce_grad), not after the rank's last: under interleaving the earlier chunks' gradients go first.
  if (sync && plan_.reduce_after_last_backward && units()) {
    for (const auto& [chunk, layer] : pending_reduce_) reduce_unit(last, mb, chunk, layer);
    pending_reduce_.clear();
  }
  if (++grads_done_[static_cast<size_t>(mb)] == plan_.vpp) end_of_micro_batch(mb, last, sync);
}

// Unsharded gradients of one unit: reduce-scattered as soon as its backward ends (syncing micro-batches), or
// kept across micro-batches under no_sync.
void StageBuilder::unit_gradients(int32_t first, int32_t last, int32_t mb, int32_t chunk, int32_t layer, bool sync) {
  const auto u = static_cast<size_t>(layer);
  const MemKind kind = plan_.keeps_unsharded_grads ? MemKind::unsharded_grads : MemKind::unit_grads;
  if (!grads_alive_[u] && (!c_.moments || plan_.keeps_unsharded_grads)) {
    e_.alloc_at_start(first, kind, c_.unit_grads);
    grads_alive_[u] = true;
  }
  if (!sync) return;
  if (plan_.reduce_after_last_backward) {
    pending_reduce_.push_back({chunk, layer});  // issued by end_of_micro_batch after the last backward
    return;
  }
  reduce_unit(last, mb, chunk, layer);
}

void StageBuilder::reduce_unit(int32_t after, int32_t mb, int32_t chunk, int32_t layer) {
  const auto u = static_cast<size_t>(layer);
  const MemKind kind = plan_.keeps_unsharded_grads ? MemKind::unsharded_grads : MemKind::unit_grads;
  const int32_t rs = e_.add_op(st_.reduce, OpKind::reduce_unit, c_.reduce_block, mb, chunk, layer);
  e_.add_dep(rs, after);
  sharded_grads_appear(rs, c_.block_params);
  if (!c_.moments || plan_.keeps_unsharded_grads) e_.free_at_end(rs, kind, c_.unit_grads);
  grads_alive_[u] = false;
  last_reduce_ = rs;
  if (c_.moments) fsdp_.unit_reduced(rs, u);
}

void StageBuilder::alloc_root_grads(int32_t op) {
  if (!units() || grads_alive_.back()) return;
  if (c_.moments && !plan_.keeps_unsharded_grads) return;  // FsdpMemory writes them
  e_.alloc_at_start(op, plan_.keeps_unsharded_grads ? MemKind::unsharded_grads : MemKind::root_grads, c_.root_grads);
  grads_alive_.back() = true;
}

// no_sync: each unit's sharded gradient appears with its first reduce-scatter (set_to_none zero_grad freed it).
void StageBuilder::sharded_grads_appear(int32_t rs, double unit_params) {
  if (!plan_.keeps_unsharded_grads) return;
  const double all = c_.block_params * static_cast<double>(c_.layers()) + c_.root_params;
  if (all > 0) e_.alloc_at_start(rs, MemKind::grads, c_.sharded_grads * unit_params / all);
}

// After the micro-batch's last backward pass on this stage: the root unit is reduced and resharded (FSDP reduces
// the root last, in its post-backward callback); DDP without overlap reduces every bucket now.
void StageBuilder::end_of_micro_batch(int32_t mb, int32_t last, bool sync) {
  if (units() && sync)
    for (const auto& [chunk, layer] : pending_reduce_) reduce_unit(last, mb, chunk, layer);
  pending_reduce_.clear();
  // The first block's reduce-scatter input goes at the root's post-backward, before the root's own.
  if (c_.moments) fsdp_.micro_batch_end(last);
  if (units() && has_root()) {
    if (frees_after_backward(mb)) e_.free_at_end(last, root_kind(), c_.gathered_root);
    if (sync) {
      const int32_t rs = e_.add_op(st_.reduce, OpKind::reduce_root, c_.reduce_root, mb);
      e_.add_dep(rs, last);
      sharded_grads_appear(rs, c_.root_params);
      if (c_.moments) fsdp_.root_reduced(rs, mb);
      if (!c_.moments || plan_.keeps_unsharded_grads)
        e_.free_at_end(rs, plan_.keeps_unsharded_grads ? MemKind::unsharded_grads : MemKind::root_grads, c_.root_grads);
      grads_alive_.back() = false;
      last_reduce_ = rs;
      if (plan_.waits_for_root_reduce) gate_ = rs, reduce_waited_ = rs;
    }
  }
  if (plan_.dp_mode == DpMode::buckets && sync && c_.buckets > 0) {
    if (!plan_.overlap_buckets) {
      const int32_t op = e_.add_op(st_.bucket, OpKind::reduce_bucket,
                                   c_.reduce_bucket * static_cast<double>(c_.buckets), mb);
      e_.add_dep(op, last);
      last_reduce_ = op;
      gate_ = op;  // not overlapped: the rank's compute waits for it (DeepSpeed without overlap_comm reduces in-stream)
    } else if (bucket_fill_ > 0) {
      reduce_bucket(last, mb);  // the partly filled last bucket
      bucket_fill_ = 0;
    }
    // torch DDP's reducer waits for every bucket's all-reduce as the backward ends (reducer.cpp finalize_backward:
    // future_work->wait() on the current stream), as FSDP's root post-backward does (framework.hpp).
    if (plan_.waits_for_root_reduce) gate_ = last_reduce_;
  }
}

}  // namespace shardplan::sim
