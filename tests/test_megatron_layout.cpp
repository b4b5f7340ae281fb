// Megatron-Core's custom pipeline layout (--pp-layout, planner/megatron_layout.cpp): the text read as
// pipeline_parallel_layer_layout.py reads it, DeepSeek-V3's recipe layouts (Megatron-Bridge recipes/deepseek/h100/
// deepseek_v3.py) priced stage by stage, the simulator agreeing, the flags Megatron refuses, and the launch file.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/megatron_layout.hpp"
#include "planner/partition.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/predict.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

std::vector<int64_t> stage_blocks(const StageLayout& l) {
  return std::vector<int64_t>(l.blocks.begin(), l.blocks.begin() + l.stages);
}

// DeepSeek-V3 (61 blocks, one MTP layer) on 256 GB200 as Megatron-Bridge's 26.08 recipe runs it: PP 4 × VP 4, EP 64.
Strategy deepseek_pp4_vp4(const std::string& layout_text) {
  Strategy s;
  s.framework = Framework::megatron;
  s.gpus = 256;
  s.pp = 4;
  s.vpp = 4;
  s.dp = 64;
  s.ep = 64;
  s.zero = 1;
  s.schedule = Schedule::interleaved;
  s.micro_batch = 1;
  s.global_batch = 1024;
  s.seq = 4096;
  s.recompute = Recompute::selective;
  const LayoutParse parsed = parse_megatron_layout(layout_text);
  REQUIRE(parsed.error.empty());
  s.split.layout = parsed.layout;
  return s;
}

}  // namespace

