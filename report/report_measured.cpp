// The documents of measurements: validations (predicted against measured) and calibration profiles.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report/parts.hpp"
#include "report/svg.hpp"

namespace shardplan::report {

Document validation_document(const json& doc, const Reader& r) {
  Document d;
  const json* cfg = r.find(doc, "config");
  const Config c = cfg && cfg->is_object() && r.find(*cfg, "gpus") ? read_config(r, *cfg, "config") : Config{};
  d.title = c.gpus > 0 ? fmt::format("validate: {} on {} × {}", c.model, c.gpus, c.gpu) : std::string("validate");
  if (c.gpus > 0) d.subtitle = {config_line(c), strategy_line(c)};
  // A figure may be null: not predicted (CPU ranks without a profile) or not measured (a log without memory).
  auto opt = [&](const json& j, std::string_view path, const std::string& where) -> std::optional<double> {
    const json* v = r.find(j, path);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_number()) r.fail(where, path, "is not a number");
    return v->get<double>();
  };
  const std::optional<double> pp = opt(doc, "predicted.peak_bytes", ""), mp = opt(doc, "measured.peak_bytes", "");
  const std::optional<double> ps = opt(doc, "predicted.step_s", ""), ms = opt(doc, "measured.step_s", "");
  if (!r.find(doc, "predicted") || !r.find(doc, "measured")) r.at(doc, "predicted.peak_bytes");  // names the field
  auto err = [](std::optional<double> p, std::optional<double> m) {
    return p && m && *m != 0 ? fmt::format("{:+.1f} %", 100 * (*p - *m) / *m) : std::string("—");
  };
  // GB for real models; MB for the small ones the reference loop trains on CPU ranks.
  const bool small = std::max(pp.value_or(0), mp.value_or(0)) < 1e9;
  const double unit_scale = small ? 1e6 : 1e9;
  const char* unit = small ? " MB" : " GB";
  auto gbs = [&](std::optional<double> v) {
    return v ? fmt::format("{:.2f}{}", *v / unit_scale, unit) : std::string("—");
  };
  auto ss = [](std::optional<double> v) { return v ? secs(*v) + " s" : std::string("—"); };
  d.cards.push_back({"peak memory", mp ? fmt::format("{} measured", gbs(mp)) : std::string("not measured"),
                     fmt::format("predicted {}, error {}", gbs(pp), err(pp, mp)), ""});
  d.cards.push_back({"step time", ms ? fmt::format("{} measured", ss(ms)) : std::string("not measured"),
                     ps ? fmt::format("predicted {}, error {}", ss(ps), err(ps, ms)) : std::string("not predicted"), ""});

  // Components: memory in bytes; names ending in _s are seconds. Charts hold the pairs with both figures.
  PairChart mem, time;
  mem.id = "validation-memory", mem.title = "Memory: predicted vs measured";
  mem.axis_label = small ? "MB per rank" : "GB per GPU";
  mem.scale = unit_scale, mem.decimals = 2, mem.unit = unit;
  time.id = "validation-time", time.title = "Step time: predicted vs measured", time.axis_label = "seconds";
  time.decimals = 3, time.unit = " s";
  if (pp && mp) mem.rows.push_back({"peak", *pp, *mp});
  if (ps && ms) time.rows.push_back({"step", *ps, *ms});
  Table t;
  t.header = {"component", "predicted", "measured", "error"};
  t.numeric = {false, true, true, true};
  t.rows.push_back({"**peak**", gbs(pp), gbs(mp), err(pp, mp)});
  t.rows.push_back({"**step**", ss(ps), ss(ms), err(ps, ms)});
  if (const json* comps = r.find(doc, "components"); comps && comps->is_object()) {
    for (const auto& [name, v] : comps->items()) {
      const std::string where = "components." + name;
      const std::optional<double> p = opt(v, "predicted", where), m = opt(v, "measured", where);
      if (!p && !m) continue;
      const bool seconds = name.size() > 2 && name.compare(name.size() - 2, 2, "_s") == 0;
      if (p && m) (seconds ? time : mem).rows.push_back({name, *p, *m});
      t.rows.push_back({name, seconds ? ss(p) : gbs(p), seconds ? ss(m) : gbs(m), err(p, m)});
    }
  }
  Section s{"Predicted vs measured", {}};
  s.blocks.push_back(paragraph("The error is 100 · (predicted − measured) / measured: positive when the model "
                               "over-predicts."));
  if (!mem.rows.empty()) s.blocks.push_back(chart_block(predicted_vs_measured_chart(mem)));
  if (!time.rows.empty()) s.blocks.push_back(chart_block(predicted_vs_measured_chart(time)));
  s.blocks.push_back(table_block(std::move(t)));
  d.sections.push_back(std::move(s));
  return d;
}

