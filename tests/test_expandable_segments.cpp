// PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): the allocator's reserve stays in
// the peak (max_memory_reserved) but no longer decides whether a run fits (planner/memory.hpp fit_bytes); each
// runtime's launcher default, the flags, plan's line, and the launch files that carry the setting.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/framework.hpp"
#include "planner/memory.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy fsdp_8b(Framework fw, int64_t seq) {
  Strategy s;
  s.framework = fw;
  s.gpus = 8;
  s.dp = 8;
  s.zero = 3;
  s.micro_batch = 1;
  s.global_batch = 8;
  s.seq = seq;
  return s;
}

}  // namespace

TEST_SUITE("expandable segments") {
  TEST_CASE("the fit test leaves out the reserve only under expandable segments") {
    MemoryComponents c;
    c.params = 10e9;
    c.activations = 50e9;
    c.runtime = 1e9;
    c.fragmentation = 6e9;
    CHECK(fit_bytes(c, false) == doctest::Approx(67e9));
    CHECK(fit_bytes(c, true) == doctest::Approx(61e9));
    Candidate cand;
    cand.memory.peak = c;
    cand.capacity_bytes = 80'000'000'000;
    cand.max_hbm_fraction = 0.8;  // the line: 64 GB
    CHECK_FALSE(cand.within_safety());
    cand.expandable_segments = true;
    CHECK(cand.within_safety());
    CHECK(cand.fits());
  }

  TEST_CASE("each runtime's launcher default, and the strategy's override") {
    Strategy s = fsdp_8b(Framework::torchtitan, 8192);
    CHECK(effective_expandable_segments(s, framework_traits(Framework::torchtitan)));  // run_train.sh
    CHECK(effective_expandable_segments(s, framework_traits(Framework::fsdp)));        // --emit's torchrun.sh
    for (Framework f : {Framework::fsdp1, Framework::deepspeed, Framework::megatron})
      CHECK_FALSE(effective_expandable_segments(s, framework_traits(f)));
    s.expandable_segments = false;
    CHECK_FALSE(effective_expandable_segments(s, framework_traits(Framework::torchtitan)));
  }

  TEST_CASE("a Llama 3 8B run on 8 H100 over HBM only by the allocator reserve fits with expandable segments") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    // Full recomputation, sequences 256 tokens apart: the first that does not fit without expandable segments is over
    // by less than the reserve, so it fits with them; the peak (what max_memory_reserved shows) is the same either way.
    bool found = false;
    for (int64_t seq = 16384; seq <= 262144 && !found; seq += 256) {
      Strategy off = fsdp_8b(Framework::torchtitan, seq);
      off.recompute = Recompute::full;
      off.expandable_segments = false;
      Strategy on = off;
      on.expandable_segments = true;
      const Prediction p_off = predict(m, off, c), p_on = predict(m, on, c);
      REQUIRE(p_off.peak_bytes() == p_on.peak_bytes());
      if (p_off.fits()) continue;
      CAPTURE(seq);
      const double reserve = p_on.memory.peak_stage().peak.fragmentation;
      CHECK(reserve > 0);
      CHECK(p_on.fit_bytes() == doctest::Approx(static_cast<double>(p_on.peak_bytes()) - reserve).epsilon(1e-9));
      CHECK(p_on.fits() == (p_on.fit_bytes() <= static_cast<double>(p_on.memory.capacity_bytes)));
      found = p_on.fits();
      if (!found) break;  // the first that does not fit without them must fit with them
    }
    CHECK(found);
  }

  TEST_CASE("CLI: the flags, predict's JSON and fit rule, and the launch files") {
    const std::string base = "--preset llama3-8b --gpus 8 --cluster dgx-h100 --format json ";
    const test::CliResult titan = test::run_cli("predict " + base + "--framework torchtitan");
    REQUIRE(titan.exit_code == 0);
    const auto j = nlohmann::json::parse(titan.out);
    CHECK(j["config"]["expandable_segments"] == true);
    CHECK(j["memory"]["fit_rule"].get<std::string>().find("expandable segments") != std::string::npos);
    CHECK(j["memory"]["fit_bytes"].get<int64_t>() < j["memory"]["peak_bytes"].get<int64_t>());
    // Headroom is what can still be allocated: capacity less the bytes that decide the fit.
    CHECK(j["memory"]["headroom_bytes"].get<int64_t>() ==
          j["memory"]["capacity_bytes"].get<int64_t>() - j["memory"]["fit_bytes"].get<int64_t>());
    const test::CliResult off = test::run_cli("predict " + base + "--framework torchtitan --no-expandable-segments");
    REQUIRE(off.exit_code == 0);
    const auto k = nlohmann::json::parse(off.out);
    CHECK(k["config"]["expandable_segments"] == false);
    CHECK(k["memory"]["fit_bytes"] == k["memory"]["peak_bytes"]);

    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "shardplan-test-expandable";
    std::filesystem::remove_all(dir);
    REQUIRE(test::run_cli("plan --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework megatron --emit '" +
                          dir.string() + "'")
                .exit_code == 0);
    CHECK(test::read_all(dir / "megatron_args.sh").find("PYTORCH_CUDA_ALLOC_CONF") == std::string::npos);
    std::filesystem::remove_all(dir);
    REQUIRE(test::run_cli("plan --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework megatron "
                          "--expandable-segments --emit '" + dir.string() + "'")
                .exit_code == 0);
    CHECK(test::read_all(dir / "megatron_args.sh").find("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") !=
          std::string::npos);
    std::filesystem::remove_all(dir);
    REQUIRE(test::run_cli("plan --preset llama3-8b --gpus 8 --cluster dgx-h100 --framework torchtitan --emit '" +
                          dir.string() + "'")
                .exit_code == 0);
    CHECK(test::read_all(dir / "torchtitan.sh").find("expandable_segments:True") != std::string::npos);
    std::filesystem::remove_all(dir);
  }
}
