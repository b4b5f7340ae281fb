// Measurement logs for `validate --measurements` (schema in io/measurements.hpp).
#include "io/measurements.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/input_file.hpp"
#include "io/json_checked.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"

namespace shardplan {

namespace {

using nlohmann::json;

// Byte counts above 2^59 (576 PB) are no machine's (planner/memory.hpp kMaxPlausibleBytes).
constexpr double kMaxBytes = 576460752303423488.0;
// A step longer than a week is a typo (milliseconds logged as seconds, ...), not a measurement.
constexpr double kMaxStepSeconds = 7 * 24 * 3600.0;
constexpr std::size_t kMaxSteps = 1000000;

std::string where(const std::string& origin, int64_t line, const std::string& key) {
  return fmt::format("{}:{}: '{}'", origin, line, key);
}

double number_at(const json& v, const std::string& at) {
  if (!v.is_number()) throw InputError(fmt::format("{} must be a number, not {}", at, v.type_name()));
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw InputError(fmt::format("{} must be finite", at));
  return x;
}

int64_t bytes_at(const json& v, const std::string& at) {
  const double x = number_at(v, at);
  if (x < 0 || x > kMaxBytes || x != std::floor(x))
    throw InputError(fmt::format("{} must be a whole number of bytes between 0 and 2^59, not {}", at, v.dump()));
  if (v.is_number_unsigned()) return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer()) return v.get<int64_t>();
  return static_cast<int64_t>(x);
}

MeasuredStep parse_line(const json& j, const std::string& origin, int64_t line) {
  if (!j.is_object())
    throw InputError(fmt::format("{}:{}: each line must be a JSON object like {{\"step\": 0, \"step_s\": 1.2}}, not {}",
                                 origin, line, j.type_name()));
  MeasuredStep s;
  const auto step = j.find("step");
  if (step == j.end())
    throw InputError(fmt::format("{}:{}: 'step' is missing (each line needs the step number)", origin, line));
  const double n = number_at(*step, where(origin, line, "step"));
  if (n < 0 || n != std::floor(n) || n > 1e15)
    throw InputError(fmt::format("{} must be a whole number ≥ 0, not {}", where(origin, line, "step"), step->dump()));
  s.step = static_cast<int64_t>(n);
  if (const auto t = j.find("step_s"); t != j.end() && !t->is_null()) {
    const double x = number_at(*t, where(origin, line, "step_s"));
    if (!(x > 0) || x > kMaxStepSeconds)
      throw InputError(fmt::format("{} must be seconds between 0 and a week, not {} (milliseconds?)",
                                   where(origin, line, "step_s"), t->dump()));
    s.step_s = x;
  }
  if (const auto p = j.find("peak_bytes"); p != j.end() && !p->is_null())
    s.peak_bytes = bytes_at(*p, where(origin, line, "peak_bytes"));
  if (const auto w = j.find("warmup"); w != j.end()) {
    if (!w->is_boolean())
      throw InputError(fmt::format("{} must be true or false, not {}", where(origin, line, "warmup"), w->dump()));
    s.warmup = w->get<bool>();
  }
  if (const auto c = j.find("components"); c != j.end() && !c->is_null()) {
    if (!c->is_object())
      throw InputError(fmt::format("{} must be an object of component → bytes", where(origin, line, "components")));
    const auto& names = measurement_component_names();
    for (const auto& [name, value] : c->items()) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw InputError(fmt::format("{}:{}: unknown component '{}' (use {})", origin, line, name,
                                     fmt::join(names, ", ")));
      s.components[name] = bytes_at(value, where(origin, line, "components." + name));
    }
  }
  return s;
}

}  // namespace

const std::vector<std::string>& measurement_component_names() {
  static const std::vector<std::string> names = {"params",      "grads",  "master",  "optimizer",    "activations",
                                                 "logits",      "buffers", "runtime", "fragmentation"};
  return names;
}

