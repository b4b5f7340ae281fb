#include "io/hf_config.hpp"

#include <cmath>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/hf_config_families.hpp"
#include "io/hf_fields.hpp"
#include "io/json_checked.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"

namespace shardplan {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using hf::describe;
using hf::Fields;
using hf::printable;

struct Family {
  const char* name;
  const char* architecture;  // the usual CausalLM class
  const char* block_class;   // the decoder layer class
};

constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", "LlamaDecoderLayer"},
    {"mistral", "MistralForCausalLM", "MistralDecoderLayer"},
    {"qwen2", "Qwen2ForCausalLM", "Qwen2DecoderLayer"},
    {"gemma", "GemmaForCausalLM", "GemmaDecoderLayer"},
    {"gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXLayer"},
    {"gpt2", "GPT2LMHeadModel", "GPT2Block"},
    {"falcon", "FalconForCausalLM", "FalconDecoderLayer"},
    // io/hf_config_moe.cpp (issue 17)
    {"mixtral", "MixtralForCausalLM", "MixtralDecoderLayer"},
    {"qwen3", "Qwen3ForCausalLM", "Qwen3DecoderLayer"},
    {"qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeDecoderLayer"},
    {"deepseek_v2", "DeepseekV2ForCausalLM", "DeepseekV2DecoderLayer"},
    {"deepseek_v3", "DeepseekV3ForCausalLM", "DeepseekV3DecoderLayer"},
    {"gpt_oss", "GptOssForCausalLM", "GptOssDecoderLayer"},
    {"llama4", "Llama4ForConditionalGeneration", "Llama4TextDecoderLayer"},
    {"phi3", "Phi3ForCausalLM", "Phi3DecoderLayer"},
    {"gemma2", "Gemma2ForCausalLM", "Gemma2DecoderLayer"},
    {"gemma3", "Gemma3ForCausalLM", "Gemma3DecoderLayer"},
    {"nemotron", "NemotronForCausalLM", "NemotronDecoderLayer"},
    {"olmo2", "Olmo2ForCausalLM", "Olmo2DecoderLayer"},
};

// model_type spellings (and old Falcon ones) → family.
const Family* family_by_model_type(const std::string& t) {
  for (const Family& f : kFamilies)
    if (t == f.name) return &f;
  if (t == "RefinedWeb" || t == "RefinedWebModel") return &kFamilies[6];
  if (t == "llama4_text") return family_by_model_type("llama4");  // Llama4TextConfig on its own
  if (t == "gemma3_text") return family_by_model_type("gemma3");  // Gemma3TextConfig (gemma-3-1b)
  // Kimi K2: DeepSeek-V3's model under its own model_type (moonshotai/Kimi-K2-Instruct config.json: architectures
  // DeepseekV3ForCausalLM, auto_map to configuration_deepseek.DeepseekV3Config: the same fields); Kimi K2.5: a vision
  // tower and that language model under text_config (KimiK25ForConditionalGeneration).
  if (t == "kimi_k2" || t == "kimi_k25") return family_by_model_type("deepseek_v3");
  return nullptr;
}

const Family* family_by_architecture(const std::string& a) {
  for (const Family& f : kFamilies)
    if (a == f.architecture) return &f;
  if (a == "RWForCausalLM") return &kFamilies[6];
  if (a == "GPT2Model") return &kFamilies[5];
  return nullptr;
}

// "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..." → "3:5: syntax error ...".
std::string json_error_text(const json::parse_error& e) {
  std::string what = e.what();
  const auto bracket = what.find("] ");
  if (bracket != std::string::npos) what = what.substr(bracket + 2);
  const std::string prefix = "parse error at line ";
  if (what.rfind(prefix, 0) == 0) {
    // "parse error at line L, column C: reason"
    const auto comma = what.find(", column ", prefix.size());
    const auto colon = what.find(": ", prefix.size());
    if (comma != std::string::npos && colon != std::string::npos && comma < colon) {
      const std::string line = what.substr(prefix.size(), comma - prefix.size());
      const std::string column = what.substr(comma + 9, colon - comma - 9);
      return fmt::format("{}:{}: malformed JSON: {}", line, column, what.substr(colon + 2));
    }
  }
  return "malformed JSON: " + what;
}

