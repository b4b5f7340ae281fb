// Parameter counts against published totals and hand-derived closed forms.
#include <doctest/doctest.h>

#include "io/preset_store.hpp"
#include "planner/model.hpp"
#include "planner/partition.hpp"

using namespace shardplan;

namespace {
const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}
int64_t total(const char* name) { return count_params(presets().model(name)).total; }
}  // namespace

TEST_SUITE("params") {
  TEST_CASE("Llama totals equal the published counts exactly") {
    CHECK(total("llama3-8b") == 8'030'261'248);    // Meta-Llama-3-8B model card / safetensors index
    CHECK(total("llama2-7b") == 6'738'415'616);    // Llama-2-7b-hf
    CHECK(total("llama2-13b") == 13'015'864'320);  // Llama-2-13b-hf
    CHECK(total("llama2-70b") == 68'976'648'192);  // Llama-2-70b-hf
    CHECK(total("llama3-70b") == 70'553'706'496);  // Meta-Llama-3-70B
  }

  TEST_CASE("Megatron GPT counts follow Narayanan et al. 2021 §5.1 plus the final LayerNorm") {
    // P = 12lh² + 13lh + (V + s)h (blocks with biases, tied embedding, learned positions) + 2h (final norm).
    for (const char* name : {"gpt-1.7b", "gpt-7.5b", "gpt-22b", "gpt-145.6b", "gpt-1t", "gpt3-175b"}) {
      CAPTURE(name);
      const ModelSpec m = presets().model(name);
      const int64_t l = m.layers, h = m.hidden, V = model_padded_vocab(m), s = m.seq;
      CHECK(count_params(m).total == 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h);
    }
  }

  TEST_CASE("Megatron GPT counts round to the paper's Table 1 figures") {
    const std::pair<const char*, double> table1[] = {
        {"gpt-1.7b", 1.7e9},    {"gpt-3.6b", 3.6e9},    {"gpt-7.5b", 7.5e9},    {"gpt-18.4b", 18.4e9},
        {"gpt-39.1b", 39.1e9},  {"gpt-76.1b", 76.1e9},  {"gpt-145.6b", 145.6e9}, {"gpt-310.1b", 310.1e9},
        {"gpt-529.6b", 529.6e9}, {"gpt-1t", 1008e9}};
    for (const auto& [name, published] : table1) {
      CAPTURE(name);
      CHECK(static_cast<double>(total(name)) == doctest::Approx(published).epsilon(0.03));
    }
  }

  TEST_CASE("Nemotron-4: squared-ReLU MLPs of two matrices; the reports' embedding and non-embedding counts") {
    // Nemotron-4 15B report (arXiv 2402.16819) §2: 3.2 B embedding, 12.5 B non-embedding parameters;
    // Nemotron-4 340B report (arXiv 2406.11704) Table 1: 9.4 B embedding, 331.6 B non-embedding.
    for (const auto& [name, embedding, rest] :
         {std::tuple{"nemotron4-15b", 3.2e9, 12.5e9}, {"nemotron4-340b", 9.4e9, 331.6e9}}) {
      CAPTURE(name);
      const ModelSpec m = presets().model(name);
      CHECK(m.mlp == MlpKind::squared_relu);
      const ParamCounts p = count_params(m);
      CHECK(p.block.mlp_weights == 2 * m.hidden * m.ffn_hidden);
      const double emb = static_cast<double>(p.embedding + p.lm_head);
      CHECK(emb == doctest::Approx(embedding).epsilon(0.02));
      CHECK(static_cast<double>(p.total) - emb == doctest::Approx(rest).epsilon(0.005));
    }
  }

  TEST_CASE("the seed's CodeChat 8B: 40 blocks of 12h² (+ LayerNorms) and untied 32768-row embeddings") {
    const ModelSpec m = presets().model("8b");
    const ParamCounts p = count_params(m);
    CHECK(p.block.total() == 12 * 4096 * 4096 + 4 * 4096);
    CHECK(p.embedding == 32768 * 4096);
    CHECK(p.lm_head == 32768 * 4096);
    CHECK(p.total == 8'322'162'688);  // "≈ 8.3 B" in the seed article
  }

  TEST_CASE("OLMo 2's Q/K norms span the whole projections (qk_norm_full_width)") {
    // OLMo-core olmo_7B: untied 100,352 × 4096 embeddings; a block of 4h² attention, 3·h·11008 MLP, two norms of h
    // and the Q and K norms of h each (olmo_core/nn/attention.py: q_norm over d_model, k_norm over kv heads × 128).
    const int64_t h = 4096, block = 4 * h * h + 3 * h * 11008 + 2 * h + 2 * h;
    CHECK(total("olmo2-7b") == 2 * 100352 * h + 32 * block + h);
    CHECK(total("olmo2-7b") == 7'298'617'344);  // allenai/OLMo-2-1124-7B: 7.30 B
    // Head-wise norms (Qwen3's) would be 2 × 128 per layer instead of 2 × 4096.
    ModelSpec headwise = presets().model("olmo2-7b");
    headwise.qk_norm_full_width = false;
    CHECK(count_params(headwise).total == total("olmo2-7b") - 32 * (2 * h - 2 * 128));
  }

  TEST_CASE("GQA shrinks K and V; SwiGLU has three matrices") {
    ModelSpec m = presets().model("llama3-8b");
    const BlockParams gqa = count_params(m).block;
    CHECK(gqa.attn_weights == 4096 * 4096 * 2 + 2 * 4096 * 1024);
    CHECK(gqa.mlp_weights == 3 * 4096 * 14336);
    m.kv_heads = m.heads;
    CHECK(count_params(m).block.attn_weights == 4 * 4096 * 4096);
  }

  TEST_CASE("tied embeddings drop the LM head; vocab padding adds rows") {
    ModelSpec m = presets().model("8b");
    const int64_t untied = count_params(m).total;
    m.tied_embeddings = true;
    CHECK(count_params(m).total == untied - 32768 * 4096);
    m.vocab = 32000;
    m.vocab_pad_to = 128 * 8;
    CHECK(model_padded_vocab(m) == 32768);
  }

  TEST_CASE("pipeline stages sum to the whole model") {
    ModelSpec m = presets().model("llama3-8b");
    Strategy s;
    s.pp = 4;
    s.gpus = 4;
    int64_t sum = 0;
    for (const StageParams& st : partition_stages(m, s)) sum += st.total();
    CHECK(sum == count_params(m).total);
    // Tied embeddings with pp > 1: the last stage keeps a copy (Megatron's embedding group).
    m.tied_embeddings = true;
    sum = 0;
    for (const StageParams& st : partition_stages(m, s)) sum += st.total();
    CHECK(sum == count_params(m).total + count_params(m).embedding);
  }

  TEST_CASE("uneven pipeline splits give the remainder to the last stages") {
    CHECK(stage_layers(42, 4) == std::vector<int64_t>{10, 10, 11, 11});
    CHECK(stage_layers(40, 8) == std::vector<int64_t>(8, 5));
  }

  TEST_CASE("tensor parallelism splits matrices and replicates norms and row-parallel biases") {
    const ModelSpec m = presets().model("gpt-22b");
    const BlockParams b = count_params(m).block;
    const int64_t t = 8;
    // Split: weights and column-parallel biases; replicated: norms (4h) and row-parallel biases (2h).
    const int64_t split = b.attn_weights + b.attn_biases_split + b.mlp_weights + b.mlp_biases_split;
    const int64_t replicated = b.norms + b.attn_biases_replicated + b.mlp_biases_replicated;
    CHECK(block_params_per_tp_rank(m, t) == split / t + replicated);
    CHECK(replicated == 6 * m.hidden);
  }

  TEST_CASE("TP beyond kv_heads keeps one K/V head per rank") {
    const ModelSpec m = presets().model("llama3-70b");  // 8 KV heads of 128
    const int64_t per_rank16 = block_params_per_tp_rank(m, 16);
    const int64_t h = m.hidden, q = 64 * 128 / 16, kv = 1 * 128;
    CHECK(per_rank16 == h * q + 2 * h * kv + q * h + 3 * h * m.ffn_hidden / 16 + 2 * h);
  }
}
