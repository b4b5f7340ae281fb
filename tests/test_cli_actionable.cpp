// Issue 16, "plans a user can act on", end to end through the real binary: the default global batch (one rule,
// always dividing over dp), advice that fits when nothing does (exit 3), and outputs that fit their tools.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

using nlohmann::json;
using shardplan::test::CliResult;
using shardplan::test::run_cli;

namespace {

json plan_json_of(const std::string& args) {
  const CliResult r = run_cli("plan " + args + " --format json");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return json::parse(r.out);
}

const json& recommended(const json& plan) { return plan["candidates"][plan["recommended"].get<size_t>()]; }

// Every candidate's batch is a whole number of micro-batches on every replica.
void check_batches_divide(const json& plan) {
  for (const json& c : plan["candidates"]) {
    const json& cfg = c["config"];
    const int64_t per_step = cfg["dp"].get<int64_t>() * cfg["micro_batch"].get<int64_t>();
    CHECK(cfg["global_batch"].get<int64_t>() % per_step == 0);
    CHECK(cfg["grad_accum"].get<int64_t>() * per_step == cfg["global_batch"].get<int64_t>());
  }
}

// report/parts.hpp secs(), restated: the figure as the report prints it.
std::string fmt_secs(double s) {
  char buf[32];
  if (s >= 100) std::snprintf(buf, sizeof buf, "%.1f", s);
  else if (s >= 1) std::snprintf(buf, sizeof buf, "%.2f", s);
  else std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

bool one_line(const std::string& err) {
  return err.rfind("error: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

}  // namespace

TEST_SUITE("issue 16: default global batch") {
  TEST_CASE("llama3-405b on 16000 H100: the batch meets dp 125/2000, not a power of two forcing pp 125") {
    // Target 1 Ki tokens per GPU (Llama 3 405B, Dubey et al. 2024 §3.4.1): 16000 · 1024 = 16,384,000 tokens / 8192
    // = 2000 sequences exactly. The old power-of-two 2048 left dp ∈ {1, 2, ..., 128}, so tp·pp had to carry the
    // factor 125 of 16000 = 2^7 · 125: pp 125 at 8.8 % MFU.
    const json plan = plan_json_of("--preset llama3-405b --gpus 16000 --cluster dgx-h100");
    CHECK(plan["global_batch"]["given"] == false);
    CHECK(plan["global_batch"]["target_tokens"] == 16384000);
    CHECK(plan["global_batch"]["target_sequences"] == 2000);
    CHECK(plan["global_batch"]["basis"].get<std::string>().find("Llama 3") != std::string::npos);
    const json& cfg = recommended(plan)["config"];
    CHECK(cfg["pp"] != 125);
    CHECK(cfg["global_batch"] == 2000);  // dp 2000 × 1 or dp 125 × 16: both exactly the target
    CHECK(recommended(plan)["throughput"]["mfu"].get<double>() > 0.20);
    check_batches_divide(plan);
    // No layout trains a larger batch than the target to win on throughput (dp 8000 would be 4 × the tokens).
    for (const json& c : plan["candidates"]) CHECK(c["config"]["dp"].get<int64_t>() <= 2000);
  }

  TEST_CASE("llama3-405b on 6000 H100 plans (it exited with an error) and says the rule in the table") {
    // 6000 · 1024 = 6,144,000 tokens / 8192 = 750 sequences.
    const json plan = plan_json_of("--preset llama3-405b --gpus 6000 --cluster dgx-h100");
    CHECK(plan["global_batch"]["target_sequences"] == 750);
    check_batches_divide(plan);
    const CliResult table = run_cli("plan --preset llama3-405b --gpus 6000 --cluster dgx-h100 --simulate-top 0");
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("--global-batch not given, so the default aims at 6.14 M tokens per step") != std::string::npos);
  }

  TEST_CASE("llama3-70b on 24 GPUs is not forced to 512 accumulation steps") {
    // Below 128 GPUs the target is capped at 32 Ki tokens per GPU: 24 · 32768 = 786,432 tokens / 8192 = 96 sequences
    // (the old 4 Mi tokens = 512 sequences, on dp 1 since 24 GPUs have no power-of-two dp above 8 with tp·pp = 3 …).
    const json plan = plan_json_of("--preset llama3-70b --gpus 24 --cluster dgx-h100");
    CHECK(plan["global_batch"]["target_sequences"] == 96);
    const json& cfg = recommended(plan)["config"];
    CHECK(cfg["global_batch"] == 96);  // every dp of 24 GPUs (24, 12, 6, 3) divides 96
    CHECK(cfg["grad_accum"].get<int64_t>() <= 32);
    check_batches_divide(plan);
  }

  TEST_CASE("the seed case on 8 GPUs: 128 sequences, at most 16 accumulation steps, not 128") {
    // 8 · 32768 = 262,144 tokens / 2048 = 128 sequences; dp 8 → 16 per replica.
    const json plan = plan_json_of("--preset 8b --gpus 8 --cluster a800x8");
    const json& cfg = recommended(plan)["config"];
    CHECK(cfg["global_batch"] == 128);
    CHECK(cfg["grad_accum"].get<int64_t>() * cfg["micro_batch"].get<int64_t>() == 16);
  }

  TEST_CASE("predict prices the batch plan chose for the same layout: one rule") {
    const json plan = plan_json_of("--preset llama3-70b --gpus 24 --cluster dgx-h100");
    const json& c = recommended(plan)["config"];
    const std::string flags = "--preset llama3-70b --gpus 24 --cluster dgx-h100 --tp " + c["tp"].dump() + " --pp " +
                              c["pp"].dump() + " --micro-batch " + c["micro_batch"].dump() + " --format json";
    const CliResult r = run_cli("predict " + flags);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const json p = json::parse(r.out);
    CHECK(p["config"]["global_batch"] == c["global_batch"]);
    CHECK(p["config"]["global_batch_rule"].get<std::string>().find("accumulation steps") != std::string::npos);
    // A given batch is kept as given, and then no rule is reported.
    const json given = json::parse(run_cli("predict " + flags + " --global-batch 48").out);
    CHECK(given["config"]["global_batch"] == 48);
    CHECK_FALSE(given["config"].contains("global_batch_rule"));
  }

  TEST_CASE("help says the rule, not predict's old micro-batch × dp, and no {false} noise") {
    for (const char* cmd : {"plan", "predict", "simulate"}) {
      const CliResult r = run_cli(std::string(cmd) + " --help");
      CHECK(r.exit_code == 0);
      CHECK(r.out.find("micro-batch * dp") == std::string::npos);
      CHECK(r.out.find("4 M tokens") != std::string::npos);
      CHECK(r.out.find("{false}") == std::string::npos);
      CHECK(r.out.find("--no-flash-attn") != std::string::npos);
    }
  }
}

TEST_SUITE("issue 16: advice that works") {
  TEST_CASE("nothing fits: exit 3, one line, and the change it names does fit") {
    // llama3-8b on 8 × RTX 4090 (24 GiB): amp-bf16 misses the 80 % line; pure-bf16 drops the 4 B/param fp32 master.
    const CliResult r = run_cli("plan --preset llama3-8b --gpu rtx4090 --gpus 8");
    CHECK(r.exit_code == 3);
    CHECK(one_line(r.err));
    CHECK(r.err.find("--precision pure-bf16 (") != std::string::npos);
    CHECK(r.err.find("smaller --global-batch") == std::string::npos);  // per-GPU memory does not depend on it
    CHECK(run_cli("plan --preset llama3-8b --gpu rtx4090 --gpus 8 --precision pure-bf16").exit_code == 0);
    // A typo is still 2.
    CHECK(run_cli("plan --preset llama3-8b --gpu rtx4090 --gpus 8 --precision bf17").exit_code == 2);
  }

  TEST_CASE("nothing fits on 1 GPU: the GPU count that fits, as a number, and it fits") {
    // 8b in amp-bf16: 16 B × 8.32 B parameters = 133 GB of model states on one 80 GiB A800.
    const CliResult r = run_cli("plan --preset 8b --gpus 1 --cluster a800x8");
    CHECK(r.exit_code == 3);
    CHECK(one_line(r.err));
    const auto at = r.err.find("--gpus ");
    REQUIRE(at != std::string::npos);
    const std::string gpus = r.err.substr(at + 7, r.err.find(' ', at + 7) - at - 7);
    CHECK(std::stoi(gpus) > 1);
    CHECK(run_cli("plan --preset 8b --cluster a800x8 --gpus " + gpus).exit_code == 0);
  }

  TEST_CASE("the GPU count named is the fewest whole nodes that fit: one node fewer does not") {
    // llama3-405b in amp-bf16: 16 B × 405.85 B = 6.5 TB of model states; on 80 GiB A800s under the 80 % line.
    const CliResult r = run_cli("plan --preset llama3-405b --gpus 8 --cluster a800x8");
    CHECK(r.exit_code == 3);
    const auto at = r.err.find("--gpus ");
    REQUIRE(at != std::string::npos);
    const int gpus = std::stoi(r.err.substr(at + 7));
    CHECK(gpus % 8 == 0);
    CHECK(run_cli("plan --preset llama3-405b --cluster a800x8 --gpus " + std::to_string(gpus)).exit_code == 0);
    CHECK(run_cli("plan --preset llama3-405b --cluster a800x8 --gpus " + std::to_string(gpus - 8)).exit_code == 3);
  }

  TEST_CASE("--offload-optimizer on a 24 GB card: model states offloaded, and not suggested again") {
    const CliResult p = run_cli("predict --preset llama3-8b --gpu rtx4090 --gpus 8 --framework deepspeed "
                                "--offload-optimizer --format json");
    REQUIRE_MESSAGE(p.exit_code == 0, p.err);
    const json j = json::parse(p.out);
    // ZeRO-3 on 8 ranks with the optimizer on the host: bf16 params + bf16 grads = 4 B × 8,030,261,248 / 8 on the GPU.
    const json& by_zero = j["memory"]["model_states_by_zero"];
    CHECK(by_zero[3]["bytes"].get<double>() == doctest::Approx(4.0 * 8030261248 / 8).epsilon(1e-6));
    CHECK(j["memory"]["components"]["optimizer"] == 0);
    CHECK(j["memory"]["components"]["master"] == 0);
    const CliResult t = run_cli("predict --preset llama3-8b --gpu rtx4090 --gpus 8 --framework deepspeed --offload-optimizer");
    CHECK(t.out.find("master weights and optimizer states are on the host") != std::string::npos);
    // FSDP2 cannot offload the optimizer alone (framework_support.cpp): with --offload-optimizer given, the advice
    // is not --offload-optimizer again but DeepSpeed's ZeRO-Offload, and that advice fits.
    const CliResult plan = run_cli("plan --preset llama3-8b --gpu rtx4090 --gpus 8 --offload-optimizer");
    CHECK(plan.exit_code == 3);
    CHECK(one_line(plan.err));
    CHECK(plan.err.find("--framework deepspeed --offload-optimizer (ZeRO-3 + TP + offload") != std::string::npos);
    CHECK(plan.err.find("; --offload-optimizer (") == std::string::npos);
    CHECK(plan.err.find("again): --offload-optimizer (") == std::string::npos);
    const CliResult ds = run_cli("plan --preset llama3-8b --gpu rtx4090 --gpus 8 --offload-optimizer --framework deepspeed "
                                 "--format json");
    REQUIRE(ds.exit_code == 0);
    CHECK(recommended(json::parse(ds.out))["config"]["offload_optimizer"] == true);
  }
}

TEST_SUITE("issue 16: outputs") {
  TEST_CASE("plan --format csv: a header and one row per candidate") {
    const CliResult r = run_cli("plan --preset 8b --gpus 8 --cluster a800x8 --format csv");
    REQUIRE(r.exit_code == 0);
    const json j = plan_json_of("--preset 8b --gpus 8 --cluster a800x8");
    std::istringstream in(r.out);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(line);
    REQUIRE(lines.size() == j["candidates"].size() + 1);
    CHECK(lines[0].rfind("rank,recommended,strategy,layout,tp,pp,dp,", 0) == 0);
    const auto commas = [](const std::string& s) { return std::count(s.begin(), s.end(), ','); };
    for (const std::string& l : lines) CHECK(commas(l) == commas(lines[0]));
    CHECK(lines[1].rfind("1,", 0) == 0);
  }

  TEST_CASE("plan --format markdown: real tables, no code fence") {
    const CliResult r = run_cli("plan --preset 8b --gpus 8 --cluster a800x8 --format markdown");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("```") == std::string::npos);
    CHECK(r.out.find("| # | strategy | layout | mb | recompute | peak GB | HBM | step s | sim s |") != std::string::npos);
    CHECK(r.out.find("|---:|---|---|") != std::string::npos);
    CHECK(r.out.find("| family | verdict |") != std::string::npos);
  }

  TEST_CASE("notes go to stderr; stdout stays the answer") {
    const CliResult plan = run_cli("plan --preset 8b --gpus 8");
    CHECK(plan.out.find("note:") == std::string::npos);
    CHECK(plan.err.find("note: no --cluster or --gpu given") != std::string::npos);
    const CliResult predict = run_cli("predict --preset 8b --gpus 8");
    CHECK(predict.out.find("note:") == std::string::npos);
    CHECK(predict.err.find("note: no --cluster or --gpu given") != std::string::npos);
    // A document carries the cluster in its fields; stderr stays empty for scripts that read it for errors.
    const CliResult doc = run_cli("predict --preset 8b --gpus 8 --format json");
    CHECK(doc.err.empty());
    CHECK(json::parse(doc.out)["config"]["cluster"] == "a800x8");
  }

  TEST_CASE("--version") {
    const CliResult r = run_cli("--version");
    CHECK(r.exit_code == 0);
    CHECK(r.out.rfind("shardplan 0.", 0) == 0);
  }

  TEST_CASE("a tiny model's parameter count reads as one (tiny: 803,968 parameters, presets/models/tiny.yaml)") {
    const CliResult r = run_cli("predict --preset tiny --gpus 1");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("tiny (803.97 K parameters)") != std::string::npos);
    CHECK(r.out.find("0.00 B") == std::string::npos);
  }