// Fields of configs this planner cannot represent faithfully: mixture-of-experts, at the top or in a nested
// object (multimodal configs keep the language model under "text_config"; issue 19, item 13). `prefix` names the
// nesting in the message ("text_config.").
void reject_moe(const json& j, const std::string& origin, const std::string& prefix = "", int depth = 0) {
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"}) {
    if (j.contains(key) && !j.at(key).is_null() && !(j.at(key).is_number() && j.at(key).get<double>() <= 1)) {
      throw InputError(fmt::format("{}: '{}{}' ({}) describes a mixture-of-experts model, which shardplan reads "
                                   "for model_type mixtral, qwen3_moe, deepseek_v2/v3, kimi_k2, gpt_oss and llama4 "
                                   "only; describe it with --model FILE.yaml (experts, experts_per_token, ...)",
                                   origin, printable(prefix), key, describe(j.at(key))));
    }
  }
  if (depth >= 4) return;  // configs nest a sub-config or two (text_config, vision_config)
  for (const auto& [key, value] : j.items())
    if (value.is_object()) reject_moe(value, origin, prefix + key + ".", depth + 1);
}

bool any_dropout(const Fields& f, std::initializer_list<const char*> keys, double fallback) {
  for (const char* key : keys)
    if (f.number_or(key, fallback) > 0) return true;
  return false;
}

}  // namespace

// Default sequence: max positions, capped for rotary/ALiBi models (see kHfDefaultSeqCap).
int64_t default_seq(HfModel& out, int64_t max_positions, bool learned) {
  if (learned || max_positions <= kHfDefaultSeqCap) return max_positions;
  out.notes.push_back(fmt::format("max_position_embeddings is {}; the default --seq is capped at {}", max_positions,
                                  kHfDefaultSeqCap));
  return kHfDefaultSeqCap;
}

namespace {
// The shape fields transformers' Llama-style configs share (LlamaConfig, NemotronConfig, ...).
void read_decoder_shape(const Fields& f, ModelSpec& m) {
  m.hidden = f.integer({"hidden_size"});
  m.layers = f.integer({"num_hidden_layers"});
  m.heads = f.integer({"num_attention_heads"});
  m.kv_heads = f.integer_or({"num_key_value_heads"}, m.heads);
  m.ffn_hidden = f.integer({"intermediate_size"});
  m.vocab = f.integer({"vocab_size"});
}
}  // namespace

// Llama, Mistral, Qwen2 and Gemma: gated MLP (gate, up, down), RMSNorm, rotary, grouped-query attention.
void read_llama_like(const Fields& f, HfModel& out) {
  ModelSpec& m = out.spec;
  read_decoder_shape(f, m);
  const bool gemma = out.family == "gemma" || out.family == "gemma2" || out.family == "gemma3";
  if (gemma) {
    m.head_dim = f.integer({"head_dim"});  // Gemma-7B: 256 with 16 heads and hidden 3072
  } else {
    m.head_dim = f.integer_or({"head_dim"}, 0);
  }
  if (m.head_dim > 0 && m.heads > 0 && m.head_dim * m.heads == m.hidden) m.head_dim = 0;  // the usual h / a
  m.mlp = MlpKind::swiglu;  // three matrices (gate, up, down) whatever the activation
  const std::string act = f.string_or(gemma ? "hidden_activation" : "hidden_act",
                                      f.string_or("hidden_act", gemma ? "gelu_pytorch_tanh" : "silu"));
  if (!gemma && act != "silu" && act != "swish")
    out.notes.push_back(fmt::format("hidden_act '{}': the gated MLP is counted as SwiGLU (three matrices)", act));
  m.norm = NormKind::rmsnorm;
  m.norm_bias = false;
  m.position = PositionKind::rotary;
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", gemma);
  m.seq = default_seq(out, f.integer_or({"max_position_embeddings"}, gemma ? 8192 : 2048), false);
  if (out.family == "qwen2") {
    m.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without; no MLP biases
    m.out_bias = false;
  } else {
    const bool attention_bias = f.boolean_or("attention_bias", false);
    const bool mlp_bias = f.boolean_or("mlp_bias", false);
    m.qkv_bias = attention_bias;
    // The planner has one switch for the output projection's bias and the MLP's: follow the MLP.
    m.out_bias = mlp_bias;
    if (attention_bias && !mlp_bias)
      out.notes.push_back("attention_bias without mlp_bias: the o_proj bias (hidden per layer) is not counted");
    if (mlp_bias && !attention_bias)
      out.notes.push_back("mlp_bias without attention_bias: an o_proj bias (hidden per layer) is counted");
  }
  m.dropout = any_dropout(f, {"attention_dropout"}, 0);
  m.rotary_base = f.number_or("rope_theta", m.rotary_base);  // carried to --emit's launch files
  m.norm_eps = f.number_or("rms_norm_eps", m.norm_eps);
  read_sliding_window(f, out);  // last: gpt_oss rewrites this note (hf_config_moe.cpp)
}

