// `shardplan report` and `--report FILE` on plan and predict, end to end: the files they write, the formats the
// names choose, and one error line with nothing left behind for what cannot be read or written.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_runner.hpp"

using shardplan::test::is_one_error_line;
using shardplan::test::read_all;
using shardplan::test::run_cli;
namespace fs = std::filesystem;

namespace {

// This run's directory, removed when the tests end.
const fs::path& scratch_root() {
  static const struct Root {
    fs::path path = fs::temp_directory_path() / ("shardplan_report_" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } root;
  return root.path;
}

// A fresh, empty directory for one test case.
fs::path scratch(const std::string& name) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Quoted for the shell (built by appending: GCC 12 warns, falsely, about "'" + string).
std::string q(const fs::path& p) {
  std::string s(1, '\'');
  s += p.string();
  s += '\'';
  return s;
}

size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

bool is_html(const std::string& s) { return s.rfind("<!DOCTYPE html>", 0) == 0 && s.find("</html>") != std::string::npos; }
bool is_markdown(const std::string& s) { return s.rfind("# ", 0) == 0 && s.find("<svg") == std::string::npos; }

// The seed's plan and prediction as saved JSON files (once per run).
const fs::path& saved(const std::string& which) {
  static const fs::path dir = [] {
    const fs::path d = scratch("saved");
    for (const char* which : {"plan", "predict"}) {
      const auto r = run_cli(std::string(which) + " --preset 8b --gpus 8 --format json");
      REQUIRE(r.exit_code == 0);
      std::ofstream(d / (std::string(which) + ".json")) << r.out;
    }
    return d;
  }();
  static const fs::path plan = dir / "plan.json", predict = dir / "predict.json";
  return which == "plan" ? plan : predict;
}

}  // namespace

TEST_SUITE("cli report") {
  TEST_CASE("plan --report FILE.html and FILE.md: the report beside the usual output") {
    const fs::path dir = scratch("plan");
    auto r = run_cli("plan --preset 8b --gpus 8 --report " + q(dir / "seed.html"));
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("Recommended:") != std::string::npos);  // the table still goes to stdout
    const std::string html = read_all(dir / "seed.html");
    CHECK(is_html(html));
    CHECK(html.find("<svg") != std::string::npos);
    CHECK(html.find("shardplan plan --preset 8b --gpus 8 --report") != std::string::npos);  // the command, in the footer
    r = run_cli("plan --preset 8b --gpus 8 --format json --report " + q(dir / "seed.md"));
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.out).contains("candidates"));
    CHECK(is_markdown(read_all(dir / "seed.md")));
    CHECK(entries(dir) == 2);  // no temporary files left
  }

  TEST_CASE("a 70B plan at 4 M tokens a step: FLOPs beyond 1e18 render, partial recomputation named as in the table") {
    // 64 H100, seq 8192, one sequence a micro-batch: the step is 1.3e18 hardware FLOPs, and the recommendation
    // recomputes the first blocks only (planner/search_recompute.hpp).
    const fs::path dir = scratch("big-plan");
    const auto r = run_cli("plan --preset llama3-70b --gpus 64 --cluster dgx-h100 --seq 8192 --micro-batch 1 "
                           "--format json --report " + q(dir / "plan.md"));
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    const auto& best = j["candidates"][j["recommended"].get<size_t>()];
    CHECK(best["flops"]["hardware_flops"].get<double>() > 1e18);
    const int64_t n = best["config"]["recompute_layers"].get<int64_t>();
    REQUIRE(n > 0);
    CHECK(read_all(dir / "plan.md").find("recompute first " + std::to_string(n)) != std::string::npos);
  }

  TEST_CASE("predict --report") {
    const fs::path dir = scratch("predict");
    const auto r = run_cli("predict --preset 8b --gpus 8 --report " + q(dir / "p.HTML"));
    REQUIRE(r.exit_code == 0);
    const std::string html = read_all(dir / "p.HTML");
    CHECK(is_html(html));
    CHECK(html.find("<h1>predict: 8b on 8 × a800-80g</h1>") != std::string::npos);
  }

  TEST_CASE("report FILE: Markdown on stdout by default, HTML with --format html, files by extension") {
    const fs::path dir = scratch("render");
    auto r = run_cli("report " + q(saved("plan")));
    REQUIRE(r.exit_code == 0);
    CHECK(is_markdown(r.out));
    CHECK(r.out.find("# plan: 8b on 8 × a800-80g") == 0);
    r = run_cli("report " + q(saved("plan")) + " --format html");
    REQUIRE(r.exit_code == 0);
    CHECK(is_html(r.out));
    const std::string from_stdout = r.out;
    r = run_cli("report " + q(saved("plan")) + " -o " + q(dir / "a.html") + " -o " + q(dir / "a.md") + " --html " +
                q(dir / "b.txt") + " --md " + q(dir / "c.txt") + " --title 'Seed case'");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.empty());
    CHECK(is_html(read_all(dir / "a.html")));
    CHECK(read_all(dir / "a.md").rfind("# Seed case\n", 0) == 0);
    CHECK(read_all(dir / "b.txt") == read_all(dir / "a.html"));
    CHECK(read_all(dir / "c.txt") == read_all(dir / "a.md"));
    CHECK(entries(dir) == 4);
    // The same document renders to the same bytes.
    r = run_cli("report " + q(saved("plan")) + " --format html");
    CHECK(r.out == from_stdout);
    // A prediction too.
    r = run_cli("report " + q(saved("predict")) + " --format html");
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("id=\"memory\"") != std::string::npos);
  }

  TEST_CASE("a report name that is neither .md nor .html fails before any work") {
    const fs::path dir = scratch("names");
    auto r = run_cli("plan --preset 8b --gpus 8 --report " + q(dir / "seed.pdf"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--report") != std::string::npos);
    CHECK(r.err.find(".md") != std::string::npos);
    r = run_cli("report " + q(saved("plan")) + " -o " + q(dir / "x.txt"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--output") != std::string::npos);
    r = run_cli("report " + q(saved("plan")) + " --format pdf");
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--format") != std::string::npos);
    CHECK(entries(dir) == 0);
  }

  TEST_CASE("an output that cannot be written: one error line, exit 2, nothing left") {
    const fs::path dir = scratch("unwritable");
    auto r = run_cli("plan --preset 8b --gpus 8 --report " + q(dir / "missing" / "seed.html"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("--report") != std::string::npos);
    CHECK(r.err.find("cannot write") != std::string::npos);
    CHECK(r.out.empty());
    fs::create_directories(dir / "taken.html");
    r = run_cli("predict --preset 8b --gpus 8 --report " + q(dir / "taken.html"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("is a directory") != std::string::npos);
    // Several outputs are written all or none.
    r = run_cli("report " + q(saved("plan")) + " -o " + q(dir / "ok.html") + " -o " + q(dir / "missing" / "x.md"));
    CHECK(is_one_error_line(r));
    CHECK_FALSE(fs::exists(dir / "ok.html"));
    CHECK(entries(dir) == 1);  // only the directory made above
  }

  TEST_CASE("an input that cannot be read, is not JSON, or is not a shardplan document") {
    const fs::path dir = scratch("inputs");
    auto r = run_cli("report " + q(dir / "nothing.json"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("nothing.json: cannot read") != std::string::npos);
    std::ofstream(dir / "broken.json") << "{\"candidates\": [\n  1,\n";
    r = run_cli("report " + q(dir / "broken.json"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("broken.json: not valid JSON") != std::string::npos);
    CHECK(r.err.find("line 3") != std::string::npos);
    std::ofstream(dir / "other.json") << "{\"name\": \"x\"}";
    r = run_cli("report " + q(dir / "other.json") + " -o " + q(dir / "out.html"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("not a shardplan document") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "out.html"));
    auto doc = nlohmann::json::parse(read_all(saved("predict")));
    doc["memory"].erase("components");
    std::ofstream(dir / "partial.json") << doc.dump();
    r = run_cli("report " + q(dir / "partial.json"));
    CHECK(is_one_error_line(r));
    CHECK(r.err.find("field 'memory.components' is missing") != std::string::npos);
    r = run_cli("report");
    CHECK(is_one_error_line(r));
  }
}
