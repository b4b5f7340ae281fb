// Context parallelism's memory as torch's ring allocates it: PyTorch 2.15's own context_parallel and ring attention
// under FSDP2 on fake tensors (reports/cp-memory.json, bench/torch/compare.py --cases cp, bench/torch/cp_plan.py),
// against shardplan's moment of the most allocated; and the three facts it showed, by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/context_parallel.hpp"
#include "planner/framework.hpp"
#include "planner/memory_ledger.hpp"
#include "planner/memory_moments.hpp"
#include "planner/partition.hpp"
#include "planner/predict.hpp"
#include "tests/cli_runner.hpp"
#include "tests/memory_check.hpp"

using namespace shardplan;
using test::h100;
using test::presets;

namespace {

// torchtitan's Table 2 layout: Llama 3 8B on 8 ranks, one sequence of `seq` tokens over `cp` ranks, full
// checkpointing, K/V repeated to every query head (its 2024 Llama), blocks and root wrapped.
Strategy table2(int64_t cp, int64_t seq) {
  const nlohmann::json c = {{"impl", "titan"}, {"ranks", 8}, {"zero", 3}, {"recompute", "full"}, {"seq", seq},
                            {"micro_batch", 1}, {"cp", cp}, {"kv", "repeated"}};
  return test::case_strategy(c);
}

// The moment of a measured peak (fsdp2_mem.py's peak_moment): the loss's backward while logits are alive, else a
// block's backward.
MemoryPhase measured_phase(const nlohmann::json& mo) {
  if (mo["logits"].get<double>() > 0) return MemoryPhase::loss_backward;
  return mo["unit"].get<std::string>().find(".layers.") != std::string::npos ? MemoryPhase::block_backward
                                                                                 : MemoryPhase::optimizer_step;
}

double items_named(const std::vector<MemoryItem>& items, const std::string& prefix) {
  double sum = 0;
  for (const MemoryItem& it : items)
    if (it.what.rfind(prefix, 0) == 0) sum += it.bytes;
  return sum;
}

}  // namespace

