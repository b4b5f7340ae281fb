// Reports (report/): the SVG helpers, every chart on data of the shapes its producers emit (the seed's plan
// and prediction from the real CLI, a validation in CONTRACT.md's shape, nccl-tests message sizes, the
// simulator's played step), the documents rendered to Markdown and HTML, and errors that name the field.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/error.hpp"
#include "report/charts.hpp"
#include "report/report.hpp"
#include "report/svg.hpp"
#include "tests/cli_runner.hpp"

#ifdef SHARDPLAN_REPORT_SIM
#include "io/preset_store.hpp"
#include "report/sim_timeline.hpp"
#endif

using namespace shardplan;
using namespace shardplan::report;
using nlohmann::json;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Tags balance (HTML void elements aside); comments, doctype and processing instructions skipped. The reports
// escape every '<' and '>' in text and attributes, so this simple scan is exact for them.
bool balanced(const std::string& doc, std::string* problem = nullptr) {
  static const char* const kVoid[] = {"meta", "link", "br", "img", "hr", "input"};
  std::vector<std::string> open;
  size_t i = 0;
  while ((i = doc.find('<', i)) != std::string::npos) {
    if (doc.compare(i, 4, "<!--") == 0) {
      i = doc.find("-->", i);
      if (i == std::string::npos) return false;
      continue;
    }
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return false;
    const std::string tag = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty() || tag[0] == '!' || tag[0] == '?') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        if (problem) *problem = "</" + name + "> closes <" + (open.empty() ? "" : open.back()) + ">";
        return false;
      }
      open.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n"));
    if (std::find(std::begin(kVoid), std::end(kVoid), name) != std::end(kVoid)) continue;
    open.push_back(name);
  }
  if (!open.empty() && problem) *problem = "<" + open.back() + "> is never closed";
  return open.empty();
}

// Every <svg ...> start tag has a positive width, height and a viewBox.
bool svgs_have_sizes(const std::string& doc, size_t& n) {
  static const std::regex svg(R"re(<svg [^>]*width="([0-9.]+)" height="([0-9.]+)" viewBox="0 0 ([0-9.]+) ([0-9.]+)")re");
  n = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), svg); it != std::sregex_iterator(); ++it) {
    if (std::stod((*it)[1]) <= 0 || std::stod((*it)[2]) <= 0) return false;
    if ((*it)[1] != (*it)[3] || (*it)[2] != (*it)[4]) return false;
    ++n;
  }
  return n == count(doc, "<svg ");
}

// No way to reach the network or run code: no scripts, no URLs but the SVG namespace, no src, no url().
bool self_contained(const std::string& html) {
  if (html.find("<script") != std::string::npos || html.find(" src=") != std::string::npos) return false;
  if (html.find("url(") != std::string::npos || html.find("@import") != std::string::npos) return false;
  std::string rest = html;
  for (size_t at; (at = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) rest.erase(at, 26);
  return rest.find("http://") == std::string::npos && rest.find("https://") == std::string::npos;
}

const json& seed_plan() {
  static const json j = [] {
    const auto r = test::run_cli("plan --preset 8b --gpus 8 --format json");
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  }();
  return j;
}

const json& seed_prediction() {
  static const json j = [] {
    const auto r = test::run_cli("predict --preset 8b --gpus 8 --format json");
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  }();
  return j;
}

// CONTRACT.md's `validate --format json`.
json validation_doc() {
  return json::parse(R"({"config": {"model": "8b", "cluster": "a800x8", "gpu": "a800-80g", "gpus": 8, "zero": 3},
    "predicted": {"peak_bytes": 30400000000, "step_s": 1.92}, "measured": {"peak_bytes": 31850000000, "step_s": 2.05},
    "error_pct": {"peak_bytes": -4.55, "step_s": -6.34},
    "components": {"activations": {"predicted": 10800000000, "measured": 11900000000},
                   "buffers": {"predicted": 2700000000, "measured": 2400000000},
                   "compute_s": {"predicted": 1.71, "measured": 1.80}}})");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

}  // namespace

