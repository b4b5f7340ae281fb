// Time to train and cost (--tokens, --gpu-hour-price, --objective cost): the arithmetic exactly, the suffixes,
// and the figures in predict/plan output.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/cost.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;
using shardplan::test::is_one_error_line;
using shardplan::test::run_cli;

TEST_SUITE("cost") {
  TEST_CASE("token counts with suffixes") {
    CHECK(parse_token_count("2T") == 2e12);
    CHECK(parse_token_count("2t") == 2e12);
    CHECK(parse_token_count("300B") == 3e11);
    CHECK(parse_token_count("1.5M") == 1.5e6);
    CHECK(parse_token_count("0.3T") == 3e11);  // the suffix is an exponent, not a multiplication (0.3·1e12 ≠ 3e11)
    CHECK(parse_token_count("10K") == 1e4);
    CHECK(parse_token_count("1.5e12") == 1.5e12);
    CHECK(parse_token_count("4000000") == 4e6);
    for (const char* bad : {"", "T", "-2T", "2X", "1e3T", "inf", "nan", "0", "2 T T", "0x10"}) {
      CAPTURE(bad);
      CHECK_FALSE(parse_token_count(bad));
    }
  }

  TEST_CASE("days, GPU-hours and cost") {
    // 2e12 tokens at 400,000 tokens/s on 64 GPUs: 5e6 s = 57.87 days; 5e6·64/3600 = 88,888.9 GPU-hours.
    const auto e = estimate_training({2e12, 2.5}, 400'000.0, 64, 4'194'304);
    REQUIRE(e);
    CHECK(e->seconds == 5e6);
    CHECK(e->days == 2e12 / 400'000.0 / 86400);
    CHECK(e->gpu_hours == doctest::Approx(5e6 * 64 / 3600));
    CHECK(*e->cost == doctest::Approx(5e6 * 64 / 3600 * 2.5));
    CHECK(e->steps == 476'838);  // ceil(2e12 / 4 Mi tokens per step)
    CHECK_FALSE(estimate_training({2e12, {}}, 0.0, 64));
    CHECK_FALSE(estimate_training({2e12, {}}, 1e5, 64)->cost);
  }

  TEST_CASE("GPU-seconds per token: the cost objective's key") {
    CHECK(gpu_seconds_per_token(1000.0, 8) == 0.008);
    CHECK(std::isinf(gpu_seconds_per_token(0.0, 8)));
  }

  TEST_CASE("predict --tokens 2T: days = tokens / tokens_per_s / 86400 exactly, in JSON and table") {
    const auto r = run_cli("predict --preset llama3-8b --gpus 8 --tokens 2T --gpu-hour-price 2 --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(j.contains("training"));
    const auto& t = j["training"];
    const double tps = j["throughput"]["tokens_per_s"].get<double>();
    CHECK(t["tokens"].get<double>() == 2e12);
    CHECK(t["days"].get<double>() == 2e12 / tps / 86400);
    CHECK(t["gpu_hours"].get<double>() == doctest::Approx(2e12 / tps * 8 / 3600));
    CHECK(t["cost"].get<double>() == doctest::Approx(t["gpu_hours"].get<double>() * 2));
    const auto table = run_cli("predict --preset llama3-8b --gpus 8 --tokens 2T");
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("Time to train 2 T tokens:") != std::string::npos);
    // Without --tokens nothing changes.
    const auto plain = run_cli("predict --preset llama3-8b --gpus 8 --format json");
    CHECK_FALSE(nlohmann::json::parse(plain.out).contains("training"));
  }

  TEST_CASE("plan --objective cost ranks by GPU-hours and recommends the cheapest") {
    const auto r = run_cli("plan --preset llama3-8b --gpus 8 --tokens 300B --objective cost --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["objective"] == "cost");
    CHECK(j["recommended"] == 0);  // no simplicity allowance: the cheapest
    double previous = 0;
    for (const auto& c : j["candidates"]) {
      const double hours = c["training"]["gpu_hours"].get<double>();
      CHECK(hours >= previous);
      previous = hours;
    }
  }

  TEST_CASE("bad training flags: one error line") {
    CHECK(is_one_error_line(run_cli("predict --preset llama3-8b --gpus 8 --tokens 2X")));
    CHECK(is_one_error_line(run_cli("predict --preset llama3-8b --gpus 8 --gpu-hour-price 2")));
    CHECK(is_one_error_line(run_cli("predict --preset llama3-8b --gpus 8 --tokens 2T --gpu-hour-price -1")));
    const auto r = run_cli("plan --preset llama3-8b --gpus 8 --objective cost");
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--tokens") != std::string::npos);
  }
}
