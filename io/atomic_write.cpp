// Temporary name, fsync, rename (io/atomic_write.hpp). POSIX calls throughout: std::ofstream can neither fsync
// nor tell why a write failed.
#include "io/atomic_write.hpp"
#include "io/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "planner/error.hpp"

namespace shardplan::io {

namespace fs = std::filesystem;

namespace {

// A path that cannot be a file is the user's to fix (exit 2); a device that fails under a good path is not (exit 1).
bool is_path_problem(int err) {
  switch (err) {
    case ENOENT: case ENOTDIR: case EISDIR: case EACCES: case EPERM: case EROFS: case ENAMETOOLONG: case ELOOP:
    case EEXIST: case ENOTEMPTY: case EXDEV: case EINVAL:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void fail(const std::string& message, int err) {
  if (err == 0 || is_path_problem(err)) throw InputError(message);
  throw std::runtime_error(message);
}

// 0666 or 0777 less the umask: what open(2) would have created (mkstemp makes 0600, mkdtemp 0700).
mode_t file_mode(bool executable) {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return (executable ? 0777 : 0666) & ~mask;
}

// Writes all of `text` to `fd`, sets its mode, fsyncs and closes it. 0 or the errno of the first failure.
int finish_file(int fd, const std::string& text, mode_t mode) {
  size_t done = 0;
  int err = 0;
  while (done < text.size() && err == 0) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno != EINTR) err = errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fchmod(fd, mode) != 0) err = errno;
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// Makes a rename durable (the folder's entry); best effort, a failure here loses nothing already visible.
void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

fs::path folder_of(const fs::path& target) { return target.has_parent_path() ? target.parent_path() : fs::path("."); }

// [".NAME.tmp.XXXXXX"] beside `target`, a template for mkstemp/mkdtemp. (Appended piecewise: "." + name + ... trips
// a false -Wrestrict in GCC 12.)
std::string temporary_template(const fs::path& target) {
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp.XXXXXX";
  return (folder_of(target) / name).string();
}

// What a target path is, once symbolic links are followed (the header's rules).
struct Target {
  enum Kind { file, in_place } kind = file;
  std::string path;      // where to stage and rename (a link's target) or to write in place
  std::string identity;  // "dev:ino" of an existing file, the resolved path of a new one; "" = may repeat
  int stream = -1;       // 1 or 2 when the target is this process's stdout or stderr
  bool fifo = false, append = false;
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

Target classify(const std::string& path, const std::string& who) {
  Target t;
  t.path = path;
  struct stat l {};
  if (::lstat(path.c_str(), &l) != 0) {  // a new file (or a path mkstemp will explain)
    std::error_code ec;
    const fs::path resolved = fs::weakly_canonical(fs::absolute(path), ec);
    t.identity = ec ? path : resolved.string();
    return t;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(fmt::format("{}: cannot write (a symbolic link to a missing file; remove the link or create its target)", who),
         ENOENT);
  if (S_ISDIR(st.st_mode)) fail(fmt::format("{}: cannot write (it is a directory)", who), EISDIR);
  if (S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode))
    fail(fmt::format("{}: cannot write (it is a {}; name a regular file)", who,
                     S_ISBLK(st.st_mode) ? "block device" : "socket"),
         EINVAL);
  t.identity = fmt::format("{}:{}", st.st_dev, st.st_ino);
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat sf {};
    if (::fstat(fd, &sf) == 0 && sf.st_dev == st.st_dev && sf.st_ino == st.st_ino && !S_ISCHR(st.st_mode)) {
      t.kind = Target::in_place;  // `--out /dev/stdout > file`: after what was printed, through the same offset
      t.stream = fd;
      t.identity.clear();
      return t;
    }
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    t.kind = Target::in_place;
    t.fifo = S_ISFIFO(st.st_mode);
    if (S_ISCHR(st.st_mode)) t.identity.clear();  // /dev/null twice loses nothing
    return t;
  }
  if (S_ISLNK(l.st_mode)) {
    // /dev/fd/N, /proc/self/fd/N and the like name an open file, not a place for a new one: append in place.
    const bool fd_link = starts_with(path, "/dev/fd/") || starts_with(path, "/dev/std") ||
                         (starts_with(path, "/proc/") && path.find("/fd/") != std::string::npos);
    if (fd_link) {
      t.kind = Target::in_place;
      t.append = true;
      return t;
    }
    char* real = ::realpath(path.c_str(), nullptr);
    if (real != nullptr) {
      t.path = real;  // replace the file the link names; the link stays a link
      std::free(real);
    }
  }
  return t;
}

// Writes all of `text` to `fd`; 0 or the errno of the first failure.
int write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

void AtomicWriter::stage(const std::string& path, const std::string& text, const std::string& flag, bool executable) {
  const std::string who = flag.empty() ? path : flag + " " + path;
  if (path.empty()) fail(fmt::format("{}: cannot write (empty file name)", flag.empty() ? "output" : flag), 0);
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(fmt::format("{}: cannot write (it is a directory)", who), EISDIR);
  if (!fs::path(path).has_filename()) fail(fmt::format("{}: cannot write (not a file name)", who), EISDIR);
  const Target t = classify(path, who);
  if (!t.identity.empty()) {
    for (const auto& [identity, other, other_path] : identities_)
      if (identity == t.identity && (t.identity.find(':') == std::string::npos || same_file(path, other_path)))
        throw InputError(fmt::format("{} and {} name the same file: one would overwrite the other; give each output "
                                     "its own file",
                                     other, who));
    identities_.emplace_back(t.identity, who, path);
  }
  if (t.kind == Target::in_place) {
    // Checked now, written at commit(). A FIFO is not opened here: a reader would take the close for the end.
    if (t.stream < 0 && !t.fifo && ::access(t.path.c_str(), W_OK) != 0) {
      const int err = errno;
      fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err);
    }
    in_place_.push_back({t.path, who, text, t.stream, t.fifo, t.append});
    return;
  }
  // Beside the target (a link's target, when it is one): the same file system, so that rename(2) can replace it.
  std::string tmp = temporary_template(fs::path(t.path));
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    const int err = errno;
    fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err);
  }
  staged_.push_back({tmp, t.path, who, ""});  // from here on the destructor removes it
  const int err = finish_file(fd, text, file_mode(executable));
  if (err != 0) {
    ::unlink(tmp.c_str());
    staged_.pop_back();
    fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err);
  }
}

