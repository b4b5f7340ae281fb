#pragma once
// The one way shardplan writes a file (plan --emit, simulate --trace, report -o/--html/--md, --report, calibrate
// --out): the text goes to a temporary name in the target's own folder (".NAME.tmp.XXXXXX", same file system),
// is fsync'ed, and is renamed over the target (rename(2) is atomic: a reader sees the old file or the new one,
// never part of one). A failure or an exception removes every temporary.
//
// A target that is not a regular file is never renamed over (issue 19, item 3): a character device (/dev/null) or a
// FIFO is written in place (a FIFO that no process reads is refused rather than waited for); standard output or
// error named by path (/dev/stdout, /proc/self/fd/1, or the file they are redirected to) is written through the
// process's own descriptor, after what was printed so far; a symbolic link to a regular file has that file replaced
// atomically (the link stays); a block device or a socket is refused. One writer refuses two outputs that are one
// file (compared by device and inode, or by resolved path when new), whatever their spelling.
//
// Errors name the flag and the path: "<flag> <path>: cannot write (<reason>)". A path that cannot be a file
// (missing folder, a directory, no permission, read-only file system, name too long) is bad input: InputError,
// exit 2. Anything else (disk full, I/O error) is a runtime failure: std::runtime_error, exit 1.
//
// Not routed here, by design: calibrate's --raw CSV, an append-only log flushed line by line so that an
// interrupted run can --resume (calibrate/README.md).
#include <string>
#include <tuple>
#include <vector>

namespace shardplan::io {

// Several files committed all or none. stage() writes each one to its temporary name; commit() renames them all,
// and if one rename fails the targets already replaced get their previous contents back (kept as hard links
// until the commit is through) and the new ones go. Whatever is staged but not committed is removed when the
// writer goes away, so an exception between stage() and commit() leaves nothing behind.
class AtomicWriter {
 public:
  AtomicWriter() = default;
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  ~AtomicWriter();
  // `flag` names the option the path came from ("--report"); may be empty. `executable`: mode 0777 less the umask
  // (launch scripts), else 0666 less the umask, as a plain open(2) would create it.
  void stage(const std::string& path, const std::string& text, const std::string& flag = "", bool executable = false);
  void commit();
  // Removes the temporaries now (the destructor does the same).
  void discard();

 private:
  struct Staged {
    std::string tmp, path, who;
    std::string backup;  // a hard link to the previous target while commit() runs ("" = none)
  };
  struct InPlace {       // a device, a FIFO or a standard stream: written, not renamed over, at commit()
    std::string path, who, text;
    int stream = -1;     // 1 or 2: write through this descriptor; -1: open `path`
    bool fifo = false, append = false;
  };
  std::vector<Staged> staged_;
  std::vector<InPlace> in_place_;
  // (file identity, who, path) of every staged target. A match is checked again on the paths (same_file): an inode
  // freed and reused between two stats (another writer replacing the first file) is not the same file.
  std::vector<std::tuple<std::string, std::string, std::string>> identities_;
};

void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag = "");

// A folder of files, all or none (`plan --emit DIR`). A new DIR is filled as a hidden sibling and renamed into
// place (one rename publishes every file); into an existing DIR the files go through an AtomicWriter (other files
// there are kept). Errors read "<flag> <dir>: cannot write <what> (<reason>)".
struct FolderFile {
  std::string name;  // a plain file name, no '/'
  std::string text;
  bool executable = false;
};
void write_folder_atomically(const std::string& dir, const std::vector<FolderFile>& files, const std::string& flag);

}  // namespace shardplan::io
