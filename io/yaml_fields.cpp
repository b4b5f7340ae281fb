#include "io/yaml_fields.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <set>

namespace shardplan::yaml {

std::string where(const std::string& origin, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return origin;
  return fmt::format("{}:{}", origin, mark.line + 1);  // yaml-cpp counts lines from 0
}

std::string where(const std::string& origin, const YAML::Node& node) {
  // A node that is not defined (a missing key) has no mark, and Mark() on it would throw.
  if (!node.IsDefined()) return origin;
  return where(origin, node.Mark());
}

YAML::Node load_document(const std::string& text, const std::string& origin) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: malformed YAML: {}", where(origin, e.mark), e.msg));
  }
  // A second document would otherwise be silently ignored: one preset per file.
  if (documents.size() > 1) {
    throw InputError(fmt::format("{}: more than one YAML document ('---'); put one preset per file",
                                 where(origin, documents[1])));
  }
  if (documents.empty() || documents[0].IsNull()) {
    throw InputError(fmt::format("{}: the file is empty; expected a mapping such as 'name: ...'", origin));
  }
  if (!documents[0].IsMap()) {
    throw InputError(fmt::format("{}: expected a mapping of keys ('name: ...'), got {}",
                                 where(origin, documents[0]), describe(documents[0])));
  }
  return documents[0];
}

std::optional<int64_t> parse_strict_int(std::string_view text) {
  // Plain decimal only: from_chars alone would accept a prefix ("4096.5" → 4096).
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);  // from_chars rejects a leading '+'
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;  // overflow
  return value;
}

std::optional<double> parse_strict_double(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (!std::isfinite(value)) return std::nullopt;  // from_chars accepts "inf" and "nan"
  return value == 0 ? 0.0 : value;                  // no -0
}

std::optional<bool> parse_strict_bool(std::string_view text) {
  // YAML 1.1's yes/no/on/off are deliberately not accepted: "no" is also a country code and a word.
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  // yaml-cpp tags quoted scalars "!" and plain ones "?": a quoted number is text, and saying so explains
  // why '"32"' is not accepted as 32.
  if (node.Tag() == "!") return fmt::format("the quoted text \"{}\"", node.Scalar());
  return fmt::format("'{}'", node.Scalar());
}

MapReader::MapReader(YAML::Node map, std::string origin, std::string what, std::string prefix)
    : map_(std::move(map)), origin_(std::move(origin)), what_(std::move(what)), prefix_(std::move(prefix)) {}

void MapReader::check_keys(const std::vector<std::string_view>& known) const {
  std::set<std::string> seen;
  for (const auto& item : map_) {
    const YAML::Node& key_node = item.first;
    if (!key_node.IsScalar()) {
      throw InputError(fmt::format("{}: keys in {} must be words, got {}", yaml::where(origin_, key_node),
                                   what_, describe(key_node)));
    }
    const std::string& key = key_node.Scalar();
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || k == key;
    if (!is_known) {
      throw InputError(fmt::format("{}: unknown key '{}{}' in {} (known keys: {})", yaml::where(origin_, key_node),
                                   prefix_, key, what_, fmt::join(known, ", ")));
    }
    // yaml-cpp keeps both copies of a repeated key and lookups return the first: reject the ambiguity.
    if (!seen.insert(key).second) {
      throw InputError(fmt::format("{}: key '{}{}' appears twice in {}; keep one", yaml::where(origin_, key_node),
                                   prefix_, key, what_));
    }
  }
}

bool MapReader::has(const std::string& key) const {
  // operator[] on a const node does not insert the key.
  return static_cast<bool>(map_[key]);
}

std::string MapReader::where(const std::string& key) const {
  const YAML::Node value = map_[key];
  return value ? yaml::where(origin_, value) : yaml::where(origin_, map_);
}

YAML::Node MapReader::required(const std::string& key) const {
  const YAML::Node value = map_[key];
  if (!value) {
    throw InputError(fmt::format("{}: missing required key '{}{}' in {}", yaml::where(origin_, map_), prefix_, key,
                                 what_));
  }
  return value;
}

std::string MapReader::scalar_text(const std::string& key, const YAML::Node& value, const char* expected) const {
  if (!value.IsScalar()) {
    throw InputError(fmt::format("{}: '{}{}' must be {}, got {}", yaml::where(origin_, value), prefix_, key, expected,
                                 describe(value)));
  }
  return value.Scalar();
}

std::string MapReader::string(const std::string& key) const {
  return scalar_text(key, required(key), "text");
}

std::string MapReader::string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

int64_t MapReader::integer(const std::string& key, Bound bound) const {
  const char* expected = bound == Bound::positive ? "a positive integer" : "a non-negative integer";
  const YAML::Node value = required(key);
  std::string text = scalar_text(key, value, expected);
  std::optional<int64_t> parsed = value.Tag() == "!" ? std::nullopt : parse_strict_int(text);
  bool in_range = parsed && (bound == Bound::positive ? *parsed > 0 : *parsed >= 0);
  if (!in_range) {
    throw InputError(fmt::format("{}: '{}{}' must be {}, got {}", yaml::where(origin_, value), prefix_, key, expected,
                                 describe(value)));
  }
  return *parsed;
}

int64_t MapReader::integer_or(const std::string& key, int64_t fallback, Bound bound) const {
  return has(key) ? integer(key, bound) : fallback;
}

double MapReader::number(const std::string& key, Bound bound) const {
  const char* expected = bound == Bound::positive ? "a positive number" : "a number >= 0";
  const YAML::Node value = required(key);
  std::string text = scalar_text(key, value, expected);
  std::optional<double> parsed = value.Tag() == "!" ? std::nullopt : parse_strict_double(text);
  bool in_range = parsed && (bound == Bound::positive ? *parsed > 0 : *parsed >= 0);
  if (!in_range) {
    throw InputError(fmt::format("{}: '{}{}' must be {}, got {}", yaml::where(origin_, value), prefix_, key, expected,
                                 describe(value)));
  }
  return *parsed;
}

double MapReader::number_or(const std::string& key, double fallback, Bound bound) const {
  return has(key) ? number(key, bound) : fallback;
}

bool MapReader::boolean(const std::string& key) const {
  const YAML::Node value = required(key);
  std::string text = scalar_text(key, value, "true or false");
  std::optional<bool> parsed = value.Tag() == "!" ? std::nullopt : parse_strict_bool(text);
  if (!parsed) {
    throw InputError(fmt::format("{}: '{}{}' must be true or false, got {}", yaml::where(origin_, value), prefix_, key,
                                 describe(value)));
  }
  return *parsed;
}

bool MapReader::boolean_or(const std::string& key, bool fallback) const {
  return has(key) ? boolean(key) : fallback;
}

MapReader MapReader::map(const std::string& key) const {
  const YAML::Node value = required(key);
  if (!value.IsMap()) {
    throw InputError(fmt::format("{}: '{}{}' must be a mapping of keys, got {}", yaml::where(origin_, value), prefix_,
                                 key, describe(value)));
  }
  return MapReader(value, origin_, prefix_ + key, prefix_ + key + ".");
}

void MapReader::throw_choice_error(const std::string& key, const std::string& text, const char* choices) const {
  throw InputError(fmt::format("{}: '{}{}' must be one of {}; got '{}'", where(key), prefix_, key, choices, text));
}

}  // namespace shardplan::yaml