  TEST_CASE("HSDP is not searched inside one node, and is across nodes") {
    const json one = plan_json_of("--preset 8b --gpus 8 --cluster a800x8 --all");
    for (const json& f : one["families"]) CHECK(f["hsdp"] == 0);
    for (const json& c : one["candidates"]) CHECK(c["config"]["hsdp"] == 0);
    const json two = plan_json_of("--preset 8b --gpus 16 --cluster a800x8 --all");
    bool any = false;
    for (const json& f : two["families"]) any = any || f["hsdp"].get<int64_t>() > 0;
    CHECK(any);
  }

  TEST_CASE("a --tp wider than a node is warned about") {
    const CliResult r = run_cli("predict --preset llama3-70b --gpus 16 --tp 16 --cluster dgx-h100");
    CHECK(r.err.find("note: --tp 16 spans 2 nodes (8 GPUs per node)") != std::string::npos);
    CHECK(run_cli("predict --preset llama3-70b --gpus 16 --tp 8 --cluster dgx-h100").err.find("spans") == std::string::npos);
  }

  TEST_CASE("a capped default sequence length is reported, and not when --seq is given") {
    // Llama 3.1 8B declares 131072 positions (meta-llama/Llama-3.1-8B config.json); the reader caps the default --seq.
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "shardplan_issue16_hf";
    std::filesystem::create_directories(dir);
    const std::string cfg = (dir / "llama31.json").string();
    {
      std::ofstream f(cfg);
      f << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
              "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false})";
    }
    const CliResult r = run_cli("predict --hf-config '" + cfg + "' --gpus 8 --cluster dgx-h100");
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("max_position_embeddings is 131072; the default --seq is capped at") != std::string::npos);
    CHECK(run_cli("predict --hf-config '" + cfg + "' --gpus 8 --cluster dgx-h100 --seq 4096").err.find("capped") ==
          std::string::npos);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("the ranked table keeps one row per family and layout") {
    // Megatron on 64 H100s interleaves: before folding the top 5 were one layout at several vpp values.
    const json plan = plan_json_of("--preset llama3-70b --gpus 64 --cluster dgx-h100 --framework megatron");
    std::set<std::tuple<int64_t, int64_t, bool, int64_t, bool, bool>> seen;
    for (const json& c : plan["candidates"]) {
      const json& s = c["config"];
      const auto key = std::make_tuple(s["tp"].get<int64_t>(), s["pp"].get<int64_t>(), s["sp"].get<bool>(),
                                       s["zero"].get<int64_t>(), s["hsdp"].get<int64_t>() > 0,
                                       s["offload_optimizer"].get<bool>());
      CHECK_MESSAGE(seen.insert(key).second, s.dump());
    }
    CHECK(plan["folded_variants"].get<int64_t>() > 0);
  }
}

