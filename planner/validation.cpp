// Predicted against measured (planner/validation.hpp).
#include "planner/validation.hpp"

#include <cmath>

namespace shardplan {

std::optional<double> error_percent(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? std::optional<double>(0.0) : std::nullopt;
  return (predicted - measured) / measured * 100.0;
}

namespace {

ComparedFigure figure(std::string name, std::optional<double> predicted, std::optional<double> measured) {
  ComparedFigure f{std::move(name), predicted, measured, std::nullopt};
  if (predicted && measured) f.error_pct = error_percent(*predicted, *measured);
  return f;
}

}  // namespace

Validation compare_with_measurement(const Prediction& p, const MeasuredFigures& m, bool time_predicted) {
  Validation v;
  v.peak = figure("peak_bytes", static_cast<double>(p.peak_bytes()),
                  m.peak_bytes ? std::optional<double>(static_cast<double>(*m.peak_bytes)) : std::nullopt);
  v.step = figure("step_s", time_predicted ? std::optional<double>(p.time.step_s) : std::nullopt, m.step_s);
  std::map<std::string, int64_t> rest = m.components;
  for (const NamedBytes& c : component_bytes(p.memory.peak_stage().peak)) {
    std::optional<double> measured;
    if (auto it = rest.find(c.name); it != rest.end()) {
      measured = static_cast<double>(it->second);
      rest.erase(it);
    }
    v.components.push_back(figure(c.name, static_cast<double>(c.bytes), measured));
  }
  for (const auto& [name, bytes] : rest) v.components.push_back(figure(name, std::nullopt, static_cast<double>(bytes)));
  return v;
}

}  // namespace shardplan
