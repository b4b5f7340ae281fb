#include "report/charts.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "report/svg.hpp"

namespace shardplan::report {

namespace {

constexpr const char* kFont =
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, 'Noto Sans', 'Liberation Sans', sans-serif";
constexpr const char* kText = "#1f2328";
constexpr const char* kMuted = "#57606a";
constexpr const char* kGrid = "#e6e9ed";
constexpr const char* kAxis = "#8c959f";
constexpr const char* kHighlight = "#eaf2fe";
constexpr double kFontPx = 12;
constexpr double kSmallPx = 11;

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string open_svg(const std::string& id, double w, double h, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{0}\" class=\"chart\" width=\"{1}\" height=\"{2}\" "
      "viewBox=\"0 0 {1} {2}\" role=\"img\" aria-labelledby=\"{0}-title\" font-family=\"{3}\" font-size=\"{4}\">\n"
      "<title id=\"{0}-title\">{5}</title>\n",
      xml_escape(id), coord(w), coord(h), kFont, coord(kFontPx), xml_escape(title));
}

std::string text(double x, double y, const std::string& s, const char* anchor = "start", double size = kFontPx,
                 const char* fill = kText, const char* weight = nullptr) {
  return fmt::format("<text x=\"{}\" y=\"{}\"{}{}{}{}>{}</text>\n", coord(x), coord(y),
                     std::string(anchor) == "start" ? "" : fmt::format(" text-anchor=\"{}\"", anchor),
                     size == kFontPx ? "" : fmt::format(" font-size=\"{}\"", coord(size)),
                     std::string(fill) == kText ? "" : fmt::format(" fill=\"{}\"", fill),
                     weight ? fmt::format(" font-weight=\"{}\"", weight) : "", xml_escape(s));
}

std::string line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
                 const char* dash = nullptr) {
  return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n",
                     coord(x1), coord(y1), coord(x2), coord(y2), stroke, coord(width),
                     dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "");
}

std::string rect(double x, double y, double w, double h, const std::string& fill, const std::string& tooltip = "",
                 const char* extra = "") {
  if (tooltip.empty())
    return fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}/>\n", coord(x), coord(y),
                       coord(w), coord(h), fill, extra);
  return fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}><title>{}</title></rect>\n",
                     coord(x), coord(y), coord(w), coord(h), fill, extra, xml_escape(tooltip));
}

// Swatch-and-name items, wrapped to `max_w`; returns the height used.
double legend(std::string& out, const std::vector<Series>& items, double x0, double y0, double max_w) {
  if (items.empty()) return 0;
  double x = x0, y = y0;
  const double row_h = 18;
  for (const Series& s : items) {
    const double w = 14 + text_width(s.name, kSmallPx) + 16;
    if (x > x0 && x + w > x0 + max_w) {
      x = x0;
      y += row_h;
    }
    out += rect(x, y + 3, 10, 10, s.color, "", " rx=\"2\"");
    out += text(x + 14, y + 12, s.name, "start", kSmallPx, kMuted);
    x += w;
  }
  return y - y0 + row_h;
}

std::string value_string(double v, const std::string& unit, int decimals) {
  return fmt::format("{:.{}f}{}", v, decimals, unit);
}

// Labels of vertical reference lines above a plot: the highest to the right of its line, the others to the
// left; rows are added where labels would overlap. Returns (per label) its row, and the number of rows.
struct PlacedLabel {
  double x;
  const char* anchor;
  int row;
};
std::vector<PlacedLabel> place_line_labels(const std::vector<std::pair<double, std::string>>& lines, double right_edge,
                                           int& rows) {
  std::vector<PlacedLabel> placed;
  std::vector<std::vector<std::pair<double, double>>> used;
  size_t highest = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].first > lines[highest].first) highest = i;
  for (size_t i = 0; i < lines.size(); ++i) {
    const double w = text_width(lines[i].second, kSmallPx);
    const double x = lines[i].first;
    bool right = i == highest && x + 4 + w <= right_edge;
    const double a = right ? x + 4 : x - 4 - w, b = right ? x + 4 + w : x - 4;
    int row = 0;
    for (;; ++row) {
      if (static_cast<size_t>(row) == used.size()) used.emplace_back();
      bool clash = false;
      for (auto [u, v] : used[static_cast<size_t>(row)])
        if (a < v + 6 && b > u - 6) clash = true;
      if (!clash) break;
    }
    used[static_cast<size_t>(row)].push_back({a, b});
    placed.push_back({right ? x + 4 : x - 4, right ? "start" : "end", row});
  }
  rows = static_cast<int>(used.size());
  return placed;
}

}  // namespace

