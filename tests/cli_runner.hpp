#pragma once
// Runs the real `shardplan` executable for CLI tests: exit code, stdout and stderr.
#include <sys/wait.h>

#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace shardplan::test {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a shell command line (run in `cwd` when given) and captures what it printed and its exit code.
inline CliResult run_shell(const std::string& command, const std::string& cwd = "") {
  namespace fs = std::filesystem;
  static int counter = 0;
  fs::path dir = fs::temp_directory_path() / ("shardplan_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path out = dir / ("out" + std::to_string(counter));
  fs::path err = dir / ("err" + std::to_string(counter++));
  std::string cmd;
  if (!cwd.empty()) cmd += "cd '" + cwd + "' && ";
  cmd += "{ " + command + "; } >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(out);
  r.err = read_all(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// `args` is appended to the binary path as-is (shell syntax); run in `cwd` when given.
inline CliResult run_cli(const std::string& args, const std::string& cwd = "") {
  return run_shell(std::string("'") + SHARDPLAN_BIN + "' " + args, cwd);
}

// One shell for several runs (CONTRIBUTING.md, Tests: a spawn per case strains the sanitizer pass): `base` + each of
// `runs` in turn, stdout and stderr together in `out`, each run's own exit code.
inline std::vector<CliResult> run_cli_batch(const std::string& base, const std::vector<std::string>& runs) {
  std::string script;
  for (const std::string& r : runs)
    script += std::string(script.empty() ? "" : "; ") + "'" + SHARDPLAN_BIN + "' " + base + r + " 2>&1; echo \"@@@ $?\"";
  const CliResult all = run_shell(script);
  std::vector<CliResult> out;
  for (size_t at = 0, end; (end = all.out.find("@@@ ", at)) != std::string::npos;) {
    CliResult r;
    r.out = all.out.substr(at, end - at);
    r.exit_code = std::stoi(all.out.substr(end + 4));
    out.push_back(std::move(r));
    at = all.out.find('\n', end) + 1;
  }
  return out;
}

// A bad-input failure: exit 2 and exactly one stderr line starting with "error:".
inline bool is_one_error_line(const CliResult& r) {
  if (r.exit_code != 2) return false;
  if (r.err.rfind("error: ", 0) != 0) return false;
  auto first_newline = r.err.find('\n');
  return first_newline == std::string::npos || first_newline == r.err.size() - 1;
}

// A bad-input failure (is_one_error_line) whose line names `names` (the flag, file or key at fault).
inline bool refuses_naming(const CliResult& r, const std::string& names) {
  return is_one_error_line(r) && r.err.find(names) != std::string::npos;
}

// Runs `args` and checks it is refused that way, reporting the command and its stderr when it is not.
inline void check_refused(const std::string& args, const std::string& names) {
  const CliResult r = run_cli(args);
  CAPTURE(args);
  CAPTURE(r.err);
  CHECK(refuses_naming(r, names));
}

}  // namespace shardplan::test
