// Fuzz target: the command line of `predict` and `plan`, in process. The input is split at newlines into
// arguments ("predict\n--preset\n8b\n--gpus\n16"); they go through CLI11, the subcommand's flags and
// resolve_config exactly as main() runs them. Allowed endings: success, CLI::ParseError (exit 2), InputError (exit 2,
// one line). Anything else — a crash, a hang, undefined behaviour, std::logic_error from an unchecked conversion, a
// runtime_error where the input was at fault — is a finding.
//
// Arguments that would touch the file system beyond reading (--report, --emit, --trace, --presets-dir) or that name
// a path with '/' are skipped: a fuzzer must not write files or wander the disk.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "planner/error.hpp"

namespace {

std::vector<std::string> split_arguments(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  args.push_back(current);
  return args;
}

bool allowed(const std::string& arg) {
  if (arg.size() > 256 || arg.find('/') != std::string::npos) return false;
  for (const char* flag : {"--report", "--emit", "--trace", "--presets-dir"})
    if (arg.rfind(flag, 0) == 0) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  static std::ostringstream sink;  // the rendered output is not the point; keep the terminal quiet
  static std::streambuf* const original = std::cout.rdbuf(sink.rdbuf());
  (void)original;
  sink.str("");
  std::vector<std::string> args = split_arguments(data, size);
  if (args.size() > 48) return 0;
  for (const std::string& a : args)
    if (!allowed(a)) return 0;
  std::vector<char*> argv{const_cast<char*>("shardplan")};  // [1 + args] as main() gets them
  for (std::string& a : args) argv.push_back(a.data());

  CLI::App app{"shardplan", "shardplan"};
  app.require_subcommand(1);
  cli::GlobalOptions global;
  cli::add_predict_command(app, global);
  cli::add_plan_command(app, global);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
  } catch (const InputError& e) {
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) {
      std::cerr << "InputError message is not one line: '" << m << "'\n";
      std::abort();
    }
  } catch (const NoFeasiblePlan& e) {  // valid input, nothing fits (exit 3): one line as well
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) {
      std::cerr << "NoFeasiblePlan message is not one line: '" << m << "'\n";
      std::abort();
    }
  } catch (const std::exception& e) {
    std::cerr << "not an InputError: " << e.what() << "\n";
    std::abort();
  }
  return 0;
}
