#pragma once
// Strict, typed access to the fields of a Hugging Face config object (io/hf_config.cpp and io/hf_config_moe.cpp):
// every message names the file and the field.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/error.hpp"

namespace shardplan::hf {

using nlohmann::json;

inline std::string describe(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// A string from the file as it may appear in a one-line message: control characters escaped as in JSON (found by
// fuzz/fuzz_hf_config: a model_type "gpt\neox" split the error line in two).
inline std::string printable(const std::string& s) {
  const std::string quoted = json(s).dump();
  return quoted.substr(1, quoted.size() - 2);
}

// Typed, strict access to the fields of the config object; every message names the file and the field.
class Fields {
 public:
  Fields(const json& j, std::string origin, std::string family) : j_(j), origin_(std::move(origin)), family_(std::move(family)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  // The first of `keys` present (aliases: "num_hidden_layers" or GPT-2's "n_layer"), or nullopt.
  std::optional<int64_t> integer_opt(std::initializer_list<const char*> keys) const {
    for (const char* key : keys)
      if (has(key)) return as_positive_integer(key, j_.at(key));
    return std::nullopt;
  }
  int64_t integer(std::initializer_list<const char*> keys) const {
    if (auto v = integer_opt(keys)) return *v;
    throw missing(*keys.begin(), keys.size() > 1 ? *(keys.begin() + 1) : nullptr);
  }
  int64_t integer_or(std::initializer_list<const char*> keys, int64_t fallback) const {
    return integer_opt(keys).value_or(fallback);
  }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean())
      throw InputError(fmt::format("{}: '{}' must be true or false, got {}", origin_, key, describe(v)));
    return v.get<bool>();
  }

  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw InputError(fmt::format("{}: '{}' must be a number, got {}", origin_, key, describe(v)));
    return v.get<double>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) throw InputError(fmt::format("{}: '{}' must be a string, got {}", origin_, key, describe(v)));
    return v.get<std::string>();
  }

  InputError missing(const char* key, const char* alias = nullptr) const {
    return InputError(fmt::format("{}: '{}'{} is missing (needed to size a {} model); add it to the config", origin_,
                                  key, alias ? fmt::format(" (or '{}')", alias) : std::string(), family_));
  }

  const std::string& origin() const { return origin_; }
  const json& raw() const { return j_; }  // lists (layer_types, mlp_only_layers) are read by their family

 private:
  int64_t as_positive_integer(const char* key, const json& v) const {
    std::optional<int64_t> value;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) value = std::nullopt;
      else value = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) value = static_cast<int64_t>(d);
    }
    if (!value || *value <= 0)
      throw InputError(fmt::format("{}: '{}' must be a positive integer, got {}", origin_, key, describe(v)));
    return *value;
  }

  const json& j_;
  std::string origin_;
  std::string family_;
};

}  // namespace shardplan::hf