namespace {

// GPT-NeoX (Pythia): LayerNorm with bias, GELU MLP with biases, rotary on part of each head, untied embed_out.
void read_gpt_neox(const Fields& f, HfModel& out) {
  ModelSpec& m = out.spec;
  m.hidden = f.integer({"hidden_size"});
  m.layers = f.integer({"num_hidden_layers"});
  m.heads = f.integer({"num_attention_heads"});
  m.kv_heads = m.heads;
  m.ffn_hidden = f.integer({"intermediate_size"});
  m.vocab = f.integer({"vocab_size"});
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.position = PositionKind::rotary;
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  m.seq = default_seq(out, f.integer_or({"max_position_embeddings"}, 2048), false);
  const bool attention_bias = f.boolean_or("attention_bias", true);  // query_key_value and dense
  m.qkv_bias = attention_bias;
  m.out_bias = true;  // dense_h_to_4h and dense_4h_to_h always have biases
  if (!attention_bias)
    out.notes.push_back("attention_bias false: the attention dense bias (hidden per layer) is still counted");
  m.dropout = any_dropout(f, {"hidden_dropout", "attention_dropout"}, 0);
  // use_parallel_residual: two LayerNorms per layer either way, so the count does not change.
}

// GPT-2: n_* names, learned positions, biases everywhere, Conv1D layers, tied LM head.
void read_gpt2(const Fields& f, HfModel& out) {
  ModelSpec& m = out.spec;
  m.hidden = f.integer({"n_embd", "hidden_size"});
  m.layers = f.integer({"n_layer", "num_hidden_layers"});
  m.heads = f.integer({"n_head", "num_attention_heads"});
  m.kv_heads = m.heads;
  m.ffn_hidden = f.integer_or({"n_inner"}, 4 * m.hidden);  // null = 4·n_embd
  m.vocab = f.integer({"vocab_size"});
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.position = PositionKind::learned;
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  m.seq = f.integer({"n_positions", "n_ctx"});  // learned positions: the table has exactly this many rows
  m.qkv_bias = true;
  m.out_bias = true;
  m.dropout = any_dropout(f, {"resid_pdrop", "embd_pdrop", "attn_pdrop"}, 0.1);  // GPT2Config defaults 0.1
}

// Falcon: fused query_key_value, multi-query (7B) or grouped KV heads (new decoder architecture: 40B, 180B).
void read_falcon(const Fields& f, HfModel& out) {
  ModelSpec& m = out.spec;
  m.hidden = f.integer({"hidden_size", "n_embed"});
  m.layers = f.integer({"num_hidden_layers", "n_layer"});
  m.heads = f.integer({"num_attention_heads", "n_head"});
  const bool new_arch = f.boolean_or("new_decoder_architecture", false);
  const bool multi_query = f.boolean_or("multi_query", true);  // FalconConfig's default
  if (new_arch) {
    m.kv_heads = f.integer_or({"num_kv_heads", "n_head_kv"}, m.heads);
  } else {
    m.kv_heads = multi_query ? 1 : m.heads;
  }
  m.ffn_hidden = f.integer_or({"ffn_hidden_size"}, 4 * m.hidden);
  m.vocab = f.integer({"vocab_size"});
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  const bool alibi = f.boolean_or("alibi", false);
  m.position = alibi ? PositionKind::alibi : PositionKind::rotary;
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  m.seq = default_seq(out, f.integer_or({"max_position_embeddings"}, 2048), false);
  const bool bias = f.boolean_or("bias", false);
  m.qkv_bias = bias;
  m.out_bias = bias;
  m.dropout = any_dropout(f, {"hidden_dropout", "attention_dropout"}, 0);
  // One LayerNorm shared by attention and MLP (Falcon-7B: parallel_attn without the new architecture; Falcon2:
  // num_ln_in_parallel_attn 1). The planner's blocks always have two norms.
  const bool parallel = f.boolean_or("parallel_attn", true);
  const int64_t norms = new_arch ? f.integer_or({"num_ln_in_parallel_attn"}, 2) : (parallel ? 1 : 2);
  if (norms == 1)
    out.notes.push_back(fmt::format("one LayerNorm per layer (parallel attention) is counted as two: +{} parameters",
                                    m.layers * 2 * m.hidden));
}

// Nemotron (transformers NemotronConfig: Nemotron-4, Minitron): LayerNorm1P with bias, a two-matrix MLP with
// relu² (NemotronMLP: up_proj, down_proj; hidden_act "relu2"), rotary on part of each head, untied by default.
void read_nemotron(const Fields& f, HfModel& out) {
  ModelSpec& m = out.spec;
  read_decoder_shape(f, m);
  m.head_dim = f.integer_or({"head_dim", "kv_channels"}, 0);
  if (m.head_dim > 0 && m.head_dim * m.heads == m.hidden) m.head_dim = 0;  // the usual h / a
  const std::string act = f.string_or("hidden_act", "relu2");
  m.mlp = MlpKind::squared_relu;
  if (act != "relu2")
    out.notes.push_back(fmt::format("hidden_act '{}': the two-matrix MLP is counted as squared ReLU's", act));
  m.norm = NormKind::layernorm;  // NemotronLayerNorm1P: weight (applied as 1 + w) and bias
  m.norm_bias = true;
  m.position = PositionKind::rotary;
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  m.seq = default_seq(out, f.integer_or({"max_position_embeddings"}, 4096), false);
  m.qkv_bias = f.boolean_or("attention_bias", false);
  m.out_bias = f.boolean_or("mlp_bias", false);
  m.dropout = any_dropout(f, {"attention_dropout"}, 0);
  m.rotary_base = f.number_or("rope_theta", m.rotary_base);
  m.norm_eps = f.number_or("norm_eps", m.norm_eps);
}

std::string last_component(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string name_from_origin(const std::string& origin) {
  const fs::path p(origin);
  if (p.filename() == "config.json") {
    std::string parent = last_component(fs::absolute(p).parent_path().string());
    if (!parent.empty()) return parent;
  }
  std::string stem = p.stem().string();
  return stem.empty() ? std::string("hf-model") : stem;
}

}  // namespace

const std::vector<std::string>& hf_supported_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Family& f : kFamilies) v.emplace_back(f.name);
    return v;
  }();
  return names;
}

