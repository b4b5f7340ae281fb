// --hf-config: Hugging Face config.json files (written here from the models' published configs) give the
// published parameter totals; unsupported or broken files fail with one line naming the file and the field.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/hf_config.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/model.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;
using shardplan::test::is_one_error_line;
using shardplan::test::run_cli;

namespace {

// Published totals, checked against the sources named beside each (the count of the released weights).
// Llama-3-8B, Llama-2-7B: the models' safetensors indexes (also tests/test_params.cpp); Mistral-7B-v0.1:
// 7,241,732,096 (GGUF general.parameter_count of mistral-7b); Qwen2-7B: 7,615,616,512 (GGUF qwen2
// general.parameter_count; Qwen2.5-7B has the same shape); Gemma-7B: 8,537,680,896 (keras-hub gemma_7b_en preset
// metadata "params"); GPT-2: 124,439,808 (GPT2LMHeadModel printout: wte 50257×768, wpe 1024×768, 12 × 7,087,872);
// Pythia-1.4B (GPT-NeoX): 1,414,647,808 (GPTNeoXForCausalLM, EleutherAI's Pythia tables).
const char* kLlama3_8b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256, "attention_bias": false})";

const char* kLlama2_7b = R"({
  "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false, "vocab_size": 32000})";

const char* kMistral_7b = R"({
  "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "sliding_window": 4096, "tie_word_embeddings": false, "vocab_size": 32000})";

const char* kQwen2_7b = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
  "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "use_sliding_window": false,
  "vocab_size": 152064})";

const char* kGemma_7b = R"({
  "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "head_dim": 256, "hidden_act": "gelu",
  "hidden_size": 3072, "intermediate_size": 24576, "max_position_embeddings": 8192, "num_attention_heads": 16,
  "num_hidden_layers": 28, "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "vocab_size": 256000})";

const char* kGpt2 = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "embd_pdrop": 0.1,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
  "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257})";

const char* kPythia_1_4b = R"({
  "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 2048,
  "intermediate_size": 8192, "max_position_embeddings": 2048, "num_attention_heads": 16,
  "num_hidden_layers": 24, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
  "use_parallel_residual": true, "vocab_size": 50304})";

// tiiuae/falcon-7b: fused query_key_value 4544 → 4544 + 2·64 (multi-query), no biases, one LayerNorm per layer.
const char* kFalcon_7b = R"({
  "alibi": false, "apply_residual_connection_post_layernorm": false, "architectures": ["FalconForCausalLM"],
  "bias": false, "hidden_size": 4544, "model_type": "falcon", "multi_query": true,
  "new_decoder_architecture": false, "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": true,
  "vocab_size": 65024})";

int64_t total_of(const char* text) { return count_params(parse_hf_config(text, "config.json").spec).total; }

std::string error_of(const std::string& text, const std::string& origin = "config.json") {
  try {
    parse_hf_config(text, origin);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardplan_hf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path;
}

// OLMo-2-1124-7B's config.json (allenai/OLMo-2-1124-7B): 7,298,617,344 parameters, as OLMo-core builds it
// (tests/test_params.cpp counts the olmo2-7b preset by hand to the same figure).
const char* kOlmo2_7b = R"({
  "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 500000, "attention_bias": false,
  "tie_word_embeddings": false, "vocab_size": 100352})";

}  // namespace