namespace {

// --- Calibration profiles (calibrate/README.md, schema version 1) ---------------------------------------------

const char* const kSeriesPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                      "#b07aa1", "#edc948", "#9c755f", "#ff9da7", "#bab0ac"};

// A row of numbers ("points", "table" entries); InputError naming it when it is not one.
std::vector<double> number_row(const Reader& r, const json& row, const std::string& where, size_t min_size) {
  if (!row.is_array() || row.size() < min_size) r.fail("", where, "is not a row of numbers");
  std::vector<double> out;
  for (const json& v : row) {
    if (!v.is_number()) r.fail("", where, "holds something that is not a number");
    out.push_back(v.get<double>());
  }
  return out;
}

// A duration for people: 26.2 µs, 1.02 ms, 3.4 s.
std::string duration(double s) {
  if (s < 1e-3) return fmt::format("{:.3g} µs", s * 1e6);
  if (s < 1) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} s", s);
}

}  // namespace

Document calibration_document(const json& doc, const Reader& r) {
  Document d;
  const std::string name = r.str_or(doc, "name", "profile");
  d.title = "calibration: " + name;
  const json* meta = r.find(doc, "meta");
  const json empty = json::object();
  const json& m = meta && meta->is_object() ? *meta : empty;
  std::string devices;
  if (const json* dv = r.find(m, "devices"); dv && dv->is_array())
    for (const json& x : *dv)
      if (x.is_string()) devices += (devices.empty() ? "" : ", ") + x.get<std::string>();
  const int64_t ranks = static_cast<int64_t>(r.num_or(m, "ranks", 0)), nodes = static_cast<int64_t>(r.num_or(m, "nodes", 1));
  d.subtitle.push_back(fmt::format("{} ranks on {} node{} · backend {}{} · refines the cluster preset {}", ranks, nodes,
                                   nodes == 1 ? "" : "s", r.str_or(m, "backend", "?"),
                                   devices.empty() ? "" : " · " + devices, r.str_or(doc, "base_cluster", "?")));
  if (const std::string date = r.str_or(m, "date", ""); !date.empty())
    d.subtitle.push_back(fmt::format("measured {}{}", date, r.flag_or(m, "quick", false) ? " (--quick)" : ""));

  const json& hw = r.object(doc, "hardware");
  const std::string dtype = r.str_or(hw, "dtype", "");
  const double wrong = r.num_or(hw, "wrong", 0);
  d.cards.push_back({"device", r.str_or(hw, "device", "?") + (dtype.empty() ? "" : " · " + dtype),
                     fmt::format("peak {:.3g} TFLOP/s", r.num_or(hw, "peak_tflops", 0)), ""});
  if (const double copy = r.num_or(hw, "copy_gbps", 0); copy > 0)
    d.cards.push_back({"copy bandwidth", fmt::format("{:.3g} GB/s", copy), "large copies, read + write", ""});
  d.cards.push_back({"wrong elements", fmt::format("{:.0f}", wrong), "over every collective",
                     wrong == 0 ? "good" : "bad"});

  // Collectives: measured busbw per size, and the fit's busbw over the measured range.
  LogChart busbw{"busbw", "Bus bandwidth vs message size", "message size S (bytes, nccl-tests convention)",
                 "bus bandwidth (GB/s)", true, {}, 920, 440};
  Table fits;
  fits.header = {"collective", "scope", "ranks", "sizes", "rms error", "max error",
                 "fit per segment: α (latency), 1/β (bandwidth)"};
  fits.numeric = {false, false, true, true, true, true, false};
  size_t worst = 0;
  double worst_rms = -1;
  const json* colls = r.find(doc, "collectives");
  if (colls && colls->is_array()) {
    for (size_t i = 0; i < colls->size(); ++i) {
      const json& c = (*colls)[i];
      const std::string where = fmt::format("collectives[{}]", i);
      const std::string op = r.str(c, "op", where), scope = r.str_or(c, "scope", "world");
      const int64_t n = static_cast<int64_t>(r.num_or(c, "ranks", 0));
      LogSeries series{fmt::format("{} · {} · {} ranks", op, scope, n), kSeriesPalette[i % std::size(kSeriesPalette)], {}, {}};
      double factor = 0;  // busbw / algbw, from the points themselves (nccl-tests doc/PERFORMANCE.md)
      const json& points = r.array(c, "points", where);
      for (size_t k = 0; k < points.size(); ++k) {
        const auto row = number_row(r, points[k], fmt::format("{}.points[{}]", where, k), 6);
        series.points.push_back({row[0], row[5]});
        if (factor == 0 && row[4] > 0) factor = row[5] / row[4];
      }
      struct Seg {
        double from, to, alpha, beta;
      };
      std::vector<Seg> segs;
      std::string fit_text;
      if (const json* fit = r.find(c, "fit"); fit && fit->is_array()) {
        for (size_t k = 0; k < fit->size(); ++k) {
          const std::string fw = fmt::format("{}.fit[{}]", where, k);
          const Seg sg{r.num((*fit)[k], "from_bytes", fw), r.num((*fit)[k], "to_bytes", fw), r.num((*fit)[k], "alpha_s", fw),
                       r.num((*fit)[k], "beta_s_per_byte", fw)};
          segs.push_back(sg);
          fit_text += fmt::format("{}{}–{}: {}, {}", fit_text.empty() ? "" : "; ", size_label(sg.from), size_label(sg.to),
                                  duration(sg.alpha), sg.beta > 0 ? fmt::format("{:.3g} GB/s", 1e-9 / sg.beta) : "∞");
        }
      }
      const double lo = r.num_or(c, "min_bytes", series.points.empty() ? 0 : series.points.front().x);
      const double hi = r.num_or(c, "max_bytes", series.points.empty() ? 0 : series.points.back().x);
      if (!segs.empty() && factor > 0 && lo > 0 && hi > lo) {
        for (int k = 0; k <= 64; ++k) {
          const double bytes = lo * std::pow(hi / lo, k / 64.0);
          const Seg* sg = &segs.back();
          for (const Seg& x : segs)
            if (bytes <= x.to) { sg = &x; break; }
          const double t = sg->alpha + sg->beta * bytes;
          if (t > 0) series.curve.push_back({bytes, factor * bytes / t / 1e9});
        }
      }
      const double rms = r.num_or(c, "rms_error_pct", 0);
      if (rms > worst_rms) worst_rms = rms, worst = i;
      fits.rows.push_back({op, scope, std::to_string(n), std::to_string(points.size()), fmt::format("{:.1f} %", rms),
                           fmt::format("{:.1f} %", r.num_or(c, "max_error_pct", 0)), fit_text.empty() ? "—" : fit_text});
      busbw.series.push_back(std::move(series));
    }
  }
  if (!busbw.series.empty()) {
    d.cards.push_back({"collectives", fmt::format("{} fitted", busbw.series.size()),
                       fmt::format("worst rms error {:.1f} % ({})", worst_rms, fits.rows[worst][0]), ""});
    Section s{"Collectives: bus bandwidth vs message size", {}};
    s.blocks.push_back(paragraph(
        "Points are the measured medians; lines are the fitted t = α + β·S, per segment, over the measured sizes. Bus "
        "bandwidth is nccl-tests' busbw: the algorithm bandwidth S/t times the collective's factor, comparable "
        "across ranks."));
    s.blocks.push_back(chart_block(loglog_chart(busbw)));
    s.blocks.push_back(table_block(std::move(fits)));
    d.sections.push_back(std::move(s));
  }

  // GEMMs: achieved TFLOP/s against the work of one GEMM.
  if (const json* gemm = r.find(doc, "gemm.table"); gemm && gemm->is_array() && !gemm->empty()) {
    LogChart g{"gemm", "GEMM throughput by size", "FLOPs of one GEMM (2·m·n·k)", "achieved TFLOP/s", false, {}, 920, 400};
    LogSeries pts{"GEMM " + r.str_or(doc, "gemm.dtype", dtype), "#4e79a7", {}, {}};
    Table t;
    t.header = {"m", "n", "k", "median", "TFLOP/s", "efficiency"};
    t.numeric = {true, true, true, true, true, true};
    for (size_t k = 0; k < gemm->size(); ++k) {
      const auto row = number_row(r, (*gemm)[k], fmt::format("gemm.table[{}]", k), 8);
      pts.points.push_back({2 * row[0] * row[1] * row[2], row[6]});
      t.rows.push_back({fmt::format("{:.0f}", row[0]), fmt::format("{:.0f}", row[1]), fmt::format("{:.0f}", row[2]),
                        duration(row[3]), fmt::format("{:.3g}", row[6]), pct(row[7], 0)});
    }
    g.series.push_back(std::move(pts));
    Section s{"GEMM efficiency", {}};
    s.blocks.push_back(paragraph(fmt::format(
        "Each measured shape's throughput; efficiency is against the peak of {:.3g} TFLOP/s. Small GEMMs cannot fill "
        "the device: that is why the planner times every GEMM at its own shape.",
        r.num_or(hw, "peak_tflops", 0))));
    s.blocks.push_back(chart_block(loglog_chart(g)));
    s.blocks.push_back(table_block(std::move(t)));
    d.sections.push_back(std::move(s));
  }
  return d;
}

}  // namespace shardplan::report
