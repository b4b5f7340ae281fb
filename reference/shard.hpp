#pragma once
// Parameters, gradients and AdamW states of every FSDP unit under one ZeRO stage, and the collectives that move
// them (comm/comm.hpp). Stage by stage (Rajbhandari et al. 2020 §5; PyTorch FSDP, Zhao et al. 2023 §3):
//   0 DDP     full params, full grads all-reduced in place per unit (one bucket per unit, issued as backward
//             finishes the unit, waited before the step), full m/v.
//   1 ZeRO-1  as DDP, but m/v only for the rank's shard; the step updates the shard, then all-gathers params.
//   2 ZeRO-2  full params; a unit's unsharded grads live from its backward until their reduce-scatter into
//             the rank's persistent grad shard completes; shard m/v; all-gather params after the step.
//   3 ZeRO-3  only the param shard persists; a unit is all-gathered before use (forward prefetch one unit ahead,
//             BACKWARD_PRE prefetch in backward) and freed after; grads as ZeRO-2; AdamW on the shard.
// Under gradient accumulation (no_sync) grads accumulate unsharded and are reduced on the last micro-batch.
#include <deque>
#include <vector>

#include "comm/comm.hpp"
#include "reference/arena.hpp"
#include "reference/backend.hpp"
#include "reference/layout.hpp"

namespace shardplan::reference {

class UnitStore {
 public:
  // Tensors live in `arena`, on its backend, in the backend's dtype (parameters and gradients: fp32 or bf16); AdamW
  // moments are fp32, and with `keep_master` (amp-bf16) an fp32 master copy of the parameters is kept where the
  // moments are. Collectives run over `world` (its backend's memory: MPI with the CPU backend, NCCL with CUDA), in
  // the backend's dtype.
  UnitStore(const std::vector<UnitLayout>& units, int zero, bool keep_master, comm::Communicator& world, Arena& arena,
            double timeout_s);
  ~UnitStore();
  UnitStore(const UnitStore&) = delete;
  UnitStore& operator=(const UnitStore&) = delete;
  // Deterministic initial values (the same whatever the world size): N(0, 0.02) matrices, 0.02/√(2L) for the
  // residual projections (GPT-2), norm gains 1, biases 0.
  void params_init(uint64_t seed, int64_t layers);

  floatX* params_acquire(int u);  // unit u's full parameters [padded], gathered when sharded
  void params_prefetch(int u);    // ZeRO-3: start gathering unit u (no-op otherwise or when out of range)
  void params_release(int u);     // ZeRO-3: free the gathered copy (reshard)
  floatX* grads_acquire(int u);   // unit u's unsharded gradients [padded], zeroed at first use in a step
  void grads_done(int u, bool reduce);  // unit u's backward is over; reduce when `reduce` (last micro-batch)
  void grads_finish();            // waits every reduction of the step
  // Global grad norm (before clipping), clipping, AdamW on what this rank owns, parameter all-gather (ZeRO-1/2).
  double optimizer_step(AdamWParams a, double clip_norm);
  void poll();                    // drives communication in flight

  // Every unit's parameters, unpadded, concatenated, widened to fp32 (collective under ZeRO-3).
  std::vector<float> params_full_read();
  int64_t params_stored() const;  // elements of parameters this rank keeps persistently
  double comm_wait_s = 0;         // seconds blocked in wait(), accumulated by the caller's window

  // Collectives of the loop itself, with buffers and handles owned here: after a communication failure the
  // caller abandons this object (never destroyed: an unfinished MPI request must neither be waited on — the peer
  // may be dead — nor write into freed memory), so nothing in flight may live on the caller's stack.
  void barrier();
  // Gathers `mine` (the same length on every rank) from every rank: [ranks × mine.size()].
  std::vector<double> stats_gather(const std::vector<double>& mine);
  bool in_flight() const;         // any operation issued and not yet waited

 private:
  struct UnitState {
    Buf full;             // [padded] parameters (persistent under ZeRO 0-2; gathered copy under ZeRO-3)
    Buf shard;            // [shard] ZeRO-3 parameter shard
    comm::HandlePtr gather;  // ZeRO-3 all-gather in flight into `full`
    Buf gfull;            // [padded] unsharded gradients
    Buf gshard;           // [shard] ZeRO-2/3 reduced gradients
    Buf m, v;             // [padded] under DDP, [shard] otherwise: AdamW moments (fp32)
    Buf master;           // [padded] under DDP, [shard] otherwise: fp32 master parameters (amp-bf16 only)
  };
  struct Pending {
    int unit;
    comm::HandlePtr handle;
  };
  void wait_timed(comm::Handle& h);
  void wait_held(comm::HandlePtr h);  // keeps h in held_ until done
  void reduction_retire();
  void collective_prepare();
  // [floats] backend memory for values that cross between ranks through the host (stats, the grad norm); kept
  // for the store's lifetime, outside the arena (a few bytes, not the loop's tensors).
  float* exchange_buffer(std::size_t floats);
  std::size_t bytes_of(int64_t elements) const;  // of the backend's dtype

  const std::vector<UnitLayout>& units_;
  int zero_;
  bool keep_master_;
  comm::Communicator& world_;
  Arena& arena_;
  Backend& k_;
  DType dtype_;                  // of parameters and gradients
  comm::DataType comm_dtype_;    // the same, as the communicator names it
  double timeout_s_;
  int rank_, size_;
  std::vector<UnitState> state_;
  std::deque<Pending> reductions_;
  std::vector<comm::HandlePtr> held_;  // loop-level collectives being waited
  std::vector<Buf> sends_;             // [shard] per unit: copies of updated shards being all-gathered (ZeRO-1/2)
  float* exchange_ = nullptr;          // exchange_buffer
  std::size_t exchange_floats_ = 0;
};

}  // namespace shardplan::reference
