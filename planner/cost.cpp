#include "planner/cost.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace shardplan {

std::optional<TrainingEstimate> estimate_training(const TrainingGoal& goal, double tokens_per_s, int64_t gpus,
                                                  int64_t tokens_per_step) {
  if (!(tokens_per_s > 0) || !std::isfinite(tokens_per_s) || gpus < 1 || !(goal.tokens > 0)) return std::nullopt;
  TrainingEstimate e;
  e.tokens = goal.tokens;
  e.tokens_per_s = tokens_per_s;
  e.gpus = gpus;
  e.seconds = goal.tokens / tokens_per_s;
  e.days = e.seconds / 86400.0;
  e.gpu_hours = e.seconds * static_cast<double>(gpus) / 3600.0;
  if (tokens_per_step > 0) e.steps = static_cast<int64_t>(std::ceil(goal.tokens / static_cast<double>(tokens_per_step)));
  e.gpu_hour_price = goal.gpu_hour_price;
  if (goal.gpu_hour_price) e.cost = e.gpu_hours * *goal.gpu_hour_price;
  return e;
}

double gpu_seconds_per_token(double tokens_per_s, int64_t gpus) {
  if (!(tokens_per_s > 0)) return std::numeric_limits<double>::infinity();
  return static_cast<double>(gpus) / tokens_per_s;
}

std::optional<double> parse_token_count(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  int exponent = 0;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K': exponent = 3; break;
    case 'M': exponent = 6; break;
    case 'B':
    case 'G': exponent = 9; break;
    case 'T': exponent = 12; break;
    default: break;
  }
  if (exponent != 0) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  // Digits, one point and an exponent only: no sign in front, no "inf"/"nan", no hex; no exponent with a suffix.
  for (char c : text) {
    const bool exp_char = c == 'e' || c == 'E' || c == '+' || c == '-';
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || exp_char)) return std::nullopt;
    if (exp_char && exponent != 0) return std::nullopt;
  }
  if (!std::isdigit(static_cast<unsigned char>(text.front())) && text.front() != '.') return std::nullopt;
  // The suffix becomes a decimal exponent of the text itself, so that "0.3T" is the double nearest 3e11.
  std::string s(text);
  if (exponent != 0) s += "e" + std::to_string(exponent);
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if (!std::isfinite(value) || !(value > 0)) return std::nullopt;
  return value;
}

}  // namespace shardplan
