#pragma once
// What main() guarantees around every command (reports/reliability.md, round 2):
//  - standard descriptors: a closed stdin/stdout/stderr is taken by /dev/null, opened so that writing to a closed
//    stdout still fails (read-only) — a file opened later can never land on descriptor 1 and receive the output;
//  - SIGPIPE and SIGXFSZ ignored: a FIFO or pipe whose reader went away, or a file past `ulimit -f`, is a write
//    error we report, not a silent death;
//  - stdout flushed and checked before exit (finish_stdout): a full disk or a closed stdout is exit 1 with one line;
//  - integer flags parsed strictly (add_strict_integer_checks): CLI11 2.1 reads "010" as octal 8, saturates
//    2^64 to 2^63−1 and wraps "-1" to 2^64−1 for unsigned flags; here each is refused naming the flag and the text;
//  - error lines escaped (error_line): control bytes and non-UTF-8 written as \xNN, on one line.
#include <string>

#include <CLI/CLI.hpp>

namespace shardplan::cli {

// Call first in main().
void guard_process();

// Flushes stdout; 0 when everything printed reached it, else prints the one error line and returns 1.
int finish_stdout();

// Adds the strict check to every integer option of `app` and of its subcommands (recursively).
void add_strict_integer_checks(CLI::App& app);

// "error: " + the message on one line (newlines become spaces, control bytes and invalid UTF-8 are escaped).
std::string error_line(const std::string& message);

}  // namespace shardplan::cli
