// Multi-token prediction as the runtimes run it: each MTP module's cross-entropy keeps its saved tensors until its
// backward, beside the main loss's (activations.hpp mtp_loss_saved_bytes), and torchtitan's MTP runs without a
// pipeline, context parallelism or the chunked loss (framework_support.hpp mtp_runs).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy layout(Framework fw, int64_t gpus, int64_t ep, int zero) {
  Strategy s;
  s.framework = fw;
  s.precision = Precision::amp_bf16;
  s.gpus = gpus;
  s.dp = gpus;
  s.ep = ep;
  s.zero = zero;
  s.micro_batch = 1;
  s.global_batch = gpus;
  s.seq = 4096;
  s.recompute = Recompute::full;
  return s;
}

// The peak stage's items whose description names the MTP modules' cross-entropy.
double mtp_loss_item(const StageMemory& st) {
  double bytes = 0;
  for (const MemoryItem& item : st.items)
    if (item.what.find("MTP module") != std::string::npos && item.what.find("cross-entropy") != std::string::npos)
      bytes += item.bytes;
  return bytes;
}

}  // namespace

TEST_SUITE("multi-token prediction") {
  TEST_CASE("each MTP module's cross-entropy keeps a logit-sized tensor until its backward, by hand") {
    const ModelSpec m = presets().model("deepseek-v3");
    REQUIRE(m.mtp_layers == 1);
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    Strategy s = layout(Framework::megatron, 256, 8, 1);
    // 4,096 tokens × 129,280 logits (DeepSeek-V3's vocabulary is a multiple of 128) × 4 B of fp32 softmax.
    const double elements = 4096.0 * 129280.0;
    CHECK(mtp_loss_saved_bytes(m, s, fw) == doctest::Approx(elements * 4));
    s.loss = LossKind::fused;  // Transformer Engine's: the bf16 logits
    CHECK(mtp_loss_saved_bytes(m, s, fw) == doctest::Approx(elements * 2));
    s.tp = 2;                  // vocabulary-parallel: half the logits a rank
    CHECK(mtp_loss_saved_bytes(m, s, fw) == doctest::Approx(elements));
    s.loss = LossKind::chunked;
    CHECK(mtp_loss_saved_bytes(m, s, fw) == doctest::Approx(elements / 2 * 4 / static_cast<double>(fw.loss_chunks)));
    ModelSpec two = m;
    two.mtp_layers = 2;
    CHECK(mtp_loss_saved_bytes(two, s, fw) == doctest::Approx(2 * mtp_loss_saved_bytes(m, s, fw)));
    ModelSpec none = m;
    none.mtp_layers = 0;
    CHECK(mtp_loss_saved_bytes(none, s, fw) == 0);
  }

  TEST_CASE("at the loss's backward the MTP cross-entropy sits beside the main one; predict and simulate agree") {
    const ModelSpec m = presets().model("deepseek-v3");
    ModelSpec without = m;
    without.mtp_layers = 0;
    const ClusterSpec c = presets().cluster("gb200-nvl72-superpod");
    // Megatron-Core (the ledger of parts) and torchtitan (the FSDP2 moments), each peaking at the loss.
    Strategy megatron = layout(Framework::megatron, 256, 64, 1);
    megatron.precision = Precision::megatron_bf16;
    Strategy titan = layout(Framework::torchtitan, 256, 64, 3);
    for (const Strategy& s : {megatron, titan}) {
      CAPTURE(std::string(to_string(s.framework)));
      const sim::SimResult r = sim::simulate(m, s, c);
      const StageMemory& st = r.analytic.memory.peak_stage();
      REQUIRE(st.peak_phase == MemoryPhase::loss_backward);
      const double saved = mtp_loss_saved_bytes(m, s, framework_traits(s.framework, c.gpu));
      CHECK(mtp_loss_item(st) == doctest::Approx(saved));
      // The same moment without MTP holds less by at least that (the MTP block's activations come off too).
      const Prediction p0 = predict(without, s, c);
      const StageMemory& st0 = p0.memory.stages.back();
      CHECK(mtp_loss_item(st0) == 0);
      CHECK(st.peak.total() - st0.peak.total() >= saved);
      // The simulator plays the same moment with the same bytes.
      CHECK(r.peak_stage().moment == MemoryPhase::loss_backward);
      CHECK(r.peak_stage().peak_bytes == doctest::Approx(st.peak.total()).epsilon(0.03));
    }
  }

  TEST_CASE("torchtitan's MTP runs without a pipeline, context parallelism or the chunked loss") {
    const ModelSpec m = presets().model("deepseek-v3");
    Strategy s = layout(Framework::torchtitan, 256, 8, 3);
    CHECK(mtp_runs(s, m));
    CHECK_FALSE(mtp_refusal(s, m));
    Strategy pp = s;
    pp.pp = 8, pp.dp = 32;
    CHECK_FALSE(mtp_runs(pp, m));
    REQUIRE(mtp_refusal(pp, m));
    CHECK(mtp_refusal(pp, m)->find("MTPDecoder.Config.update_from_config") != std::string::npos);
    CHECK(mtp_refusal(pp, m)->find("--mtp-layers 0") != std::string::npos);
    Strategy cp = s;
    cp.cp = 2, cp.dp = 128;
    CHECK_FALSE(mtp_runs(cp, m));
    Strategy chunked = s;
    chunked.loss = LossKind::chunked;
    CHECK_FALSE(mtp_runs(chunked, m));
    CHECK(mtp_refusal(chunked, m)->find("MTPDecoder.forward") != std::string::npos);
    // Without MTP, or under another runtime, the layouts run.
    ModelSpec without = m;
    without.mtp_layers = 0;
    CHECK(mtp_runs(pp, without));
    for (Framework f : {Framework::megatron, Framework::deepspeed, Framework::fsdp}) {
      Strategy other = pp;
      other.framework = f;
      CHECK(mtp_runs(other, m));
    }
  }

  TEST_CASE("plan under torchtitan offers no pipeline or CP for a model with MTP, and says why") {
    const ModelSpec m = presets().model("deepseek-v3");
    const ClusterSpec c = presets().cluster("gb200-nvl72-superpod");
    SearchSpace sp;
    sp.base = layout(Framework::torchtitan, 256, 1, 3);
    sp.base.seq = 65536;  // long enough for the search to try context parallelism
    sp.base.global_batch = 256;
    const SearchResult r = search_strategies(m, c, sp, 200);
    REQUIRE_FALSE(r.ranked.empty());
    for (const Candidate& cand : r.ranked) {
      CHECK(cand.strategy.pp == 1);
      CHECK(cand.strategy.cp == 1);
    }
    for (const Candidate& cand : r.families) CHECK(mtp_runs(cand.strategy, m));
    bool says_pipeline = false, says_cp = false;
    for (const NotRun& n : r.not_run) {
      says_pipeline |= n.what == "pipeline parallelism" && n.reason.find("MTP") != std::string::npos;
      says_cp |= n.what == "context parallelism" && n.reason.find("MTP") != std::string::npos;
    }
    CHECK(says_pipeline);
    CHECK(says_cp);
    // A fixed --pp is refused up front with the reason.
    SearchSpace fixed = sp;
    fixed.pp = 4;
    CHECK_THROWS_WITH_AS(search_strategies(m, c, fixed, 10), doctest::Contains("multi-token-prediction"), InputError);
    // Without MTP the pipelines come back.
    ModelSpec without = m;
    without.mtp_layers = 0;
    const SearchResult r0 = search_strategies(without, c, sp, 400);
    bool piped = false;
    for (const Candidate& cand : r0.families) piped |= cand.strategy.pp > 1 || cand.strategy.cp > 1;
    CHECK(piped);
  }

  TEST_CASE("the CLI: --mtp-layers overrides the model; refusals are one error line and exit 2") {
    // One shell for the runs (CONTRIBUTING.md, Tests): stdout and stderr together in each result's `out`.
    const std::string base = "predict --preset deepseek-v3 --cluster gb200-nvl72-superpod --gpus 256 --ep 8 "
                             "--recompute full ";
    const auto runs = test::run_cli_batch(
        base, {"--framework torchtitan --pp 8", "--framework torchtitan --cp 2 --seq 8192",
               "--framework torchtitan --loss chunked", "--framework torchtitan --mtp-layers -1",
               "--framework torchtitan --mtp-layers 65", "--framework torchtitan --pp 8 --mtp-layers 0 --format json",
               "--framework torchtitan --mtp-layers 2 --format json", "--framework torchtitan --format json",
               "--framework megatron --pp 8 --format json"});
    REQUIRE(runs.size() == 9);
    for (size_t i = 0; i < 5; ++i) {
      CAPTURE(i);
      CAPTURE(runs[i].out);
      CHECK(runs[i].exit_code == 2);
      CHECK(runs[i].out.rfind("error: ", 0) == 0);
      CHECK(runs[i].out.find('\n') == runs[i].out.size() - 1);
    }
    for (size_t i = 5; i < 9; ++i) REQUIRE(runs[i].exit_code == 0);
    auto mtp_params = [&](size_t i) { return nlohmann::json::parse(runs[i].out).at("model").at("mtp_params").get<int64_t>(); };
    CHECK(mtp_params(5) == 0);
    CHECK(mtp_params(6) == 2 * mtp_params(7));
    CHECK(mtp_params(8) == mtp_params(7));  // Megatron-Core pipelines MTP (its layers on the last stage)
  }
}
