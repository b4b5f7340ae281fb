#pragma once
// Where a pipeline's blocks live: how many transformer blocks each virtual stage holds under the strategy's split
// (Strategy::split, planner/pipeline_split.hpp), which rank holds which virtual stage (looped or V-shaped), where
// the embedding and the loss are, and which splits each runtime accepts (its own rule, cited in the .cpp).
//
// Virtual stages: the model is cut into S = pp · chunks pieces, in model order. Looped schedules (1F1B,
// interleaved, ZB-H1) give rank r the pieces r, r + pp, r + 2·pp, ... (Megatron's interleaving); V-shaped ones
// (ZB-V, DualPipeV) give rank r the pieces r and 2·pp − 1 − r, so rank 0 holds both the embedding and the loss.
#include <cstdint>
#include <optional>
#include <string>

#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// ZB-V and DualPipeV: two chunks per rank in a V (torch.distributed.pipelining _get_pp_rank_to_stage_indices_mapping
// "v" style, as torchtitan/distributed/pipeline_parallel.py calls it).
bool schedule_is_v_shaped(Schedule s);
// The schedules that split each backward into B (input gradients) and W (weight gradients).
bool schedule_splits_backward(Schedule s);

// Whether the split is Megatron's per-stage layout (--pp-layout; planner/megatron_layout.hpp).
bool has_stage_layout(const Strategy& s);

// Model chunks per rank: vpp (1 without interleaving); 2 for the V-shaped schedules.
int64_t chunks_per_rank(const Strategy& s);
int64_t virtual_stage_count(const Strategy& s);
// The virtual stage (model piece) that chunk `chunk` of pipeline rank `rank` runs.
int64_t virtual_stage_of(const Strategy& s, int64_t rank, int64_t chunk);

// The embedding and loss weights in effect: the split's, or the runtime's default (torchtitan's
// pipeline_parallel_first/last_stage_less_layers = 1, torchtitan/config/configs.py; 0 elsewhere).
int64_t effective_embedding_layers(const Strategy& s);
int64_t effective_loss_layers(const Strategy& s);

// Transformer blocks of virtual stage k, of chunk `chunk` of rank `rank`, and of the whole rank. No allocation:
// the search calls these in its inner loop. The strategy must pass pipeline_layout_refusal.
int64_t virtual_stage_layers(const ModelSpec& m, const Strategy& s, int64_t k);
int64_t chunk_layers(const ModelSpec& m, const Strategy& s, int64_t rank, int64_t chunk);
int64_t rank_layers(const ModelSpec& m, const Strategy& s, int64_t rank);
// Whether the rank runs the first virtual stage (token embedding) / the last one (final norm, LM head, loss).
bool rank_holds_embedding(const Strategy& s, int64_t rank);
bool rank_holds_head(const Strategy& s, int64_t rank);

// Why the schedule, vpp and split do not fit the model or the runtime (one line naming the flag, the runtime's
// rule with its source and a way out), or nothing. validate_strategy calls it; so does the search.
std::optional<std::string> pipeline_layout_refusal(const ModelSpec& m, const Strategy& s);

// A few splits worth pricing for the strategy's pp, vpp, schedule and framework, each one the runtime accepts:
// its default, Megatron's first/last counts that leave the middle stages ⌈L/pp⌉ blocks (Llama 3's one block fewer
// on the first and last stages, Dubey et al. 2024 §3.3.2), the embedding and the loss counted as one block each, and
// under Megatron a per-stage layout with ⌈L/S⌉ blocks in every middle virtual stage (recipe_style_layout).
// Duplicates (the same blocks everywhere) are left out. Returns how many of `out` are set.
inline constexpr int kMaxSplitCandidates = 4;
int pipeline_split_candidates(const ModelSpec& m, const Strategy& s, PipelineSplit out[kMaxSplitCandidates]);

// Megatron's layout as Megatron-Bridge's DeepSeek-V3 recipes write it (recipes/deepseek/h100/deepseek_v3.py
// _get_deepseek_v3_pipeline_layout): every middle virtual stage ⌈L/S⌉ blocks, the first as many or what is left
// beside the embedding, the last the rest beside the MTP layers and the loss. 61 blocks on 16 virtual stages →
// E+4 | 4 × 14 | 1+m+L, on 32 → E+1 | 2 × 30 | m+L: the recipes' own. Nothing when the middle stages would take more
// than the blocks, or beyond kMaxLayoutStages.
std::optional<StageLayout> recipe_style_layout(const ModelSpec& m, const Strategy& s);

// When the user set no split and the runtime's default split cannot lay out the model (94 blocks on pp 8 × vpp 4
// under Megatron-Core), the split its recipes use instead, if one of pipeline_split_candidates runs: the embedding and
// the loss counted as a block each first (Megatron-Bridge's recipes set account_for_embedding_in_pipeline_split and
// account_for_loss_in_pipeline_split for Llama 3.1 405B and Qwen3-235B-A22B: recipes/llama/llama3.py,
// recipes/qwen/h100/qwen3_moe.py), then uneven first and last stages. Nothing when the default runs or nothing does.
std::optional<PipelineSplit> runnable_split_for_default(const ModelSpec& m, const Strategy& s);

// The strategy's split as Megatron's --pipeline-model-parallel-layout text (planner/megatron_layout.hpp
// format_megatron_layout): every virtual stage's blocks, the embedding first, the MTP layers and the loss last.
std::string megatron_layout_of(const ModelSpec& m, const Strategy& s);

// "7/8×14/7" style summary of the blocks per rank for tables (empty without a pipeline).
std::string describe_stage_layers(const ModelSpec& m, const Strategy& s);

}  // namespace shardplan
