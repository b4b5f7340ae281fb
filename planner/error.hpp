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

// Valid input for which no plan fits: the CLI prints `error: <message>` (the message says which changes fit) and
// exits 3, apart from a typo's 2, so that a script can tell "fix the command" from "change the hardware or the plan".
class NoFeasiblePlan : public std::runtime_error {
 public:
  explicit NoFeasiblePlan(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace shardplan
