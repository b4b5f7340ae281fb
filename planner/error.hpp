#pragma once
// The one exception type the planner throws for bad input. Its message is a single line that names the
// offending flag, key or value and says how to fix it; the CLI prints it as `error: <message>` and exits 2.
#include <stdexcept>
#include <string>

namespace shardplan {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace shardplan