namespace {

// The cells of the first <table> in `html` whose header has `column`, row by row, tags stripped.
std::vector<std::vector<std::string>> table_with(const std::string& html, const std::string& column) {
  std::vector<std::vector<std::string>> rows;
  for (size_t at = 0; (at = html.find("<table", at)) != std::string::npos;) {
    const size_t end = html.find("</table>", at);
    const std::string table = html.substr(at, end - at);
    at = end;
    if (table.find(">" + column + "</th>") == std::string::npos) continue;
    for (size_t r = 0; (r = table.find("<tr", r)) != std::string::npos;) {
      const size_t r_end = table.find("</tr>", r);
      const std::string tr = table.substr(r, r_end - r);
      r = r_end;
      std::vector<std::string> cells;
      for (size_t c = 0; (c = tr.find("<t", c)) != std::string::npos;) {
        if (tr[c + 2] != 'd' && tr[c + 2] != 'h') { ++c; continue; }
        const size_t open_end = tr.find('>', c);
        const size_t close = tr.find("</t", open_end);
        std::string text;
        bool in_tag = false;
        for (char ch : tr.substr(open_end + 1, close - open_end - 1)) {
          if (ch == '<') in_tag = true;
          else if (ch == '>') in_tag = false;
          else if (!in_tag) text += ch;
        }
        cells.push_back(text);
        c = close;
      }
      rows.push_back(cells);
    }
    break;
  }
  return rows;
}

}  // namespace

