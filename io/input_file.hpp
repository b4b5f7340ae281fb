#pragma once
// Reading what a user names on the command line without trusting it (reports/reliability.md, round 2):
//  - bounded in bytes: at most `limit` bytes are read (/dev/zero, a log given by mistake);
//  - never blocking on open: a FIFO is opened O_NONBLOCK (a FIFO with no writer would block open(2) for ever) and
//    read to its end (no writer: end of file at once);
//  - `regular_only` refuses anything but a regular file (after symbolic links): the files of a --presets-dir folder.
// And comparing outputs by the file they name, not by their spelling (same_file).
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardplan::io {

// Reads `path` into `out`. Returns "" on success, else the reason in words ("No such file or directory",
// "it is a folder, not a file", "larger than 64 MiB", "a FIFO, not a regular file"); `out` is then incomplete.
std::string read_file_bounded(const std::string& path, std::string& out, std::size_t limit, bool regular_only = false);

// Whether two paths name the same file: the same device and inode when both exist, else the same absolute path
// once the folders are resolved (./a.yaml, a.yaml and dir/../a.yaml are one file; so are two hard links).
bool same_file(const std::string& a, const std::string& b);

// Throws InputError "<flag a> A and <flag b> B name the same file; give each output its own file" for the first
// two outputs that are one file. Empty paths are skipped; character devices (/dev/null) may be given twice.
void require_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& flag_and_path);

// Text as it may appear in a one-line message on a terminal: control bytes and bytes that are not UTF-8 written as
// \r, \t, \xNN (a CRLF CSV, a non-UTF-8 byte from a document); a newline as "\n". Valid UTF-8 is kept.
std::string escape_for_line(const std::string& text);

}  // namespace shardplan::io