namespace {

// Writes one in-place target; 0 or the errno of the failure (ENXIO: a FIFO nobody reads).
int write_in_place(const std::string& path, int stream, bool fifo, bool append, const std::string& text) {
  if (stream >= 0) {
    std::fflush(stream == STDOUT_FILENO ? stdout : stderr);  // what was printed so far goes first
    return write_all(stream, text);
  }
  // O_NONBLOCK on open only: a FIFO without a reader fails with ENXIO instead of waiting for one for ever.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | (fifo ? O_NONBLOCK : 0) | (append ? O_APPEND : 0));
  if (fd < 0) return errno;
  if (fifo) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  int err = write_all(fd, text);
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

}  // namespace

void AtomicWriter::commit() {
  // Devices, FIFOs and standard streams first: one that fails (/dev/full) fails the group before a file is replaced.
  for (const InPlace& w : in_place_) {
    const int err = write_in_place(w.path, w.stream, w.fifo, w.append, w.text);
    if (err == 0) continue;
    const std::string who = w.who;  // discard() clears in_place_
    discard();
    if (err == ENXIO) fail(fmt::format("{}: cannot write (a FIFO that no process is reading)", who), EINVAL);
    fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err == EACCES ? err : EIO);
  }
  in_place_.clear();
  // Keep each previous target as a hard link until every rename is through, so that a failure can restore it.
  for (Staged& s : staged_) {
    struct stat st;
    const std::string backup = s.tmp + ".old";
    if (::lstat(s.path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode) && ::link(s.path.c_str(), backup.c_str()) == 0)
      s.backup = backup;
  }
  for (size_t i = 0; i < staged_.size(); ++i) {
    if (std::rename(staged_[i].tmp.c_str(), staged_[i].path.c_str()) == 0) continue;
    const int err = errno;
    const std::string who = staged_[i].who;
    // Undo the renames already made: the previous file back, or no file where there was none. A target whose
    // backup could not be linked keeps its new (complete) contents rather than losing the old ones.
    for (size_t j = 0; j < i; ++j) {
      const Staged& s = staged_[j];
      if (!s.backup.empty()) {
        (void)std::rename(s.backup.c_str(), s.path.c_str());
      } else {
        struct stat st;
        if (::lstat(s.path.c_str(), &st) == 0) (void)::unlink(s.path.c_str());
      }
    }
    discard();
    fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err);
  }
  for (const Staged& s : staged_) {
    if (!s.backup.empty()) ::unlink(s.backup.c_str());
  }
  for (const Staged& s : staged_) sync_folder(folder_of(s.path));
  staged_.clear();
  identities_.clear();
}

