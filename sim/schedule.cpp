// The step as ops on streams: Megatron's pipeline schedules and torch.distributed.pipelining's zero-bubble ones
// (B and W passes apart; V-shaped chunk placement), FSDP's per-unit gathers and reductions with their
// prefetch limit, DDP's buckets, TP on the critical path, blocking point-to-point transfers, gradient
// accumulation, the grad-norm all-reduce and the optimizer.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "sim/fsdp_memory.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

namespace {

constexpr int32_t kNone = -1;

struct StageStreams {
  int32_t compute = kNone, tp = kNone, pp = kNone, gather = kNone, reduce = kNone, bucket = kNone, ep = kNone,
          cp = kNone;
};

// Per stage, what the cross-stage edges and the step's tail need.
struct StageOps {
  std::vector<int32_t> fwd_entry, bwd_entry;   // [mb·v + c] first compute op of the pass (waits for its input)
  std::vector<int32_t> bwd_entry_gather;       // [mb·v + c] first all-gather of a backward pass (issued on input)
  std::vector<int32_t> send_act, send_grad;    // [mb·v + c] transfers to the next / previous stage
};

class StageBuilder {
 public:
  StageBuilder(const StepPlan& plan, int64_t stage, Engine& e, const StageStreams& st)
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

  void add_pass(const PassRef& p) {
    if (p.forward) forward(p.micro, p.chunk);
    else if (p.part == 2) weight_pass(p.micro, p.chunk);
    else backward(p.micro, p.chunk, p.part == 1);
  }

  StageOps& ops() { return ops_; }
  // Ops each other stage's grad-norm waits for: the last op of every stream of this stage.
  std::vector<int32_t> tail() const { return {last_compute_, last_reduce_, last_gather_}; }
  int32_t add_grad_norm() {
    const int32_t op = e_.add_op(st_.bucket, OpKind::grad_norm, c_.grad_norm);
    return op;
  }
  int32_t add_optimizer(int32_t grad_norm) {
    const int32_t opt = e_.add_op(st_.compute, OpKind::optimizer, c_.optimizer);
    e_.add_dep(opt, grad_norm);
    e_.alloc_at_start(opt, MemKind::optimizer_temps, c_.optimizer_temps);
    e_.free_at_end(opt, MemKind::optimizer_temps, c_.optimizer_temps);
    if (c_.param_gather <= 0 || !param_gathers_.empty()) return opt;
    const int32_t g = e_.add_op(st_.bucket, OpKind::param_gather, c_.param_gather);
    e_.add_dep(g, opt);
    return g;
  }

 private:
  bool syncs(int32_t mb) const { return plan_.sync_every_micro || mb == plan_.micro_batches - 1; }
  size_t pass_index(int32_t mb, int32_t c) const { return static_cast<size_t>(mb * plan_.vpp + c); }
  bool has_root() const { return c_.gather_root > 0 || c_.gathered_root > 0 || c_.reduce_root > 0 || c_.root_grads > 0; }
  bool units() const { return plan_.dp_mode == DpMode::units; }
  // FSDP moments count gathered units as parameters (planner/memory_moments.hpp), the others as buffers.
  // Megatron's CPU activation offloading (Transformer Engine cpu_offload.py, TE 2.10+; docs/features/cpu_offloading):
  // the first N blocks' saved tensors leave the GPU as they are saved, and at most L − N blocks' sets are on the GPU
  // at any time. Here a block's set is freed at the end of the next block's forward (its copy ran beside it) and
  // reloaded at the start of the next block's backward, or at the end of its own forward and the start of its own
  // backward when only one set may stay (N = L − 1).
  bool offloaded(int64_t layer) const { return layer >= 0 && layer < c_.offloaded_blocks; }
  int64_t offload_lag() const { return c_.layers() - c_.offloaded_blocks >= 2 ? 1 : 0; }

