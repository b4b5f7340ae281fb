// `shardplan predict` end to end: the contract's JSON, the seed's case, and one error line for bad input.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

using shardplan::test::is_one_error_line;
using shardplan::test::run_cli;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardplan_predict_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

const char* kModelYaml =
    "name: tiny\nlayers: 4\nhidden: 256\nheads: 8\nkv_heads: 8\nffn_hidden: 1024\nvocab: 1000\nseq: 128\n"
    "mlp: gelu\nnorm: layernorm\ntied_embeddings: true\n";

}  // namespace

TEST_SUITE("cli predict") {
  TEST_CASE("json carries every field of the contract, and components sum to the peak") {
    const auto r = run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["model"]["params"] == 8030261248);
    CHECK(j["model"].contains("params_per_rank"));
    for (const char* k : {"peak_bytes", "capacity_bytes", "fits", "components"}) CHECK(j["memory"].contains(k));
    int64_t sum = 0;
    for (const char* k : {"params", "grads", "master", "optimizer", "activations", "logits", "buffers", "runtime",
                          "fragmentation"}) {
      CAPTURE(k);
      REQUIRE(j["memory"]["components"].contains(k));
      sum += j["memory"]["components"][k].get<int64_t>();
    }
    CHECK(sum == j["memory"]["peak_bytes"].get<int64_t>());
    for (const char* k : {"step_s", "compute_s", "exposed_comm_s", "bubble_s", "optimizer_s"}) CHECK(j["time"].contains(k));
    for (const char* k : {"tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                          "mfu", "hfu"})
      CHECK(j["throughput"].contains(k));
    CHECK(j["config"]["dp"] == 8);
  }

  TEST_CASE("--loss unset: torchtitan with --compile compiles its loss (fused); otherwise the standard one") {
    const std::string base = "predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --format json --framework ";
    auto loss_of = [](const std::string& args) {
      const auto r = run_cli(args);
      REQUIRE(r.exit_code == 0);
      return nlohmann::json::parse(r.out)["config"]["loss"].get<std::string>();
    };
    CHECK(loss_of(base + "torchtitan --compile") == "fused");
    CHECK(loss_of(base + "torchtitan") == "standard");
    CHECK(loss_of(base + "fsdp --compile") == "standard");
    CHECK(loss_of(base + "torchtitan --compile --loss standard") == "standard");
    // The compiled loss keeps the bf16 logits and their bf16 gradient: 4 B per logit where the eager one holds 12.
    const auto eager = nlohmann::json::parse(run_cli(base + "torchtitan --compile --loss standard").out);
    const auto compiled = nlohmann::json::parse(run_cli(base + "torchtitan --compile").out);
    CHECK(compiled["memory"]["peak_bytes"].get<int64_t>() < eager["memory"]["peak_bytes"].get<int64_t>());
  }

  TEST_CASE("the seed's case shows the four ZeRO stages' model states") {
    const auto r = run_cli("predict --preset 8b --gpus 8 --cluster a800x8 --precision pure-bf16");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("99.87") != std::string::npos);  // DDP
    CHECK(r.out.find("41.61") != std::string::npos);  // ZeRO-1
    CHECK(r.out.find("27.05") != std::string::npos);  // ZeRO-2
    CHECK(r.out.find("12.48") != std::string::npos);  // ZeRO-3
    CHECK(r.out.find("fits") != std::string::npos);
    const auto ddp = run_cli("predict --preset 8b --gpus 8 --cluster a800x8 --precision pure-bf16 --zero 0");
    CHECK(ddp.out.find("DOES NOT FIT") != std::string::npos);
  }

  TEST_CASE("yaml, csv and markdown render") {
    CHECK(run_cli("predict --preset 2b --gpus 8 --format yaml").out.find("peak_bytes:") != std::string::npos);
    CHECK(run_cli("predict --preset 2b --gpus 8 --format csv").out.find("memory.peak_bytes,") != std::string::npos);
    CHECK(run_cli("predict --preset 2b --gpus 8 --format markdown").out.find("| **peak** |") != std::string::npos);
  }

  TEST_CASE("a model from a file") {
    const std::string file = write_temp("tiny.yaml", kModelYaml);
    const auto r = run_cli("predict --model '" + file + "' --gpu a100-80g --gpus 2 --format json");
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.out)["config"]["model"] == "tiny");
  }

  TEST_CASE("bad input: one error line naming the problem, exit 2") {
    const std::string bad_yaml = write_temp("bad.yaml", "name: x\nlayers: [1, 2\n");
    const std::string no_kv = write_temp("kv.yaml", std::string(kModelYaml).replace(
                                                        std::string(kModelYaml).find("kv_heads: 8"), 11, "kv_heads: 3"));
    const std::pair<std::string, std::string> cases[] = {
        {"predict --preset lama3-8b --gpus 8", "llama3-8b"},  // unknown preset lists the known ones
        {"predict --model '" + bad_yaml + "' --gpus 8", "bad.yaml:"},
        {"predict --model '" + no_kv + "' --gpus 8", "kv_heads"},
        {"predict --preset 8b --gpus 0", "--gpus"},
        {"predict --preset 8b --gpus 8 --micro-batch -1", "--micro-batch"},
        {"predict --preset 8b --gpus 24 --tp 3", "--tp 3"},
        {"predict --preset 8b --gpus 8 --dp 4", "--gpus (8) must equal"},
        {"predict --preset 2b --gpus 32 --pp 32", "--pp 32 exceeds"},
        {"predict --preset 8b --gpus 8 --global-batch 16 --micro-batch 3", "--micro-batch 3"},
        {"predict --preset 8b --gpus 8 --precision bf17", "--precision"},
        {"predict --preset 8b --gpus 8 --format xml", "--format"},
        {"predict --preset 8b --gpus 8 --zero 5", "--zero"},
        {"predict --preset 8b --gpus 8 --hsdp 3", "--hsdp"},
        {"predict --preset 8b --gpus 8 --cluster nowhere.yaml", "nowhere.yaml"},
        {"predict --preset 8b --gpus 8 --cluster dgx-2-v100 --precision amp-bf16", "bf16"},
        {"predict --gpus 8", "--preset"},
        {"predict --preset 8b --frobnicate", "frobnicate"},
        {"", "subcommand"},
    };
    for (const auto& [args, needle] : cases) {
      CAPTURE(args);
      const auto r = run_cli(args);
      CHECK(is_one_error_line(r));
      CHECK(r.err.find(needle) != std::string::npos);
      CHECK(r.out.empty());
    }
  }
}
