#pragma once
// How tensor and pipeline parallelism split the parameters: what one rank of each pipeline stage holds
// before data-parallel sharding.
#include <cstdint>
#include <vector>

#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

struct StageParams {
  int64_t stage = 0;
  int64_t layers = 0;            // transformer blocks on this stage (all its virtual chunks)
  bool first = false;            // holds the token (and position) embedding
  bool last = false;             // holds the final norm and the LM head
  // Parameters per rank (after the TP split), by part.
  int64_t block_params = 0;      // one block on one TP rank (an MoE model's MoE block: its largest FSDP unit)
  int64_t blocks = 0;            // layers · block_params, dense blocks of an MoE model at their own size
  int64_t moe_layers = 0;        // MoE blocks among `layers` (planner/moe.hpp)
  // Routed-expert parameters among the above (blocks and MTP), experts/ep of them: with --ep their states are
  // reduced and sharded over the expert-data-parallel group (strategy.hpp expert_data_parallel), the rest over dp.
  int64_t block_routed = 0;      // in one MoE block
  int64_t routed_experts = 0;    // on this rank's stage
  int64_t embedding = 0;         // token embedding (vocab-parallel) + learned positions (replicated)
  int64_t final_norm = 0;
  int64_t lm_head = 0;           // the output matrix, or its tied copy on the last stage when pp > 1
  int64_t mtp = 0;               // multi-token prediction modules, after the head on the last stage (Megatron-Core
                                 // puts them there: multi_token_prediction.py, mtp_on_this_rank)
  // 1-D parameters among the above (norms, biases of attention and dense MLPs, Q/K norms, sinks, MLA's latent norms,
  // the router's bias, the final norm and MTP's norms): what Muon leaves to Adam besides the embedding and the head
  // (planner/optimizer.hpp). The routed experts' biases (GPT-OSS's, < 0.1 % of them) count with the experts.
  int64_t vector_params = 0;
  int64_t total() const { return blocks + embedding + final_norm + lm_head + mtp; }
  // FSDP/ZeRO-3 units: each block is one; the root holds the rest (embedding, final norm, LM head, MTP).
  int64_t root_unit() const { return embedding + final_norm + lm_head + mtp; }
};

// Parameters of one block on one TP rank. TP splits Q/K/V, the MLP up/gate (column-parallel) and the output
// projections (row-parallel) by tp; norms and row-parallel biases are replicated. When tp exceeds kv_heads,
// each rank keeps one K/V head (Megatron replicates them).
// MoE: experts/ep routed experts each split over etp ranks (0: = tp; strategy.hpp expert_tensor_parallel).
int64_t block_params_per_tp_rank(const ModelSpec& m, int64_t tp, int64_t ep = 1, int64_t etp = 0);

// Layers of each stage: L / pp, the remainder given to the last stages (which hold no embedding and, under
// 1F1B, the fewest in-flight micro-batches).
std::vector<int64_t> stage_layers(int64_t layers, int64_t pp);

// One stage's parameters (no allocation: the search calls this in its inner loop).
StageParams stage_params(const ModelSpec& m, const Strategy& s, int64_t stage);
std::vector<StageParams> partition_stages(const ModelSpec& m, const Strategy& s);

// The stages that can hold the peak: the first (embedding, most micro-batches in flight), the first middle stage
// with the most blocks, and the last (LM head, logits). Returns how many of `out` are set.
int candidate_peak_stages(const ModelSpec& m, const Strategy& s, int64_t out[3]);

}  // namespace shardplan