  // A module gathered only while its pass runs (DeepSpeed's embedding and LM head), from op `first` to op `last`.
  void module_gathered(int32_t first, int32_t last, double bytes) {
    if (bytes <= 0) return;
    e_.alloc_at_start(first, MemKind::gathered_block, bytes);
    e_.free_at_end(last, MemKind::gathered_block, bytes);
  }
  void module_gathered(int32_t op, double bytes) { module_gathered(op, op, bytes); }

  MemKind block_kind() const { return c_.moments ? MemKind::gathered_weights : MemKind::gathered_block; }
  MemKind root_kind() const { return c_.moments ? MemKind::gathered_weights : MemKind::gathered_root; }
  // Whether this micro-batch's forward gathers the units, and whether its backward frees them again.
  bool gathers_in(int32_t mb) const { return !plan_.gathers_once || mb == 0; }
  bool frees_after_backward(int32_t mb) const { return !plan_.gathers_once || mb == plan_.micro_batches - 1; }

  // The overlapped parameter gather (param_gathers_) that holds the parameters before `params` in forward order.
  int32_t param_gather_for(double params_before) const {
    if (param_gathers_.empty()) return kNone;
    const double total = c_.root_params + c_.block_params * static_cast<double>(c_.layers());
    const auto n = static_cast<double>(param_gathers_.size());
    const auto i = static_cast<size_t>(std::clamp(std::floor(params_before / total * n), 0.0, n - 1));
    return param_gathers_[i];
  }

  // The attention slices of a ring, played by ring() below rather than inside the block's own op.
  static double ring_slices(const CpRing& r) { return r.steps > 1 ? static_cast<double>(r.steps) * r.slice_s : 0; }

