#pragma once
// The report's charts, each drawn as one inline <svg> element with a width, a height and a viewBox, from plain
// structs (no JSON here): horizontal stacked bars with reference lines (memory per rank against capacity and the
// 80 % line; step-time breakdowns), predicted vs measured pairs (validation), log-log points and fitted curves
// (calibration: bus bandwidth vs message size), and a timeline of one step with one lane per stream plus memory
// over the step (simulation). Every mark carries a <title>, so hovering shows the exact value; no scripts.
#include <string>
#include <vector>

namespace shardplan::report {

// A named, coloured series (a memory component, a part of the step, a kind of op).
struct Series {
  std::string key;
  std::string name;
  std::string color;
};

// --- Horizontal stacked bars -------------------------------------------------------------------------------

struct Segment {
  std::string key;  // Series::key
  double value = 0;
};

struct Bar {
  std::string label;   // left of the bar
  std::string detail;  // a second, smaller line under the label (may be empty)
  std::vector<Segment> segments;
  bool highlight = false;   // the recommendation: bold label, shaded row
  std::string value_text;   // right of the bar; empty: the total in the chart's unit
  std::string value_color;  // of the value text; empty: the text colour
  double total() const;
};

struct RefLine {
  double value = 0;    // in the bars' units
  std::string label;   // drawn above the plot
  std::string color;
};

struct BarChart {
  std::string id;          // the <svg>'s id
  std::string title;       // accessible name (<title>)
  std::string axis_label;  // under the x axis
  double scale = 1;        // axis and labels show value / scale (1e9: bytes as GB)
  int decimals = 1;
  std::string unit;        // appended to values: " GB", " s"
  std::vector<Series> series;
  std::vector<Bar> bars;
  std::vector<RefLine> lines;
  double clip_at = 0;      // > 0: longer bars are cut here with a break mark; their label keeps the value
  double width = 920;
};

std::string stacked_bar_chart(const BarChart& c);

// --- Predicted vs measured -----------------------------------------------------------------------------------

struct PairRow {
  std::string label;
  double predicted = 0;
  double measured = 0;
};

struct PairChart {
  std::string id, title, axis_label;
  double scale = 1;
  int decimals = 1;
  std::string unit;
  std::vector<PairRow> rows;
  double width = 920;
};

// Two thin bars per row (predicted, measured) and the signed error of the prediction, 100·(p − m)/m.
std::string predicted_vs_measured_chart(const PairChart& c);

// --- Log-log: points and fitted curves -----------------------------------------------------------------------

struct XY {
  double x = 0;
  double y = 0;
};

struct LogSeries {
  std::string name;
  std::string color;
  std::vector<XY> points;  // measured: circles
  std::vector<XY> curve;   // fitted: a line (may be empty)
};

struct LogChart {
  std::string id, title, x_label, y_label;
  bool x_is_bytes = true;  // x ticks as message sizes (1 KB, 1 MB...)
  std::vector<LogSeries> series;
  double width = 920;
  double height = 420;
};

// Both axes logarithmic; points with x or y ≤ 0 are left out.
std::string loglog_chart(const LogChart& c);

// --- Timeline of one step ------------------------------------------------------------------------------------

struct TimelineSpan {
  int lane = 0;
  double start_s = 0;
  double end_s = 0;
  std::string category;  // Series::key (forward, backward, tp, pp, dp, optimizer ...)
  std::string label;     // op name, for the tooltip
};

struct MemorySample {
  double t_s = 0;
  double bytes = 0;
};

struct MemoryTrack {
  std::string name;  // "stage 0"
  std::vector<MemorySample> samples;  // ascending time; the value holds until the next sample
};

struct Timeline {
  std::vector<std::string> lanes;  // one per stream, top to bottom ("stage 0 · compute")
  std::vector<TimelineSpan> spans;
  std::vector<Series> categories;
  double step_s = 0;
  std::vector<MemoryTrack> memory;
  double capacity_bytes = 0;  // 0: no capacity lines on the memory chart
};

// One lane per stream. Spans narrower than a pixel are merged with their neighbours of the same category, so the
// SVG stays small for steps of many thousands of ops.
std::string timeline_chart(const Timeline& t, const std::string& id);
// Allocated bytes over the step, one line per track, with capacity and 80 % lines when capacity is known.
std::string memory_over_step_chart(const Timeline& t, const std::string& id);

}  // namespace shardplan::report
