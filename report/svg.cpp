#include "report/svg.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace shardplan::report {

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string coord(double v) {
  if (!std::isfinite(v)) v = 0;
  double r = std::round(v * 10) / 10;
  if (r == 0) r = 0;  // no "-0"
  std::string s = fmt::format("{:.1f}", r);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step) * step;
  for (int i = 0;; ++i) {
    const double t = first + i * step;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi - step * 1e-9 || i > 100) break;
  }
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi > lo)) return ticks;
  const int first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int last = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  const bool fine = last - first <= 2;
  for (int e = first; e <= last; ++e) {
    const double d = std::pow(10.0, e);
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double t = m * d;
      if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) ticks.push_back(t);
    }
  }
  return ticks;
}

double text_width(std::string_view s, double font_px) {
  double units = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (c >= 0x80) units += 0.75;      // ×, ·, →, ★ ...
    else if (c == ' ' || c == '.' || c == ',' || c == 'i' || c == 'l' || c == 'I' || c == '|' || c == '(' || c == ')')
      units += 0.32;
    else if (c == 'm' || c == 'w' || c == 'M' || c == 'W' || c == '%') units += 0.9;
    else if (c >= 'A' && c <= 'Z') units += 0.68;
    else units += 0.56;
  }
  return units * font_px;
}

std::string tick_label(double v) {
  const double a = std::abs(v);
  auto trim = [](std::string s) {
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s;
  };
  if (a == 0) return "0";
  if (a >= 1e9) return trim(fmt::format("{:.2f}", v / 1e9)) + "G";
  if (a >= 1e6) return trim(fmt::format("{:.2f}", v / 1e6)) + "M";
  if (a >= 1e4) return trim(fmt::format("{:.2f}", v / 1e3)) + "k";
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 1) return trim(fmt::format("{:.2f}", v));
  return trim(fmt::format("{:.3g}", v));
}

std::string size_label(double bytes) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  double v = bytes;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::string s = fmt::format("{:.3g}", v);
  return s + " " + units[u];
}

}  // namespace shardplan::report