TEST_SUITE("context-parallel memory") {
  TEST_CASE("PyTorch's own ring under FSDP2: every case within 1 %, the same moment") {
    const nlohmann::json rows = test::report_json("cp-memory.json");
    REQUIRE(rows.size() >= 10);
    double worst = 0;
    for (const nlohmann::json& r : rows) {
      CAPTURE(r["case"].dump());
      const Prediction p = predict(test::case_model(presets(), r["case"]["model"]), test::case_strategy(r["case"]), h100());
      const double err = test::tracked_allocation(p) / r["measured"]["total"].get<double>() - 1;
      CHECK(std::fabs(err) < 0.01);
      CHECK(p.memory.peak_stage().allocated_phase == measured_phase(r["peak_moment"]));
      worst = std::max(worst, std::fabs(err));
    }
    MESSAGE("worst |error| ", 100 * worst, " %");
  }

  TEST_CASE("the ring's K/V buffers live inside the attention: none at the loss's backward, so CP 1–8 peak alike") {
    // Table 2 runs 32,768 tokens a rank at every CP degree, and measured 83.9 / 84.2 / 84.0 / 84.5 GiB; the ring
    // gathers K and V for each attention call and frees them after it (torch _templated_ring_attention's rotater),
    // so the loss's backward, where these runs peak, holds none of them.
    const ModelSpec m = presets().model("llama3-8b");
    Strategy one = table2(1, 32768), eight = table2(8, 262144);
    one.rope_cache_per_layer = eight.rope_cache_per_layer = false;  // torchtitan's one table of 2024
    const Prediction p1 = predict(m, one, h100()), p8 = predict(m, eight, h100());
    CHECK(p8.memory.peak_stage().peak_phase == MemoryPhase::loss_backward);
    CHECK(items_named(p8.memory.peak_stage().items, "context-parallel K/V buffers") == 0);
    CHECK(test::tracked_allocation(p8) == doctest::Approx(test::tracked_allocation(p1)).epsilon(0.01));
    // Inside the attention's backward (sub-moment 1) they are there, whole.
    const FrameworkTraits fw = framework_traits(eight.framework);
    const StageParams st = stage_params(m, eight, 0);
    const memory_detail::StageInputs in = memory_detail::stage_inputs(m, eight, fw, st);
    const memory_detail::MomentLedger attn = memory_detail::moment_at(in, MemoryPhase::block_backward, 16, 1, true);
    const memory_detail::MomentLedger mlp = memory_detail::moment_at(in, MemoryPhase::block_backward, 16, 0, true);
    CHECK(items_named(attn.ledger.items_, "context-parallel K/V buffers") == doctest::Approx(cp_kv_buffer_bytes(m, eight)));
    CHECK(items_named(mlp.ledger.items_, "context-parallel K/V buffers") == 0);
  }

  TEST_CASE("torch's ring returns its output in [B, H, S, D] order: the out-projection's input is a copy, both kept") {
    // Llama 3 8B, no recomputation, 8,192 tokens a rank: under CP 2 a block keeps 2 B × 4,096 (the q width) a token
    // more than without CP at the same tokens a rank (measured: 176,264 against 168,072 B, reports/cp-memory.md);
    // Megatron's p2p ring returns Transformer Engine's own layout and keeps nothing more.
    const ModelSpec m = presets().model("llama3-8b");
    for (Framework f : {Framework::torchtitan, Framework::megatron}) {
      CAPTURE(to_string(f));
      const FrameworkTraits fw = framework_traits(f);
      Strategy base;
      base.framework = f;
      base.precision = Precision::amp_bf16;
      base.gpus = 8, base.dp = 8, base.zero = 3, base.recompute = Recompute::none;
      base.seq = 8192, base.micro_batch = 1, base.global_batch = 8;
      Strategy cp2 = base;
      cp2.cp = 2, cp2.dp = 4, cp2.seq = 16384, cp2.global_batch = 4;
      const double more = block_activation_bytes(m, cp2, fw) - block_activation_bytes(m, base, fw);
      CHECK(more == doctest::Approx(f == Framework::torchtitan ? 2.0 * 4096 * 8192 : 0.0));
      CHECK(cp_output_copied(cp2) == (f == Framework::torchtitan));
    }
  }

  TEST_CASE("--rope-cache: a table of the training length in every attention layer, or one; echoed; refused elsewhere") {
    // torchtitan since 02d24f017 (2026-06-05): each ComplexRoPE keeps a complex64 [max_context_length, head_dim / 2]
    // cache, whole on every CP rank (CP shards the positions that index it). 32 layers × 65,536 × 64 × 8 B = 1 GiB.
    const std::string base = "predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework torchtitan --cp 2 "
                             "--seq 65536 --recompute full --format json";
    const auto per_layer = test::run_cli(base), shared = test::run_cli(base + " --rope-cache shared");
    REQUIRE(per_layer.exit_code == 0);
    REQUIRE(shared.exit_code == 0);
    const auto jp = nlohmann::json::parse(per_layer.out), js = nlohmann::json::parse(shared.out);
    CHECK(jp["config"]["rope_cache"] == "per-layer");
    CHECK(js["config"]["rope_cache"] == "shared");
    const double table = 65536.0 * 64 * 8;
    CHECK(jp["memory"]["peak_bytes"].get<double>() - js["memory"]["peak_bytes"].get<double>() ==
          doctest::Approx(31 * table).epsilon(1e-6));
    test::check_refused("predict --preset 8b --gpus 8 --framework megatron --rope-cache shared", "--rope-cache");
    test::check_refused("predict --preset 8b --gpus 8 --framework torchtitan --rope-cache global", "--rope-cache");
  }
}
