#pragma once
// Full recomputation of some of the blocks only. Under `--recompute full` every block keeps just its input and runs
// its forward again in backward, unless the strategy names which blocks of each model chunk (a pipeline stage, or one
// virtual stage of it under interleaving) do:
//  - `recompute_layers` N: the first N blocks of each chunk. Megatron-Core's `--recompute-granularity full
//    --recompute-method block --recompute-num-layers N` (megatron/core/transformer/transformer_block.py
//    TransformerBlock._checkpointed_forward: "Checkpoint the input activation of only a set number of individual
//    Transformer layers and skip the rest", layers l < recompute_num_layers of the chunk's block); its MTP layer is
//    not recomputed ("recompute_method == 'block' is not supported for MTP yet", multi_token_prediction.py).
//  - `recompute_every` K: the K-th, 2K-th, ... block of each chunk, counted from 1. torchtitan's layer-level
//    selective AC, `activation_checkpoint.mode = "selective"`, `selective_ac_option = "K"`
//    (torchtitan/distributed/activation_checkpoint.py _apply_layer_sac: `_layer_sac_count % ac_freq == 0`, the
//    counter reset by apply_ac for each model part).
// The others keep every tensor they save (as under `--recompute none`). Memory follows the blocks one by one
// (planner/activations.hpp saved_first_blocks_bytes, the simulator per layer); time prices the recomputed share of the
// blocks' forward (recomputed_block_share).
#include <cstdint>
#include <string>

#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Full recomputation of some blocks, not all.
bool partial_recompute(const Strategy& s);
// Whether block `index` (0 = first in forward order) of a chunk of `chunk_blocks` blocks recomputes its forward.
bool recomputes_block(const Strategy& s, int64_t index, int64_t chunk_blocks);
// How many blocks of a chunk of `chunk_blocks` recompute (all of them under plain full recomputation, none otherwise).
int64_t recomputed_blocks(const Strategy& s, int64_t chunk_blocks);
// Of the first `first` blocks of a chunk, how many recompute.
int64_t recomputed_among_first(const Strategy& s, int64_t first, int64_t chunk_blocks);
// Whether block k of the rank's stage, counted in forward order over its chunks (chunk 0's blocks, then chunk 1's:
// the simulator's numbering), recomputes.
bool stage_block_recomputes(const ModelSpec& m, const Strategy& s, int64_t rank, int64_t k);
// Recomputed blocks of the rank's stage (every chunk), and the share of the model's blocks that recompute
// (1 under plain full recomputation, 0 without full recomputation): what the step time repeats of each block's
// forward, its TP, CP and EP collectives included.
int64_t stage_recomputed_blocks(const ModelSpec& m, const Strategy& s, int64_t rank);
double recomputed_block_share(const ModelSpec& m, const Strategy& s);

// The recomputation in a word or two, for tables and sentences: none, selective, full, "first 3" (blocks of each
// chunk), "every 2nd".
std::string recompute_label(const Strategy& s);

// Why --recompute-layers / --recompute-every cannot be as given (one line with the fix), or "": either needs
// --recompute full, not both, N at most the largest chunk's blocks (Megatron-Core checkpoints them all then),
// K at least 2. The runtime's own rule is framework_support.cpp's partial_recompute_runtime_refusal.
std::string partial_recompute_refusal(const ModelSpec& m, const Strategy& s);

}  // namespace shardplan
