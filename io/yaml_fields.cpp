#include "io/yaml_fields.hpp"

#include <fmt/format.h>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <charconv>
#include <cmath>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>

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

namespace {

// Length of the UTF-8 sequence starting at text[i], or 0 when it is not valid UTF-8 (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF).
size_t utf8_sequence_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

// yaml-cpp 0.7 can loop for minutes on invalid UTF-8 and control bytes (found by fuzz/fuzz_cluster_yaml): only
// text that is valid UTF-8 without control characters other than tab, newline and carriage return reaches it.
void require_plain_text(const std::string& text, const std::string& origin) {
  int64_t line = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_sequence_length(text, i);
    const bool control = c < 0x20 && c != '\t' && c != '\n' && c != '\r';
    if (n == 0 || control || c == 0x7F)
      throw InputError(fmt::format("{}:{}: byte 0x{:02X} is not UTF-8 text; presets and profiles are UTF-8 YAML",
                                   origin, line, c));
    if (c == '\n') ++line;
    i += n;
  }
}

// Line (1-based) of a second document's "---" marker, or 0: a marker after content starts another document.
int64_t second_document_line(const std::string& text) {
  bool content = false;
  int64_t line = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view l(text.data() + pos, end - pos);
    ++line;
    const bool marker = l.substr(0, 3) == "---" && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
    if (marker && content) return line;
    const size_t first = l.find_first_not_of(" \t\r");
    if (!marker && first != std::string_view::npos && l[first] != '#' && l[first] != '%') content = true;
    pos = end + 1;
  }
  return 0;
}

// Counts the nodes of the first document as a reader walking it would meet them: an alias counts the whole
// subtree it names. yaml-cpp shares aliased nodes, so Load is cheap, but every walk (report's YAML-to-JSON, key
// checks) expands them: ten lines of nested aliases ("billion laughs") are 9^9 nodes. Refused before Load: more
// than kMaxYamlNodes nodes, or deeper than kMaxYamlDepth. The low-level parser only emits events (no tree).
class NodeBudget : public YAML::EventHandler {
 public:
  explicit NodeBudget(std::string origin) : origin_(std::move(origin)) {}
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = sizes_.find(anchor);
    add(mark, it == sizes_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    leaf(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  void add(const YAML::Mark& mark, int64_t n) {
    total_ += n;
    if (total_ > kMaxYamlNodes)
      throw InputError(fmt::format("{}: the YAML holds more than {} values{}; no preset or profile is that large",
                                   where(origin_, mark), kMaxYamlNodes,
                                   sizes_.empty() ? "" : " once its aliases (*name) are expanded"));
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    add(mark, 1);
    if (anchor != YAML::NullAnchor) sizes_[anchor] = 1;
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    add(mark, 1);
    if (static_cast<int64_t>(open_.size()) >= kMaxYamlDepth)
      throw InputError(fmt::format("{}: the YAML is nested deeper than {} levels", where(origin_, mark), kMaxYamlDepth));
    open_.push_back({anchor, total_});
  }
  void close() {
    if (open_.empty()) return;
    const Open o = open_.back();
    open_.pop_back();
    if (o.anchor != YAML::NullAnchor) sizes_[o.anchor] = total_ - o.start + 1;
  }
  struct Open {
    YAML::anchor_t anchor;
    int64_t start;  // total_ after the node itself was counted
  };
  std::string origin_;
  int64_t total_ = 0;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, int64_t> sizes_;  // expanded size of each anchored node
};

}  // namespace

void check_yaml_text(const std::string& text, const std::string& origin) {
  require_plain_text(text, origin);
  std::istringstream in(text);
  YAML::Parser parser(in);
  NodeBudget budget(origin);
  parser.HandleNextDocument(budget);  // one document: LoadAll's loop is what never returned on ",ne"
}

YAML::Node load_document(const std::string& text, const std::string& origin) {
  require_plain_text(text, origin);  // before anything else parses it (check_yaml_text repeats it: cheap)
  // One preset per file: a second document would otherwise be silently ignored.
  if (const int64_t line = second_document_line(text))
    throw InputError(fmt::format("{}:{}: more than one YAML document ('---'); put one preset per file", origin, line));
  // YAML::Load, not LoadAll: yaml-cpp 0.7's LoadAll never returns on a stray top-level ',' (found by
  // fuzz/fuzz_cluster_yaml: the 3-byte input ",ne").
  YAML::Node document;
  try {
    check_yaml_text(text, origin);
    document = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: malformed YAML: {}", where(origin, e.mark), printable(e.msg)));
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format("{}: out of memory while reading its {} bytes of YAML", origin, text.size()));
  }
  if (!document.IsDefined() || document.IsNull()) {
    throw InputError(fmt::format("{}: no YAML mapping found (empty, or not a 'key: value' file); expected a "
                                 "mapping such as 'name: ...'",
                                 origin));
  }
  if (!document.IsMap()) {
    throw InputError(fmt::format("{}: expected a mapping of keys ('name: ...'), got {}", where(origin, document),
                                 describe(document)));
  }
  return document;
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

std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if ((u < 0x20 && c != '\t') || u == 0x7f) out += fmt::format("\\x{:02X}", u);
    else out += c;
  }
  return out;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  // yaml-cpp tags quoted scalars "!" and plain ones "?": a quoted number is text, and saying so explains
  // why '"32"' is not accepted as 32.
  if (node.Tag() == "!") return fmt::format("the quoted text \"{}\"", printable(node.Scalar()));
  return fmt::format("'{}'", printable(node.Scalar()));
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
                                   prefix_, printable(key), what_, fmt::join(known, ", ")));
    }
    // yaml-cpp keeps both copies of a repeated key and lookups return the first: reject the ambiguity.
    if (!seen.insert(key).second) {
      throw InputError(fmt::format("{}: key '{}{}' appears twice in {}; keep one", yaml::where(origin_, key_node),
                                   prefix_, printable(key), what_));
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
  throw InputError(fmt::format("{}: '{}{}' must be one of {}; got '{}'", where(key), prefix_, key, choices, printable(text)));
}

}  // namespace shardplan::yaml
