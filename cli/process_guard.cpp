// Descriptors, SIGPIPE, the stdout check, strict integers, escaped error lines (process_guard.hpp).
#include "cli/process_guard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "io/input_file.hpp"

namespace shardplan::cli {

namespace {

bool g_stdout_closed = false;

// Occupies descriptor `fd` with /dev/null when it is closed; true when it was.
bool fill_closed(int fd, int mode) {
  if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) return false;
  const int got = ::open("/dev/null", mode | O_CLOEXEC);
  if (got >= 0 && got != fd) {
    ::dup2(got, fd);
    ::close(got);
  }
  return true;
}

// Whole decimal numbers only, within the option's type (`type` "INT" or "UINT": CLI11's names).
std::string strict_integer(const std::string& text, bool is_unsigned) {
  std::string digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.erase(0, 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    return fmt::format("'{}' is not a whole number (write it in decimal digits, e.g. 8)", io::escape_for_line(text));
  if (digits.size() > 1 && digits[0] == '0')
    return fmt::format("'{}' has a leading zero (it would be read as octal); write {}", text,
                       digits.substr(digits.find_first_not_of('0') == std::string::npos ? digits.size() - 1
                                                                                         : digits.find_first_not_of('0')));
  if (is_unsigned && negative && digits.find_first_not_of('0') != std::string::npos)
    return fmt::format("{} is negative; give a whole number of 0 or more", text);
  // Beyond 64 bits: compare as text (19 digits for int64, 20 for uint64).
  const std::string limit = is_unsigned ? "18446744073709551615" : negative ? "9223372036854775808" : "9223372036854775807";
  const std::string trimmed = digits.substr(std::min(digits.find_first_not_of('0'), digits.size() - 1));
  if (trimmed.size() > limit.size() || (trimmed.size() == limit.size() && trimmed > limit))
    return fmt::format("{} is implausibly large (beyond a 64-bit integer)", text);
  return "";
}

}  // namespace

void guard_process() {
  fill_closed(STDIN_FILENO, O_RDONLY);
  g_stdout_closed = fill_closed(STDOUT_FILENO, O_RDONLY);  // read-only: writing fails (EBADF) as to a closed one
  fill_closed(STDERR_FILENO, O_WRONLY);
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);  // `ulimit -f`: a write past the limit fails (EFBIG) instead of killing the process
}

int finish_stdout() {
  std::cout.flush();
  const bool stream_bad = std::cout.bad() || std::cout.fail();
  if (!stream_bad && std::fflush(stdout) == 0 && !std::ferror(stdout)) return 0;
  // The stream keeps no errno: one more byte finds out why (the output is incomplete anyway).
  int err = EIO;
  if (::write(STDOUT_FILENO, "\n", 1) < 0) err = errno;
  const std::string reason = g_stdout_closed || err == EBADF ? std::string("standard output is closed")
                                                             : std::string(std::strerror(err));
  std::fputs(error_line(fmt::format("cannot write standard output ({}); the output is incomplete", reason)).c_str(),
             stderr);
  std::fflush(stderr);
  return 1;
}

void add_strict_integer_checks(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    const bool is_unsigned = type == "UINT";
    o->check(CLI::Validator([is_unsigned](std::string& v) { return strict_integer(v, is_unsigned); }, "", "strict integer"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add_strict_integer_checks(*sub);
}

std::string error_line(const std::string& message) {
  std::string s = message;
  for (char& c : s)
    if (c == '\n') c = ' ';  // CLI11's messages can span lines; the contract wants one
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return "error: " + io::escape_for_line(s) + "\n";
}

}  // namespace shardplan::cli
