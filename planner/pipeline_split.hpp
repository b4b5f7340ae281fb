#pragma once
// How a pipeline's transformer blocks are split over its stages, as the user (or the search) set it. The rules
// that turn it into layer counts per stage, and what each runtime accepts, are in planner/pipeline_layout.hpp.
#include <array>
#include <cstdint>

namespace shardplan {

// Megatron-Core's custom layout (--pipeline-model-parallel-layout, megatron/core/transformer/
// pipeline_parallel_layer_layout.py PipelineParallelLayerLayout): the blocks of every virtual stage in model order,
// parsed by planner/megatron_layout.hpp. A fixed array, so that a Strategy stays a plain value the search copies.
inline constexpr int kMaxLayoutStages = 128;

struct StageLayout {
  int16_t stages = 0;          // virtual stages (pp · vpp); 0 = no layout
  int16_t mtp_layers = 0;      // 'm' entries, all in one virtual stage
  int16_t mtp_stage = -1;      // the virtual stage that holds them; -1 = none
  std::array<int16_t, kMaxLayoutStages> blocks{};  // [stages] 't' entries per virtual stage
  bool operator==(const StageLayout&) const = default;
};

struct PipelineSplit {
  // Blocks on the first / last pipeline rank, all its virtual chunks together (Megatron-LM
  // --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers); 0 = not set: the middle stages'
  // share.
  int64_t first_layers = 0;
  int64_t last_layers = 0;
  // The token embedding, and the final norm + LM head + loss, each counted as this many blocks when the layers are
  // split (Megatron-LM --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split = 1;
  // torchtitan pipeline_parallel_first/last_stage_less_layers; DeepSpeed partition_method
  // 'type:transformer|embedding' = 1 each). -1 = the runtime's default (torchtitan 1, the others 0).
  int64_t embedding_layers = -1;
  int64_t loss_layers = -1;
  // Every virtual stage's blocks given one by one (Megatron's layout); excludes the four fields above.
  StageLayout layout;
  bool operator==(const PipelineSplit&) const = default;
};

}  // namespace shardplan
