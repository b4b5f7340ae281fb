#pragma once
// The optional model-YAML keys of mixture-of-experts, MLA, MTP and sliding-window models (CONTRACT.md fixes the
// names experts … sliding_window; moe_layer_freq, router_bias, sliding_window_pattern, qk_norm, qk_norm_full_width, attention_sinks and block_norms are
// this project's additions, planner/model.hpp says what each means).
#include <string_view>
#include <vector>

#include "io/yaml_fields.hpp"
#include "planner/model.hpp"

namespace shardplan {

// The keys read_moe_keys accepts, for MapReader::check_keys.
const std::vector<std::string_view>& moe_model_keys();
// Reads those present into `m` (absent keys keep ModelSpec's defaults: a dense model with full attention).
void read_moe_keys(const yaml::MapReader& r, ModelSpec& m);

}  // namespace shardplan
