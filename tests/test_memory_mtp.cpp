// torchtitan's multi-token prediction under FSDP2 (planner/framework.hpp torchtitan_mtp): the MTP layers as units of
// their own, the embedding's second use held through the backward, every depth's logits at the loss, the MTP layers
// never checkpointed. PyTorch's own allocations (reports/fsdp2-memory-mtp.json, bench/torch/compare.py --cases mtp),
// the terms by hand, and the simulator on the same cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/activations.hpp"
#include "planner/framework.hpp"
#include "planner/memory_moments.hpp"
#include "planner/partition.hpp"
#include "planner/predict.hpp"
#include "sim/simulate.hpp"
#include "tests/memory_check.hpp"

using namespace shardplan;
using test::h100;
using test::presets;

namespace {

ModelSpec with_mtp(const std::string& preset, int64_t mtp) {
  ModelSpec m = presets().model(preset);
  m.mtp_layers = mtp;
  return m;
}

Strategy titan(int64_t ranks, int zero, Recompute rc, int64_t seq) { return test::titan_strategy(ranks, zero, rc, seq); }

// The tracker's peak moment as shardplan names it: the loss (logits alive: its forward and backward are one moment
// to shardplan), the embedding's backward (its post-backward to shardplan), or the optimizer step.
MemoryPhase measured_phase(const nlohmann::json& mo) {
  if (mo["logits"].get<double>() > 0) return MemoryPhase::loss_backward;
  const std::string unit = mo["unit"].get<std::string>();
  if (unit.find("tok_embeddings") != std::string::npos && mo["phase"] == "backward") return MemoryPhase::root_post_backward;
  return MemoryPhase::optimizer_step;
}

double item_bytes(const StageMemory& st, const std::string& what) {
  double bytes = 0;
  for (const MemoryItem& item : st.items)
    if (item.what.find(what) != std::string::npos) bytes += item.bytes;
  return bytes;
}

}  // namespace

