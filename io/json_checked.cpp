// JSON with limits on repeats, depth and size (io/json_checked.hpp).
#include "io/json_checked.hpp"

#include <set>
#include <vector>

#include <fmt/format.h>

#include "io/input_file.hpp"

namespace shardplan::io {

using nlohmann::json;

json parse_json_checked(const std::string& text, std::size_t max_values) {
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each open object, innermost last
  std::vector<std::string> path;            // the key of each open object, for the message
  std::string last_key;
  std::size_t values = 0;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw JsonLimitError(fmt::format("nested deeper than {} levels (no shardplan input is)", kMaxJsonDepth));
        if (++values > max_values)
          throw JsonLimitError(fmt::format("more than {} values (is it the right file?)", max_values));
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        path.push_back(last_key);
        last_key.clear();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        if (!path.empty()) path.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.is_string() ? parsed.get<std::string>() : parsed.dump();
        if (!keys.empty() && !keys.back().insert(last_key).second) {
          std::string where;
          for (const std::string& p : path)
            if (!p.empty()) where += p + ".";
          throw JsonLimitError(fmt::format("key '{}{}' appears twice in one object; keep one", escape_for_line(where),
                                           escape_for_line(last_key)));
        }
        break;
      }
      case json::parse_event_t::value:
        if (++values > max_values)
          throw JsonLimitError(fmt::format("more than {} values (is it the right file?)", max_values));
        last_key.clear();
        break;
    }
    return true;
  };
  return json::parse(text, callback);
}

}  // namespace shardplan::io
