// `validate` output (cli/render_validation.hpp).
#include "cli/render_validation.hpp"
#include "cli/terminal.hpp"

#include <cmath>

#include <fmt/format.h>

#include "cli/render_prediction.hpp"
#include "planner/error.hpp"

namespace shardplan::cli {

namespace {

using nlohmann::json;

json number_or_null(const std::optional<double>& v, bool integral) {
  if (!v) return nullptr;
  if (integral) return static_cast<int64_t>(std::llround(*v));
  return *v;
}

json figure_pair(const ComparedFigure& f, bool integral) {
  return {{"predicted", number_or_null(f.predicted, integral)},
          {"measured", number_or_null(f.measured, integral)},
          {"error_pct", number_or_null(f.error_pct, false)}};
}

// 1.23 GB / 45.6 MB / 789 kB / 12 B (decimal units, as the planner's tables).
std::string bytes_text(double b) {
  const double a = std::fabs(b);
  if (a >= 1e9) return fmt::format("{:.3g} GB", b / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g} MB", b / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string seconds_text(double s) {
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} µs", s * 1e6);
}

std::string cell(const std::optional<double>& v, bool seconds) {
  if (!v) return "-";
  return seconds ? seconds_text(*v) : bytes_text(*v);
}

std::string error_cell(const std::optional<double>& e) { return e ? fmt::format("{:+.1f} %", *e) : "-"; }

struct Row {
  std::string name;
  const ComparedFigure* f;
  bool seconds;
};

std::vector<Row> rows_of(const Validation& v) {
  std::vector<Row> rows{{"peak memory", &v.peak, false}};
  for (const ComparedFigure& c : v.components)
    if ((c.predicted && *c.predicted != 0) || (c.measured && *c.measured != 0)) rows.push_back({"  " + c.name, &c, false});
  rows.push_back({"step time", &v.step, true});
  return rows;
}

std::string headline(const Prediction& p, const ValidationSource& src) {
  const Strategy& s = p.strategy;
  return fmt::format("validate: {} on {} ranks, ZeRO-{}, micro-batch {} × {} per step, seq {}, {}, framework {} — "
                     "measured by {}",
                     p.model.name, s.gpus, s.zero, s.micro_batch,
                     s.global_batch / std::max<int64_t>(s.micro_batch * s.dp, 1), s.seq, to_string(s.precision),
                     to_string(s.framework), src.what);
}

// Unfitted (term.width 0) exactly the fmt columns "{:<16} {:>12} {:>12} {:>9}"; fitted to a terminal or COLUMNS, the
// prose wraps and the table drops the error column, then the measured one (issue 19, item 23).
std::string render_table(const Prediction& p, const Validation& v, const ValidationSource& src, const Terminal& term) {
  std::string out = fit_lines(headline(p, src) + "\n", term.width) + "\n";
  TextTable table("", {{"", 16, false, 0, true}, {"predicted", 12, true, 0, false, 1}, {"measured", 12, true, 2, false, 1},
                       {"error", 9, true, 3, false, 1}});
  table.add_header();
  for (const Row& r : rows_of(v))
    table.add_row({r.name, cell(r.f->predicted, r.seconds), cell(r.f->measured, r.seconds), error_cell(r.f->error_pct)});
  out += table.render(term);
  std::string prose;
  if (src.steps_timed > 0) prose += fmt::format("\nstep time: median of {} steps after warm-up, slowest rank\n", src.steps_timed);
  for (const std::string& n : src.notes) prose += "note: " + n + "\n";
  return out + fit_lines(prose, term.width);
}

std::string render_markdown(const Prediction& p, const Validation& v, const ValidationSource& src) {
  std::string out = "# " + headline(p, src) + "\n\n| | predicted | measured | error |\n|---|---:|---:|---:|\n";
  for (const Row& r : rows_of(v))
    out += fmt::format("| {} | {} | {} | {} |\n", r.name, cell(r.f->predicted, r.seconds),
                       cell(r.f->measured, r.seconds), error_cell(r.f->error_pct));
  out += "\n";
  if (src.steps_timed > 0) out += fmt::format("Step time: median of {} steps after warm-up, slowest rank.\n\n", src.steps_timed);
  for (const std::string& n : src.notes) out += "- " + n + "\n";
  return out;
}

}  // namespace

json validation_json(const Prediction& p, const Validation& v, const ValidationSource& src) {
  json prediction = prediction_json(p);
  json j;
  j["config"] = prediction["config"];
  j["predicted"] = {{"peak_bytes", number_or_null(v.peak.predicted, true)}, {"step_s", number_or_null(v.step.predicted, false)}};
  j["measured"] = {{"peak_bytes", number_or_null(v.peak.measured, true)}, {"step_s", number_or_null(v.step.measured, false)}};
  j["error_pct"] = {{"peak_bytes", number_or_null(v.peak.error_pct, false)}, {"step_s", number_or_null(v.step.error_pct, false)}};
  json components = json::object();
  for (const ComparedFigure& c : v.components) components[c.name] = figure_pair(c, true);
  j["components"] = components;
  j["source"] = {{"what", src.what}, {"steps_timed", src.steps_timed}};
  j["notes"] = src.notes;
  j["steps"] = src.steps;
  j["prediction"] = prediction;
  return j;
}

std::string render_validation(const Prediction& p, const Validation& v, const ValidationSource& src,
                              const std::string& format, const Terminal& term) {
  if (format == "table") return render_table(p, v, src, term);
  if (format == "markdown") return render_markdown(p, v, src);
  if (format == "json") return validation_json(p, v, src).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(validation_json(p, v, src));
  if (format == "csv") return json_to_csv(validation_json(p, v, src));
  throw InputError("--format '" + format + "' is not one of: table, json, yaml, csv, markdown");
}

}  // namespace shardplan::cli