double Bar::total() const {
  double t = 0;
  for (const Segment& s : segments) t += std::max(0.0, s.value);
  return t;
}

std::string stacked_bar_chart(const BarChart& c) {
  std::map<std::string, const Series*> style;
  for (const Series& s : c.series) style[s.key] = &s;

  // Which series occur (legend), and the texts that set the margins.
  std::vector<Series> present;
  for (const Series& s : c.series)
    for (const Bar& b : c.bars)
      if (std::any_of(b.segments.begin(), b.segments.end(),
                      [&](const Segment& g) { return g.key == s.key && g.value > 0; })) {
        present.push_back(s);
        break;
      }
  bool any_detail = false;
  double label_w = 0, value_w = 0;
  std::vector<std::string> values;
  for (const Bar& b : c.bars) {
    const std::string label = (b.highlight ? "★ " : "") + b.label;
    label_w = std::max(label_w, text_width(label, kFontPx) * (b.highlight ? 1.08 : 1.0));
    if (!b.detail.empty()) {
      any_detail = true;
      label_w = std::max(label_w, text_width(b.detail, kSmallPx));
    }
    values.push_back(b.value_text.empty() ? value_string(b.total() / c.scale, c.unit, c.decimals) : b.value_text);
    value_w = std::max(value_w, text_width(values.back(), kSmallPx));
  }
  label_w = std::clamp(label_w + 16, 100.0, 360.0);
  const double x0 = label_w, x1 = c.width - std::max(48.0, value_w + 14);

  // Scale: the longest bar shown (after clipping) and every reference line.
  double max_shown = 0;
  for (const Bar& b : c.bars) max_shown = std::max(max_shown, c.clip_at > 0 ? std::min(b.total(), c.clip_at) : b.total());
  for (const RefLine& l : c.lines) max_shown = std::max(max_shown, l.value);
  if (max_shown <= 0) max_shown = c.scale;
  const std::vector<double> ticks = nice_ticks(0, max_shown / c.scale * 1.02);
  const double x_max = ticks.back() * c.scale;
  auto X = [&](double v) { return x0 + (x1 - x0) * v / x_max; };

  std::string body;
  double y = 6;
  y += legend(body, present, x0, y, x1 - x0) + 4;

  // Reference-line labels.
  std::vector<std::pair<double, std::string>> line_pos;
  for (const RefLine& l : c.lines) line_pos.push_back({X(l.value), l.label});
  int label_rows = 0;
  const auto placed = place_line_labels(line_pos, c.width - 2, label_rows);
  const double labels_top = y;
  y += label_rows * 14 + (label_rows > 0 ? 4 : 0);
  const double plot_top = y;
  const double row_h = any_detail ? 38 : 26, bar_h = 16;
  const double plot_bottom = plot_top + row_h * static_cast<double>(c.bars.size());

  // Grid and ticks.
  std::string grid;
  for (double t : ticks) {
    const double x = X(t * c.scale);
    grid += line(x, plot_top, x, plot_bottom, kGrid);
    grid += text(x, plot_bottom + 15, tick_label(t), "middle", kSmallPx, kMuted);
  }
  grid += line(x0, plot_top, x0, plot_bottom, kAxis);
  if (!c.axis_label.empty()) grid += text((x0 + x1) / 2, plot_bottom + 33, c.axis_label, "middle", kSmallPx, kMuted);

  // Rows: the highlight behind everything, then the reference lines, then bars and values over them.
  std::string rows, rows_bg;
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    const double top = plot_top + row_h * static_cast<double>(i);
    const double bar_y = top + (row_h - bar_h) / 2;
    if (b.highlight) rows_bg += rect(2, top + 1, c.width - 4, row_h - 2, kHighlight, "", " rx=\"4\"");
    const std::string label = (b.highlight ? "★ " : "") + b.label;
    if (b.detail.empty()) {
      rows += text(8, bar_y + bar_h / 2 + 4, label, "start", kFontPx, kText, b.highlight ? "600" : nullptr);
    } else {
      rows += text(8, top + 16, label, "start", kFontPx, kText, b.highlight ? "600" : nullptr);
      rows += text(8, top + 30, b.detail, "start", kSmallPx, kMuted);
    }
    double cum = 0;
    const double limit = c.clip_at > 0 ? c.clip_at : b.total();
    for (const Segment& g : b.segments) {
      if (g.value <= 0 || cum >= limit) continue;
      const double v = std::min(g.value, limit - cum);
      const auto it = style.find(g.key);
      const std::string color = it != style.end() ? it->second->color : std::string("#999999");
      const std::string name = it != style.end() ? it->second->name : g.key;
      rows += rect(X(cum), bar_y, X(cum + v) - X(cum), bar_h, color,
                   fmt::format("{} — {}: {}", b.label, name, value_string(g.value / c.scale, c.unit, c.decimals)));
      cum += v;
    }
    const bool clipped = c.clip_at > 0 && b.total() > c.clip_at;
    const double end = X(cum);
    if (clipped)  // a break mark: the bar goes on beyond the axis
      rows += fmt::format("<path d=\"M{} {}L{} {}M{} {}L{} {}\" stroke=\"#ffffff\" stroke-width=\"2.5\"/>\n",
                          coord(end - 11), coord(bar_y - 1), coord(end - 6), coord(bar_y + bar_h + 1), coord(end - 6),
                          coord(bar_y - 1), coord(end - 1), coord(bar_y + bar_h + 1));
    // A white halo keeps the value readable where a reference line crosses it.
    rows += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"3\" "
                        "stroke-linejoin=\"round\" paint-order=\"stroke\"{}>{}</text>\n",
                        coord(end + 6), coord(bar_y + bar_h / 2 + 4), coord(kSmallPx),
                        b.value_color.empty() ? kText : b.value_color, b.value_color.empty() ? "" : " font-weight=\"600\"",
                        xml_escape(values[i] + (clipped ? " ▸" : "")));
    if (clipped) {  // the parts beyond the axis are not drawn: the value's tooltip lists them all
      std::string parts;
      for (const Segment& g : b.segments) {
        if (g.value <= 0) continue;
        const auto it = style.find(g.key);
        parts += fmt::format("{}{}: {}", parts.empty() ? "" : ", ", it != style.end() ? it->second->name : g.key,
                             value_string(g.value / c.scale, c.unit, c.decimals));
      }
      rows.insert(rows.size() - 8, "<title>" + xml_escape(b.label + " — " + parts) + "</title>");  // before </text>
    }
  }

  // Reference lines over the bars.
  std::string refs;
  for (size_t i = 0; i < c.lines.size(); ++i) {
    const RefLine& l = c.lines[i];
    const double x = X(l.value);
    const double label_y = labels_top + 11 + 14 * placed[i].row;
    refs += line(x, label_y - 10, x, plot_bottom, l.color, 1.5, "5 3");
    refs += text(placed[i].x, label_y, l.label, placed[i].anchor, kSmallPx, l.color.c_str(), "600");
  }

  const double height = plot_bottom + (c.axis_label.empty() ? 24 : 42);
  return open_svg(c.id, c.width, height, c.title) + grid + rows_bg + refs + rows + body + "</svg>\n";
}