HfModel parse_hf_config(const std::string& text, const std::string& origin, const std::string& fallback_name) {
  json j;
  try {
    j = io::parse_json_checked(text);  // a repeated key, absurd depth or size: refused (io/json_checked.hpp)
  } catch (const io::JsonLimitError& e) {
    throw InputError(fmt::format("{}: {}", origin, e.what()));
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}:{}", origin, json_error_text(e)));
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format("{}: out of memory while reading its {} bytes of JSON", origin, text.size()));
  } catch (const json::exception& e) {  // out_of_range.406 "number overflow parsing '1e400'" (found by bad-input tests)
    std::string what = e.what();
    const auto bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    throw InputError(fmt::format("{}: malformed JSON: {}", origin, what));
  }
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected a JSON object (a Hugging Face config.json), got {}", origin,
                                 j.is_array() ? "an array" : describe(j)));

  HfModel out;
  out.source_path = origin;
  const Fields top(j, origin, "Hugging Face");
  out.model_type = printable(top.string_or("model_type", ""));
  std::string first_architecture;
  if (j.contains("architectures") && j.at("architectures").is_array() && !j.at("architectures").empty() &&
      j.at("architectures").at(0).is_string())
    first_architecture = printable(j.at("architectures").at(0).get<std::string>());

  const Family* family = out.model_type.empty() ? family_by_architecture(first_architecture)
                                                : family_by_model_type(out.model_type);
  if (family == nullptr) {
    // Say what is missing as well as what is unknown, so that the user knows how far the file is from usable.
    std::string lacks;
    for (const char* key : {"model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "vocab_size"}) {
      if (!top.has(key)) {
        lacks = fmt::format("; missing field '{}'", key);
        break;
      }
    }
    const std::string what =
        out.model_type.empty()
            ? (first_architecture.empty() ? std::string("it has no 'model_type' and no 'architectures'")
                                          : fmt::format("architecture '{}' is not supported", first_architecture))
            : fmt::format("model_type '{}'{} is not supported", out.model_type,
                          first_architecture.empty() ? "" : fmt::format(" ({})", first_architecture));
    throw InputError(fmt::format("{}: {}{} (supported model_type: {}); describe the model with --model FILE.yaml "
                                 "instead",
                                 origin, what, lacks, fmt::join(hf_supported_families(), ", ")));
  }
  out.family = family->name;
  out.architecture = first_architecture.empty() ? family->architecture : first_architecture;
  out.block_class = family->block_class;
  if (!first_architecture.empty() && first_architecture.find("ForCausalLM") == std::string::npos &&
      first_architecture.find("LMHeadModel") == std::string::npos && first_architecture != "GPT2Model")
    out.notes.push_back(fmt::format("architectures[0] is '{}'; planned as a causal language model",
                                    first_architecture));
  if (!is_moe_file_family(out.family)) reject_moe(j, origin);

  // Llama 4's multimodal config keeps the language model under text_config (Llama4Config), as do Gemma 3's
  // multimodal Gemma3Config and Kimi K2.5's; their vision towers are not planned.
  const bool multimodal = out.family == "llama4" || out.family == "gemma3" || out.model_type == "kimi_k25";
  const bool nested = multimodal && j.contains("text_config") && j.at("text_config").is_object();
  if (nested && out.model_type == "kimi_k25")
    out.notes.push_back("the language model of text_config planned; the vision tower is not");
  const Fields f(nested ? j.at("text_config") : j, nested ? origin + " text_config" : origin, out.family);
  if (is_moe_file_family(out.family)) read_moe_file_family(f, out);
  else if (out.family == "gpt2") read_gpt2(f, out);
  else if (out.family == "gpt_neox") read_gpt_neox(f, out);
  else if (out.family == "falcon") read_falcon(f, out);
  else if (out.family == "nemotron") read_nemotron(f, out);
  else read_llama_like(f, out);

  ModelSpec& m = out.spec;
  std::string name = printable(last_component(top.string_or("_name_or_path", "")));
  if (name.empty()) name = fallback_name.empty() ? name_from_origin(origin) : fallback_name;
  m.name = name;
  m.source = fmt::format("Hugging Face config {}", origin);
  m.description = fmt::format("{} (model_type {}) from {}", out.architecture,
                              out.model_type.empty() ? out.family : out.model_type, origin);
  for (const std::string& note : out.notes) m.description += "; " + note;
  try {
    validate_model(m);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", origin, e.what()));
  }
  return out;
}

HfModel load_hf_config(const std::string& path) {
  return parse_hf_config(read_text_file(path), path, "");
}

}  // namespace shardplan
