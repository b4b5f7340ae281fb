// FP8 GEMMs (--fp8): peaks, casts per recipe and runtime, the copies Transformer Engine keeps, FSDP2's FP8
// all-gather, and the refusals (GPU without FP8, recipe a runtime lacks).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/compute_cost.hpp"
#include "planner/error.hpp"
#include "planner/fp8.hpp"
#include "planner/framework_support.hpp"
#include "planner/predict.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy llama8b(Framework fw, Fp8Recipe fp8) {
  Strategy s;
  s.framework = fw;
  s.gpus = s.dp = 8;
  s.zero = fw == Framework::megatron ? 1 : 3;
  s.precision = fw == Framework::megatron ? Precision::megatron_bf16 : Precision::amp_bf16;
  s.micro_batch = 1;
  s.global_batch = 16;
  s.seq = 8192;
  s.fp8 = fp8;
  return s;
}

}  // namespace

TEST_SUITE("fp8") {
  TEST_CASE("an FP8 GEMM runs at the FP8 peak: half the time of a large bf16 GEMM on H100") {
    const GpuSpec g = presets().gpu("h100-sxm");
    CHECK(peak_flops(g, DType::fp8) == doctest::Approx(1978.9e12));
    // 8192³: 1.1 TFLOP, compute-bound in both dtypes; the FP8 one moves 1 + 1 + 2 B per element, not 2 + 2 + 2.
    const GemmShape big{8192, 8192, 8192};
    CHECK(gemm_time_s(g, DType::fp8, big) == doctest::Approx(gemm_time_s(g, DType::bf16, big) / 2).epsilon(0.02));
    CHECK(peak_flops(presets().gpu("a100-80g"), DType::fp8) > 0);  // total even without FP8: validation refuses it
  }

  TEST_CASE("cast bytes of one linear layer, by runtime and recipe (hand-computed)") {
    // X [T×k] = 8192 × 4096 = 33,554,432 elements; W [k×n] = 4096 × 4096 = 16,777,216; dY [T×n] = 33,554,432.
    const double T = 8192, k = 4096, n = 4096, x = T * k, w = k * n, dy = T * n;
    Strategy s = llama8b(Framework::torchtitan, Fp8Recipe::tensorwise);
    s.compile = true;  // torchao under Inductor: 5 B per cast element; six casts (X, W forward; dY twice, W, X backward)
    Fp8CastBytes c = fp8_linear_cast_bytes(s, T, k, n, 4);
    CHECK(c.fwd == doctest::Approx(5 * (x + w)));
    CHECK(c.bwd == doctest::Approx(5 * (2 * dy + x + w)));
    s.compile = false;  // eager: abs, amax, mul, clamp, cast as five kernels, 17 B
    c = fp8_linear_cast_bytes(s, T, k, n, 4);
    CHECK(c.fwd == doctest::Approx(17 * (x + w)));
    s.compile = true;
    s.fp8_all_gather = true;  // the gathered weight is FP8 already: no weight casts in either pass
    c = fp8_linear_cast_bytes(s, T, k, n, 4);
    CHECK(c.fwd == doctest::Approx(5 * x));
    CHECK(c.bwd == doctest::Approx(5 * (2 * dy + x)));
    // Transformer Engine: fused cast-transpose once per operand (6 B), the weight's cast once per step of 4 micro-batches.
    const Strategy te = llama8b(Framework::megatron, Fp8Recipe::tensorwise);
    c = fp8_linear_cast_bytes(te, T, k, n, 4);
    CHECK(c.fwd == doctest::Approx(6 * (x + w / 4)));
    CHECK(c.bwd == doctest::Approx(6 * dy));
    CHECK(fp8_cached_weight_bytes_per_param(te) == 2);
    CHECK(fp8_cached_weight_bytes_per_param(s) == 0);
    CHECK(gathered_block_param_bytes(s) == 1);
  }

  TEST_CASE("FP8 makes the step faster; torchao keeps memory, Transformer Engine adds 2 B per block parameter") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    for (Framework fw : {Framework::torchtitan, Framework::megatron}) {
      CAPTURE(to_string(fw));
      const Prediction off = predict(m, llama8b(fw, Fp8Recipe::off), c);
      const Prediction on = predict(m, llama8b(fw, Fp8Recipe::tensorwise), c);
      CHECK(on.time.step_s < off.time.step_s);
      CHECK(on.time.step_s > 0.5 * off.time.step_s);  // attention, the LM head and casts stay
      const double extra = on.memory.peak_stage().peak.buffers - off.memory.peak_stage().peak.buffers;
      if (fw == Framework::megatron) {
        // 32 blocks × 218,112,000 parameters each on one rank (TP 1) × 2 B = 13,959,168,000 B.
        CHECK(extra == doctest::Approx(2.0 * 32 * 218'112'000));
      } else {
        CHECK(extra == doctest::Approx(0));
      }
    }
  }

  TEST_CASE("FSDP2's FP8 all-gather moves the blocks' weights in one byte: less data-parallel traffic") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy s = llama8b(Framework::torchtitan, Fp8Recipe::tensorwise);
    s.gpus = s.dp = 64;
    s.global_batch = 64;
    const Prediction bf16_gather = predict(m, s, c);
    s.fp8_all_gather = true;
    const Prediction fp8_gather = predict(m, s, c);
    CHECK(fp8_gather.time.dp_comm_total_s < bf16_gather.time.dp_comm_total_s);
  }

  TEST_CASE("refused with one line: no FP8 on the GPU, MXFP8 before Blackwell, a recipe the runtime lacks") {
    test::check_refused("predict --preset llama3-8b --gpus 8 --cluster dgx-a100-80g --fp8 tensorwise", "FP8 tensor cores");
    test::check_refused("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --fp8 mxfp8", "mxfp8");
    test::check_refused("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework megatron --fp8 rowwise",
                       "rowwise");
    test::check_refused("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework fsdp1 --fp8 tensorwise",
                       "--fp8 tensorwise");
    test::check_refused("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --fp8 rowwise --fp8-all-gather",
                       "--fp8-all-gather");
    test::check_refused("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --fp8 float4", "--fp8");
    // FP8 grouped expert GEMMs are not modelled: a mixture-of-experts model is refused rather than half-priced.
    test::check_refused("predict --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --fp8 tensorwise", "mixture of experts");
    test::check_refused("plan --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --fp8 tensorwise", "mixture of experts");
    test::check_refused("plan --preset llama3-8b --gpus 8 --cluster dgx-a100-80g --fp8 tensorwise", "FP8 tensor cores");
    // MXFP8 runs on Blackwell.
    const auto b200 = test::run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-b200 --framework megatron "
                                    "--fp8 mxfp8 --format json");
    CAPTURE(b200.err);
    REQUIRE(b200.exit_code == 0);
    CHECK(nlohmann::json::parse(b200.out)["config"]["fp8"] == "mxfp8");
  }

  TEST_CASE("plan keeps the recipe on every candidate and prints it") {
    const auto r = test::run_cli("plan --preset llama3-8b --gpus 16 --cluster dgx-h100 --framework torchtitan "
                                 "--fp8 tensorwise --format json");
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE_FALSE(j["candidates"].empty());
    for (const auto& cand : j["candidates"]) CHECK(cand["config"]["fp8"] == "tensorwise");
    const auto table = test::run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --fp8 tensorwise");
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("FP8 GEMMs (tensorwise)") != std::string::npos);
  }
}