TEST_SUITE("torchtitan MTP memory") {
  TEST_CASE("PyTorch's allocations with torchtitan's MTP (reports/fsdp2-memory-mtp.json): within 1 %, the same moment") {
    const nlohmann::json rows = test::report_json("fsdp2-memory-mtp.json");
    REQUIRE(rows.size() >= 14);
    double worst = 0;
    int root_moments = 0, two_depths = 0;
    for (const nlohmann::json& r : rows) {
      const nlohmann::json& c = r["case"];
      CAPTURE(c.dump());
      REQUIRE(c.value("mtp", 0) >= 1);
      ModelSpec m = test::case_model(presets(), c["model"]);
      m.mtp_layers = c["mtp"];
      const Strategy s = test::case_strategy(c);
      const Prediction p = predict(m, s, h100());
      const double err = test::tracked_allocation(p) / r["measured"]["total"].get<double>() - 1;
      CHECK(std::fabs(err) < 0.01);
      worst = std::max(worst, std::fabs(err));
      CHECK(p.memory.peak_stage().allocated_phase == measured_phase(r["peak_moment"]));
      root_moments += measured_phase(r["peak_moment"]) == MemoryPhase::root_post_backward ? 1 : 0;
      two_depths += m.mtp_layers == 2 ? 1 : 0;
    }
    MESSAGE("worst |error| ", 100 * worst, " %");
    CHECK(root_moments >= 1);
    CHECK(two_depths >= 1);
  }

  TEST_CASE("the embedding's backward adds its two uses' gradients: the gathered unit and three bf16 copies, by hand") {
    // Llama 3 8B, ZeRO-3, full recompute, s2048 on 8 ranks: PyTorch peaks at that add (19.94 GiB); the embedding is
    // 128,256 × 4,096 parameters, 2 B each gathered and in every gradient.
    const ModelSpec m = with_mtp("llama3-8b", 1);
    const Prediction p = predict(m, titan(8, 3, Recompute::full, 2048), h100());
    const StageMemory& st = p.memory.peak_stage();
    REQUIRE(st.allocated_phase == MemoryPhase::root_post_backward);
    const double embedding = 128256.0 * 4096 * 2;
    // The allocated moment's components: the grads hold the three copies, the block's reduce-scatter input in flight
    // and every other unit's shard; the params the gathered embedding.
    CHECK(st.allocated.params == doctest::Approx(embedding));
    const double shards = (p.params.total + p.params.mtp - 128256.0 * 4096) * 4 / 8;
    const double block_rs = static_cast<double>(p.params.block.total()) * 4;
    CHECK(st.allocated.grads == doctest::Approx(3 * embedding + block_rs + shards).epsilon(1e-6));
  }

  TEST_CASE("from the MTP's backward on, each block's backward holds the gathered embedding and its first gradient") {
    const ModelSpec m = with_mtp("llama3-8b", 1);
    ModelSpec none = m;
    none.mtp_layers = 0;
    const double embedding = 128256.0 * 4096 * 2;
    for (int zero : {3, 2}) {
      CAPTURE(zero);
      const Strategy s = titan(8, zero, Recompute::none, 8192);
      const FrameworkTraits fw = framework_traits(Framework::torchtitan);
      const StageParams st = stage_params(m, s, 0), st0 = stage_params(none, s, 0);
      const MomentParts with = moment_parts(m, s, fw, st), without = moment_parts(none, s, fw, st0);
      CHECK(with.mtp_embed_grad == doctest::Approx(embedding));
      // ZeRO-3 gathers the unit again at the MTP's backward; ZeRO-2 never resharded it.
      CHECK(with.mtp_embed_gathered == doctest::Approx(zero == 3 ? embedding : 0.0));
      // The [final norm, LM head] unit holds no MTP layer; ZeRO-2 keeps the MTP layers gathered to their backward.
      CHECK(with.gathered_head_unit == doctest::Approx(without.gathered_head_unit));
      CHECK(with.gathered_mtp_unit == doctest::Approx(zero == 2 ? static_cast<double>(st.mtp) * 2 : 0.0));
    }
    // Megatron-Core's MTP has none of it (no FSDP2 units; its loss runs inside the forward).
    CHECK_FALSE(framework_traits(Framework::megatron).torchtitan_mtp);
  }

  TEST_CASE("torchtitan checkpoints model.layers only: its MTP layers keep every activation; Megatron's recompute") {
    const ModelSpec m = with_mtp("llama3-8b", 1);
    ModelSpec none = m;
    none.mtp_layers = 0;
    const FrameworkTraits titan_fw = framework_traits(Framework::torchtitan);
    const FrameworkTraits mcore_fw = framework_traits(Framework::megatron);
    const Strategy full = titan(8, 3, Recompute::full, 4096);
    Strategy kept = full;
    kept.recompute = Recompute::none;
    auto mtp_part = [&](const Strategy& s, const FrameworkTraits& fw) {
      return last_stage_extra_bytes(m, s, fw) - last_stage_extra_bytes(none, s, fw);
    };
    CHECK(mtp_part(full, titan_fw) == doctest::Approx(mtp_part(kept, titan_fw)));
    Strategy mcore = full;
    mcore.framework = Framework::megatron;
    mcore.zero = 1;
    Strategy mcore_kept = mcore;
    mcore_kept.recompute = Recompute::none;
    CHECK(mtp_part(mcore, mcore_fw) < 0.5 * mtp_part(mcore_kept, mcore_fw));
  }

  TEST_CASE("the loss at the last MTP depth's forward: every output's logits, by hand") {
    // Two depths, eager loss: at the last cross-entropy's forward the three outputs' bf16 logits (2 B), their three
    // log-softmax outputs (4 B) and the last one's fp32 upcast (4 B): 22 B a logit, more than the backward's 12 + 2 × 4.
    const ModelSpec m = with_mtp("llama3-8b", 2);
    const Strategy s = titan(8, 3, Recompute::full, 4096);
    const FrameworkTraits fw = framework_traits(Framework::torchtitan);
    const double elements = 4096.0 * 128256;
    CHECK(mtp_loss_forward_bytes(m, s, fw) == doctest::Approx(2 * 6 * elements));
    CHECK(mtp_loss_saved_bytes(m, s, fw) == doctest::Approx(2 * 4 * elements));
    const Prediction p = predict(m, s, h100());
    const StageMemory& st = p.memory.peak_stage();
    REQUIRE(st.allocated_phase == MemoryPhase::loss_backward);
    CHECK(st.allocated.logits == doctest::Approx(22 * elements));
    // Megatron computes each depth's loss inside the forward: no such moment.
    CHECK(mtp_loss_forward_bytes(m, s, framework_traits(Framework::megatron)) == 0);
  }

  TEST_CASE("the simulator plays the same moments with the same bytes") {
    const nlohmann::json rows = test::report_json("fsdp2-memory-mtp.json");
    for (const nlohmann::json& r : rows) {
      const nlohmann::json& c = r["case"];
      CAPTURE(c.dump());
      ModelSpec m = test::case_model(presets(), c["model"]);
      m.mtp_layers = c["mtp"];
      const sim::SimResult sim = sim::simulate(m, test::case_strategy(c), h100());
      const StageMemory& st = sim.analytic.memory.peak_stage();
      CHECK(sim.peak_stage().moment == st.peak_phase);
      CHECK(sim.peak_stage().peak_bytes == doctest::Approx(st.peak.total()).epsilon(0.005));
    }
  }
}
