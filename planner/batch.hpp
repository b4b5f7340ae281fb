#pragma once
// The default global batch, one rule for plan, predict, simulate and validate --measurements: a target in tokens
// per step, turned into sequences that always divide over the data-parallel degree (global batch = dp ×
// micro-batch × accumulation steps, accumulation rounded to the nearest whole number).
#include <cstdint>
#include <string>

namespace shardplan {

struct BatchTarget {
  int64_t tokens = 0;     // tokens per optimizer step the rule aims at
  int64_t sequences = 0;  // tokens / seq, rounded to the nearest sequence (at least 1)
  int64_t seq = 0;
  int64_t gpus = 0;
  const char* basis = "";  // which bound set the target, in words (printed with the batch)
};

// Target tokens per step for `gpus` GPUs (kept within [1, 2^40] first, so the product cannot overflow):
//   T = min(max(4 Mi, 1 Ki · gpus), 32 Ki · gpus)
// 4 Mi tokens is Llama 2's batch (Touvron et al. 2023 §2.2: "global batch-size of 4M tokens"); 1 Ki tokens per GPU is
// Llama 3 405B's (Dubey et al. 2024 §3.4.1: 16 M tokens on 16 K H100s), which takes over past 4 Ki GPUs. The cap of
// 32 Ki tokens per GPU is shardplan's: below 128 GPUs 4 M tokens would mean hundreds of accumulation steps per step
// (8b on 8 GPUs: 2048 sequences of 2048 = 128 steps of micro-batch 2, 136-s steps) where 8 to 16 already amortise the
// per-step costs (optimizer step, gradient reduce, pipeline fill) to a few percent.
BatchTarget default_batch_target(int64_t seq, int64_t gpus);

// Accumulation steps the rule gives a replica of `dp` ranks at `micro_batch` sequences: the nearest whole number of
// micro-batches to the target, at least 1.
int64_t default_accumulation(const BatchTarget& t, int64_t dp, int64_t micro_batch);
// dp × micro_batch × default_accumulation: always a multiple of dp × micro_batch.
int64_t default_global_batch(const BatchTarget& t, int64_t dp, int64_t micro_batch);

// One line for the output: what was chosen for this layout and why ("global batch 2000 sequences (16.38 M tokens) =
// dp 125 × micro-batch 1 × 16 accumulation steps; default: ~16.38 M tokens per step, 1 Ki per GPU (Llama 3 405B) …").
std::string describe_default_batch(const BatchTarget& t, int64_t dp, int64_t micro_batch);

}  // namespace shardplan
