// `shardplan plan` end to end: the seed's case as a table and as the contract's JSON, one error line for what
// cannot be planned, and deterministic output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

using shardplan::test::is_one_error_line;
using shardplan::test::run_cli;

namespace {

// The output without the line that carries the (timing-dependent) "search_ms".
std::string without_search_ms(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (line.find("\"search_ms\"") == std::string::npos) out += line + "\n";
  return out;
}

// The line of a table output that starts (after spaces) with `prefix`.
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, prefix.size(), prefix) == 0) return line;
  }
  return "";
}

}  // namespace

TEST_SUITE("cli plan") {
  TEST_CASE("the seed's case as a table: a recommendation, and DDP does not fit") {
    const auto r = run_cli("plan --preset 8b --gpus 8");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("Recommended:") != std::string::npos);
    const std::string ddp = line_starting(r.out, "DDP:");
    CAPTURE(r.out);
    REQUIRE_FALSE(ddp.empty());
    CHECK(ddp.find("does not fit") != std::string::npos);
    CHECK(ddp.find("model states") != std::string::npos);
    // No cluster given: the a800x8 default is announced.
    CHECK(r.out.find("a800x8") != std::string::npos);
  }

  TEST_CASE("the seed's case as JSON: the contract's fields") {
    const auto r = run_cli("plan --preset 8b --gpus 8 --cluster a800x8 --precision pure-bf16 --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(j.contains("candidates"));
    REQUIRE(j["candidates"].is_array());
    REQUIRE_FALSE(j["candidates"].empty());
    double previous_tokens = INFINITY;
    for (const auto& c : j["candidates"]) {
      REQUIRE(c.is_object());
      const int64_t peak = c["memory"]["peak_bytes"].get<int64_t>();
      const int64_t capacity = c["memory"]["capacity_bytes"].get<int64_t>();
      CHECK(peak > 0);
      // Ranked: under the safety line by what decides a fit (the peak less the reserve under expandable segments).
      const int64_t fit = c["memory"]["fit_bytes"].get<int64_t>();
      CHECK(fit <= peak);
      CHECK(static_cast<double>(fit) <= 0.80 * static_cast<double>(capacity));
      CHECK(c["memory"]["fits"] == true);
      int64_t sum = 0;
      for (const auto& [name, bytes] : c["memory"]["components"].items()) sum += bytes.get<int64_t>();
      CHECK(sum == peak);
      CHECK(c["time"]["step_s"].get<double>() > 0);
      const double mfu = c["throughput"]["mfu"].get<double>();
      CHECK(mfu > 0);
      CHECK(mfu <= 1);
      // 128 sequences × 2048 tokens per step: the default global batch on 8 GPUs is capped at 32 Ki tokens per GPU
      // (planner/batch.hpp): 8 · 32768 / 2048 = 128, which every dp of 8 GPUs divides.
      CHECK(c["config"]["global_batch"] == 128);
      CHECK(c["throughput"]["tokens_per_s"].get<double>() * c["time"]["step_s"].get<double>() ==
            doctest::Approx(128.0 * 2048));
      CHECK(c["config"]["tp"].get<int64_t>() * c["config"]["pp"].get<int64_t>() * c["config"]["dp"].get<int64_t>() == 8);
      // Best first: by the simulated step among the re-ranked (--simulate-top, default 3), analytic after them.
      if (c.contains("simulated")) continue;
      const double tokens = c["throughput"]["tokens_per_s"].get<double>();
      CHECK(tokens <= previous_tokens);
      previous_tokens = tokens;
    }
    for (size_t i = 1; i < j["candidates"].size(); ++i)
      if (j["candidates"][i].contains("simulated"))
        CHECK(j["candidates"][i - 1]["simulated"]["step_s"].get<double>() <=
              j["candidates"][i]["simulated"]["step_s"].get<double>());
    REQUIRE(j["recommended"].is_number_integer());
    const auto rec = j["recommended"].get<int64_t>();
    REQUIRE(rec >= 0);
    REQUIRE(rec < static_cast<int64_t>(j["candidates"].size()));
    const auto& chosen = j["candidates"][rec]["config"];
    CHECK(chosen["zero"].get<int>() >= 2);
    CHECK(chosen["tp"] == 1);
    CHECK(chosen["pp"] == 1);
    // Within 2 % of the fastest (both simulated: by the simulator).
    const char* by = j["candidates"][rec].contains("simulated") ? "simulated" : "throughput";
    CHECK(j["candidates"][rec][by]["tokens_per_s"].get<double>() >=
          0.98 * j["candidates"][0][by]["tokens_per_s"].get<double>());
    REQUIRE(j["rejected"].is_array());
    bool ddp_rejected = false;
    for (const auto& x : j["rejected"]) {
      CHECK(x.contains("config"));
      CHECK(x["reason"].is_string());
      CHECK_FALSE(x["reason"].get<std::string>().empty());
      if (x["config"]["zero"] == 0 && x["config"]["tp"] == 1 && x["config"]["pp"] == 1 && x["config"]["hsdp"] == 0) {
        ddp_rejected = true;
        CHECK(x["reason"].get<std::string>().find("model states") != std::string::npos);
      }
    }
    CHECK(ddp_rejected);
  }

  TEST_CASE("nothing fits: one error line that says so, exit 3") {
    const auto r = run_cli("plan --preset llama3-405b --gpus 8");
    CAPTURE(r.err);
    CHECK(r.exit_code == 3);  // valid input, no feasible plan (a typo is 2)
    CHECK(r.err.rfind("error: ", 0) == 0);
    CHECK(r.err.find('\n') == r.err.size() - 1);
    CHECK(r.err.find("fits") != std::string::npos);
    CHECK(r.out.empty());
  }

  TEST_CASE("bad --objective: one error line naming the flag") {
    const auto r = run_cli("plan --preset 8b --gpus 8 --objective speed");
    CAPTURE(r.err);
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--objective") != std::string::npos);
  }

  TEST_CASE("a global batch no fixed dp divides: one error line naming --global-batch") {
    const auto r = run_cli("plan --preset 8b --gpus 8 --dp 8 --global-batch 3");
    CAPTURE(r.err);
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--global-batch") != std::string::npos);
  }

  TEST_CASE("7 GPUs, 7 sequences: only tp 1 and pp·dp = 7 layouts, and one is recommended") {
    // 7 is prime and divides neither the 32 heads nor anything else: tp must be 1, (pp, dp) is (1, 7) or (7, 1).
    const auto r = run_cli("plan --preset 8b --gpus 7 --global-batch 7 --cluster a800x8 --format json");
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE_FALSE(j["candidates"].empty());
    for (const auto& c : j["candidates"]) {
      const auto& cfg = c["config"];
      CHECK(cfg["gpus"] == 7);
      CHECK(cfg["tp"] == 1);
      const int64_t pp = cfg["pp"].get<int64_t>(), dp = cfg["dp"].get<int64_t>();
      CHECK(((pp == 1 && dp == 7) || (pp == 7 && dp == 1)));
      CHECK(cfg["global_batch"] == 7);
    }
    const auto rec = j["recommended"].get<int64_t>();
    REQUIRE(rec < static_cast<int64_t>(j["candidates"].size()));
    // 16 B × 8.32 B / 7 ≈ 19 GB of ZeRO-3 states: plain sharded data parallelism fits and needs no pipeline.
    CHECK(j["candidates"][rec]["config"]["pp"] == 1);
    CHECK(j["candidates"][rec]["config"]["dp"] == 7);
  }

  TEST_CASE("--simulate-top: the best K re-ranked by the simulator, with both step times in the JSON") {
    const std::string base = "plan --preset llama3-8b --gpus 16 --cluster dgx-h100 --global-batch 64 --format json";
    const auto a = run_cli(base + " --simulate-top 0"), d = run_cli(base), k = run_cli(base + " --simulate-top 4");
    REQUIRE(a.exit_code == 0);
    REQUIRE(d.exit_code == 0);
    REQUIRE(k.exit_code == 0);
    const auto analytic = nlohmann::json::parse(a.out), def = nlohmann::json::parse(d.out),
               four = nlohmann::json::parse(k.out);
    // K = 0: the analytic order, nothing simulated.
    CHECK_FALSE(analytic.contains("simulate_top"));
    double previous = INFINITY;
    for (size_t i = 0; i < analytic["candidates"].size(); ++i) {
      const auto& c = analytic["candidates"][i];
      CHECK_FALSE(c.contains("simulated"));
      if (i >= 5) continue;  // the top 5 are ranked; a recommendation outside them is appended whatever its speed
      CHECK(c["throughput"]["tokens_per_s"].get<double>() <= previous);
      previous = c["throughput"]["tokens_per_s"].get<double>();
    }
    // The default is 3; --simulate-top 4 simulates 4.
    REQUIRE(def.contains("simulate_top"));
    CHECK(def["simulate_top"]["k"] == 3);
    CHECK(def["simulate_top"]["simulated"] == 3);
    CHECK(four["simulate_top"]["simulated"] == 4);
    for (const auto* j : {&def, &four}) {
      const size_t window = (*j)["simulate_top"]["simulated"].get<size_t>();
      const auto& cands = (*j)["candidates"];
      REQUIRE(cands.size() == analytic["candidates"].size());
      std::vector<int64_t> ranks;
      bool moved = false;
      for (size_t i = 0; i < window; ++i) {
        const auto& sim = cands[i]["simulated"];
        CHECK(sim["step_s"].get<double>() > 0);
        CHECK(sim["rank"] == i + 1);
        // The same candidate's analytic step, where the analytic order had it.
        const int64_t was = sim["analytic_rank"].get<int64_t>();
        ranks.push_back(was);
        moved = moved || was != static_cast<int64_t>(i + 1);
        CHECK(cands[i]["time"]["step_s"] == analytic["candidates"][was - 1]["time"]["step_s"]);
        CHECK(cands[i]["config"] == analytic["candidates"][was - 1]["config"]);
        // Simulated tokens/s = 64 sequences × 8192 tokens / simulated step.
        CHECK(sim["tokens_per_s"].get<double>() == doctest::Approx(64.0 * 8192 / sim["step_s"].get<double>()));
        CHECK(std::abs(sim["difference_pct"]["step_s"].get<double>()) < 10);
        if (i > 0) CHECK(cands[i - 1]["simulated"]["step_s"].get<double>() <= sim["step_s"].get<double>());
        // A candidate that moved says why.
        CHECK(cands[i].contains("rerank_note") == (was != static_cast<int64_t>(i + 1)));
      }
      // The window holds the analytic top `window`, re-ordered; nothing after it moved.
      std::sort(ranks.begin(), ranks.end());
      for (size_t i = 0; i < window; ++i) CHECK(ranks[i] == static_cast<int64_t>(i + 1));
      for (size_t i = window; i < cands.size(); ++i)
        if (!cands[i].contains("simulated")) CHECK(cands[i]["config"] == analytic["candidates"][i]["config"]);
      CHECK((*j)["simulate_top"]["order_changed"] == moved);
    }
    // The table shows both step times.
    const auto t = run_cli("plan --preset llama3-8b --gpus 16 --cluster dgx-h100 --global-batch 64");
    REQUIRE(t.exit_code == 0);
    CHECK(line_starting(t.out, "#").find("sim s") != std::string::npos);
    CHECK(t.out.find("--simulate-top 3") != std::string::npos);
    // --simulate-top takes 0 to 1000.
    CHECK(is_one_error_line(run_cli("plan --preset 8b --gpus 8 --simulate-top -1")));
  }

  TEST_CASE("deterministic: the same plan twice gives the same JSON (but for search_ms)") {
    const std::string cmd = "plan --preset llama3-8b --gpus 16 --cluster dgx-h100 --global-batch 64 --format json";
    const auto a = run_cli(cmd), b = run_cli(cmd);
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    CHECK(a.out.find("\"search_ms\"") != std::string::npos);
    CHECK(without_search_ms(a.out) == without_search_ms(b.out));
    CHECK(without_search_ms(a.out).size() > 1000);
    // The table is deterministic too, but for its "searched … in X ms" line.
    const auto ta = run_cli("plan --preset 8b --gpus 8"), tb = run_cli("plan --preset 8b --gpus 8");
    auto strip = [](const std::string& t) {
      std::istringstream in(t);
      std::string line, out;
      while (std::getline(in, line))
        if (line.find(" ms;") == std::string::npos) out += line + "\n";
      return out;
    };
    CHECK(strip(ta.out) == strip(tb.out));
  }
}
