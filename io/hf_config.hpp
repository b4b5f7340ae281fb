#pragma once
// `--hf-config config.json`: a Hugging Face transformers config read into the planner's ModelSpec.
//
// Families (by `model_type`, or by `architectures[0]` when model_type is absent):
//   llama, mistral, qwen2   gated MLP (gate/up/down), RMSNorm, rotary, GQA (num_key_value_heads)
//   gemma                   as llama, GeGLU, explicit head_dim, tied embeddings by default
//   gpt_neox                LayerNorm with biases, GELU MLP with biases, rotary, untied (Pythia)
//   gpt2                    n_embd/n_layer/n_head/n_inner, learned positions, biases everywhere, tied
//   falcon                  (also RefinedWeb/RefinedWebModel) multi-query or num_kv_heads, optional biases
//   nemotron                LayerNorm1P with bias, two-matrix relu² MLP, rotary, GQA, untied (Nemotron-4, Minitron)
//   mixtral, qwen3_moe, deepseek_v2, deepseek_v3 (kimi_k2, kimi_k25), gpt_oss, llama4 (llama4_text)   MoE, MLA
//   qwen3, phi3, gemma2, gemma3 (gemma3_text)   dense; Q/K norms, sandwich norms, sliding windows
//   (io/hf_config_moe.cpp: each reader names the transformers class it counts)
//
// Sliding windows are read (mistral, phi3, gpt_oss layer_types, gemma2/3) or refused (Qwen's use_sliding_window),
// never dropped; Llama 4's chunked attention is costed as full attention, with a note.
//
// What the planner does not model is said in HfModel::notes (and in the spec's description): e.g. Falcon-7B's
// single LayerNorm shared by its parallel attention and MLP is counted as the two norms every planner block has
// (+2·hidden parameters per layer, 0.004 % of Falcon-7B). Parallel attention otherwise changes no count.
//
// Errors are InputError, one line, naming the file and the field: a missing field ("'intermediate_size' is
// missing"), a value of the wrong type, an unsupported model_type (with the standard fields it lacks), a
// mixture-of-experts config of a family read as dense, malformed JSON (with line and column).
#include <string>
#include <vector>

#include "planner/model.hpp"

namespace shardplan {

struct HfModel {
  ModelSpec spec;
  std::string model_type;    // as written in the file ("llama", "RefinedWebModel", ...)
  std::string family;        // canonical: llama | mistral | qwen2 | gemma | gpt_neox | gpt2 | falcon | (hf_config_moe.cpp)
  std::string architecture;  // architectures[0], or the family's usual class when absent
  std::string block_class;   // the decoder layer class (LlamaDecoderLayer, GPT2Block, ...): FSDP's wrap unit
  std::string source_path;   // the config file (load_hf_config) or the origin given to parse_hf_config
  std::vector<std::string> notes;  // approximations and defaults worth knowing
};

// The default sequence length is max_position_embeddings, capped at this for rotary/ALiBi models (Llama 3.1 and
// Qwen2 declare 131072 positions but pre-train at 8192 or less); learned positions are never capped (they are
// parameters). Plan a longer context with --seq.
inline constexpr int64_t kHfDefaultSeqCap = 8192;

// The canonical families, for messages and tests.
const std::vector<std::string>& hf_supported_families();

// Parses config.json text. `origin` names the file in messages; `fallback_name` names the model when the config
// has no usable `_name_or_path` ("" = derive from origin).
HfModel parse_hf_config(const std::string& text, const std::string& origin, const std::string& fallback_name = "");

// Reads and parses a config.json file. The model is named after `_name_or_path`, else the folder holding a file
// called config.json, else the file's stem.
HfModel load_hf_config(const std::string& path);

}  // namespace shardplan
