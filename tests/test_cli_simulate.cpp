// `shardplan simulate` end to end: JSON fields, the trace file, and the error contract (bad input exit 2, an
// unwritable trace exit 1 with nothing written).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

using namespace shardplan::test;
namespace fs = std::filesystem;

TEST_SUITE("cli simulate") {
  TEST_CASE("json: step time, breakdown, peak with what is live, difference from the analytic prediction") {
    const CliResult r = run_cli("simulate --preset 8b --gpus 16 --cluster dgx-h100 --tp 2 --pp 2 --global-batch 32 --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["config"]["pp"] == 2);
    CHECK(j["time"]["step_s"].get<double>() > 0);
    for (const char* k : {"compute_s", "exposed_comm_s", "bubble_s", "optimizer_s"}) CHECK(j["time"].contains(k));
    CHECK(j["time"]["bubble_s"].get<double>() > 0);  // 2 stages, 4 micro-batches
    CHECK(j["memory"]["peak_bytes"].get<int64_t>() > 0);
    CHECK(j["memory"]["live_at_peak"].size() > 3);
    CHECK(j["stages"].size() == 2);
    CHECK(j["analytic"]["time"]["step_s"].get<double>() > 0);
    CHECK(std::abs(j["difference_pct"]["step_s"].get<double>()) < 3.0);
  }

  TEST_CASE("--trace writes a Chrome trace; an unwritable path fails with exit 1 and leaves nothing") {
    const fs::path dir = fs::temp_directory_path() / ("shardplan_cli_sim_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path file = dir / "step.json";
    const CliResult ok = run_cli("simulate --preset 8b --gpus 8 --trace '" + file.string() + "'");
    CHECK(ok.exit_code == 0);
    std::ifstream in(file);
    const auto j = nlohmann::json::parse(in);
    CHECK(j["traceEvents"].size() > 100);
    CHECK(fs::directory_iterator(dir)->path() == file);  // no temporary file left beside it

    const fs::path bad = dir / "no-such-dir" / "step.json";
    const CliResult r = run_cli("simulate --preset 8b --gpus 8 --trace '" + bad.string() + "'");
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("error: ", 0) == 0);
    CHECK(r.err.find('\n') == r.err.size() - 1);
    CHECK(!fs::exists(bad.parent_path()));
    fs::remove_all(dir);
  }

  TEST_CASE("configurations that cannot be scheduled are bad input") {
    // Interleaving needs the micro-batches (here 1 per replica) in groups of pp.
    CHECK(is_one_error_line(run_cli("simulate --preset 8b --gpus 8 --pp 4 --vpp 2 --schedule interleaved --zero 0")));
    CHECK(is_one_error_line(run_cli("simulate --preset 8b --gpus 8 --format xml")));
  }
}