TEST_SUITE("report svg helpers") {
  TEST_CASE("escaping, coordinates, ticks and labels") {
    CHECK(xml_escape("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
    CHECK(coord(12.0) == "12");
    CHECK(coord(12.25) == "12.3");
    CHECK(coord(-0.01) == "0");
    const auto t = nice_ticks(0, 68.7);
    CHECK(t.front() == 0);
    CHECK(t.back() >= 68.7);
    CHECK(t.size() >= 4);
    CHECK(t.size() <= 9);
    for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == doctest::Approx(t[1] - t[0]));
    CHECK(nice_ticks(0, 134.2).back() == 150);
    CHECK(log_ticks(0.1, 1000) == std::vector<double>{0.1, 1, 10, 100, 1000});
    CHECK(size_label(8) == "8 B");
    CHECK(size_label(1024) == "1 KB");
    CHECK(size_label(64.0 * 1024 * 1024) == "64 MB");
    CHECK(size_label(std::ldexp(1.0, 33)) == "8 GB");
    CHECK(tick_label(2500) == "2500");
    CHECK(tick_label(25000) == "25k");
    CHECK(tick_label(0.5) == "0.5");
    CHECK(text_width("ZeRO-3 HSDP + PP", 12) > text_width("ZeRO-3", 12));
    CHECK(text_width("×", 12) < text_width("ab", 12));  // one glyph, not two UTF-8 bytes' worth
  }

  TEST_CASE("report formats follow the file name") {
    CHECK(format_from_path("out/seed.html") == Format::html);
    CHECK(format_from_path("seed.HTM") == Format::html);
    CHECK(format_from_path("seed.md") == Format::markdown);
    CHECK(format_from_path("a.b/seed.markdown") == Format::markdown);
    CHECK_FALSE(format_from_path("seed.pdf").has_value());
    CHECK_FALSE(format_from_path("seed").has_value());
    CHECK(parse_format("html") == Format::html);
    CHECK_FALSE(parse_format("pdf").has_value());
  }
}

TEST_SUITE("report charts") {
  TEST_CASE("stacked bars: one mark per non-zero part, reference lines, a clipped bar, the highlight") {
    BarChart c;
    c.id = "m";
    c.title = "memory";
    c.scale = 1e9;
    c.unit = " GB";
    c.series = {{"a", "part a", "#111111"}, {"b", "part b", "#222222"}, {"c", "part c", "#333333"}};
    c.bars = {{"fits", "tp 1", {{"a", 20e9}, {"b", 10e9}, {"c", 0}}, true, "", ""},
              {"huge", "", {{"a", 150e9}, {"b", 60e9}}, false, "", "#cf222e"}};
    c.lines = {{68.7e9, "80 % line", "#bf8700"}, {85.9e9, "capacity", "#cf222e"}};
    c.clip_at = 1.5 * 85.9e9;
    const std::string svg = stacked_bar_chart(c);
    std::string problem;
    CHECK_MESSAGE(balanced(svg, &problem), problem);
    size_t n = 0;
    CHECK(svgs_have_sizes(svg, n));
    CHECK(n == 1);
    // Parts drawn: 2 of the first bar (not the 0), 1 of the second, whose part b lies beyond the cut.
    CHECK(count(svg, "</title></rect>") == 3);
    CHECK(svg.find("fits — part a: 20.0 GB") != std::string::npos);
    CHECK(svg.find(">80 % line<") != std::string::npos);
    CHECK(svg.find(">capacity<") != std::string::npos);
    CHECK(svg.find("★ fits") != std::string::npos);
    // The second bar is cut at 1.5 × capacity, but its label keeps the whole value.
    CHECK(svg.find("210.0 GB ▸") != std::string::npos);
    CHECK(svg.find("huge — part a: 150.0 GB, part b: 60.0 GB</title>") != std::string::npos);
    // The legend names only the parts that occur.
    CHECK(svg.find(">part c<") == std::string::npos);
  }

  TEST_CASE("predicted vs measured: both bars and the signed error") {
    PairChart c;
    c.id = "v";
    c.scale = 1e9;
    c.unit = " GB";
    c.rows = {{"activations", 10.8e9, 11.9e9}, {"buffers", 2.7e9, 2.4e9}, {"nothing measured", 1e9, 0}};
    const std::string svg = predicted_vs_measured_chart(c);
    CHECK(balanced(svg));
    CHECK(svg.find(">-9.2 %<") != std::string::npos);
    CHECK(svg.find(">+12.5 %<") != std::string::npos);
    CHECK(svg.find(">—<") != std::string::npos);
    CHECK(count(svg, "</title></rect>") == 6);
  }

  TEST_CASE("bus bandwidth vs message size on log axes: nccl-tests sizes and an alpha-beta fit") {
    // all_reduce on 8 ranks, 8 B to 8 GB doubling (nccl-tests -b 8 -e 8G -f 2): busbw = 2(n-1)/n · S / t.
    LogSeries s{"all_reduce · intra_node", "", {}, {}};
    const double alpha = 20e-6, beta = 1 / 150e9, factor = 2.0 * 7 / 8;
    for (int e = 3; e <= 33; ++e) {
      const double bytes = std::ldexp(1.0, e);
      const double t = alpha + beta * bytes;
      s.points.push_back({bytes, factor * bytes / t / 1e9 * (1 + 0.03 * std::sin(e))});
      s.curve.push_back({bytes, factor * bytes / t / 1e9});
    }
    s.points.push_back({0, 1});    // not drawable on a log axis: left out
    s.points.push_back({1024, -1});
    LogChart c{"busbw", "Bus bandwidth", "message size", "busbw (GB/s)", true, {s}, 920, 420};
    const std::string svg = loglog_chart(c);
    CHECK(balanced(svg));
    CHECK(count(svg, "<circle") == 31);
    CHECK(count(svg, "<path d=\"M") == 1);
    for (const char* tick : {">1 B<", ">1 KB<", ">32 KB<", ">1 MB<", ">1 GB<", ">32 GB<"}) CHECK_MESSAGE(svg.find(tick) != std::string::npos, tick);
    CHECK(svg.find(">100<") != std::string::npos);  // busbw decades
  }

  TEST_CASE("timeline: lanes, spans merged below a pixel, memory over the step with capacity lines") {
    Timeline t;
    t.lanes = {"stage 0 · compute", "stage 0 · dp all-gather", "stage 1 · compute"};
    t.categories = {{"forward", "forward", "#4e79a7"}, {"dp_gather", "DP all-gather", "#59a14f"}};
    t.step_s = 10;
    for (int i = 0; i < 10000; ++i) t.spans.push_back({0, i * 1e-3, i * 1e-3 + 0.9e-3, "forward", "F"});
    t.spans.push_back({1, 2, 3, "dp_gather", "all-gather L1"});
    t.spans.push_back({2, 5, 6, "unknown", "odd"});
    t.memory = {{"stage 0", {{0, 10e9}, {1, 30e9}, {1.0001, 31e9}, {2, 12e9}}}, {"stage 1", {{0, 5e9}, {9, 20e9}}}};
    t.capacity_bytes = 85.9e9;
    const std::string svg = timeline_chart(t, "timeline");
    CHECK(balanced(svg));
    CHECK(count(svg, "</title></rect>") < 20);  // 10,000 spans of 0.9 ms on a 10 s axis: one mark
    CHECK(svg.find("forward × 10000 ops") != std::string::npos);
    CHECK(svg.find("all-gather L1 (DP all-gather)") != std::string::npos);
    for (const std::string& lane : t.lanes) CHECK(svg.find(xml_escape(lane) + "</text>") != std::string::npos);
    const std::string mem = memory_over_step_chart(t, "mem");
    CHECK(balanced(mem));
    CHECK(count(mem, "fill=\"none\" stroke=") == 2);
    CHECK(mem.find("stage 0: peak 31.00 GB") != std::string::npos);
    CHECK(mem.find(">capacity 85.9 GB<") != std::string::npos);
    CHECK(mem.find(">80 % line 68.7 GB<") != std::string::npos);
  }

  TEST_CASE("a timeline survives its JSON form; bad timelines name the field") {
    Timeline t;
    t.lanes = {"a", "b"};
    t.categories = {{"forward", "forward", "#4e79a7"}};
    t.step_s = 1.5;
    t.spans = {{0, 0, 1, "forward", "F0"}, {1, 0.5, 1.5, "forward", "F1"}};
    t.memory = {{"stage 0", {{0, 1e9}, {1, 2e9}}}};
    t.capacity_bytes = 80e9;
    const Timeline back = timeline_from_json(timeline_json(t), "x.json");
    CHECK(back.lanes == t.lanes);
    REQUIRE(back.spans.size() == 2);
    CHECK(back.spans[1].start_s == 0.5);
    CHECK(back.spans[1].label == "F1");
    REQUIRE(back.memory.size() == 1);
    CHECK(back.memory[0].samples[1].bytes == 2e9);
    CHECK(back.capacity_bytes == 80e9);

    json bad = timeline_json(t);
    bad["spans"][1]["lane"] = 7;
    CHECK(error_of([&] { timeline_from_json(bad, "x.json"); }).find("timeline.spans[1].lane") != std::string::npos);
    bad = timeline_json(t);
    bad["memory"][0]["bytes"].push_back(3);
    CHECK(error_of([&] { timeline_from_json(bad, "x.json"); }).find("timeline.memory[0]") != std::string::npos);
  }
}

TEST_SUITE("report documents") {
  TEST_CASE("what a document is follows from its keys") {
    CHECK(detect_kind(seed_plan(), "p") == DocKind::plan);
    CHECK(detect_kind(seed_prediction(), "p") == DocKind::prediction);
    CHECK(detect_kind(validation_doc(), "v") == DocKind::validation);
    const std::string e = error_of([] { detect_kind(json{{"hello", 1}}, "other.json"); });
    CHECK(e.rfind("other.json: not a shardplan document", 0) == 0);
    CHECK(e.find("plan --format json") != std::string::npos);
    CHECK(error_of([] { detect_kind(json::array(), "a.json"); }).find("a.json") != std::string::npos);
  }

  TEST_CASE("the seed's plan as HTML: self-contained, every chart sized, every family drawn") {
    const std::string html = render_report(seed_plan(), Format::html, {"plan.json", ""});
    CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
    std::string problem;
    CHECK_MESSAGE(balanced(html, &problem), problem);
    CHECK(self_contained(html));
    size_t svgs = 0;
    CHECK(svgs_have_sizes(html, svgs));
    CHECK(svgs == 3);
    for (const char* id : {"id=\"memory\"", "id=\"step-time\"", "id=\"step-overhead\""}) CHECK(html.find(id) != std::string::npos);
    // Every family of the search is a bar of the memory chart; the recommendation is starred.
    const std::string memory = html.substr(html.find("id=\"memory\""), html.find("id=\"step-time\"") - html.find("id=\"memory\""));
    for (const json& f : seed_plan()["families"])
      CHECK_MESSAGE(memory.find(xml_escape(f["family"].get<std::string>()) + " — parameters:") != std::string::npos,
                    f["family"]);
    CHECK(memory.find("★ ZeRO-") != std::string::npos);
    CHECK(memory.find("capacity 85.9 GB") != std::string::npos);
    CHECK(memory.find("80 % line 68.7 GB") != std::string::npos);
    // DDP does not fit: its value is in red, beyond the capacity.
    CHECK(memory.find("fill=\"#cf222e\"") != std::string::npos);
    CHECK(html.find("from plan.json") != std::string::npos);
  }

  TEST_CASE("the seed's plan as Markdown: the tables, and the charts' numbers") {
    const std::string md = render_report(seed_plan(), Format::markdown, {"plan.json", ""});
    CHECK(md.rfind("# plan: 8b on 8 × a800-80g", 0) == 0);
    CHECK(md.find("<svg") == std::string::npos);
    CHECK(md.find("| # | strategy | layout |") != std::string::npos);
    CHECK(md.find("| strategy | parameters | gradients |") != std::string::npos);  // memory by component
    CHECK(md.find("| candidate | compute |") != std::string::npos);               // step time by part
    CHECK(md.find("does not fit: model states alone need") != std::string::npos);  // DDP's reason
    const size_t rec = seed_plan()["recommended"].get<size_t>();
    CHECK(md.find(fmt::format("| **{}** |", rec + 1)) != std::string::npos);       // the recommended row in bold
    // Deterministic: the same document gives the same bytes.
    CHECK(md == render_report(seed_plan(), Format::markdown, {"plan.json", ""}));
  }

  TEST_CASE("the seed's prediction: memory against the lines, step time by part") {
    const std::string html = render_report(seed_prediction(), Format::html, {"predict.json", ""});
    CHECK(balanced(html));
    CHECK(self_contained(html));
    CHECK(html.find("id=\"memory\"") != std::string::npos);
    CHECK(html.find("id=\"step-time\"") != std::string::npos);
    CHECK(html.find("<h1>predict: 8b on 8 × a800-80g</h1>") != std::string::npos);
    const std::string md = render_report(seed_prediction(), Format::markdown, {"predict.json", "Seed"});
    CHECK(md.rfind("# Seed\n", 0) == 0);  // --title
    CHECK(md.find("| **peak** |") != std::string::npos);
    CHECK(md.find("fp32 master weights") != std::string::npos);
  }

  TEST_CASE("a prediction that does not fit, with EP and CP: rendered, its step-time rows sum to the step") {
    // Mixtral 8x7B, EP 8 on 16 H100 with ZeRO-1 does not fit (headroom_bytes < 0, which the reader once refused);
    // Llama 3 8B at 64 K with CP 2 has an exposed ring. Each exposed group is a row of the step-time table.
    for (const char* args : {"predict --preset mixtral-8x7b --cluster dgx-h100 --gpus 16 --ep 8 --zero 1 "
                             "--framework megatron --format json",
                             "predict --preset llama3-8b --cluster dgx-h100 --gpus 16 --cp 2 --seq 65536 "
                             "--framework torchtitan --recompute full --format json"}) {
      CAPTURE(args);
      const auto r = test::run_cli(args);
      REQUIRE(r.exit_code == 0);
      const json doc = json::parse(r.out);
      const std::string md = render_report(doc, Format::markdown, {"predict.json", ""});
      const json& by_group = doc["time"]["exposed_comm_by_group_s"];
      if (by_group["ep"].get<double>() > 0) {
        CHECK(doc["memory"]["headroom_bytes"].get<double>() < 0);
        CHECK(md.find("| expert-parallel all-to-all (exposed) |") != std::string::npos);
      }
      if (by_group["cp"].get<double>() > 0) CHECK(md.find("| context-parallel K/V ring (exposed) |") != std::string::npos);
      // The rows between the header and **step**: their seconds add up to the step (to the printed digits).
      const size_t from = md.find("| part | seconds | share |"), to = md.find("| **step** |");
      REQUIRE(from != std::string::npos);
      REQUIRE(to != std::string::npos);
      double sum = 0;
      const std::regex seconds(R"(\n\| [^|]+ \| ([0-9.e+-]+) \|)");
      const std::string rows = md.substr(from, to - from);
      for (auto it = std::sregex_iterator(rows.begin(), rows.end(), seconds); it != std::sregex_iterator(); ++it)
        sum += std::stod((*it)[1].str());
      CHECK(sum == doctest::Approx(doc["time"]["step_s"].get<double>()).epsilon(0.01));
    }
  }

  TEST_CASE("a validation in the contract's shape: predicted vs measured per component") {
    const std::string html = render_report(validation_doc(), Format::html, {"v.json", ""});
    CHECK(balanced(html));
    CHECK(html.find("id=\"validation-memory\"") != std::string::npos);
    CHECK(html.find("id=\"validation-time\"") != std::string::npos);
    CHECK(html.find(">-9.2 %<") != std::string::npos);   // activations under-predicted
    CHECK(html.find(">+12.5 %<") != std::string::npos);  // buffers over-predicted
    CHECK(html.find(">-5.0 %<") != std::string::npos);   // compute_s is time, in the time chart
    const std::string md = render_report(validation_doc(), Format::markdown, {"v.json", ""});
    CHECK(md.find("| activations | 10.80 GB | 11.90 GB | -9.2 % |") != std::string::npos);
    CHECK(md.find("| compute_s | 1.71 s | 1.80 s | -5.0 % |") != std::string::npos);
  }

  TEST_CASE("a missing or mistyped field is named, with the document it belongs to") {
    json doc = seed_plan();
    doc["candidates"][1]["memory"].erase("peak_bytes");
    std::string e = error_of([&] { render_report(doc, Format::html, {"plan.json", ""}); });
    CHECK(e.find("plan.json: field 'candidates[1].memory.peak_bytes' is missing") == 0);
    CHECK(e.find("plan --format json") != std::string::npos);
    doc = seed_plan();
    doc["recommended"] = 99;
    CHECK(error_of([&] { render_report(doc, Format::html, {"plan.json", ""}); }).find("'recommended'") != std::string::npos);
    doc = seed_prediction();
    doc["time"]["step_s"] = "fast";
    CHECK(error_of([&] { render_report(doc, Format::markdown, {"p.json", ""}); }).find("'time.step_s' is not a number") !=
          std::string::npos);
    json v = validation_doc();
    v["components"]["buffers"]["measured"] = "lots";  // absent or null is "not measured"; a string is wrong
    CHECK(error_of([&] { render_report(v, Format::markdown, {"v.json", ""}); }).find("components.buffers.measured") !=
          std::string::npos);
    v = validation_doc();
    v["components"]["buffers"].erase("measured");
    v["predicted"]["step_s"] = nullptr;  // CPU ranks without a profile: the step time is not predicted
    const std::string md = render_report(v, Format::markdown, {"v.json", ""});
    CHECK(md.find("not predicted") != std::string::npos);
  }

  TEST_CASE("a plan saved before families had components still charts its candidates") {
    json doc = seed_plan();
    for (json& f : doc["families"]) f.erase("components");  // a document saved before families had components
    const std::string html = render_report(doc, Format::html, {"old.json", ""});
    CHECK(html.find("id=\"memory\"") != std::string::npos);
    CHECK(count(html.substr(html.find("id=\"memory\""), html.find("id=\"step-time\"") - html.find("id=\"memory\"")),
                "— parameters:") == doc["candidates"].size());
  }
}

TEST_SUITE("report calibration profile") {
  // A real `calibrate --backend mpi --quick` profile of 4 CPU ranks (report/tests/cpu-profile.yaml).
  const std::string kProfile = std::string(SHARDPLAN_SOURCE_DIR) + "/report/tests/cpu-profile.yaml";

  TEST_CASE("busbw vs message size per collective, with the fit; GEMM throughput by size") {
    const json doc = read_json_file(kProfile);
    REQUIRE(detect_kind(doc, kProfile) == DocKind::calibration);
    const std::string html = render_report(doc, Format::html, {"cpu-profile.yaml", ""});
    std::string problem;
    CHECK_MESSAGE(balanced(html, &problem), problem);
    CHECK(self_contained(html));
    size_t svgs = 0;
    CHECK(svgs_have_sizes(html, svgs));
    CHECK(svgs == 2);
    const size_t busbw = html.find("id=\"busbw\""), gemm = html.find("id=\"gemm\"");
    REQUIRE(busbw != std::string::npos);
    REQUIRE(gemm != std::string::npos);
    const std::string bus = html.substr(busbw, gemm - busbw);
    CHECK(count(bus, "<circle") == 3 * 11);         // every measured size of the three collectives
    CHECK(count(bus, "(fit)</title></path>") == 3);  // and each one's fitted curve
    CHECK(bus.find(">1 KB<") != std::string::npos);
    CHECK(bus.find(">1 MB<") != std::string::npos);
    CHECK(count(html.substr(gemm), "<circle") == 30);
    // reduce_scatter's one segment: α = 26.2 µs, 1/β = 1.82 GB/s; busbw = algbw × (n−1)/n at 4 ranks.
    const std::string md = render_report(doc, Format::markdown, {"cpu-profile.yaml", ""});
    CHECK(md.find("| reduce_scatter | world | 4 | 11 | 32.8 % | 85.2 % | 1 KB–1 MB: 26.2 µs, 1.82 GB/s |") != std::string::npos);
    CHECK(md.find("| 64 | 64 | 192 | 63.5 µs | 0.0248 | 82 % |") != std::string::npos);
    CHECK(md.find("**wrong elements:** 0") != std::string::npos);
  }

  TEST_CASE("a profile that is not YAML, or lacks what the report needs, is named") {
    const auto dir = std::filesystem::temp_directory_path() / ("shardplan_report_cal_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "bad.yaml") << "kind: calibration-profile\ncollectives: [\n  - op: x\n";
    CHECK(error_of([&] { read_json_file((dir / "bad.yaml").string()); }).find("bad.yaml: not valid YAML: line") !=
          std::string::npos);
    json doc = read_json_file(kProfile);
    doc.erase("hardware");
    CHECK(error_of([&] { render_report(doc, Format::html, {"p.yaml", ""}); }).find("field 'hardware' is missing") !=
          std::string::npos);
    doc = read_json_file(kProfile);
    doc["collectives"][1]["points"][3] = "x";
    CHECK(error_of([&] { render_report(doc, Format::html, {"p.yaml", ""}); }).find("collectives[1].points[3]") !=
          std::string::npos);
    std::filesystem::remove_all(dir);
  }
}

#ifdef SHARDPLAN_REPORT_SIM
TEST_SUITE("report simulated timeline") {
  TEST_CASE("the simulator's step of the seed case: every op on its stream's lane, memory per stage") {
    const PresetStore store = PresetStore::builtin();
    const ModelSpec m = store.model("8b");
    const ClusterSpec c = store.cluster("a800x8");
    Strategy s;
    s.gpus = 8;
    s.dp = 8;
    s.zero = 3;
    s.micro_batch = 1;
    s.global_batch = 32;  // 4 micro-batches
    s.seq = m.seq;
    const sim::SimResult r = sim::simulate(m, s, c, true);
    const Timeline t = timeline_from_simulation(r);
    CHECK(t.step_s == r.step_s);
    CHECK(t.spans.size() == r.ops);
    CHECK(t.lanes.size() >= 3);  // compute, all-gather, reduce-scatter
    CHECK(t.lanes.front() == "stage 0 · compute");
    REQUIRE(t.memory.size() == 1);
    double peak = 0;
    for (const MemorySample& x : t.memory[0].samples) peak = std::max(peak, x.bytes);
    // The samples are the engine's bytes: what is allocated and the segments it keeps cached (MemKind::cached_free:
    // the gradient shards' reserve on the reduce-scatter stream), not the allocator's fixed reserve.
    const double cached = r.peak_stage().fragmentation - r.plan.stages[0].allocator_reserve;
    CHECK(cached > 0);
    CHECK(peak == doctest::Approx(r.peak_stage().allocated + cached).epsilon(1e-9));
    for (const TimelineSpan& sp : t.spans) {
      CHECK(sp.end_s >= sp.start_s);
      CHECK(sp.end_s <= r.step_s * (1 + 1e-9));
    }
    const std::string svg = timeline_chart(t, "timeline");
    CHECK(balanced(svg));
    CHECK(svg.size() < 200000);
    CHECK(svg.find("DP all-gather") != std::string::npos);

    // In a document: the prediction's report gains the two charts.
    json doc = seed_prediction();
    doc["timeline"] = timeline_json(t);
    const std::string html = render_report(doc, Format::html, {"sim", ""});
    CHECK(balanced(html));
    CHECK(html.find("id=\"timeline\"") != std::string::npos);
    CHECK(html.find("id=\"memory-over-step\"") != std::string::npos);
    size_t svgs = 0;
    CHECK(svgs_have_sizes(html, svgs));
    CHECK(svgs == 4);
  }
}
#endif
