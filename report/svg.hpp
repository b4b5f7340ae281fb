#pragma once
// A few helpers for writing SVG by hand: escaping, compact numbers, "nice" axis ticks, and an estimate of the
// width of a line of text (no font metrics are available; the estimate is deliberately generous).
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::report {

// XML text and attribute escaping (& < > " ').
std::string xml_escape(std::string_view s);

// A coordinate or length, one decimal, no trailing ".0" ("12", "12.5", "-3").
std::string coord(double v);

// Ticks from 0 (or lo) up to at least hi, at a step of 1, 2, 2.5 or 5 × 10^k, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Decades (and, when few, 1-2-5 steps) covering [lo, hi] for a log axis; lo > 0.
std::vector<double> log_ticks(double lo, double hi);

// Width in pixels of `s` in a proportional sans-serif font of `font_px` (UTF-8 aware; wide glyphs counted wider).
double text_width(std::string_view s, double font_px);

// A number for an axis tick: 0, 0.5, 20, 1.5k, 2M... (at most 3 significant digits).
std::string tick_label(double v);

// A message size for a log axis, in steps of 1024 as nccl-tests prints them: 8 B, 1 KB, 64 MB, 2 GB.
std::string size_label(double bytes);

}  // namespace shardplan::report