TEST_SUITE("megatron layout") {
  TEST_CASE("the text unrolls as parse_str_to_list unrolls it") {
    // DeepSeek-V3's (4, 4) and (8, 2) layouts: E + 4 blocks, 14 stages of 4, 1 block + MTP + loss.
    const LayoutParse ds = parse_megatron_layout("Et*4|(t*4|)*14tmL");
    REQUIRE(ds.error.empty());
    std::vector<int64_t> want(16, 4);
    want.back() = 1;
    CHECK(stage_blocks(ds.layout) == want);
    CHECK(ds.layout.mtp_layers == 1);
    CHECK(ds.layout.mtp_stage == 15);
    // The documentation's example (docs/user-guide/features/pipeline_parallel_layout.md), commas ignored: the MTP layer
    // alone in stage 30, the loss alone in 31.
    const LayoutParse doc = parse_megatron_layout("Et*3|(tt|)*29,m|L");
    REQUIRE(doc.error.empty());
    CHECK(doc.layout.stages == 31 + 1);
    CHECK(doc.layout.blocks[0] == 3);
    CHECK(doc.layout.blocks[29] == 2);
    CHECK(doc.layout.blocks[30] == 0);
    CHECK(doc.layout.mtp_stage == 30);
    // Empty stages are allowed ("E||t|L").
    const LayoutParse empty = parse_megatron_layout("E||t|L");
    REQUIRE(empty.error.empty());
    CHECK(stage_blocks(empty.layout) == std::vector<int64_t>{0, 0, 1, 0});
    // The 25.09 H100 recipe's 32 stages: rank 0 of PP 8 holds 1 + 2 + 2 + 2 blocks.
    const LayoutParse h100 = parse_megatron_layout("Et|(tt|)*30mL");
    REQUIRE(h100.error.empty());
    CHECK(h100.layout.stages == 32);
    CHECK(h100.layout.blocks[31] == 0);
  }

  TEST_CASE("what Megatron-Core refuses in the text is one message naming it") {
    for (const char* bad : {"Et*4|t*4",       // no loss
                            "tE|L",           // the embedding must come first
                            "Et|mt|L",        // a block after the MTP layer
                            "Etm|tmL",        // MTP layers in two stages
                            "Et|(t|",         // an open group
                            "Et|t)|L",        // a stray ')'
                            "Ex|L",           // not a symbol
                            "E((t|)*2)*2L",   // groups do not nest
                            "Et*0|L",         // nothing to repeat
                            "E(t|)*|L",       // a group without its count
                            "*3Et|L",         // a count with nothing before it
                            "",               // empty
                            "Et|(t|)*99999999L"}) {  // unrolls beyond any model
      CAPTURE(std::string(bad));
      CHECK_FALSE(parse_megatron_layout(bad).error.empty());
    }
    CHECK(parse_megatron_layout(",,Et,|,L,").error.empty());
  }

  TEST_CASE("formatting folds equal stages and reads back to the same blocks") {
    CHECK(format_megatron_layout({5, 4, 4, 4, 2}, 1) == "Et*5|(t*4|)*3,t*2mL");
    CHECK(format_megatron_layout({1, 2, 0}, 0) == "Et|t*2|L");
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int64_t> blocks(static_cast<size_t>(2 + rng() % 40));
      for (int64_t& b : blocks) b = rng() % 4;  // runs of equal stages are frequent
      const int64_t mtp = rng() % 3;
      const LayoutParse back = parse_megatron_layout(format_megatron_layout(blocks, mtp));
      CAPTURE(format_megatron_layout(blocks, mtp));
      REQUIRE(back.error.empty());
      CHECK(stage_blocks(back.layout) == blocks);
      CHECK(back.layout.mtp_layers == mtp);
    }
  }

  TEST_CASE("DeepSeek-V3 on PP 4 × VP 4: ranks of 16/16/16/13 blocks, the MTP and the loss on the last") {
    const ModelSpec m = presets().model("deepseek-v3");
    REQUIRE(m.layers == 61);
    REQUIRE(m.mtp_layers == 1);
    const Strategy s = deepseek_pp4_vp4("Et*4|(t*4|)*14tmL");
    REQUIRE_FALSE(pipeline_layout_refusal(m, s));
    std::vector<int64_t> ranks;
    for (int64_t r = 0; r < s.pp; ++r) ranks.push_back(rank_layers(m, s, r));
    CHECK(ranks == std::vector<int64_t>{16, 16, 16, 13});
    // Rank 3 runs the virtual stages 3, 7, 11 and 15: three of 4 blocks and the last one's single block.
    CHECK(chunk_layers(m, s, 3, 3) == 1);
    CHECK(stage_params(m, s, 3).mtp > 0);
    CHECK(stage_params(m, s, 0).embedding > 0);
    CHECK(describe_stage_layers(m, s) == "16×3/13");
    // The first three blocks are dense (dense_layers 3): all on rank 0's first chunk.
    CHECK(stage_params(m, s, 0).moe_layers == 16 - 3);
    CHECK(stage_params(m, s, 1).moe_layers == 16);

    // The uneven split could not express it: 13 on the last rank is not a multiple of vpp 4.
    Strategy uneven = s;
    uneven.split = PipelineSplit{};
    uneven.split.last_layers = 13;
    CHECK(pipeline_layout_refusal(m, uneven));

    // The simulator plays the same stages: steps within tests/test_sim.cpp's 3 %.
    const ClusterSpec c = presets().cluster("gb200-nvl72-superpod");
    const sim::SimResult r = sim::simulate(m, s, c);
    CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.03);
  }

  TEST_CASE("the layout against the model and the strategy: counts, stages, runtime") {
    const ModelSpec m = presets().model("deepseek-v3");
    Strategy s = deepseek_pp4_vp4("Et*4|(t*4|)*14tmL");
    auto refusal_names = [&](const Strategy& st, const std::string& words) {
      const auto why = pipeline_layout_refusal(m, st);
      REQUIRE(why);
      CAPTURE(*why);
      CHECK(why->find(words) != std::string::npos);
    };
    Strategy other = s;
    other.vpp = 2;
    refusal_names(other, "--vpp");
    other = deepseek_pp4_vp4("Et*4|(t*4|)*14tmL");
    other.pp = 3;
    other.vpp = 5;
    refusal_names(other, "does not divide");
    refusal_names(deepseek_pp4_vp4("Et*4|(t*4|)*14ttmL"), "62 transformer blocks");
    refusal_names(deepseek_pp4_vp4("Et*4|(t*4|)*14tL"), "MTP");
    // The MTP layer in a stage of its own: Megatron runs it (mtp_standalone), shardplan prices MTP beside the loss.
    refusal_names(deepseek_pp4_vp4("Et*5|(t*4|)*12,t*8|m|L"), "beside the loss");
    other = s;
    other.framework = Framework::torchtitan;
    refusal_names(other, "--framework megatron");
    other = s;
    other.split.first_layers = 16;
    refusal_names(other, "cannot be combined");
  }

  TEST_CASE("the search's own layout is the recipes' rule: DeepSeek-V3's layouts come out of it") {
    const ModelSpec m = presets().model("deepseek-v3");
    Strategy s = deepseek_pp4_vp4("Et*4|(t*4|)*14tmL");
    const StageLayout recipe44 = s.split.layout;
    s.split = PipelineSplit{};
    CHECK(recipe_style_layout(m, s) == recipe44);  // (4, 4)
    s.pp = 8;
    s.vpp = 2;
    CHECK(recipe_style_layout(m, s) == recipe44);  // (8, 2): the same 16 stages
    s.vpp = 4;
    CHECK(recipe_style_layout(m, s) == parse_megatron_layout("Et|(tt|)*30mL").layout);  // 25.09's H100 layout
    // No per-rank split runs 61 blocks on 4 × 4 under Megatron: the layout is the one candidate, and predict takes it.
    s.pp = 4;
    s.vpp = 4;
    PipelineSplit found[kMaxSplitCandidates];
    const int n = pipeline_split_candidates(m, s, found);
    REQUIRE(n == 1);
    CHECK(found[0].layout == recipe44);
    const test::CliResult r = test::run_cli(
        "predict --preset deepseek-v3 --cluster gb200-nvl72-superpod --gpus 256 --pp 4 --vpp 4 --ep 64 --framework "
        "megatron --global-batch 1024 --format json");
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["config"]["pipeline_split_rule"].get<std::string>().find("Et*4|(t*4|)*14,tmL") != std::string::npos);
    CHECK(j["config"]["pipeline"]["chunk_layers"][3][3] == 1);
    // plan's recommendation names the split with the flag that gives predict the same one.
    const test::CliResult planned = test::run_cli(
        "plan --preset deepseek-v3 --cluster gb200-nvl72-superpod --gpus 256 --pp 4 --vpp 4 --tp 1 --ep 64 --framework "
        "megatron --global-batch 1024 --simulate-top 0 --no-color");
    CAPTURE(planned.err);
    REQUIRE(planned.exit_code == 0);
    CHECK(planned.out.find("blocks per rank 16×3/13 (--pp-layout 'Et*4|(t*4|)*14,tmL')") != std::string::npos);
    // A model whose blocks the middle stages would overrun gets no layout.
    Strategy tiny = s;
    tiny.pp = 8;
    tiny.vpp = 8;  // 64 stages of ⌈61/64⌉ = 1: 62 in the middle alone
    CHECK_FALSE(recipe_style_layout(m, tiny));
  }

  TEST_CASE("predict, plan and --emit take --pp-layout; bad input is one error line") {
    const std::string base = "--preset deepseek-v3 --cluster gb200-nvl72-superpod --gpus 256 --pp 4 --ep 64 "
                             "--framework megatron --micro-batch 1 --global-batch 1024 --seq 4096 ";
    const test::CliResult ok = test::run_cli("predict " + base + "--pp-layout 'Et*4|(t*4|)*14,tmL' --format json");
    CAPTURE(ok.err);
    REQUIRE(ok.exit_code == 0);
    const auto j = nlohmann::json::parse(ok.out);
    CHECK(j["config"]["vpp"] == 4);  // the layout's 16 stages over pp 4
    CHECK(j["config"]["schedule"] == "interleaved");
    CHECK(j["config"]["pipeline"]["chunk_layers"][3][3] == 1);
    CHECK(j["config"]["pipeline"]["layout"] == "Et*4|(t*4|)*14,tmL");
    for (const std::string& bad : {std::string("--pp-layout 'Et*4|(t*4|)*14tmL' --vpp 2"),
                                   std::string("--pp-layout 'Et*4|(t*4|)*14tmL' --pp-last-layers 13"),
                                   std::string("--pp-layout 'Et*4|(t*4|'"),
                                   std::string("--pp-layout 'Et*4|(t*4|)*13tmL'"),
                                   std::string("--pp-layout 'Et*4|(t*4|)*14tmL' --schedule 1f1b")})
      test::check_refused("predict " + base + bad, "--pp-layout");

    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "shardplan-test-pp-layout";
    std::filesystem::remove_all(dir);
    const test::CliResult planned =
        test::run_cli("plan " + base + "--pp-layout 'Et*4|(t*4|)*14tmL' --recompute selective --format json --emit '" +
                      dir.string() + "'");
    CAPTURE(planned.err);
    REQUIRE(planned.exit_code == 0);
    const auto p = nlohmann::json::parse(planned.out);
    const auto& rec = p["candidates"][p["recommended"].get<size_t>()];
    CHECK(rec["config"]["vpp"] == 4);
    const std::string args = test::read_all(dir / "megatron_args.sh");
    CHECK(args.find("--pipeline-model-parallel-layout 'Et*4|(t*4|)*14,tmL'") != std::string::npos);
    // arguments.py: at most one of the layout and the virtual-stage flags.
    CHECK(args.find("--num-virtual-stages-per-pipeline-rank") == std::string::npos);
    std::filesystem::remove_all(dir);
  }
}
