// Megatron's model FLOP count (bench/megatron_flops.hpp), by hand and against the tables that print both their
// tokens/s and their model TFLOP/s: a wrong count would misread every row whose source reports only the latter.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "bench/megatron_flops.hpp"
#include "bench/published_runs.hpp"
#include "planner/moe.hpp"

using namespace shardplan;
using namespace shardplan::validation;

TEST_SUITE("megatron_flops") {
  TEST_CASE("Qwen3-30B-A3B at 4,096 tokens, by hand") {
    const ModelSpec m = PresetStore::builtin().model("qwen3-30b-a3b");
    // h 2048, 48 MoE layers of top-8 experts 768 wide (SwiGLU: 3 matrices), q 32·128 = 4096, K/V 4·128 = 512 each,
    // padded vocabulary 151,936. Per token, × 6 (forward + wgrad + dgrad, FMA):
    //   experts   2048 · 768 · 3 · 8 · 48              = 1,811,939,328
    //   attention (2048 · (4096 + 1024) + 4096 · 2048) · 48 =   905,969,664
    //   logits    2048 · 151936                        =   311,164,928
    //   → 3,029,073,920 · 6 = 18,174,443,520
    // core attention, causal: 4096 (q) · 48 layers · 4096 (s) · 6 = 4,831,838,208; the full score matrix doubles it.
    CHECK(megatron_flops_per_token(m, 4096, AttentionCount::causal) == doctest::Approx(23006281728.0).epsilon(1e-9));
    CHECK(megatron_flops_per_token(m, 4096, AttentionCount::full) == doctest::Approx(27838119936.0).epsilon(1e-9));
  }

  TEST_CASE("DeepSeek-V3's MTP module counts as a layer of the last layer's kind") {
    ModelSpec m = PresetStore::builtin().model("deepseek-v3");
    REQUIRE(m.mtp_layers == 1);
    const double with_mtp = megatron_flops_per_token(m, 4096, AttentionCount::causal);
    m.mtp_layers = 0;
    const double without = megatron_flops_per_token(m, 4096, AttentionCount::causal);
    // Megatron-Bridge 26.08 prints 260 G per token for the run with MTP (bench/data, MB-2608), 25.11's run without
    // it 249 G (MB-2511 GB200 without MTP: 782 TFLOP/s at 3,139 tokens/s).
    CHECK(with_mtp / 1e9 == doctest::Approx(260.0).epsilon(0.005));
    CHECK(without / 1e9 == doctest::Approx(249.1).epsilon(0.005));
  }

  TEST_CASE("the tables that print both figures agree with the count") {
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    int bridge = 0, nemo = 0, windowed = 0;
    for (const PublishedRun& r : runs.runs) {
      if (!(r.stated_model_tflops > 0)) continue;
      CAPTURE(r.source);
      CAPTURE(r.model.name);
      CAPTURE(r.cluster.gpu.name);
      const double implied = r.stated_model_tflops * 1e12 / r.measured;  // FLOPs per token the table used
      if (windowed_layers(r.model) > 0) {
        // GPT-OSS: Megatron-Bridge counts its windowed layers over their window since 26.06 (32.6 G a token); the
        // 27.2 G of the releases before is no count of Megatron's.
        if (r.source == "MB-2606" || r.source == "MB-2608") {
          CHECK(megatron_flops_per_token(r.model, r.strategy.seq, AttentionCount::causal_windowed) / implied ==
                doctest::Approx(1.0).epsilon(0.01));
          ++windowed;
        }
        continue;
      }
      if (r.source.rfind("MB-", 0) == 0) {
        // Megatron-Bridge's tables count the causal half, every release from 25.09 to 26.08. Their tokens/s have 3–4
        // digits; MB-2604.01's Llama 3 70B on H100 prints 1,664 tokens/s beside 731 TFLOP/s, 2.2 % apart.
        CHECK(megatron_flops_per_token(r.model, r.strategy.seq, AttentionCount::causal) / implied ==
              doctest::Approx(1.0).epsilon(0.025));
        ++bridge;
      } else if (r.source == "NEMO-2407") {
        // NeMo's 24.07 summary counts the whole score matrix (Megatron-Core r0.8.0's formula).
        CHECK(megatron_flops_per_token(r.model, r.strategy.seq, AttentionCount::full) / implied ==
              doctest::Approx(1.0).epsilon(0.01));
        ++nemo;
      }
    }
    CHECK(bridge >= 60);
    CHECK(nemo >= 12);
    CHECK(windowed == 3);
  }

  TEST_CASE("a row that prints only model TFLOP/s is read with its source's count") {
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    const PublishedRun* r = nullptr;
    for (const PublishedRun& x : runs.runs)
      if (x.source == "MLM-MOE-2606" && x.model.name == "deepseek-v3" && x.cluster.gpu.name == "gb200") r = &x;
    REQUIRE(r);
    CHECK(r->metric == Metric::mcore_model_tflops);
    CHECK(r->mcore_attention == AttentionCount::causal);
    CHECK(r->measured == doctest::Approx(1127.6));
    // A 16.26 s step (4,337 tokens/s on each of 256 GPUs, global batch 8192 × 4096): 259.99 G per token.
    Prediction p;
    p.time.step_s = 8192.0 * 4096.0 / (4337.0 * 256.0);
    CHECK(predicted_metric(*r, p) == doctest::Approx(1127.6).epsilon(0.001));
  }
}
