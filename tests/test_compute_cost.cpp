// Compute cost model: GEMM roofline with tile/wave quantisation against measured throughput, flash attention,
// memory-bound work, edge cases.
#include <cmath>

#include <doctest/doctest.h>

#include <memory>

#include "io/preset_store.hpp"
#include "planner/compute_cost.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

double tflops(const GpuSpec& g, DType d, const GemmShape& s) { return s.flops() / gemm_time_s(g, d, s) / 1e12; }

}  // namespace

TEST_SUITE("compute cost") {
  TEST_CASE("peak throughput per dtype") {
    const GpuSpec h100 = presets().gpu("h100-sxm");
    CHECK(peak_flops(h100, DType::bf16) == doctest::Approx(989.4e12));
    CHECK(peak_flops(h100, DType::fp16) == doctest::Approx(989.4e12));
    // fp32 GEMMs run on CUDA cores (PyTorch's default has TF32 off): the fp32 peak, not tf32.
    CHECK(peak_flops(h100, DType::fp32) == doctest::Approx(66.9e12));
    // V100 has no bf16 (0): the planner rejects bf16 there; the cost model falls back to fp16, never 0.
    const GpuSpec v100 = presets().gpu("v100-32g");
    CHECK(peak_flops(v100, DType::bf16) == doctest::Approx(125e12));
    CHECK(std::isfinite(gemm_time_s(v100, DType::bf16, {4096, 4096, 4096})));
    CHECK(gemm_time_s(v100, DType::bf16, {4096, 4096, 4096}) > 0);
  }

  TEST_CASE("8192³ bf16 GEMM: H200 ≈ 790 TFLOP/s measured, A100 270–290") {
    // H200: 4096 tiles of 128×128 in 32 waves over 132 SMs; per wave 2·128·128·8192 / (989.4e12 · 0.84 / 132)
    //   = 42.6 µs + 1 µs → 1396 µs + 2 µs launch → 1.0995e12 / 1.398e-3 = 786 TFLOP/s.
    const double h200 = tflops(presets().gpu("h200"), DType::bf16, {8192, 8192, 8192});
    CHECK(h200 > 700);
    CHECK(h200 < 880);
    CHECK(h200 == doctest::Approx(790).epsilon(0.03));
    // A100: 38 waves over 108 SMs of 104.4 µs + 1 µs → 4.006 ms → 274 TFLOP/s.
    const double a100 = tflops(presets().gpu("a100-80g"), DType::bf16, {8192, 8192, 8192});
    CHECK(a100 > 250);
    CHECK(a100 < 300);
  }

  TEST_CASE("efficiency lies in (0, 1] and grows from 256³ to 8192³") {
    for (const char* name : {"a100-80g", "h100-sxm", "h200", "l40s", "rtx4090", "v100-32g"}) {
      const GpuSpec g = presets().gpu(name);
      for (DType d : {DType::bf16, DType::fp16, DType::fp32}) {
        double prev = 0;
        for (int64_t s = 256; s <= 8192; s *= 2) {
          const double e = gemm_efficiency(g, d, {s, s, s});
          CHECK(e > 0);
          CHECK(e <= 1);
          CHECK(e >= prev);
          prev = e;
        }
      }
    }
    // Ragged and degenerate shapes.
    const GpuSpec g = presets().gpu("h100-sxm");
    for (const GemmShape& s : {GemmShape{1, 1, 1}, GemmShape{3, 50000, 7}, GemmShape{100000, 1, 100000}}) {
      const double e = gemm_efficiency(g, DType::bf16, s);
      CHECK(e > 0);
      CHECK(e <= 1);
    }
    CHECK(gemm_time_s(g, DType::bf16, {0, 4096, 4096}) == 0.0);
    CHECK(gemm_efficiency(g, DType::bf16, {0, 4096, 4096}) == 1.0);
  }

  TEST_CASE("tile quantisation: one row past a multiple of 128 costs more per FLOP") {
    const GpuSpec g = presets().gpu("h200");
    const GemmShape even{128, 8192, 8192}, ragged{129, 8192, 8192};
    CHECK(gemm_efficiency(g, DType::bf16, ragged) < gemm_efficiency(g, DType::bf16, even));
    CHECK(gemm_time_s(g, DType::bf16, ragged) / ragged.flops() > gemm_time_s(g, DType::bf16, even) / even.flops());
  }

  TEST_CASE("wave quantisation: 133 tiles on 132 SMs is less efficient than 132") {
    const GpuSpec g = presets().gpu("h100-sxm");
    REQUIRE(g.sm_count == 132);
    const GemmShape full{12 * 128, 11 * 128, 4096};   // 132 tiles of 128×128: one full wave
    const GemmShape spill{7 * 128, 19 * 128, 4096};   // 133 tiles: a second wave with one tile in it
    CHECK(gemm_efficiency(g, DType::bf16, spill) < 0.9 * gemm_efficiency(g, DType::bf16, full));
  }

  TEST_CASE("a GEMV (m = 1) is memory-bound: time ≈ bytes / achievable HBM bandwidth") {
    for (const char* name : {"a100-80g", "h100-sxm", "h200"}) {
      const GpuSpec g = presets().gpu(name);
      const GemmShape s{1, 8192, 8192};
      const double bytes = 2.0 * (1.0 * 8192 + 8192.0 * 8192 + 1.0 * 8192);  // A, B, C in bf16
      const double t = gemm_time_s(g, DType::bf16, s);
      CHECK(t == doctest::Approx(bytes / (g.hbm_gbps * 1e9 * 0.85)).epsilon(0.08));  // + 2 µs launch
      CHECK(t == doctest::Approx(memory_bound_time_s(g, bytes) + 2e-6).epsilon(0.001));
    }
  }

  TEST_CASE("Llama-3-8B MLP up-projection (8192 tokens × 14336 × 4096) on H100") {
    // 7168 tiles in 55 waves (0.987 busy) of 2·128·128·4096 / 6.30e12 + 1 µs = 22.3 µs → 1.229 ms → 783 TFLOP/s.
    const double t = tflops(presets().gpu("h100-sxm"), DType::bf16, {8192, 14336, 4096});
    CHECK(t == doctest::Approx(783).epsilon(0.01));
    // A tensor-parallel shard with K = 512 loses the per-wave fill/drain: well below the large-GEMM rate.
    CHECK(tflops(presets().gpu("h100-sxm"), DType::bf16, {8192, 4096, 512}) < 0.8 * t);
  }

  TEST_CASE("fp32 GEMMs run at the fp32 peak") {
    const GpuSpec g = presets().gpu("a100-80g");
    const double t = tflops(g, DType::fp32, {8192, 8192, 8192});
    CHECK(t < 19.5);
    CHECK(t > 15);
  }

  TEST_CASE("flash attention: causal halves long sequences, backward is 2.5× the FLOPs") {
    const GpuSpec a100 = presets().gpu("a100-80g");
    const double full = flash_attention_forward_s(a100, DType::bf16, 1, 8192, 32, 128, false);
    const double causal = flash_attention_forward_s(a100, DType::bf16, 1, 8192, 32, 128, true);
    // 64 blocks of 128: the diagonal blocks are computed in full → (64 + 1) / 128 = 0.508 of the work.
    CHECK(causal / full == doctest::Approx(0.508).epsilon(0.01));
    // FA2 forward on A100, head_dim 128, 8k: 0.72 · 8192 / 8392 = 0.70 of 312 → ≈ 219 TFLOP/s (Dao 2023: ≤ 73 %).
    const double fwd_tflops = 4.0 * 8192 * 8192 * 32 * 128 / full / 1e12;
    CHECK(fwd_tflops == doctest::Approx(219).epsilon(0.02));
    // Backward: 2.5× the FLOPs at 0.62 instead of 0.72.
    const double bwd = flash_attention_backward_s(a100, DType::bf16, 1, 8192, 32, 128, false);
    CHECK((bwd - 2e-6) / (full - 2e-6) == doctest::Approx(2.5 * 0.72 / 0.62).epsilon(0.001));
    // Short sequences and small heads run further from peak (per FLOP).
    const double s512 = flash_attention_forward_s(a100, DType::bf16, 16, 512, 32, 128, false);
    CHECK(s512 / (16.0 * 512 * 512) > full / (8192.0 * 8192));
    CHECK(flash_attention_efficiency(a100, 8192, 64, false) < flash_attention_efficiency(a100, 8192, 128, false));
    // Hopper, causal, head_dim 128 at 8k (Shah et al. 2024, Fig. 5): FlashAttention-2 333 TFLOP/s of 989 = 0.337,
    // cuDNN 529 = 0.535; on Ampere both are FlashAttention-2.
    const GpuSpec h100 = presets().gpu("h100-sxm");
    CHECK(flash_attention_efficiency(h100, 8192, 128, false) == doctest::Approx(333.0 / 989.4).epsilon(0.01));
    CHECK(flash_attention_efficiency(h100, 8192, 128, false, AttentionKernel::cudnn) ==
          doctest::Approx(529.0 / 989.4).epsilon(0.01));
    CHECK(flash_attention_efficiency(a100, 8192, 128, false, AttentionKernel::cudnn) ==
          flash_attention_efficiency(a100, 8192, 128, false));
    // Degenerate inputs cost nothing.
    CHECK(flash_attention_forward_s(a100, DType::bf16, 0, 8192, 32, 128, true) == 0.0);
    CHECK(flash_attention_backward_s(a100, DType::bf16, 1, 8192, 0, 128, true) == 0.0);
  }

  TEST_CASE("a training step's attention keeps one share of its kernel's rate on every generation, not the GEMMs'") {
    // The attention efficiencies are the kernels' measured rates; the generations' fitted fractions (which differ:
    // Hopper's and Blackwell's) scale the GEMMs only, so the benchmark-over-training time ratio of a long attention
    // is the same on H100 and B200, while a GEMM's follows the generation.
    const GpuSpec h100 = presets().gpu("h100-sxm"), b200 = presets().gpu("b200");
    auto attention_share = [](const GpuSpec& g) {
      const double bench = flash_attention_forward_s(g, DType::bf16, 1, 32768, 32, 128, true, AttentionKernel::cudnn);
      return bench / flash_attention_forward_s(training_device(g), DType::bf16, 1, 32768, 32, 128, true,
                                               AttentionKernel::cudnn);
    };
    REQUIRE(sustained_tensor_fraction(h100) != doctest::Approx(sustained_tensor_fraction(b200)));
    CHECK(attention_share(h100) == doctest::Approx(attention_share(b200)).epsilon(1e-3));
    CHECK(attention_share(h100) > 0.5);
    CHECK(attention_share(h100) < 1.0);
    const GemmShape big{8192, 8192, 8192};
    CHECK(gemm_time_s(h100, DType::bf16, big) / gemm_time_s(training_device(h100), DType::bf16, big) ==
          doctest::Approx(sustained_tensor_fraction(h100)).epsilon(1e-2));
    // The fit's override moves it, on both alike.
    GpuSpec h100_half = h100;
    h100_half.attention_sustained_fraction = 0.5;
    CHECK(attention_share(h100_half) == doctest::Approx(0.5).epsilon(1e-3));
  }

  TEST_CASE("memory-bound work streams at 0.85 of HBM bandwidth") {
    const GpuSpec g = presets().gpu("h100-sxm");
    CHECK(memory_bound_time_s(g, 1e9) == doctest::Approx(1e9 / (3350e9 * 0.85)));
    CHECK(memory_bound_time_s(g, 0) == 0.0);
    CHECK(memory_bound_time_s(g, -1) == 0.0);
  }

  TEST_CASE("a calibration profile's measured rates price memory-bound work: the elementwise rate, else the copy") {
    GpuSpec g = presets().gpu("h100-sxm");
    auto cal = std::make_shared<GemmCalibration>();
    cal->memory_bytes_per_s = 20e9;  // a CPU rank's copy: 20 GB/s
    g.gemm_calibration = cal;
    CHECK(memory_bound_time_s(g, 1e9) == doctest::Approx(0.05));  // 1 GB / 20 GB/s, no efficiency factor on top
    cal->elementwise_bytes_per_s = 5e9;  // its AdamW pass: 5 GB/s
    CHECK(memory_bound_time_s(g, 1e9) == doctest::Approx(0.2));
  }
}