std::string predicted_vs_measured_chart(const PairChart& c) {
  const Series predicted{"predicted", "predicted", "#4e79a7"}, measured{"measured", "measured", "#f28e2b"};
  double label_w = 0, value_w = 0, max_v = 0;
  for (const PairRow& r : c.rows) {
    label_w = std::max(label_w, text_width(r.label, kFontPx));
    max_v = std::max({max_v, r.predicted, r.measured});
    value_w = std::max({value_w, text_width(value_string(r.predicted / c.scale, c.unit, c.decimals), kSmallPx),
                        text_width(value_string(r.measured / c.scale, c.unit, c.decimals), kSmallPx)});
  }
  label_w = std::clamp(label_w + 16, 90.0, 300.0);
  const double err_w = 70;
  const double x0 = label_w, x1 = c.width - err_w - value_w - 14;
  if (max_v <= 0) max_v = c.scale;
  const std::vector<double> ticks = nice_ticks(0, max_v / c.scale * 1.02);
  const double x_max = ticks.back() * c.scale;
  auto X = [&](double v) { return x0 + (x1 - x0) * std::max(0.0, v) / x_max; };

  std::string body;
  double y = 6;
  y += legend(body, {predicted, measured}, x0, y, x1 - x0) + 6;
  body += text(c.width - 8, y - 6, "error", "end", kSmallPx, kMuted, "600");
  const double plot_top = y, row_h = 30, bar_h = 10;
  const double plot_bottom = plot_top + row_h * static_cast<double>(c.rows.size());
  std::string grid;
  for (double t : ticks) {
    const double x = X(t * c.scale);
    grid += line(x, plot_top, x, plot_bottom, kGrid);
    grid += text(x, plot_bottom + 15, tick_label(t), "middle", kSmallPx, kMuted);
  }
  grid += line(x0, plot_top, x0, plot_bottom, kAxis);
  if (!c.axis_label.empty()) grid += text((x0 + x1) / 2, plot_bottom + 33, c.axis_label, "middle", kSmallPx, kMuted);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const PairRow& r = c.rows[i];
    const double top = plot_top + row_h * static_cast<double>(i);
    body += text(8, top + row_h / 2 + 4, r.label);
    const double y1 = top + row_h / 2 - bar_h - 1, y2 = top + row_h / 2 + 1;
    const std::string pv = value_string(r.predicted / c.scale, c.unit, c.decimals);
    const std::string mv = value_string(r.measured / c.scale, c.unit, c.decimals);
    body += rect(x0, y1, X(r.predicted) - x0, bar_h, predicted.color, r.label + " — predicted: " + pv);
    body += rect(x0, y2, X(r.measured) - x0, bar_h, measured.color, r.label + " — measured: " + mv);
    body += text(X(r.predicted) + 5, y1 + bar_h - 1, pv, "start", 10, kMuted);
    body += text(X(r.measured) + 5, y2 + bar_h - 1, mv, "start", 10, kMuted);
    if (r.measured > 0) {
      const double err = 100 * (r.predicted - r.measured) / r.measured;
      const char* color = std::abs(err) <= 10 ? "#1a7f37" : std::abs(err) <= 25 ? "#9a6700" : "#cf222e";
      body += text(c.width - 8, top + row_h / 2 + 4, fmt::format("{:+.1f} %", err), "end", kFontPx, color, "600");
    } else {
      body += text(c.width - 8, top + row_h / 2 + 4, "—", "end", kFontPx, kMuted);
    }
  }
  const double height = plot_bottom + (c.axis_label.empty() ? 24 : 42);
  return open_svg(c.id, c.width, height, c.title) + grid + body + "</svg>\n";
}

