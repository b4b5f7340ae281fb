#pragma once
// Internal to planner/memory*.cpp: what one stage's memory depends on, and the ledger that adds its parts up.
#include <algorithm>
#include <string>
#include <vector>

#include "planner/activations.hpp"
#include "planner/framework.hpp"
#include "planner/memory.hpp"
#include "planner/partition.hpp"
#include "planner/precision.hpp"

namespace shardplan::memory_detail {

// Everything one stage's memory depends on, computed once.
struct StageInputs {
  const ModelSpec& model;
  const Strategy& strategy;
  const FrameworkTraits& fw;
  const StageParams& stage;
  double psi = 0;           // parameters on this rank before DP sharding
  double shard = 1;         // DP shard degree
  StateBytes state;         // bytes per parameter of each state
  double compute_bytes = 2; // bytes of a gathered (compute-dtype) parameter
  bool keeps_unsharded_grads = false;  // no_sync under gradient accumulation with ZeRO-2/3
  // Expert parallelism (issue 17): the routed experts' states are sharded over the expert-data-parallel group
  // (strategy.hpp expert_data_parallel), the rest over `shard`. local_psi = what one shard holds of psi:
  // (psi − routed)/shard + routed/expert_shard; block_local the same of one block unit.
  double expert_shard = 1;
  double local_psi = 0;
  double block_local = 0;
};

StageInputs stage_inputs(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const StageParams& st);

// Adds bytes to a component; with `record`, also keeps a described item. Descriptions are callables so that
// the search's inner loop (record = false) formats and allocates nothing.
class Ledger {
 public:
  explicit Ledger(bool record) : record_(record) {}
  template <typename Describe>
  void add(double MemoryComponents::*field, const char* component, Describe&& describe, double bytes) {
    if (bytes <= 0) return;
    parts_.*field += bytes;
    if (record_) items_.push_back({component, std::string(describe()), bytes});
  }
  bool recording() const { return record_; }
  MemoryComponents parts_;
  std::vector<MemoryItem> items_;

 private:
  bool record_;
};

// A fixed description.
inline auto text(const char* t) {
  return [t] { return t; };
}

// The last stage's loss frees its logits before the first block's backward, where that block's backward
// temporaries, its working set under full recomputation, the gathered units and the unit gradients awaiting
// reduce-scatter appear: the peak holds one side or the other (memory_backward.cpp). On the backward side, the first
// block's backward holds one unit's gradients; the backward that holds all the awaiting ones comes after the blocks
// behind it (in forward order) have freed what they saved for the micro-batch: whichever holds more is the moment.
struct LossOrBackward {
  double logits = 0, scratch = 0, working_set = 0, gathered_units = 0;
  double head_inputs = 0;        // the micro-batch's final-norm and LM-head inputs: the loss's side only (freed after
                                 // the head's backward)
  double unit_grads = 0;         // unsharded unit gradients held at the backward moment
  int64_t grad_units = 0;        // of how many units
  int64_t done_blocks = 0;       // blocks through their backward at that moment
  double freed_activations = 0;  // their saved activations of the micro-batch, freed by then
  // The stage's saved block activations at its worst backward's start and at its loss (activations.hpp
  // stage_activation_hold): interleaved, the loss starts a backward of the last chunk only, with fewer held.
  StageActivationHold backward_hold, loss_hold;
  double loss_fewer_activations() const { return std::max(backward_hold.bytes - loss_hold.bytes, 0.0); }
  double backward_extra() const { return scratch + working_set + unit_grads + gathered_units - freed_activations; }
  bool loss_peaks() const { return logits > 0 && logits + head_inputs - loss_fewer_activations() >= backward_extra(); }
  // The activations the moment holds: the loss's side or the backward's.
  const StageActivationHold& hold() const { return loss_peaks() ? loss_hold : backward_hold; }
};
double gathered_units_for_backward(const StageInputs& in);
LossOrBackward loss_or_backward(const StageInputs& in);
// The last stage's extra activations (activations.hpp last_stage_extra_bytes): the final norm's and LM head's inputs,
// and with MTP modules their blocks' saved tensors, which torchtitan never checkpoints (FrameworkTraits::torchtitan_mtp).
inline auto head_inputs_text(const ModelSpec& m, const FrameworkTraits& fw, const Strategy& s) {
  return [&m, &fw, &s]() -> std::string {
    if (m.mtp_layers <= 0) return "final norm and LM head inputs";
    const bool kept = fw.torchtitan_mtp && s.recompute != Recompute::none;
    return std::string("final norm and LM head inputs, and the MTP modules' saved activations") +
           (kept ? " (torchtitan checkpoints model.layers only: the MTP layers keep all of theirs)" : "");
  };
}
// The saved activations of the stage's `done` last blocks for one micro-batch (freed once through their backward).
double freed_last_blocks_bytes(const StageInputs& in, int64_t done);

// Parts every moment shares (memory.cpp): runtime allocations outside the allocator, pipeline and sequence-parallel
// buffers, and the allocator's reserve on what the ledger holds so far.
// `attention_running`: a moment inside a block's attention (the context-parallel ring's K/V buffers exist only then).
void add_parallel_buffers(Ledger& l, const StageInputs& in, bool attention_running = true);
// add_parallel_buffers but for the attention's workspace: what the optimizer step still holds. `cp_buffers`: the
// context-parallel ring's.
void add_step_buffers(Ledger& l, const StageInputs& in, bool cp_buffers);
void add_runtime(Ledger& l, const StageInputs& in);
void add_fragmentation(Ledger& l, const StageInputs& in);
// The MTP modules' cross-entropies at the main loss's backward (activations.hpp mtp_loss_saved_bytes: `bytes`).
void add_mtp_loss_saved(Ledger& l, const ModelSpec& m, const Strategy& s, double bytes);

}  // namespace shardplan::memory_detail
