#pragma once
// The readers of io/hf_config.cpp that io/hf_config_moe.cpp builds on, and the mixture-of-experts / newer dense
// families read there: mixtral, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, llama4 (llama4_text), phi3.
#include <string>

#include "io/hf_config.hpp"
#include "io/hf_fields.hpp"

namespace shardplan {

// Default sequence: max positions, capped for rotary/ALiBi models (kHfDefaultSeqCap).
int64_t default_seq(HfModel& out, int64_t max_positions, bool learned);
// Llama, Mistral, Qwen2 and Gemma: gated MLP, RMSNorm, rotary, GQA; mistral's sliding_window read too.
void read_llama_like(const hf::Fields& f, HfModel& out);
// sliding_window of a model that windows every layer (Mistral, Phi-3); Qwen's use_sliding_window refused.
void read_sliding_window(const hf::Fields& f, HfModel& out);
// Whether hf_config_moe.cpp reads `family`, and the reader.
bool is_moe_file_family(const std::string& family);
void read_moe_file_family(const hf::Fields& f, HfModel& out);

}  // namespace shardplan
