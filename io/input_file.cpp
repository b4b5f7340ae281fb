// Bounded, non-blocking reads of named inputs; file identity; one-line escaping (io/input_file.hpp).
#include "io/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <istream>

#include <fmt/format.h>

#include "io/preset_store.hpp"
#include "io/yaml_fields.hpp"
#include "planner/error.hpp"

namespace shardplan::io {

namespace fs = std::filesystem;

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes a descriptor on every way out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_file_bounded(const std::string& path, std::string& out, std::size_t limit, bool regular_only) {
  out.clear();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "it is a folder, not a file";
  if (regular_only && !S_ISREG(st.st_mode)) return fmt::format("{}, not a regular file", kind_of(st.st_mode));
  if (S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) return fmt::format("{}, not a file to read", kind_of(st.st_mode));
  // O_NONBLOCK: open(2) of a FIFO without a writer would otherwise wait for one for ever.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) return std::strerror(errno);
  if (::fstat(f.fd, &st) != 0) return std::strerror(errno);
  if (regular_only && !S_ISREG(st.st_mode)) return fmt::format("{}, not a regular file", kind_of(st.st_mode));
  // Blocking reads from here: a FIFO whose writer is slow is waited for; one with no writer reads as ended.
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK);
  char chunk[65536];  // [64 KiB] read buffer
  while (true) {
    const ssize_t n = ::read(f.fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // a descriptor shared non-blocking with another process (a terminal)
      ::usleep(10000);
      continue;
    }
    if (n < 0) return std::strerror(errno);
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > limit) {
      out.clear();
      return fmt::format("larger than {} MiB", limit >> 20);
    }
    out.append(chunk, static_cast<std::size_t>(n));
  }
  return "";
}

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  struct stat sa {}, sb {};
  const bool has_a = ::stat(a.c_str(), &sa) == 0, has_b = ::stat(b.c_str(), &sb) == 0;
  if (has_a && has_b) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (has_a != has_b) return false;
  // Neither exists yet: the same name in the same (resolved) folder.
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a), ec1), cb = fs::weakly_canonical(fs::absolute(b), ec2);
  if (ec1 || ec2) return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
  return ca == cb;
}

void require_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag_a, a] = outputs[i];
    if (a.empty()) continue;
    struct stat st {};
    if (::stat(a.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) continue;  // /dev/null twice loses nothing
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [flag_b, b] = outputs[j];
      if (!same_file(a, b)) continue;
      throw InputError(fmt::format("{} {} and {} {} name the same file: one would overwrite the other; give each "
                                   "output its own file",
                                   flag_a, escape_for_line(a), flag_b, escape_for_line(b)));
    }
  }
}

std::string escape_for_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
      ++i;
      continue;
    }
    if (c == '\r') {
      out += "\\r";
      ++i;
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      out += fmt::format("\\x{:02X}", c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF) is kept whole; a C1
    // control (U+0080..U+009F, which some terminals obey) and any byte that does not start one are escaped.
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    bool valid = n > 0 && i + n <= text.size();
    for (std::size_t k = 1; valid && k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      valid = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (valid && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) valid = false;  // C1 controls
    if (!valid) {
      out += fmt::format("\\x{:02X}", c);
      ++i;
      continue;
    }
    out.append(text, i, n);
    i += n;
  }
  return out;
}

}  // namespace shardplan::io

namespace shardplan {

// Declared in io/preset_store.hpp (where every reader finds them).
std::string read_text_file(const std::string& path) {
  std::string text;
  // Bounded, and a FIFO does not block the open (io/input_file.hpp).
  const std::string why = io::read_file_bounded(path, text, kMaxInputBytes);
  if (why.rfind("larger than", 0) == 0)
    throw InputError(fmt::format("cannot read {}: larger than {} MiB, which no preset or config is; check the file name",
                                 yaml::printable(path), kMaxInputBytes >> 20));
  if (!why.empty()) throw InputError(fmt::format("cannot read {}: {}", yaml::printable(path), why));
  return text;
}

bool read_bounded(std::istream& in, std::string& out) {
  out.clear();
  char chunk[65536];  // [64 KiB] read buffer
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    if (out.size() + static_cast<std::size_t>(in.gcount()) > kMaxInputBytes) return false;
    out.append(chunk, static_cast<std::size_t>(in.gcount()));
  }
  return true;
}

}  // namespace shardplan
