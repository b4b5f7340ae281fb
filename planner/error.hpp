#pragma once
// The one exception type the planner throws for bad input. Its message is a single line that names the
// offending flag, key or value and says how to fix it; the CLI prints it as `error: <message>` and exits 2.
#include <stdexcept>
#include <string>

namespace shardplan {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(one_line(message)) {}

  // Text quoted from a file can hold line breaks or terminal escapes (a folded YAML scalar, a JSON "a\nb"; found
  // by fuzz/fuzz_profile_yaml and fuzz/fuzz_hf_config): they are written out as \n, \r, \xNN, so the message
  // stays one line and cannot drive the terminal.
  static std::string one_line(const std::string& message) {
    std::string out;
    out.reserve(message.size());
    for (const char c : message) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if ((u < 0x20 && c != '\t') || u == 0x7f) out += "\\x" + std::string(1, "0123456789ABCDEF"[u >> 4]) + "0123456789ABCDEF"[u & 15];
      else out += c;
    }
    return out;
  }
};

}  // namespace shardplan
