#pragma once
// Megatron-Core's custom pipeline layout, --pipeline-model-parallel-layout (megatron/core/transformer/
// pipeline_parallel_layer_layout.py): "Et*4|(t*4|)*14tmL" lists what each virtual stage builds, in model order:
// E the embedding, t a transformer block, m an MTP layer, L the loss; '|' ends a stage; "x*n" and "(...)*n" repeat;
// commas are ignored. DeepSeek-V3's recipes balance their 61 blocks, MTP and loss with it (Megatron-Bridge
// recipes/deepseek/h100/deepseek_v3.py _get_deepseek_v3_pipeline_layout).
#include <cstdint>
#include <string>
#include <vector>

#include "planner/pipeline_split.hpp"

namespace shardplan {

struct LayoutParse {
  StageLayout layout;
  std::string error;  // non-empty when the text is not a layout Megatron-Core accepts (what is wrong, how to fix it)
};

// Expands and checks the text as parse_str_to_list and validate_layer_layout do, apart from what needs the model
// (block and MTP counts) or the strategy (stages = pp · vpp): those are pipeline_layout_refusal's.
LayoutParse parse_megatron_layout(const std::string& text);

// The layout text of per-stage block counts, the embedding on stage 0, `mtp_layers` m's and the loss on the last
// stage, runs of equal stages folded: {5, 4, 4, 4, 2} with one MTP layer → "Et*5|(t*4|)*3,t*2mL".
std::string format_megatron_layout(const std::vector<int64_t>& blocks, int64_t mtp_layers);

}  // namespace shardplan