TEST_SUITE("power limit") {
  TEST_CASE("tensor throughput scales as the cube root of the power limit; memory-bound work does not") {
    GpuSpec g = PresetStore::builtin().gpu("h100-sxm");
    CHECK(g.tdp_w == 700);
    CHECK(power_limit_clock_factor(g) == 1.0);  // no limit given: the datasheet's
    const double full = gemm_time_s(g, DType::bf16, {8192, 8192, 8192});
    const double mem = memory_bound_time_s(g, 1e9);
    g.power_limit_w = 500;
    // (500 / 700)^(1/3) = 0.8939
    CHECK(power_limit_clock_factor(g) == doctest::Approx(0.8939).epsilon(1e-3));
    CHECK(gemm_time_s(g, DType::bf16, {8192, 8192, 8192}) > full / 0.8939 * 0.99);
    CHECK(memory_bound_time_s(g, 1e9) == mem);
    // The shipped 500 W torchtitan machine carries both figures.
    const GpuSpec tt = PresetStore::builtin().gpu("h100-96g-500w");
    CHECK(power_limit_clock_factor(tt) == doctest::Approx(0.8939).epsilon(1e-3));
  }

  TEST_CASE("a datasheet rate quoted at more power than the board has: GB200 against GB300 and B200") {
    const PresetStore& p = PresetStore::builtin();
    const GpuSpec gb200 = p.gpu("gb200"), gb300 = p.gpu("gb300"), b200 = p.gpu("b200");
    // GB200 and GB300 are both quoted at 2.5 PFLOP/s dense BF16, at 1,200 and 1,400 W.
    CHECK(gb200.bf16_tflops == gb300.bf16_tflops);
    CHECK(power_limit_clock_factor(gb300) == 1.0);
    CHECK(power_limit_clock_factor(gb200) == doctest::Approx(std::cbrt(1200.0 / 1400)).epsilon(1e-12));  // 0.950
    // The rule reproduces the 1,000 W B200's datasheet from the 1,400 W rate: 2.5 × (1000/1400)^(1/3) = 2.236.
    CHECK(2500 * std::cbrt(b200.tdp_w / gb200.full_clock_power_w) == doctest::Approx(b200.bf16_tflops).epsilon(0.01));
    // A power limit counts against the same full-clock power.
    GpuSpec limited = gb200;
    limited.power_limit_w = 1000;
    CHECK(power_limit_clock_factor(limited) == doctest::Approx(std::cbrt(1000.0 / 1400)).epsilon(1e-12));
    const std::string base = "name: g\nmemory_gib: 80\nbf16_tflops: 989\nfp16_tflops: 989\nfp32_tflops: 67\n"
                             "hbm_gbps: 3350\nsm_count: 132\nnvlink_gbps: 450\npcie_gbps: 64\n";
    CHECK_THROWS_WITH(parse_gpu_yaml(base + "full_clock_power_w: 900\n", "g.yaml"), doctest::Contains("tdp_w"));
    CHECK(parse_gpu_yaml(base + "tdp_w: 700\nfull_clock_power_w: 900\n", "g.yaml").full_clock_power_w == 900);
  }

  TEST_CASE("a power limit above the board's maximum, or without it, is refused naming the key") {
    const std::string base = "name: g\nmemory_gib: 80\nbf16_tflops: 989\nfp16_tflops: 989\nfp32_tflops: 67\n"
                             "hbm_gbps: 3350\nsm_count: 132\nnvlink_gbps: 450\npcie_gbps: 64\n";
    CHECK_THROWS_WITH(parse_gpu_yaml(base + "tdp_w: 700\npower_limit_w: 800\n", "g.yaml"),
                      doctest::Contains("power_limit_w"));
    CHECK_THROWS_WITH(parse_gpu_yaml(base + "power_limit_w: 500\n", "g.yaml"), doctest::Contains("tdp_w"));
    CHECK(parse_gpu_yaml(base + "tdp_w: 700\npower_limit_w: 500\n", "g.yaml").power_limit_w == 500);
  }
}