std::string loglog_chart(const LogChart& c) {
  double xlo = INFINITY, xhi = 0, ylo = INFINITY, yhi = 0;
  auto take = [&](const XY& p) {
    if (!(p.x > 0) || !(p.y > 0) || !std::isfinite(p.x) || !std::isfinite(p.y)) return;
    xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x), ylo = std::min(ylo, p.y), yhi = std::max(yhi, p.y);
  };
  for (const LogSeries& s : c.series) {
    for (const XY& p : s.points) take(p);
    for (const XY& p : s.curve) take(p);
  }
  if (!(xhi > 0)) xlo = 1, xhi = 10, ylo = 1, yhi = 10;
  // x: powers of two (message sizes) or decades; y: decades.
  std::vector<double> xticks;
  if (c.x_is_bytes) {
    const double span = std::log2(xhi) - std::log2(std::max(1.0, xlo));
    int step = 1;
    for (int s : {1, 2, 5, 10})
      if (span / s <= 10) { step = s; break; } else step = 10;
    const int e0 = static_cast<int>(std::floor(std::log2(std::max(1.0, xlo)) / step)) * step;
    const int e1 = static_cast<int>(std::ceil(std::log2(xhi) / step - 1e-9)) * step;
    for (int e = e0; e <= std::max(e1, e0 + step); e += step) xticks.push_back(std::ldexp(1.0, e));
  } else {
    xticks = log_ticks(std::pow(10.0, std::floor(std::log10(xlo))), std::pow(10.0, std::ceil(std::log10(xhi) + 1e-12)));
  }
  const std::vector<double> yticks =
      log_ticks(std::pow(10.0, std::floor(std::log10(ylo))), std::pow(10.0, std::ceil(std::log10(yhi) + 1e-12)));
  const double lx0 = std::log(xticks.front()), lx1 = std::log(xticks.back());
  const double ly0 = std::log(yticks.front()), ly1 = std::log(std::max(yticks.back(), yticks.front() * 10));

  std::vector<Series> keys;
  for (size_t i = 0; i < c.series.size(); ++i)
    keys.push_back({c.series[i].name, c.series[i].name,
                    c.series[i].color.empty() ? kPalette[i % std::size(kPalette)] : c.series[i].color});
  double ytick_w = 0;
  for (double t : yticks) ytick_w = std::max(ytick_w, text_width(tick_label(t), kSmallPx));
  const double x0 = ytick_w + 34, x1 = c.width - 20;
  std::string body;
  double top = 6;
  top += legend(body, keys, x0, top, x1 - x0) + 8;
  const double y1 = c.height - 44;  // plot bottom
  auto X = [&](double v) { return x0 + (x1 - x0) * (std::log(v) - lx0) / (lx1 - lx0); };
  auto Y = [&](double v) { return y1 - (y1 - top) * (std::log(v) - ly0) / (ly1 - ly0); };

  std::string grid;
  for (double t : xticks) {
    grid += line(X(t), top, X(t), y1, kGrid);
    grid += text(X(t), y1 + 15, c.x_is_bytes ? size_label(t) : tick_label(t), "middle", kSmallPx, kMuted);
  }
  for (double t : yticks) {
    grid += line(x0, Y(t), x1, Y(t), kGrid);
    grid += text(x0 - 6, Y(t) + 4, tick_label(t), "end", kSmallPx, kMuted);
  }
  grid += line(x0, top, x0, y1, kAxis) + line(x0, y1, x1, y1, kAxis);
  grid += text((x0 + x1) / 2, y1 + 34, c.x_label, "middle", kSmallPx, kMuted);
  grid += fmt::format("<text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\" font-size=\"{}\" "
                      "fill=\"{}\">{}</text>\n",
                      coord((top + y1) / 2), coord(kSmallPx), kMuted, xml_escape(c.y_label));
  auto valid = [](const XY& p) { return p.x > 0 && p.y > 0 && std::isfinite(p.x) && std::isfinite(p.y); };
  for (size_t i = 0; i < c.series.size(); ++i) {
    const LogSeries& s = c.series[i];
    const std::string& color = keys[i].color;
    std::string d;
    for (const XY& p : s.curve)
      if (valid(p)) d += fmt::format("{}{} {}", d.empty() ? "M" : "L", coord(X(p.x)), coord(Y(p.y)));
    if (!d.empty())
      body += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"><title>{} (fit)</title></path>\n",
                          d, color, xml_escape(s.name));
    for (const XY& p : s.points)
      if (valid(p))
        body += fmt::format(
            "<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"1\"><title>{}: {} → "
            "{}</title></circle>\n",
            coord(X(p.x)), coord(Y(p.y)), color, xml_escape(s.name),
            xml_escape(c.x_is_bytes ? size_label(p.x) : tick_label(p.x)), xml_escape(fmt::format("{:.3g}", p.y)));
  }
  return open_svg(c.id, c.width, c.height, c.title) + grid + body + "</svg>\n";
}

