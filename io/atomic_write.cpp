// Temporary name, fsync, rename (io/atomic_write.hpp). POSIX calls throughout: std::ofstream can neither fsync
// nor tell why a write failed.
#include "io/atomic_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

}  // namespace

void AtomicWriter::stage(const std::string& path, const std::string& text, const std::string& flag, bool executable) {
  const std::string who = flag.empty() ? path : flag + " " + path;
  if (path.empty()) fail(fmt::format("{}: cannot write (empty file name)", flag.empty() ? "output" : flag), 0);
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(fmt::format("{}: cannot write (it is a directory)", who), EISDIR);
  const fs::path target(path);
  if (!target.has_filename()) fail(fmt::format("{}: cannot write (not a file name)", who), EISDIR);
  // Beside the target: the same file system, so that rename(2) can replace it.
  std::string tmp = temporary_template(target);
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    const int err = errno;
    fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err);
  }
  staged_.push_back({tmp, path, who, ""});  // from here on the destructor removes it
  const int err = finish_file(fd, text, file_mode(executable));
  if (err != 0) {
    ::unlink(tmp.c_str());
    staged_.pop_back();
    fail(fmt::format("{}: cannot write ({})", who, std::strerror(err)), err);
  }
}

void AtomicWriter::commit() {
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
}

void AtomicWriter::discard() {
  for (const Staged& s : staged_) {
    ::unlink(s.tmp.c_str());  // ENOENT once renamed: harmless
    if (!s.backup.empty()) ::unlink(s.backup.c_str());
  }
  staged_.clear();
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
    fail_in("the folder", std::strerror(err), err);
  }
  guard.path.clear();
  sync_folder(parent);
}

}  // namespace shardplan::io