  // A collective on the critical path (TP, EP): on its own stream after `after`, and the next compute waits for it.
  int32_t critical_comm(int32_t after, int32_t stream, OpKind kind, double work, int32_t mb, int32_t chunk,
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
  int32_t ring(const CpRing& r, OpKind kind, int32_t mb, int32_t chunk, int32_t layer) {
    int32_t comm = kNone, out = kNone;
    for (int64_t k = 0; k < r.steps; ++k) {
      const int32_t issued_after = last_compute_;
      const double slowdown = k == r.steps - 1 ? r.slowdown_s : 0;  // the hidden traffic's cost (kOverlapComputeSlowdown)
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
  int32_t compute(OpKind kind, double seconds, int32_t mb, int32_t chunk, int32_t layer) {
    const int32_t op = e_.add_op(st_.compute, kind, seconds, mb, chunk, layer);
    e_.add_dep(op, gate_);
    gate_ = kNone;
    last_compute_ = op;
    return op;
  }

  // A backward compute op that produces `params` gradients; under DDP-style buckets with overlap it is split at
  // bucket boundaries and each filled bucket is reduced at once. Returns {first, last} op.
  std::pair<int32_t, int32_t> backward_compute(OpKind kind, double seconds, double params, int32_t mb, int32_t chunk,
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

  void reduce_bucket(int32_t after, int32_t mb) {
    const int32_t op = e_.add_op(st_.bucket, OpKind::reduce_bucket, c_.reduce_bucket, mb);
    e_.add_dep(op, after);
    last_reduce_ = op;
  }

  // An all-gather of the next gathered unit, at most prefetch_units ahead of the unit computing (FSDP's
  // limit_all_gathers: pytorch PR #98354; FSDP2 keeps current + prefetch).
  int32_t gather(OpKind kind, double seconds, double bytes, int32_t mb, int32_t chunk, int32_t layer) {
    const int32_t op = e_.add_op(st_.gather, kind, seconds, mb, chunk, layer);
    const auto k = static_cast<int64_t>(gathered_compute_.size());
    const int64_t free_slot = k - 1 - plan_.prefetch_units;
    if (free_slot >= 0) e_.add_dep(op, gathered_compute_[static_cast<size_t>(free_slot)]);
    e_.alloc_at_start(op, block_kind(), bytes);
    last_gather_ = op;
    return op;
  }

  void send(bool activation, int32_t mb, int32_t chunk, int32_t after) {
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

  void forward(int32_t mb, int32_t chunk) {
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
      const int32_t op = compute(OpKind::forward, c_.block_fwd - ring_slices(c_.cp_fwd) + copy, mb, chunk, layer);
      if (entry == kNone) entry = op;
      e_.add_dep(op, ag);
      if (mb == 0) e_.add_dep(op, param_gather_for(c_.embed_params + static_cast<double>(l) * c_.block_params));
      if (gathering) {
        gathered_compute_.push_back(op);
        // Reshard after forward, unless the unit stays gathered to its last backward.
        if (!plan_.gathers_once && c_.reshard_after_forward) e_.free_at_end(op, block_kind(), c_.gathered_block);
      }
      e_.alloc_at_start(op, MemKind::activations, c_.activations_per_block);
      if (offloaded(l - offload_lag())) e_.free_at_end(op, MemKind::activations, c_.activations_per_block);
      out = op;
      if (c_.cp_fwd.steps > 1) out = ring(c_.cp_fwd, OpKind::cp_fwd, mb, chunk, layer);
      if (c_.tp_fwd > 0) out = critical_comm(out, st_.tp, OpKind::tp_fwd, c_.tp_fwd, mb, chunk, layer);
      if (c_.ep_fwd > 0) out = critical_comm(out, st_.ep, OpKind::ep_fwd, c_.ep_fwd, mb, chunk, layer);
    }
    if (last_chunk) {
      const int32_t op = compute(OpKind::head_fwd, c_.head_fwd + root_copy, mb, chunk, -1);
      head_fwd_ = op;
      if (entry == kNone) entry = op;
      if (units()) e_.add_dep(op, root_gather_);
      if (mb == 0) e_.add_dep(op, param_gather_for(c_.embed_params + static_cast<double>(c_.layers()) * c_.block_params));
      e_.alloc_at_start(op, MemKind::boundary_activations, c_.last_extra);
      e_.alloc_at_start(op, MemKind::logits, c_.logits);
      module_gathered(op, c_.gathered_head);
      out = op;
    }
    ops_.fwd_entry[pass_index(mb, chunk)] = entry;
    if (!last_chunk) send(true, mb, chunk, out);
  }

  // A backward pass: whole, or (input_only) the B pass of a zero-bubble schedule, whose block weight gradients,
  // activation frees and gradient reductions wait for its W pass (weight_pass).
  void backward(int32_t mb, int32_t chunk, bool input_only = false) {
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
      module_gathered(a, b, c_.gathered_head);
      if (c_.transient_root_grads > 0) e_.alloc_at_start(a, MemKind::root_grads, c_.transient_root_grads);
    }
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
          else e_.add_dep(ag, plan_.prefetch_before_loss && c_.moments && head_fwd_ != kNone ? head_fwd_ : out);
        } else if (c_.moments) {
          // FSDP2 prefetches unit l at unit l + 1's pre-backward (_fsdp_param_group.py _backward_prefetch).
          e_.add_dep(ag, issued_after);
        }
      }
      issued_after = last_compute_;
      const double copy = regather ? c_.copy_block : 0;
      const auto [a, b] = input_only
                              ? std::pair{compute(OpKind::backward, c_.block_bwd - c_.block_wgrad - ring_slices(c_.cp_bwd) + copy,
                                                  mb, chunk, layer),
                                          last_compute_}
                              : backward_compute(OpKind::backward, c_.block_bwd - ring_slices(c_.cp_bwd) + copy,
                                                 c_.block_params, mb, chunk, layer);
      if (entry == kNone) entry = a;
      e_.add_dep(a, ag);
      if (regather) gathered_compute_.push_back(b);
      if (regather || (units() && plan_.gathers_once && frees_after_backward(mb)))
        e_.free_at_end(b, block_kind(), c_.gathered_block);
      else if (units() && !c_.reshard_after_forward && !plan_.gathers_once)
        e_.free_at_end(b, block_kind(), c_.gathered_block);  // SHARD_GRAD_OP: resharded at the unit's post-backward
      if (offloaded(l - offload_lag())) e_.alloc_at_start(a, MemKind::activations, c_.activations_per_block);
      if (!input_only) e_.free_at_end(b, MemKind::activations, c_.activations_per_block);
      if (c_.transient_unit_grads > 0) {
        e_.alloc_at_start(a, MemKind::unit_grads, c_.transient_unit_grads);
        if (unit_grads_before != kNone) e_.free_at_end(b, MemKind::unit_grads, c_.transient_unit_grads);
        unit_grads_before = b;
      }
      e_.alloc_at_start(a, MemKind::recompute_working_set, c_.recompute_working_set);
      if (c_.moments && !input_only) fsdp_.block_backward(a, b);
      e_.free_at_end(b, MemKind::recompute_working_set, c_.recompute_working_set);
      out = b;
      if (units() && !input_only) unit_gradients(a, b, mb, chunk, layer, sync);
      if (c_.cp_bwd.steps > 1) out = ring(c_.cp_bwd, OpKind::cp_bwd, mb, chunk, layer);
      if (c_.tp_bwd > 0) out = critical_comm(out, st_.tp, OpKind::tp_bwd, c_.tp_bwd, mb, chunk, layer);
      if (c_.ep_bwd > 0) out = critical_comm(out, st_.ep, OpKind::ep_bwd, c_.ep_bwd, mb, chunk, layer);
    }
    if (first_chunk) {
      const auto [a, b] = backward_compute(OpKind::embed_bwd, c_.embed_bwd, c_.embed_params, mb, chunk, -1);
      if (entry == kNone) entry = a;
      e_.free_at_end(b, MemKind::boundary_activations, c_.first_extra);
      if (!c_.last) alloc_root_grads(a);
      module_gathered(a, b, c_.gathered_embed);
      if (c_.moments) fsdp_.embed_backward(a);
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

  // The W pass of a zero-bubble schedule: each block's weight-gradient GEMMs, in backward order; the block's saved
  // activations are freed and its gradients reduced here (Qi et al. 2024 §2: W needs the input and the output grad).
  void weight_pass(int32_t mb, int32_t chunk) {
    const bool sync = syncs(mb);
    int32_t out = kNone;
    for (int64_t l = chunk_offset_[static_cast<size_t>(chunk) + 1] - 1; l >= chunk_offset_[static_cast<size_t>(chunk)]; --l) {
      const auto layer = static_cast<int32_t>(l);
      const auto [a, b] = backward_compute(OpKind::backward_weight, c_.block_wgrad, c_.block_params, mb, chunk, layer);
      e_.free_at_end(b, MemKind::activations, c_.activations_per_block);
      if (units()) unit_gradients(a, b, mb, chunk, layer, sync);
      out = b;
    }
    if (out == kNone) out = last_compute_;
    gradients_complete(mb, out, sync);
  }

  // After every chunk of a micro-batch has its gradients on this stage (its last backward or W pass).
  void gradients_complete(int32_t mb, int32_t last, bool sync) {
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
  void unit_gradients(int32_t first, int32_t last, int32_t mb, int32_t chunk, int32_t layer, bool sync) {
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

  void reduce_unit(int32_t after, int32_t mb, int32_t chunk, int32_t layer) {
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

  void alloc_root_grads(int32_t op) {
    if (!units() || grads_alive_.back()) return;
    if (c_.moments && !plan_.keeps_unsharded_grads) return;  // FsdpMemory writes them
    e_.alloc_at_start(op, plan_.keeps_unsharded_grads ? MemKind::unsharded_grads : MemKind::root_grads, c_.root_grads);
    grads_alive_.back() = true;
  }

  // no_sync: each unit's sharded gradient appears with its first reduce-scatter (set_to_none zero_grad freed it).
  void sharded_grads_appear(int32_t rs, double unit_params) {
    if (!plan_.keeps_unsharded_grads) return;
    const double all = c_.block_params * static_cast<double>(c_.layers()) + c_.root_params;
    if (all > 0) e_.alloc_at_start(rs, MemKind::grads, c_.sharded_grads * unit_params / all);
  }

  // After the micro-batch's last backward pass on this stage: the root unit is reduced and resharded (FSDP reduces
  // the root last, in its post-backward callback); DDP without overlap reduces every bucket now.
  void end_of_micro_batch(int32_t mb, int32_t last, bool sync) {
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

  const StepPlan& plan_;
  const StageCosts& c_;
  Engine& e_;
  StageStreams st_;
  int64_t stage_ = 0;
  std::vector<int32_t> grads_done_;        // [mb] chunks whose gradients are complete on this stage
  StageOps ops_;
  std::vector<int64_t> chunk_offset_;
  std::vector<int32_t> gathered_compute_;  // [k] the compute op that uses the k-th gathered unit
  std::vector<int32_t> param_gathers_;     // overlap_param_gather: [bucket] the gathers this step's forward waits for
  std::vector<std::pair<int32_t, int32_t>> pending_reduce_;  // reduce_after_last_backward: (chunk, layer) to reduce
  std::vector<bool> grads_alive_;          // [layer], and the root last
  int32_t head_fwd_ = kNone;               // the latest head forward (moments: the prefetch before the loss)
  FsdpMemory fsdp_;                        // moments: the FSDP family's allocations (sim/fsdp_memory.hpp)
  int32_t gate_ = kNone, root_gather_ = kNone;
  int32_t last_compute_ = kNone, last_reduce_ = kNone, last_gather_ = kNone;
  int32_t reduce_waited_ = kNone;  // the root reduce-scatter the next pass's compute waits for
  double bucket_params_ = 0, bucket_fill_ = 0;
};

}  // namespace

// Virtual stage (model piece) of chunk c on rank i, and the (rank, chunk) of a piece: Megatron's loop (rank i runs
// i, i + p, ...) or the V of ZB-V and DualPipeV (rank i runs i and 2p − 1 − i).
static int64_t virtual_piece(const StepPlan& plan, int64_t i, int64_t c) {
  if (schedule_is_v_shaped(plan.schedule) && plan.pp > 1) return c == 0 ? i : 2 * plan.pp - 1 - i;
  return i + c * plan.pp;
}
static std::pair<int64_t, int64_t> piece_owner(const StepPlan& plan, int64_t k) {
  if (schedule_is_v_shaped(plan.schedule) && plan.pp > 1)
    return k < plan.pp ? std::pair{k, int64_t{0}} : std::pair{2 * plan.pp - 1 - k, int64_t{1}};
  return {k % plan.pp, k / plan.pp};
}

BuiltStep build_step(const StepPlan& plan, Engine& e) {
  const int64_t p = plan.pp, v = plan.vpp;
  if (p < 1 || v < 1 || plan.micro_batches < 1 || static_cast<int64_t>(plan.stages.size()) != p)
    throw InputError("the step needs pp ≥ 1 stages, vpp ≥ 1 and at least one micro-batch");
  for (const StageCosts& c : plan.stages)
    if (static_cast<int64_t>(c.chunk_layers.size()) != v)
      throw InputError("every stage needs one layer count per model chunk (vpp)");
  std::vector<std::vector<PassRef>> orders;
  for (int64_t i = 0; i < p; ++i) orders.push_back(pass_order(plan, i));

  BuiltStep out;
  std::vector<StageStreams> streams(static_cast<size_t>(p));
  std::vector<StageBuilder> builders;
  builders.reserve(static_cast<size_t>(p));
  for (int64_t i = 0; i < p; ++i) {
    const auto rank = static_cast<int32_t>(i);
    const StageCosts& c = plan.stages[static_cast<size_t>(i)];
    StageStreams& st = streams[static_cast<size_t>(i)];
    st.compute = e.add_stream(rank, StreamKind::compute);
    if (c.tp_fwd > 0 || c.tp_bwd > 0) st.tp = e.add_stream(rank, StreamKind::tp);
    if (c.ep_fwd > 0 || c.ep_bwd > 0) st.ep = e.add_stream(rank, StreamKind::ep);
    if (c.cp_fwd.steps > 1) st.cp = e.add_stream(rank, StreamKind::cp);
    if (p > 1) st.pp = e.add_stream(rank, StreamKind::pp);
    if (plan.dp_mode == DpMode::units) {
      st.gather = e.add_stream(rank, StreamKind::dp_gather);
      st.reduce = e.add_stream(rank, StreamKind::dp_reduce);
    }
    st.bucket = e.add_stream(rank, StreamKind::dp_bucket);
    for (const auto& [kind, bytes] : c.static_bytes) e.alloc_static(rank, kind, bytes);
    out.compute_stream.push_back(st.compute);
    builders.emplace_back(plan, i, e, st);
    for (const PassRef& pass : orders[static_cast<size_t>(i)]) builders.back().add_pass(pass);
  }
  // Cross-stage edges: a forward waits for the activation from the previous stage (or, interleaved, from the last
  // stage's previous chunk); a backward for the gradient from the next stage (or the first stage's next chunk).
  for (int64_t i = 0; i < p; ++i) {
    StageOps& ops = builders[static_cast<size_t>(i)].ops();
    for (int64_t mb = 0; mb < plan.micro_batches; ++mb)
      for (int64_t c = 0; c < v; ++c) {
        const auto k = static_cast<size_t>(mb * v + c);
        // The neighbouring virtual stages of this chunk, and who runs them (looped or V-shaped).
        const int64_t piece = virtual_piece(plan, i, c), pieces = p * v;
        int32_t act = kNone;
        if (piece > 0) {
          const auto [r, rc] = piece_owner(plan, piece - 1);
          act = builders[static_cast<size_t>(r)].ops().send_act[static_cast<size_t>(mb * v + rc)];
        }
        e.add_dep(ops.fwd_entry[k], act);
        int32_t grad = kNone;
        if (piece < pieces - 1) {
          const auto [r, rc] = piece_owner(plan, piece + 1);
          grad = builders[static_cast<size_t>(r)].ops().send_grad[static_cast<size_t>(mb * v + rc)];
        }
        e.add_dep(ops.bwd_entry[k], grad);

        e.add_dep(ops.bwd_entry_gather[k], grad);
        // The last chunk's backward on the last stage starts from its own loss: its first gather waits for it.
        if (grad == kNone) e.add_dep(ops.bwd_entry_gather[k], ops.fwd_entry[k]);
      }
  }
  // The gradient norm needs every stage's reduced gradients (clip_grad_norm across model-parallel ranks); each
  // stage's optimizer waits for it.
  std::vector<int32_t> norms;
  for (int64_t i = 0; i < p; ++i) norms.push_back(builders[static_cast<size_t>(i)].add_grad_norm());
  for (int64_t i = 0; i < p; ++i)
    for (int64_t j = 0; j < p; ++j)
      for (int32_t dep : builders[static_cast<size_t>(j)].tail()) e.add_dep(norms[static_cast<size_t>(i)], dep);
  for (int64_t i = 0; i < p; ++i)
    out.last_op.push_back(builders[static_cast<size_t>(i)].add_optimizer(norms[static_cast<size_t>(i)]));
  return out;
}

}  // namespace shardplan::sim
