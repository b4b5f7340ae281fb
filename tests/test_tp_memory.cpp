// Tensor parallelism as PyTorch allocates it: the committed cross-check reports/tp-memory.json (bench/torch/compare.py
// --cases tp: torchtitan's TP plan with sequence parallelism and loss_parallel under FSDP2, tracked on fake tensors,
// torch 2.15), and the two DTensor behaviours it measured (framework.hpp tp_saves_gathered_inputs,
// loss_parallel_backward_bytes_per_logit).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/framework.hpp"
#include "planner/predict.hpp"
#include "tests/memory_check.hpp"

using namespace shardplan;
using test::h100;
using test::presets;

namespace {

Strategy titan_tp(int64_t ranks, int64_t tp, int zero, Recompute rc, int64_t seq, int64_t micro = 1) {
  Strategy s;
  s.framework = Framework::torchtitan;
  s.precision = Precision::amp_bf16;
  s.gpus = ranks;
  s.tp = tp;
  s.sp = true;
  s.dp = ranks / tp;
  s.zero = zero;
  s.recompute = rc;
  s.seq = seq;
  s.micro_batch = micro;
  s.global_batch = micro * s.dp;
  return s;
}

double allocated(const Prediction& p) { return test::tracked_allocation(p); }

}  // namespace

TEST_SUITE("tp memory") {
  TEST_CASE("DTensor saves the gathered linear inputs whole; Megatron-Core saves them scattered") {
    // Llama-3 8B, TP 4 with SP, 8192 tokens per micro-batch: the attention and MLP inputs are 2 B × 4096 per token;
    // DTensor keeps them whole (8192 B per token each), Megatron's layers a quarter (2048 B): 2 × 6144 B per token
    // per block more. Measured: 54,306 B per token per block (reports/tp-memory.json, no recompute).
    const ModelSpec m = presets().model("llama3-8b");
    const Strategy s = titan_tp(16, 4, 3, Recompute::none, 8192);
    FrameworkTraits dtensor = framework_traits(Framework::torchtitan);
    FrameworkTraits scattered = dtensor;
    scattered.tp_saves_gathered_inputs = false;
    REQUIRE(dtensor.tp_saves_gathered_inputs);
    CHECK_FALSE(framework_traits(Framework::megatron).tp_saves_gathered_inputs);
    const double tokens = 8192;
    CHECK(block_activation_bytes(m, s, dtensor) - block_activation_bytes(m, s, scattered) ==
          doctest::Approx(2 * 6144.0 * tokens));
    // Without SP the inputs are whole either way.
    Strategy no_sp = s;
    no_sp.sp = false;
    CHECK(block_activation_bytes(m, no_sp, dtensor) == doctest::Approx(block_activation_bytes(m, no_sp, scattered)));
  }

  TEST_CASE("torchao's float8 TP plan: the feed-forward saves its FP8 inputs (reports/float8-tp-saved.json)") {
    // PyTorch's own saved tensors of a torchtitan SwiGLU feed-forward at TP 8 with SP, 8192 tokens, eager, in bf16
    // and under torchao's float8 tensorwise TP plan (bench/torch/float8_tp_saved.py, torch 2.15, torchao 0.18): the
    // gathered input and w2's input are kept as their FP8 casts. shardplan's "mlp input" and "SwiGLU intermediates"
    // terms, per token on one rank, against them.
    const nlohmann::json j = test::report_json("float8-tp-saved.json");
    REQUIRE(j.contains("float8_tensorwise"));
    const ModelSpec m = presets().model("llama3-8b");
    REQUIRE(m.hidden == j.at("hidden").get<int64_t>());
    REQUIRE(m.ffn_hidden == j.at("ffn").get<int64_t>());
    Strategy s = titan_tp(8, j.at("tp").get<int64_t>(), 3, Recompute::none, j.at("tokens").get<int64_t>());
    const FrameworkTraits fw = framework_traits(Framework::torchtitan);
    auto ffn_bytes_per_token = [&](const Strategy& st) {
      double sum = 0;
      for (const ActTerm& t : block_activation_terms(m, st, fw)) {
        const std::string name = t.name;
        if (name != "mlp input" && name != "SwiGLU intermediates") continue;
        const bool split = t.split == ActSplit::tensor || (t.split == ActSplit::sequence && st.sp);
        sum += t.bytes_per_token / (split ? static_cast<double>(st.tp) : 1.0);
      }
      return sum;
    };
    CHECK(ffn_bytes_per_token(s) == doctest::Approx(j.at("bf16").at("bytes_per_token").get<double>()));
    s.fp8 = Fp8Recipe::tensorwise;
    CHECK(ffn_bytes_per_token(s) == doctest::Approx(j.at("float8_tensorwise").at("bytes_per_token").get<double>()));
  }

  TEST_CASE("loss_parallel holds 16 B per local logit at the cross-entropy backward, 12 without TP") {
    const FrameworkTraits t = framework_traits(Framework::torchtitan);
    Strategy s = titan_tp(16, 4, 3, Recompute::full, 8192);
    CHECK(loss_backward_bytes_per_logit(s, t) == 16);
    s.tp = 1;
    CHECK(loss_backward_bytes_per_logit(s, t) == 12);
    // Megatron-Core's vocab-parallel cross-entropy is its own kernel: unchanged by TP.
    Strategy mc = titan_tp(16, 4, 1, Recompute::full, 8192);
    mc.framework = Framework::megatron;
    const FrameworkTraits mt = framework_traits(Framework::megatron);
    CHECK(loss_backward_bytes_per_logit(mc, mt) == mt.loss_backward_bytes_per_logit);
  }

  TEST_CASE("PyTorch's own FSDP2 × TP allocations (reports/tp-memory.json): every case within 5 %") {
    const nlohmann::json rows = test::report_json("tp-memory.json");
    REQUIRE(rows.size() >= 5);
    double worst = 0;
    for (const nlohmann::json& r : rows) {
      const nlohmann::json& c = r["case"];
      CAPTURE(c.dump());
      REQUIRE(c.contains("tp"));
      const Prediction p = predict(test::case_model(presets(), c["model"]), test::case_strategy(c), h100());
      const double err = allocated(p) / r["measured"]["total"].get<double>() - 1;
      CHECK(std::fabs(err) < 0.05);
      worst = std::max(worst, std::fabs(err));
      // The tracker saw loss_parallel's 16 B per local logit wherever the loss ran (12 without TP).
      CHECK(r["derived"]["max_logit_bytes_per_element"].get<double>() == doctest::Approx(16.0));
    }
    MESSAGE("worst |error| ", 100 * worst, " %");
  }
}
