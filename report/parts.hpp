#pragma once
// Internal to report/: the pieces the document builders share (report.cpp: predictions; report_plan.cpp: plans;
// report_measured.cpp: validations and calibration profiles). Not part of the library's interface.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "planner/model.hpp"
#include <nlohmann/json.hpp>

#include "planner/error.hpp"
#include "report/charts.hpp"
#include "report/document.hpp"

namespace shardplan::report {

using json = nlohmann::json;

// --- Reading the JSON, with errors that name the field -------------------------------------------------------

class Reader {
 public:
  Reader(std::string origin, const char* expected) : origin_(std::move(origin)), expected_(expected) {}

  // `path` is dotted ("memory.peak_bytes"); `where` is how `j` itself is named in messages ("candidates[2]").
  const json* find(const json& j, std::string_view path) const {
    const json* cur = &j;
    while (!path.empty()) {
      const size_t dot = path.find('.');
      const std::string key(path.substr(0, dot));
      if (!cur->is_object()) return nullptr;
      const auto it = cur->find(key);
      if (it == cur->end()) return nullptr;
      cur = &*it;
      path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    }
    return cur;
  }
  const json& at(const json& j, std::string_view path, const std::string& where = "") const {
    const json* v = find(j, path);
    if (!v || v->is_null()) fail(where, path, "is missing");
    return *v;
  }
  double num(const json& j, std::string_view path, const std::string& where = "") const {
    const json& v = at(j, path, where);
    if (!v.is_number()) fail(where, path, "is not a number");
    return v.get<double>();
  }
  double num_or(const json& j, std::string_view path, double fallback) const {
    const json* v = find(j, path);
    return v && v->is_number() ? v->get<double>() : fallback;
  }
  std::string str(const json& j, std::string_view path, const std::string& where = "") const {
    const json& v = at(j, path, where);
    if (!v.is_string()) fail(where, path, "is not a string");
    return v.get<std::string>();
  }
  std::string str_or(const json& j, std::string_view path, const std::string& fallback) const {
    const json* v = find(j, path);
    return v && v->is_string() ? v->get<std::string>() : fallback;
  }
  bool flag_or(const json& j, std::string_view path, bool fallback) const {
    const json* v = find(j, path);
    return v && v->is_boolean() ? v->get<bool>() : fallback;
  }
  const json& array(const json& j, std::string_view path, const std::string& where = "") const {
    const json& v = at(j, path, where);
    if (!v.is_array()) fail(where, path, "is not an array");
    return v;
  }
  const json& object(const json& j, std::string_view path, const std::string& where = "") const {
    const json& v = at(j, path, where);
    if (!v.is_object()) fail(where, path, "is not an object");
    return v;
  }
  [[noreturn]] void fail(const std::string& where, std::string_view path, const char* what) const {
    const std::string field = where.empty() ? std::string(path) : where + "." + std::string(path);
    throw InputError(fmt::format("{}: field '{}' {} (expected the JSON of {})", origin_, field, what, expected_));
  }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  const char* expected_;
};

// Every number of a document is one a report can print: a field ending in "bytes" is 0..2^60, a FLOP count
// |x| ≤ 1e24, any other |x| ≤ 1e18.
// InputError naming the field otherwise (report/read_input.cpp).
void check_document_numbers(const json& doc, const std::string& origin);

// A field inside `where` ("candidates[2]" + "time"), for messages.
inline std::string sub(const std::string& where, const char* field) { return where.empty() ? field : where + "." + field; }

// --- Formatting -------------------------------------------------------------------------------------------------

inline std::string param_count(double n) { return format_param_count(n); }  // planner/model.hpp
inline std::string gb(double bytes, int decimals = 1) { return fmt::format("{:.{}f}", bytes / 1e9, decimals); }
inline std::string pct(double fraction, int decimals = 0) { return fmt::format("{:.{}f} %", 100 * fraction, decimals); }
inline std::string secs(double s) {
  if (s == 0) return "0";
  if (std::abs(s) >= 100) return fmt::format("{:.1f}", s);
  if (std::abs(s) >= 1) return fmt::format("{:.2f}", s);
  return fmt::format("{:.3g}", s);
}

// --- The configuration of a predict object ---------------------------------------------------------------------

struct Config {
  std::string model, cluster, gpu, precision, framework, recompute, schedule;
  int64_t gpus = 0, tp = 1, pp = 1, cp = 1, dp = 1, vpp = 1, zero = 0, hsdp = 0, micro_batch = 1, global_batch = 0,
          seq = 0, grad_accum = 0, nodes = 1;
  int64_t ep = 1;  // expert parallelism (issue 17); absent in older JSON: 1
  bool sp = false, offload = false, flash = true;
};

Config read_config(const Reader& r, const json& c, const std::string& where);
// The recomputation of a strategy object (`recompute`, and `recompute_layers` / `recompute_every` when full) as the
// CLI's tables name it: none, selective, full, "first 3", "every 2nd".
std::string recompute_named(const Reader& r, const json& c, const char* fallback);
std::string config_line(const Config& c);
std::string strategy_line(const Config& c, bool bold = false);

// --- A predict object, read (report.cpp) --------------------------------------------------------------------------

struct Time {
  bool modelled = false;
  double step = 0, compute = 0, slowdown = 0, tp = 0, cp = 0, ep = 0, pp = 0, dp = 0, dp_total = 0, bubble = 0, optimizer = 0;
  double overhead() const { return slowdown + tp + cp + ep + pp + dp + bubble + optimizer; }
};

struct Memory {
  double peak = 0, capacity = 0;
  std::vector<Segment> components;  // CONTRACT.md order
  bool fits = true, safe = true;
  std::string phase;
  int64_t stage = 0;
};

struct Rates {
  double tokens_per_s = 0, per_gpu = 0, mfu = 0, hfu = 0, model_tflops = 0;
};

struct Pred {
  Config config;
  Memory memory;
  Time time;
  Rates rates;
  double params = 0;
  bool simulated = false;  // a `simulate --format json` document
  bool has_rates = true;
  const json* raw = nullptr;
};

Pred read_prediction(const Reader& r, const json& p, const std::string& where);
const std::vector<Series>& memory_series();  // the components of memory, in CONTRACT.md order
std::string family(const Config& c);         // the strategy family (planner/search.hpp family_of)
std::string layout(int64_t tp, int64_t pp, int64_t dp, int64_t vpp, bool sp, int64_t hsdp);  // "tp 2 pp 1 dp 4"
std::string layout(const Config& c);
std::vector<Segment> time_segments(const Time& t, bool with_compute);

// --- Charts, tables and cards of a prediction (report.cpp) --------------------------------------------------------

std::string memory_value_color(double total, double capacity);
BarChart memory_chart(const std::string& id, double capacity);
BarChart time_chart(const std::string& id, bool with_compute);
Table memory_items_table(const Reader& r, const Pred& p);
Table time_table(const Time& t);
std::vector<Card> prediction_cards(const Pred& p);

// --- Blocks of a document ----------------------------------------------------------------------------------------

Block chart_block(std::string svg, Table fallback = {}, std::string caption = "");
Block paragraph(std::string s);
Block table_block(Table t);

// --- The document of a plan (report_plan.cpp) ----------------------------------------------------------------------

Document plan_document(const json& doc, const Reader& r);

// --- Documents of measurements (report_measured.cpp) ---------------------------------------------------------------

Document validation_document(const json& doc, const Reader& r);
Document calibration_document(const json& doc, const Reader& r);

}  // namespace shardplan::report