namespace {

// Seconds for a time axis: ticks and a unit (s or ms) that suits the step's length.
struct TimeAxis {
  std::vector<double> ticks;  // in seconds, none past the end
  double end = 1;             // the axis ends with the step
  double div = 1;
  std::string unit = "s";
};
TimeAxis time_axis(double end_s) {
  TimeAxis a;
  a.end = end_s > 0 ? end_s : 1;
  if (a.end < 1) a.div = 1e-3, a.unit = "ms";
  for (double t : nice_ticks(0, a.end / a.div, 8))
    if (t * a.div <= a.end * (1 + 1e-9)) a.ticks.push_back(t * a.div);
  return a;
}

}  // namespace

std::string timeline_chart(const Timeline& t, const std::string& id) {
  const double width = 920;
  double end = t.step_s;
  for (const TimelineSpan& s : t.spans) end = std::max(end, s.end_s);
  const TimeAxis axis = time_axis(end);
  const double t_max = axis.end;
  double label_w = 0;
  for (const std::string& l : t.lanes) label_w = std::max(label_w, text_width(l, kSmallPx));
  const double x0 = std::clamp(label_w + 16, 80.0, 260.0), x1 = width - 16;
  auto X = [&](double s) { return x0 + (x1 - x0) * s / t_max; };

  std::map<std::string, const Series*> style;
  for (const Series& s : t.categories) style[s.key] = &s;
  std::vector<Series> present;
  for (const Series& s : t.categories)
    if (std::any_of(t.spans.begin(), t.spans.end(), [&](const TimelineSpan& sp) { return sp.category == s.key; }))
      present.push_back(s);

  std::string body;
  double top = 6;
  top += legend(body, present, x0, top, x1 - x0) + 6;
  const double lane_h = 20, bar_h = 14;
  const double bottom = top + lane_h * static_cast<double>(t.lanes.size());
  std::string grid;
  for (double tk : axis.ticks) {
    grid += line(X(tk), top, X(tk), bottom, kGrid);
    grid += text(X(tk), bottom + 15, tick_label(tk / axis.div), "middle", kSmallPx, kMuted);
  }
  grid += text((x0 + x1) / 2, bottom + 33, "time in the step (" + axis.unit + ")", "middle", kSmallPx, kMuted);
  if (t.step_s > 0) grid += line(X(t.step_s), top - 2, X(t.step_s), bottom, kAxis, 1, "3 3");

  // Spans by lane, in time order; neighbours of one category less than a pixel apart are merged.
  std::vector<std::vector<const TimelineSpan*>> by_lane(t.lanes.size());
  for (const TimelineSpan& s : t.spans)
    if (s.lane >= 0 && static_cast<size_t>(s.lane) < t.lanes.size() && s.end_s >= s.start_s)
      by_lane[static_cast<size_t>(s.lane)].push_back(&s);
  for (size_t lane = 0; lane < t.lanes.size(); ++lane) {
    const double y = top + lane_h * static_cast<double>(lane);
    if (lane % 2 == 1) body += rect(x0, y, x1 - x0, lane_h, "#f6f8fa");
    body += text(8, y + lane_h / 2 + 4, t.lanes[lane], "start", kSmallPx, kText);
    auto& spans = by_lane[lane];
    std::stable_sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->start_s < b->start_s; });
    size_t i = 0;
    while (i < spans.size()) {
      const TimelineSpan* first = spans[i];
      double a = first->start_s, b = first->end_s;
      size_t n = 1;
      while (i + n < spans.size() && spans[i + n]->category == first->category && X(spans[i + n]->start_s) - X(b) < 1.0) {
        b = std::max(b, spans[i + n]->end_s);
        ++n;
      }
      const auto it = style.find(first->category);
      const std::string color = it != style.end() ? it->second->color : std::string("#999999");
      const std::string name = it != style.end() ? it->second->name : first->category;
      const std::string tip =
          n == 1 ? fmt::format("{} ({}): {:.4g}–{:.4g} {}", first->label, name, a / axis.div, b / axis.div, axis.unit)
                 : fmt::format("{} × {} ops: {:.4g}–{:.4g} {}", name, n, a / axis.div, b / axis.div, axis.unit);
      body += rect(X(a), y + (lane_h - bar_h) / 2, std::max(0.6, X(b) - X(a)), bar_h, color, tip);
      i += n;
    }
  }
  body += line(x0, top, x0, bottom, kAxis);
  return open_svg(id, width, bottom + 42, "Timeline of one step, one lane per stream") + grid + body + "</svg>\n";
}