TEST_SUITE("issue 16: reports equal to the terminal") {
  TEST_CASE("the HTML plan report, as headless Chromium renders it, has the simulated column with the JSON's figures") {
    if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
      MESSAGE("chromium not found (scripts/install-deps.sh installs it): DOM check skipped");
      return;
    }
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "shardplan_issue16_report";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string html = (dir / "plan.html").string(), dom = (dir / "dom.html").string();
    const CliResult r = run_cli("plan --preset 8b --gpus 8 --cluster a800x8 --format json --report '" + html + "'");
    REQUIRE(r.exit_code == 0);
    const json plan = json::parse(r.out);
    REQUIRE(plan["candidates"][0].contains("simulated"));
    const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu --dump-dom 'file://" + html +
                            "' > '" + dom + "' 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in(dom);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto rows = table_with(text, "sim s");
    REQUIRE(rows.size() == plan["candidates"].size() + 1);
    const auto col = std::find(rows[0].begin(), rows[0].end(), "sim s") - rows[0].begin();
    const auto analytic = std::find(rows[0].begin(), rows[0].end(), "analytic #") - rows[0].begin();
    REQUIRE(static_cast<size_t>(col) < rows[0].size());
    REQUIRE(static_cast<size_t>(analytic) < rows[0].size());
    for (size_t i = 0; i < plan["candidates"].size(); ++i) {
      const json& c = plan["candidates"][i];
      CAPTURE(i);
      if (!c.contains("simulated")) {
        CHECK(rows[i + 1][col] == "—");
        continue;
      }
      // report/parts.hpp secs(): two decimals from 1 s to 100 s (the seed's steps are about 9 s).
      CHECK(rows[i + 1][col] == fmt_secs(c["simulated"]["step_s"].get<double>()));
      CHECK(rows[i + 1][analytic] == c["simulated"]["analytic_rank"].dump());
    }
    // The Markdown report says the same, and the batch rule the terminal prints.
    const std::string md = (dir / "plan.md").string();
    REQUIRE(run_cli("plan --preset 8b --gpus 8 --cluster a800x8 --report '" + md + "'").exit_code == 0);
    std::ifstream md_in(md);
    const std::string md_text((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
    CHECK(md_text.find("| step s | sim s | analytic # |") != std::string::npos);
    CHECK(md_text.find("played through the event-driven simulator (plan --simulate-top 3)") != std::string::npos);
    CHECK(md_text.find("global batch 128 sequences (0.26 M tokens) = dp 8") != std::string::npos);
    std::filesystem::remove_all(dir);
  }
}

TEST_SUITE("issue 16: outputs") {
  TEST_CASE("a profile calibrated on CPU ranks is labelled as CPUs, and its MFU is against the measured peak") {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "shardplan_issue16_cpu_profile";
    std::filesystem::create_directories(dir);
    const std::string profile = (dir / "cpu.yaml").string();
    std::ofstream(profile) << "kind: calibration-profile\nversion: 1\nname: cpu-test\nbase_cluster: a800x8\n"
                              "gpus_per_node: 2\nhardware: {device: cpu, dtype: fp32, peak_tflops: 0.04, copy_gbps: 10, "
                              "elementwise_gbps: 2}\n";
    const CliResult t = run_cli("predict --preset tiny --gpus 2 --cluster '" + profile + "'");
    REQUIRE_MESSAGE(t.exit_code == 0, t.err);
    CHECK(t.out.find("on 2 × cpu-rank") != std::string::npos);
    CHECK(t.out.find("a800-80g") == std::string::npos);
    const json j = json::parse(run_cli("predict --preset tiny --gpus 2 --cluster '" + profile + "' --format json").out);
    CHECK(j["config"]["gpu"] == "cpu-rank");
    // MFU = model TFLOP/s per rank / the measured 0.04 TFLOP/s (not the A800's 312).
    CHECK(j["throughput"]["mfu"].get<double>() ==
          doctest::Approx(j["throughput"]["model_tflops_per_gpu"].get<double>() / 0.04).epsilon(1e-9));
    std::filesystem::remove_all(dir);
  }
}