std::vector<MeasuredStep> parse_measurements(const std::string& text, const std::string& origin) {
  std::vector<MeasuredStep> steps;
  std::set<int64_t> seen;
  std::istringstream in(text);
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = io::parse_json_checked(line, 100000);  // a repeated key, absurd depth or size (io/json_checked.hpp)
    } catch (const io::JsonLimitError& e) {
      throw InputError(fmt::format("{}:{}: {}", origin, number, e.what()));
    } catch (const json::parse_error& e) {
      throw InputError(fmt::format("{}:{}: not JSON (byte {}): write one JSON object per line", origin, number, e.byte));
    } catch (const json::exception& e) {  // out_of_range.406 "number overflow parsing '1e400'" (tests/test_bad_input.cpp)
      std::string what = e.what();
      if (const auto bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
      throw InputError(fmt::format("{}:{}: not JSON ({}): write one JSON object per line", origin, number, what));
    }
    // Bounded in parsed size: 64 MiB of {"step": N} lines would be 5 M steps (~500 MB once parsed).
    if (steps.size() >= kMaxSteps)
      throw InputError(fmt::format("{}:{}: more than {} steps; give the log of one run (or every Nth step)", origin,
                                   number, kMaxSteps));
    MeasuredStep s = parse_line(j, origin, number);
    if (!seen.insert(s.step).second)
      throw InputError(fmt::format("{}:{}: step {} appears twice (one line per step; several ranks: log the busiest)",
                                   origin, number, s.step));
    steps.push_back(std::move(s));
  }
  if (steps.empty())
    throw InputError(fmt::format("{}: no measurements (expected lines like {{\"step\": 0, \"step_s\": 1.2, "
                                 "\"peak_bytes\": 1000}})", origin));
  // Steps that measured nothing validate nothing: every figure would print as "-" (issue 19, item 14).
  const bool measured = std::any_of(steps.begin(), steps.end(), [](const MeasuredStep& s) {
    return s.step_s || s.peak_bytes || !s.components.empty();
  });
  if (!measured)
    throw InputError(fmt::format("{}: {} step(s) but none has 'step_s', 'peak_bytes' or 'components' (other keys are "
                                 "ignored): log at least one of them",
                                 origin, steps.size()));
  std::sort(steps.begin(), steps.end(), [](const MeasuredStep& a, const MeasuredStep& b) { return a.step < b.step; });
  return steps;
}

std::vector<MeasuredStep> load_measurements(const std::string& path) {
  std::string text;
  // Bounded (/dev/zero is refused, not read until memory runs out); a FIFO does not block the open.
  const std::string why = io::read_file_bounded(path, text, kMaxInputBytes);
  if (why.rfind("larger than", 0) == 0)
    throw InputError(fmt::format("--measurements: cannot read '{}': larger than {} MiB; is it the right file?",
                                 io::escape_for_line(path), kMaxInputBytes >> 20));
  if (!why.empty())
    throw InputError(fmt::format("--measurements: cannot read '{}' ({}; check the path)", io::escape_for_line(path), why));
  try {
    return parse_measurements(text, path);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format("--measurements {}: out of memory while reading its {} bytes",
                                         io::escape_for_line(path), text.size()));
  }
}

Measurement summarise_measurements(const std::vector<MeasuredStep>& steps, int64_t warmup, const std::string& origin) {
  Measurement m;
  m.steps_total = static_cast<int64_t>(steps.size());
  std::vector<double> times;
  bool any_time = false;
  int64_t index = 0;
  for (const MeasuredStep& s : steps) {  // sorted by step number
    const bool dropped = index++ < warmup || s.warmup;  // the first `warmup` by number, flagged or not
    if (s.step_s) {
      any_time = true;
      if (!dropped) times.push_back(*s.step_s);
    }
    if (s.peak_bytes && (!m.peak_bytes || *s.peak_bytes > *m.peak_bytes)) {
      m.peak_bytes = s.peak_bytes;
      m.components = s.components;
    }
  }
  if (any_time && times.empty())
    throw InputError(fmt::format("{}: every timed step is a warm-up step ({} steps, --warmup {}): log more steps or "
                                 "lower --warmup", origin, steps.size(), warmup));
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    const size_t n = times.size();
    m.step_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    m.steps_timed = static_cast<int64_t>(n);
  }
  return m;
}

}  // namespace shardplan
