#pragma once
// shardplan_reference: a real GPT trained with DDP / ZeRO-1 / ZeRO-2 / ZeRO-3 (FSDP FULL_SHARD) over comm/,
// measuring per-rank memory (by the planner's component names) and step time, so that `shardplan validate`
// can hold the planner's predictions against reality. This header is the interface `validate` uses; the
// implementation lives in reference/*.cpp.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "planner/model.hpp"
#include "planner/precision.hpp"
#include "planner/strategy.hpp"

namespace shardplan::reference {

// The configuration of one training run. Degrees: this loop is data parallel only (tp = pp = 1), dp = world
// size of the communicator passed to run_training.
struct RunConfig {
  ModelSpec model;                 // architecture, as the planner describes it
  int zero = 3;                    // 0 DDP, 1, 2, 3 (FULL_SHARD)
  int64_t micro_batch = 1;         // sequences per micro-batch per rank
  int64_t grad_accum = 1;          // micro-batches per optimizer step (no_sync semantics: one reduction per step)
  int64_t seq = 0;                 // tokens per sequence (0: model.seq)
  Recompute recompute = Recompute::none;  // none | full (block-level activation checkpointing)
  Precision precision = Precision::fp32;  // fp32 | pure-bf16 | amp-bf16 (run_dtype, run_keeps_master), both backends
  std::string backend = "cpu";     // "cpu" (Eigen, over an MPI communicator) | "cuda" (over NCCL)
  std::string data = "corpus";     // "corpus" (the shipped text, byte-level tokens) | "synthetic"
  int64_t steps = 8;               // optimizer steps measured, after warm-up
  int64_t warmup_steps = 2;        // steps run first and dropped from the timing
  uint64_t seed = 1234;
  double lr = 3e-3;                // AdamW (Loshchilov & Hutter 2019), fp32 states
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip_norm = 1.0;          // global gradient-norm clipping (sharded: norm² all-reduced)
  double comm_timeout_s = 120;     // every wait on communication; a late peer ends the run with CommError
  // Additions of the implementation (defaults keep the interface above unchanged):
  std::string corpus_path;         // data "corpus": this text file instead of the shipped reference/data/corpus.txt
  bool keep_params = false;        // fill RunResult::final_params (tests: sharded training equals unsharded)
};

// Bytes live in the tracking arena, by the planner's component names (planner/memory.hpp MemoryComponents).
struct MemoryByComponent {
  int64_t params = 0;       // the rank's parameters: its shard (ZeRO-3) or the full copy, plus gathered units
  int64_t grads = 0;        // gradient buffers (full or shard), including unsharded unit gradients in flight
  int64_t master = 0;       // fp32 master copy (0 under fp32 / pure precision)
  int64_t optimizer = 0;    // AdamW m and v
  int64_t activations = 0;  // tensors saved for backward and live intermediates of the current op
  int64_t logits = 0;       // LM-head output, probabilities and its gradient
  int64_t buffers = 0;      // communication buffers (gather / reduce-scatter / bucket), workspace
  int64_t total() const { return params + grads + master + optimizer + activations + logits + buffers; }
};

// One optimizer step, as every rank saw it (times: the slowest rank's, taken after a barrier).
struct StepRecord {
  int64_t step = 0;            // 0-based, counting warm-up steps
  bool warmup = false;
  double step_s = 0;           // wall time of the step, slowest rank
  double compute_s = 0;        // time computing (slowest rank)
  double comm_wait_s = 0;      // time blocked waiting on communication (slowest rank)
  double loss = 0;             // mean cross-entropy over the global batch of the step
  double grad_norm = 0;        // global gradient norm before clipping
  int64_t peak_bytes = 0;      // arena high-water mark during the step, max over ranks
  MemoryByComponent at_peak;   // what was live at that rank's peak
  int64_t rss_bytes = 0;       // the process's resident set after the step, max over ranks (/proc/self/statm)
};

struct RunResult {
  std::vector<StepRecord> steps;     // warm-up included (flagged)
  double median_step_s = 0;          // over measured (non-warm-up) steps
  int64_t peak_bytes = 0;            // max over measured steps and ranks
  MemoryByComponent at_peak;         // at that peak
  int64_t params_total = 0;          // parameters of the model, counted from the loop's own tensors
  int64_t params_per_rank = 0;       // parameters this rank stores persistently (its shard under ZeRO-3)
  int world = 1;
  // Additions of the implementation:
  MemoryByComponent between_steps;   // live after the last step on this rank: the persistent model states
  // GPU: device memory in use before the loop allocated anything (cudaMemGetInfo: the CUDA context, cuBLAS
  // workspace, NCCL buffers — the planner's `runtime`), max over ranks; 0 on CPU, where it is not separable.
  int64_t runtime_bytes = 0;
  std::vector<float> final_params;   // every parameter after training, unpadded, in unit order (keep_params)
};

// Mixed precision (CONTRACT.md "Precision policies"): the dtype of the loop's tensors — parameters, gradients,
// activations, logits — is bf16 under pure-bf16 and amp-bf16, fp32 under fp32; AdamW moments, per-row statistics and
// the master copy are fp32 always. amp-bf16 alone keeps an fp32 master copy of the parameters (sharded from ZeRO-1
// on, as the ZeRO paper's K = 12 optimizer states).
DType run_dtype(Precision p);
bool run_keeps_master(Precision p);

// Rejects what this loop cannot run (tp/pp, unsupported precision/backend/recompute), naming the field.
// Returns an empty string when the configuration is runnable.
std::string check_config(const RunConfig& c, int world_size);

// Trains. Collective over `world` (every rank calls it with the same config). Calls on_step on every rank after
// each step with that step's record (identical on all ranks). Throws comm::CommError on a communication failure
// or time-out, std::invalid_argument when check_config fails.
// Addition of the implementation: the bytes one rank will allocate at most, estimated from the loop's own tensor
// sizes before anything is allocated (states, one micro-batch's saved activations and logits, gathered units).
// run_training throws std::runtime_error naming it when it exceeds the machine's available memory.
int64_t bytes_needed(const RunConfig& c, int world_size);

RunResult run_training(const RunConfig& c, comm::Communicator& world,
                       const std::function<void(const StepRecord&)>& on_step = {});

}  // namespace shardplan::reference
