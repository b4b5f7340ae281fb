#pragma once
// One pipeline stage's ops on its streams (sim/schedule.cpp build_step wires the stages together): its forward,
// backward and W passes with FSDP's per-unit gathers and reductions, DDP's buckets, TP and EP on the critical path,
// context parallelism's ring, blocking point-to-point transfers, and each op's memory. The passes are in
// sim/stage_builder.cpp, the gradient reductions in sim/stage_reductions.cpp.
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/engine.hpp"
#include "sim/fsdp_memory.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

inline constexpr int32_t kNone = -1;


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
  StageBuilder(const StepPlan& plan, int64_t stage, Engine& e, const StageStreams& st);

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
  int32_t add_optimizer(int32_t grad_norm);

 private:
  bool syncs(int32_t mb) const { return plan_.sync_every_micro || mb == plan_.micro_batches - 1; }
  size_t pass_index(int32_t mb, int32_t c) const { return static_cast<size_t>(mb * plan_.vpp + c); }
  bool has_root() const { return c_.gather_root > 0 || c_.gathered_root > 0 || c_.reduce_root > 0 || c_.root_grads > 0; }
  bool units() const { return plan_.dp_mode == DpMode::units; }
  // Megatron's CPU activation offloading (Transformer Engine cpu_offload.py, TE 2.10+; docs/features/cpu_offloading):
  // the first N blocks' saved tensors leave the GPU as they are saved, and at most L − N blocks' sets are on the GPU
  // at any time. Here a block's set is freed at the end of the next block's forward (its copy ran beside it) and
  // reloaded at the start of the next block's backward, or at the end of its own forward and the start of its own
  // backward when only one set may stay (N = L − 1).
  bool offloaded(int64_t layer) const { return layer >= 0 && layer < c_.offloaded_blocks; }
  int64_t offload_lag() const { return c_.layers() - c_.offloaded_blocks >= 2 ? 1 : 0; }

  // A module gathered only while its pass runs (DeepSpeed's embedding and LM head), from op `first` to op `last`.
  void module_gathered(int32_t first, int32_t last, double bytes);
  void module_gathered(int32_t op, double bytes) { module_gathered(op, op, bytes); }

  // FSDP moments count gathered units as parameters (planner/memory_moments.hpp), the others as buffers.
  MemKind block_kind() const { return c_.moments ? MemKind::gathered_weights : MemKind::gathered_block; }
  MemKind root_kind() const { return c_.moments ? MemKind::gathered_weights : MemKind::gathered_root; }
  // The embedding unit's MTP use held through the backward (StageCosts::mtp_embed_grad): FSDP2 units, ends of their own.
  bool holds_mtp_embedding() const { return c_.mtp_embed_grad > 0 && c_.moments && units() && c_.end_units; }
  // Whether this micro-batch's forward gathers the units, and whether its backward frees them again.
  bool gathers_in(int32_t mb) const { return !plan_.gathers_once || mb == 0; }
  bool frees_after_backward(int32_t mb) const { return !plan_.gathers_once || mb == plan_.micro_batches - 1; }

  // The overlapped parameter gather (param_gathers_) that holds the parameters before `params` in forward order.
  int32_t param_gather_for(double params_before) const;

  // The attention slices of a ring, played by ring() below rather than inside the block's own op.
  static double ring_slices(const CpRing& r) { return r.steps > 1 ? static_cast<double>(r.steps) * r.slice_s : 0; }

  // A collective on the critical path (TP, EP): on its own stream after `after`, and the next compute waits for it.
  int32_t critical_comm(int32_t after, int32_t stream, OpKind kind, double work, int32_t mb, int32_t chunk,
                        int32_t layer);

  // One block's ring attention (planner/context_parallel.hpp CpRing): its slices on the compute stream, each
  // transfer on the cp stream issued as the slice before it starts (it waits for the previous transfer and for the
  // compute before that slice), each slice after the transfer it needs; the tail after the last slice gates what
  // follows. Returns the pass's last op.
  int32_t ring(const CpRing& r, OpKind kind, int32_t mb, int32_t chunk, int32_t layer);

  // A compute op that waits for the gate (the last TP collective or blocking transfer) before it starts.
  int32_t compute(OpKind kind, double seconds, int32_t mb, int32_t chunk, int32_t layer);

  // A backward compute op that produces `params` gradients; under DDP-style buckets with overlap it is split at
  // bucket boundaries and each filled bucket is reduced at once. Returns {first, last} op.
  std::pair<int32_t, int32_t> backward_compute(OpKind kind, double seconds, double params, int32_t mb, int32_t chunk,
                                               int32_t layer);

  void reduce_bucket(int32_t after, int32_t mb);

  // An all-gather of the next gathered unit, at most prefetch_units ahead of the unit computing (FSDP's
  // limit_all_gathers: pytorch PR #98354; FSDP2 keeps current + prefetch).
  int32_t gather(OpKind kind, double seconds, double bytes, int32_t mb, int32_t chunk, int32_t layer);

  void send(bool activation, int32_t mb, int32_t chunk, int32_t after);

  void forward(int32_t mb, int32_t chunk);

  // A backward pass: whole, or (input_only) the B pass of a zero-bubble schedule, whose block weight gradients,
  // activation frees and gradient reductions wait for its W pass (weight_pass).
  void backward(int32_t mb, int32_t chunk, bool input_only = false);
  // The [final norm, LM head] unit after the LM head's backward `head_bwd` (StageCosts::end_units). Returns the
  // norm's re-gathered op.
  int32_t head_unit_backward(int32_t head_bwd, int32_t mb, int32_t chunk, bool sync);

  // The W pass of a zero-bubble schedule: each block's weight-gradient GEMMs, in backward order; the block's saved
  // activations are freed and its gradients reduced here (Qi et al. 2024 §2: W needs the input and the output grad).
  void weight_pass(int32_t mb, int32_t chunk);

  // After every chunk of a micro-batch has its gradients on this stage (its last backward or W pass).
  void gradients_complete(int32_t mb, int32_t last, bool sync);

  // Unsharded gradients of one unit: reduce-scattered as soon as its backward ends (syncing micro-batches), or
  // kept across micro-batches under no_sync.
  void unit_gradients(int32_t first, int32_t last, int32_t mb, int32_t chunk, int32_t layer, bool sync);

  void reduce_unit(int32_t after, int32_t mb, int32_t chunk, int32_t layer);

  void alloc_root_grads(int32_t op);

  // no_sync: each unit's sharded gradient appears with its first reduce-scatter (set_to_none zero_grad freed it).
  void sharded_grads_appear(int32_t rs, double unit_params);

  // After the micro-batch's last backward pass on this stage: the root unit is reduced and resharded (FSDP reduces
  // the root last, in its post-backward callback); DDP without overlap reduces every bucket now.
  void end_of_micro_batch(int32_t mb, int32_t last, bool sync);

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

}  // namespace shardplan::sim
