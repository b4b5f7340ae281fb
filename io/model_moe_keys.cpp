#include "io/model_moe_keys.hpp"

namespace shardplan {

const std::vector<std::string_view>& moe_model_keys() {
  static const std::vector<std::string_view> keys = {
      "experts",          "experts_per_token", "shared_experts",   "expert_ffn_hidden", "dense_layers",
      "moe_layer_freq",   "router_bias",       "q_lora_rank",      "kv_lora_rank",      "qk_rope_head_dim",
      "qk_nope_head_dim", "v_head_dim",        "mtp_layers",       "sliding_window",    "sliding_window_pattern",
      "qk_norm",          "qk_norm_full_width", "attention_sinks", "block_norms"};
  return keys;
}

void read_moe_keys(const yaml::MapReader& r, ModelSpec& m) {
  using yaml::Bound;
  m.experts = r.integer_or("experts", 0, Bound::positive);
  m.experts_per_token = r.integer_or("experts_per_token", 0, Bound::positive);
  m.shared_experts = r.integer_or("shared_experts", 0, Bound::non_negative);
  m.expert_ffn_hidden = r.integer_or("expert_ffn_hidden", 0, Bound::positive);
  m.dense_layers = r.integer_or("dense_layers", 0, Bound::non_negative);
  m.moe_layer_freq = r.integer_or("moe_layer_freq", 1, Bound::positive);
  m.router_bias = r.boolean_or("router_bias", false);
  m.q_lora_rank = r.integer_or("q_lora_rank", 0, Bound::positive);
  m.kv_lora_rank = r.integer_or("kv_lora_rank", 0, Bound::positive);
  m.qk_rope_head_dim = r.integer_or("qk_rope_head_dim", 0, Bound::positive);
  m.qk_nope_head_dim = r.integer_or("qk_nope_head_dim", 0, Bound::positive);
  m.v_head_dim = r.integer_or("v_head_dim", 0, Bound::positive);
  m.mtp_layers = r.integer_or("mtp_layers", 0, Bound::non_negative);
  m.sliding_window = r.integer_or("sliding_window", 0, Bound::positive);
  m.sliding_window_pattern = r.integer_or("sliding_window_pattern", 1, Bound::positive);
  m.qk_norm_full_width = r.boolean_or("qk_norm_full_width", false);
  m.qk_norm = r.boolean_or("qk_norm", false) || m.qk_norm_full_width;
  m.attention_sinks = r.boolean_or("attention_sinks", false);
  m.block_norms = r.integer_or("block_norms", 2, Bound::positive);
}

}  // namespace shardplan
