#pragma once
// JSON parsed with limits (reports/reliability.md, round 2): nlohmann's parser takes any size, any depth and keeps
// the last of two equal keys without a word. parse_json_checked refuses
//  - a key repeated in one object (config.json with two "hidden_size": which one did the user mean?);
//  - nesting deeper than kMaxJsonDepth (no shardplan document is deeper than 8; the recursive code that reads and
//    prints values must not meet 100,000 levels);
//  - more than `max_values` values (a 60 MB array is ~500 bytes of memory per value once parsed).
// Syntax errors are nlohmann's exceptions as before (json::parse_error with its byte, json::out_of_range for
// 1e400), so that each reader keeps its own message; a limit is a JsonLimitError whose text names the key or the
// limit. std::bad_alloc passes through: the caller names the file.
#include <cstddef>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace shardplan::io {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr std::size_t kMaxJsonValues = std::size_t{1} << 21;  // 2 M values: a plan with --all is ~10 k

struct JsonLimitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json parse_json_checked(const std::string& text, std::size_t max_values = kMaxJsonValues);

}  // namespace shardplan::io
