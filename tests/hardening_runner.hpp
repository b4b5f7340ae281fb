#pragma once
// Shell-level runs of the real binary for the hardening battery (issue 19; tests/test_hardening_*.cpp): a script
// whose redirections are its own (`$B plan > /dev/full`, `$B presets >&-`), resource limits (`ulimit -v`) and time
// bounds (`timeout 20`), run in a fixture folder. $B is the binary.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/input_file.hpp"
#include "tests/cli_runner.hpp"

namespace shardplan::test {

// The sanitizer build reserves terabytes of address space: `ulimit -v` cannot run under it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

inline CliResult run_script(const std::string& script, const std::filesystem::path& cwd) {
  namespace fs = std::filesystem;
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path() / ("shardplan_hard_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string n = std::to_string(counter++);
  const fs::path file = dir / ("s" + n + ".sh"), out = dir / ("o" + n), err = dir / ("e" + n);
  // OpenMPI's own allocations read as leaks under LeakSanitizer (tests/test_bad_input.cpp does the same for MPI rows).
  std::ofstream(file) << (kAddressSanitizer ? "export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1\n" : "") << script << "\n";
  const std::string cmd = "cd '" + cwd.string() + "' && B='" + SHARDPLAN_BIN + "' bash '" + file.string() + "' >'" +
                          out.string() + "' 2>'" + err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(out);
  r.err = read_all(err);
  fs::remove(file);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// stderr is exactly one line "error: ...", printable (control bytes and non-UTF-8 escaped), naming every `mention`.
inline bool one_clean_error_line(const CliResult& r, std::initializer_list<const char*> mentions) {
  if (r.err.rfind("error: ", 0) != 0 || std::count(r.err.begin(), r.err.end(), '\n') != 1 || r.err.back() != '\n')
    return false;
  const std::string line = r.err.substr(0, r.err.size() - 1);
  if (io::escape_for_line(line) != line) return false;
  for (const char* m : mentions)
    if (line.find(m) == std::string::npos) return false;
  return true;
}

inline bool is_kind(const std::filesystem::path& p, mode_t kind) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

}  // namespace shardplan::test
