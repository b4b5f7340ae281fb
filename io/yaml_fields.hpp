#pragma once
// Strict, typed reading of YAML preset fields. yaml-cpp happily converts "4096.5" or "yes" into whatever is
// asked for (or throws an exception that names no file); these helpers instead check the YAML scalar's text
// themselves and throw InputError with one line "origin:line: 'key' must be ..., got '...'".
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/error.hpp"

namespace shardplan::yaml {

// "origin:line" (1-based line) for a node or mark; just "origin" when yaml-cpp has no position for it.
std::string where(const std::string& origin, const YAML::Mark& mark);
std::string where(const std::string& origin, const YAML::Node& node);

// Text from a file as it may appear in a one-line message: line breaks and control bytes written as \n, \r, \xNN
// (a folded YAML scalar holds newlines; found by fuzz/fuzz_profile_yaml).
std::string printable(const std::string& text);

// Parses exactly one YAML document. Malformed YAML → InputError "origin:line: malformed YAML: reason". Bounded in
// parsed size before any tree is built: at most kMaxYamlNodes values with aliases expanded (a "billion laughs"
// document is 10 lines), at most kMaxYamlDepth levels; out of memory is a std::runtime_error naming `origin`.
inline constexpr int64_t kMaxYamlNodes = 100000;  // the largest calibration profile holds ~10 k
inline constexpr int64_t kMaxYamlDepth = 64;
YAML::Node load_document(const std::string& text, const std::string& origin);
// What load_document checks before YAML::Load, for readers that load YAML themselves (report): UTF-8 without control
// bytes, and the node budget. InputError naming origin:line; a syntax error is yaml-cpp's YAML::Exception.
void check_yaml_text(const std::string& text, const std::string& origin);

// Strict scalar parsers (exposed for tests): nullopt when the text is not exactly such a value.
std::optional<int64_t> parse_strict_int(std::string_view text);
std::optional<double> parse_strict_double(std::string_view text);  // finite only; no nan/inf
std::optional<bool> parse_strict_bool(std::string_view text);      // true/false (YAML 1.2 core spellings)

enum class Bound { positive, non_negative };

// Reads the fields of one YAML mapping. `what` names the mapping in messages ("model", "gpu", "cluster");
// `prefix` is prepended to keys of a nested mapping so messages say 'intra_node.gbps'.
class MapReader {
 public:
  MapReader(YAML::Node map, std::string origin, std::string what, std::string prefix = "");

  // Unknown and duplicated keys are errors: a typo must not silently fall back to a default.
  void check_keys(const std::vector<std::string_view>& known) const;

  bool has(const std::string& key) const;
  // "origin:line" of the key's value (of the mapping when the key is absent).
  std::string where(const std::string& key) const;
  const std::string& origin() const { return origin_; }
  const YAML::Node& node() const { return map_; }

  std::string string(const std::string& key) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  int64_t integer(const std::string& key, Bound bound) const;
  int64_t integer_or(const std::string& key, int64_t fallback, Bound bound) const;
  double number(const std::string& key, Bound bound) const;
  double number_or(const std::string& key, double fallback, Bound bound) const;
  bool boolean(const std::string& key) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  // A nested mapping (required).
  MapReader map(const std::string& key) const;

  // An enum spelled as a word; `parse` is one of the planner's parse_* functions, `choices` lists the
  // accepted words for the message ("gelu, swiglu").
  template <class E>
  E choice(const std::string& key, std::optional<E> (*parse)(const std::string&), const char* choices) const {
    std::string text = string(key);
    if (auto value = parse(text)) return *value;
    throw_choice_error(key, text, choices);
  }
  template <class E>
  E choice_or(const std::string& key, E fallback, std::optional<E> (*parse)(const std::string&),
              const char* choices) const {
    return has(key) ? choice(key, parse, choices) : fallback;
  }

 private:
  YAML::Node required(const std::string& key) const;
  std::string scalar_text(const std::string& key, const YAML::Node& value, const char* expected) const;
  [[noreturn]] void throw_choice_error(const std::string& key, const std::string& text, const char* choices) const;

  YAML::Node map_;
  std::string origin_;
  std::string what_;
  std::string prefix_;
};

// A short description of what a node holds, for "got ..." in messages: 'abc', a list, a mapping, nothing.
std::string describe(const YAML::Node& node);

}  // namespace shardplan::yaml