std::string memory_over_step_chart(const Timeline& t, const std::string& id) {
  const double width = 920, height = 320;
  double end = t.step_s, max_b = t.capacity_bytes;
  for (const MemoryTrack& m : t.memory)
    for (const MemorySample& s : m.samples) end = std::max(end, s.t_s), max_b = std::max(max_b, s.bytes);
  const TimeAxis axis = time_axis(end);
  const double t_max = axis.end;
  const std::vector<double> yticks = nice_ticks(0, std::max(max_b, 1e9) / 1e9 * 1.02, 5);
  const double y_max = yticks.back() * 1e9;
  std::vector<Series> keys;
  for (size_t i = 0; i < t.memory.size(); ++i)
    keys.push_back({t.memory[i].name, t.memory[i].name, kPalette[i % std::size(kPalette)]});
  const double x0 = 56, x1 = width - 20;
  std::string body;
  double top = 6;
  top += legend(body, keys, x0, top, x1 - x0) + 8;
  const double y1 = height - 44;
  auto X = [&](double s) { return x0 + (x1 - x0) * s / t_max; };
  auto Y = [&](double b) { return y1 - (y1 - top) * b / y_max; };
  std::string grid;
  for (double tk : axis.ticks) {
    grid += line(X(tk), top, X(tk), y1, kGrid);
    grid += text(X(tk), y1 + 15, tick_label(tk / axis.div), "middle", kSmallPx, kMuted);
  }
  for (double g : yticks) {
    grid += line(x0, Y(g * 1e9), x1, Y(g * 1e9), kGrid);
    grid += text(x0 - 6, Y(g * 1e9) + 4, tick_label(g), "end", kSmallPx, kMuted);
  }
  grid += line(x0, top, x0, y1, kAxis) + line(x0, y1, x1, y1, kAxis);
  grid += text((x0 + x1) / 2, y1 + 34, "time in the step (" + axis.unit + ")", "middle", kSmallPx, kMuted);
  grid += fmt::format("<text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\" font-size=\"{}\" "
                      "fill=\"{}\">allocated (GB)</text>\n",
                      coord((top + y1) / 2), coord(kSmallPx), kMuted);
  if (t.capacity_bytes > 0) {
    for (auto [v, label, color] : {std::tuple{t.capacity_bytes, std::string("capacity"), "#cf222e"},
                                   std::tuple{0.8 * t.capacity_bytes, std::string("80 % line"), "#bf8700"}}) {
      body += line(x0, Y(v), x1, Y(v), color, 1.5, "5 3");
      body += text(x1 - 4, Y(v) - 4, fmt::format("{} {:.1f} GB", label, v / 1e9), "end", kSmallPx, color, "600");
    }
  }
  // A step line per track, reduced to each pixel column's first, highest, lowest and last value.
  for (size_t i = 0; i < t.memory.size(); ++i) {
    const auto& samples = t.memory[i].samples;
    if (samples.empty()) continue;
    std::string d = fmt::format("M{} {}", coord(X(samples.front().t_s)), coord(Y(samples.front().bytes)));
    double peak = 0;
    size_t k = 0;
    while (k < samples.size()) {
      const double col = std::floor(X(samples[k].t_s));
      double lo = samples[k].bytes, hi = samples[k].bytes;
      size_t j = k;
      while (j + 1 < samples.size() && std::floor(X(samples[j + 1].t_s)) == col) {
        ++j;
        lo = std::min(lo, samples[j].bytes), hi = std::max(hi, samples[j].bytes);
      }
      peak = std::max(peak, hi);
      d += fmt::format("H{}V{}V{}V{}V{}", coord(X(samples[k].t_s)), coord(Y(samples[k].bytes)), coord(Y(hi)),
                       coord(Y(lo)), coord(Y(samples[j].bytes)));
      k = j + 1;
    }
    d += fmt::format("H{}", coord(X(std::max(end, samples.back().t_s))));
    body += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"><title>{}: peak {:.2f} GB</title></path>\n",
                        d, keys[i].color, xml_escape(t.memory[i].name), peak / 1e9);
  }
  return open_svg(id, width, height, "Allocated memory over the step") + grid + body + "</svg>\n";
}

}  // namespace shardplan::report