TEST_SUITE("hf config") {
  TEST_CASE("OLMo 2: full-width Q/K norms, the OLMo-core preset's count") {
    CHECK(total_of(kOlmo2_7b) == 7'298'617'344);
    CHECK(total_of(kOlmo2_7b) == count_params(PresetStore::builtin().model("olmo2-7b")).total);
  }

  TEST_CASE("published totals, family by family") {
    CHECK(total_of(kLlama3_8b) == 8'030'261'248);
    CHECK(total_of(kLlama2_7b) == 6'738'415'616);
    CHECK(total_of(kMistral_7b) == 7'241'732'096);
    CHECK(total_of(kQwen2_7b) == 7'615'616'512);    // q/k/v biases: 28 · (3584 + 2·512)
    CHECK(total_of(kGemma_7b) == 8'537'680'896);    // tied, head_dim 256 ≠ 3072/16
    CHECK(total_of(kGpt2) == 124'439'808);          // tied, learned positions, biases
    CHECK(total_of(kPythia_1_4b) == 1'414'647'808); // GPT-NeoX: biases, untied embed_out
  }

  TEST_CASE("Nemotron (relu2): a two-matrix squared-ReLU MLP, LayerNorm1P with bias; Nemotron-4 15B as its preset") {
    // Nemotron-4 15B's shape (arXiv 2402.16819 Table 1) as transformers' NemotronConfig writes it.
    const char* nemotron4_15b = R"({
      "architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "hidden_act": "relu2", "hidden_size": 6144,
      "intermediate_size": 24576, "max_position_embeddings": 4096, "num_attention_heads": 48,
      "num_hidden_layers": 32, "num_key_value_heads": 8, "norm_eps": 1e-05, "partial_rotary_factor": 0.5,
      "rope_theta": 10000, "tie_word_embeddings": false, "vocab_size": 256000})";
    const HfModel hf = parse_hf_config(nemotron4_15b, "nemotron4-15b.json", "");
    CHECK(hf.spec.mlp == MlpKind::squared_relu);
    CHECK(hf.spec.norm == NormKind::layernorm);
    CHECK(hf.spec.norm_bias);
    CHECK_FALSE(hf.spec.tied_embeddings);
    CHECK(count_params(hf.spec).total == count_params(PresetStore::builtin().model("nemotron4-15b")).total);
    // Minitron-8B's explicit head_dim 128 with 48 heads on hidden 4096: q is 6144 wide.
    const char* minitron = R"({"model_type": "nemotron", "hidden_size": 4096, "intermediate_size": 16384,
      "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 32,
      "vocab_size": 256000})";
    const ModelSpec m = parse_hf_config(minitron, "minitron.json", "").spec;
    CHECK(count_params(m).block.attn_weights == 4096 * 6144 * 2 + 2 * 4096 * 1024);
    CHECK(count_params(m).block.mlp_weights == 2 * 4096 * 16384);
  }

  TEST_CASE("Falcon-7B: everything but its shared LayerNorm, which the planner counts twice") {
    // 32 · (2·4544² + 2·4544·64 + 2·4544·18176 + one LayerNorm 2·4544) + 65024·4544 (tied) + 2·4544
    // = 6,921,720,704; the planner's blocks have two norms: + 32 · 2·4544 = 290,816, and says so in a note.
    const HfModel m = parse_hf_config(kFalcon_7b, "config.json");
    CHECK(m.spec.kv_heads == 1);
    CHECK(m.spec.ffn_hidden == 4 * 4544);
    CHECK(m.spec.tied_embeddings);
    CHECK(count_params(m.spec).total == 6'921'720'704 + 32 * 2 * 4544);
    REQUIRE(m.notes.size() == 1);
    CHECK(m.notes[0].find("+290816") != std::string::npos);
  }

  TEST_CASE("fields land where the planner expects them") {
    const HfModel q = parse_hf_config(kQwen2_7b, "config.json");
    CHECK(q.family == "qwen2");
    CHECK(q.block_class == "Qwen2DecoderLayer");
    CHECK(q.spec.qkv_bias);
    CHECK_FALSE(q.spec.out_bias);
    CHECK(q.spec.seq == kHfDefaultSeqCap);  // 131072 positions, capped, with a note
    CHECK(q.notes.size() == 1);
    const HfModel g = parse_hf_config(kGemma_7b, "config.json");
    CHECK(g.spec.head_dim == 256);
    CHECK(g.spec.mlp == MlpKind::swiglu);  // GeGLU: three matrices
    const HfModel gpt2 = parse_hf_config(kGpt2, "config.json");
    CHECK(gpt2.spec.position == PositionKind::learned);
    CHECK(gpt2.spec.seq == 1024);
    CHECK(gpt2.spec.ffn_hidden == 3072);  // n_inner absent: 4·n_embd
    CHECK(gpt2.spec.dropout);
    const HfModel l2 = parse_hf_config(kLlama2_7b, "somewhere/config.json");
    CHECK(l2.spec.name == "Llama-2-7b-hf");  // from _name_or_path
    CHECK(l2.spec.kv_heads == 32);
  }

  TEST_CASE("an architecture named only by 'architectures' is read; model_type wins when both are given") {
    std::string text = kMistral_7b;
    text.replace(text.find("\"model_type\": \"mistral\","), 24, "");
    CHECK(parse_hf_config(text, "config.json").family == "mistral");
  }

  TEST_CASE("unsupported architectures and missing fields are named") {
    const std::string mamba = R"({"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 768,
                                  "num_hidden_layers": 24, "vocab_size": 50280})";
    const std::string e1 = error_of(mamba, "mamba/config.json");
    CHECK(e1.rfind("mamba/config.json: model_type 'mamba'", 0) == 0);
    CHECK(e1.find("missing field 'num_attention_heads'") != std::string::npos);
    CHECK(e1.find("llama, mistral, qwen2, gemma, gpt_neox, gpt2, falcon") != std::string::npos);

    std::string no_ffn = kLlama3_8b;
    no_ffn.replace(no_ffn.find("\"intermediate_size\": 14336,"), 27, "");
    CHECK(error_of(no_ffn).find("'intermediate_size' is missing") != std::string::npos);

    CHECK(error_of(R"({"vocab_size": 10})").find("no 'model_type' and no 'architectures'") != std::string::npos);

    const std::string moe = R"({"model_type": "mistral", "num_local_experts": 8, "hidden_size": 4096})";
    CHECK(error_of(moe).find("'num_local_experts' (8)") != std::string::npos);

    std::string bad_type = kLlama3_8b;
    bad_type.replace(bad_type.find("4096,"), 5, "\"4096\",");
    CHECK(error_of(bad_type).find("'hidden_size' must be a positive integer, got \"4096\"") != std::string::npos);
  }

  TEST_CASE("malformed JSON: file, line and column in one line") {
    const std::string e = error_of("{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096,,\n}", "m/config.json");
    CHECK(e.rfind("m/config.json:3:", 0) == 0);
    CHECK(e.find("malformed JSON") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
    CHECK(error_of("[1, 2]").find("expected a JSON object") != std::string::npos);
  }

  TEST_CASE("cli: --hf-config predicts with the imported model; bad files give one error line") {
    const auto path = write_temp("config.json", kLlama3_8b);
    const auto r = run_cli("predict --hf-config '" + path.string() + "' --gpus 8 --format json");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("\"params\": 8030261248") != std::string::npos);

    const auto broken = write_temp("broken.json", "{\"model_type\": \"llama\",");
    const auto b = run_cli("predict --hf-config '" + broken.string() + "' --gpus 8");
    CHECK(is_one_error_line(b));
    CHECK(b.err.find(broken.string()) != std::string::npos);

    const auto missing = run_cli("predict --hf-config /nonexistent/config.json --gpus 8");
    CHECK(is_one_error_line(missing));
    CHECK(missing.err.find("cannot read /nonexistent/config.json") != std::string::npos);

    const auto both = run_cli("predict --hf-config '" + path.string() + "' --preset llama3-8b");
    CHECK(is_one_error_line(both));
    CHECK(both.err.find("only one of --preset, --model and --hf-config") != std::string::npos);
  }
}