void AtomicWriter::discard() {
  for (const Staged& s : staged_) {
    ::unlink(s.tmp.c_str());  // ENOENT once renamed: harmless
    if (!s.backup.empty()) ::unlink(s.backup.c_str());
  }
  staged_.clear();
  in_place_.clear();
  identities_.clear();
}

AtomicWriter::~AtomicWriter() { discard(); }

void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag) {
  AtomicWriter w;
  w.stage(path, text, flag);
  w.commit();
}

void write_folder_atomically(const std::string& dir, const std::vector<FolderFile>& files, const std::string& flag) {
  if (dir.empty()) throw InputError(fmt::format("{} needs a folder name", flag));
  auto fail_in = [&](const std::string& what, const std::string& reason, int err) {
    fail(fmt::format("{} {}: cannot write {} ({}); choose a folder you can write to", flag, dir, what, reason), err);
  };
  std::string trimmed = dir;  // "out/" names the folder "out"
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path target(trimmed);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_directory(st)) fail_in("into it", "it exists and is not a folder", ENOTDIR);

  if (fs::exists(st)) {  // an existing folder: its other files stay
    AtomicWriter w;
    for (const FolderFile& f : files) {
      if (fs::is_directory(target / f.name, ec)) fail_in(f.name, "a folder of that name is in the way", EISDIR);
      w.stage((target / f.name).string(), f.text, flag, f.executable);
    }
    w.commit();
    return;
  }

  // A new folder: fill a hidden sibling [".NAME.tmp.XXXXXX"], then one rename publishes every file.
  const fs::path parent = folder_of(target);
  if (!fs::is_directory(parent, ec))
    fail_in("into it", fmt::format("the parent folder {} does not exist", parent.string()), ENOENT);
  std::string staging = temporary_template(target);
  if (::mkdtemp(staging.data()) == nullptr) {
    const int err = errno;
    fail_in("into it", std::strerror(err), err);
  }
  struct RemoveOnExit {  // an exception anywhere below leaves no staging folder
    std::string path;
    ~RemoveOnExit() {
      std::error_code ignore;
      if (!path.empty()) fs::remove_all(path, ignore);
    }
  } guard{staging};
  for (const FolderFile& f : files) {
    const fs::path path = fs::path(staging) / f.name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const int err = fd < 0 ? errno : finish_file(fd, f.text, file_mode(f.executable));
    if (err != 0) fail_in(f.name, std::strerror(err), err);
  }
  if (::chmod(staging.c_str(), file_mode(true)) != 0) {
    const int err = errno;
    fail_in("the folder", std::strerror(err), err);
  }
  sync_folder(staging);
  if (std::rename(staging.c_str(), target.c_str()) != 0) {
    const int err = errno;
    // Another process made the folder meanwhile (two `plan --emit DIR` at once): write into it as into any existing
    // folder, file by file, all or none, rather than fail with "Directory not empty".
    if ((err == ENOTEMPTY || err == EEXIST) && fs::is_directory(target, ec)) {
      guard.path.clear();
      fs::remove_all(staging, ec);
      write_folder_atomically(dir, files, flag);
      return;
    }
    fail_in("the folder", std::strerror(err), err);
  }
  guard.path.clear();
  sync_folder(parent);
}

}  // namespace shardplan::io
