// Hardening, round 2 (issue 19): where shardplan writes. Outputs aimed at devices, FIFOs, symbolic links and
// standard output; two outputs that are one file; write errors (a full device, a closed stdout); what simulate
// will play; terminal widths; two `plan --emit` racing for one new folder. Items refer to the list.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_write.hpp"
#include "tests/hardening_runner.hpp"

namespace fs = std::filesystem;
using shardplan::test::CliResult;
using shardplan::test::is_kind;
using shardplan::test::one_clean_error_line;
using shardplan::test::read_all;
using shardplan::test::run_script;

namespace {

fs::path scratch(const std::string& name) {
  static const struct Cleanup {  // removed when the test binary exits
    fs::path dir = fs::temp_directory_path() / ("shardplan_hard_out_" + std::to_string(::getpid()));
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } root;
  const fs::path d = root.dir / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

CliResult in(const fs::path& dir, const std::string& script, int seconds = 30) {
  return run_script("timeout " + std::to_string(seconds) + " " + script, dir);
}

// The widest line of `text` in display columns (UTF-8 code points).
size_t widest_line(const std::string& text) {
  size_t widest = 0, cur = 0;
  for (const char c : text) {
    if (c == '\n') {
      widest = std::max(widest, cur);
      cur = 0;
    } else if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) {
      ++cur;
    }
  }
  return std::max(widest, cur);
}

}  // namespace

TEST_SUITE("hardening: outputs") {
  TEST_CASE("item 3: a device, a FIFO or a link is written in place, never renamed over") {
    const fs::path d = scratch("targets");
    fs::create_symlink("/dev/null", d / "null-link.json");
    std::ofstream(d / "real.md") << "old\n";
    fs::create_symlink("real.md", d / "link.md");
    fs::create_symlink("missing.md", d / "dangling.md");
    fs::create_symlink("/dev/full", d / "full-link.json");
    REQUIRE(::mkfifo((d / "unread.json").c_str(), 0600) == 0);
    REQUIRE(::mkfifo((d / "read.json").c_str(), 0600) == 0);
    // Before: the link to /dev/null became a regular file holding the trace.
    CliResult r = in(d, "$B simulate --preset 8b --trace null-link.json");
    CHECK(r.exit_code == 0);
    CHECK(is_kind(d / "null-link.json", S_IFLNK));
    // A link to a regular file: the file is replaced (atomically), the link stays a link.
    r = in(d, "$B predict --preset 8b --report link.md");
    CHECK(r.exit_code == 0);
    CHECK(is_kind(d / "link.md", S_IFLNK));
    CHECK(read_all(d / "real.md").find("8b") != std::string::npos);
    r = in(d, "$B predict --preset 8b --report dangling.md");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"--report dangling.md", "missing file"}));
    // A FIFO nobody reads is refused at once (before: replaced by a regular file); one that is read gets the trace.
    r = in(d, "$B simulate --preset 8b --trace unread.json", 10);
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"--trace unread.json", "FIFO"}));
    CHECK(is_kind(d / "unread.json", S_IFIFO));
    r = run_script("(cat read.json > got.json &) ; sleep 0.2; timeout 30 $B simulate --preset 8b --trace read.json > /dev/null; "
                   "sleep 0.3", d);
    CHECK(r.exit_code == 0);
    CHECK(is_kind(d / "read.json", S_IFIFO));
    CHECK(read_all(d / "got.json").find("traceEvents") != std::string::npos);
    // A full device: exit 1, naming the flag (the link is not replaced either).
    r = in(d, "$B simulate --preset 8b --trace full-link.json");
    CHECK(r.exit_code == 1);
    CHECK(one_clean_error_line(r, {"--trace full-link.json", "No space left"}));
    CHECK(is_kind(d / "full-link.json", S_IFLNK));
    // /dev/stdout redirected to a file: the trace goes through the same descriptor, after the table (before: as root
    // /dev/stdout itself was replaced by a regular file).
    r = in(d, "$B simulate --preset 8b --format json --trace /dev/stdout > both.txt");
    CHECK(r.exit_code == 0);
    const std::string both = read_all(d / "both.txt");
    CHECK(both.find("traceEvents") != std::string::npos);
    CHECK(both.find("\"analytic\"") != std::string::npos);
    CHECK(is_kind("/dev/stdout", S_IFLNK));
    r = in(d, "$B validate --preset tiny --steps 1 --warmup 0 --quiet --format json --steps-out /dev/stdout > v.txt", 120);
    CHECK(r.exit_code == 0);
    const std::string v = read_all(d / "v.txt");
    CHECK(v.find("{\"comm_wait_s\"") != std::string::npos);  // the step line (the measurements schema)
    CHECK(v.find("\"measured\"") != std::string::npos);       // and the document
    CHECK(is_kind("/dev/stdout", S_IFLNK));
    // The raw CSV has no default beside a device (before: /dev/null.raw.csv, a new file in /dev as root).
    r = in(d, "$B calibrate --gemm-only --quick --quiet --out null-link.json", 60);
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"--out null-link.json", "--raw"}));
    // A character device node of our own (root only: mknod); skipped cleanly without.
    if (::mknod((d / "null-node").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
      r = in(d, "$B calibrate --gemm-only --quick --quiet --out null-node --raw raw.csv", 120);
      CHECK(r.exit_code == 0);
      CHECK(is_kind(d / "null-node", S_IFCHR));
      r = in(d, "$B calibrate --gemm-only --quick --quiet --out null-node", 60);  // no default raw beside a device
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, {"--out null-node", "--raw"}));
    } else {
      MESSAGE("not root: the mknod case is skipped");
    }
  }

  TEST_CASE("item 4, 16: one file given for two outputs is refused, whatever its spelling") {
    const fs::path d = scratch("same");
    REQUIRE(in(d, "$B predict --preset 8b --format json > doc.json").exit_code == 0);
    std::ofstream(d / "p.yaml") << "previous profile\n";
    std::ofstream(d / "log.md") << "{\"step\": 0, \"step_s\": 1.5}\n";
    fs::create_hard_link(d / "p.yaml", d / "hard.yaml");
    struct Case {
      const char* args;
      std::initializer_list<const char*> mentions;
    };
    for (const Case& c : {
             Case{"$B report doc.json --html a.html --md a.html", {"--html a.html", "--md a.html", "same file"}},
             Case{"$B report doc.json --html a.html --md ./a.html", {"--md ./a.html", "same file"}},
             Case{"$B report doc.json -o x.md --md ../same/x.md", {"same file"}},
             Case{"$B report doc.json --md doc.json", {"--md doc.json", "input"}},
             Case{"$B validate --preset 8b --measurements log.md --report log.md", {"--report log.md", "--measurements"}},
             Case{"$B simulate --preset 8b --trace t.md --report t.md", {"--trace t.md", "--report t.md"}},
             Case{"$B validate --preset tiny --steps-out x.md --report x.md", {"--steps-out x.md", "--report x.md"}},
             // Before: accepted; SIGINT then left the CSV where the previous profile was.
             Case{"$B calibrate --gemm-only --quick --quiet --out p.yaml --raw ./p.yaml", {"--raw ./p.yaml", "same file"}},
             Case{"$B calibrate --gemm-only --quick --quiet --out p.yaml --raw hard.yaml", {"--raw hard.yaml", "same file"}},
         }) {
      const std::string args = c.args;
      CAPTURE(args);
      const CliResult r = in(d, args);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, c.mentions));
    }
    CHECK(read_all(d / "p.yaml") == "previous profile\n");
    CHECK(!fs::exists(d / "a.html"));
  }

  TEST_CASE("item 5, 6: write errors on stdout and on the raw CSV are exit 1 with one line") {
    const fs::path d = scratch("write-errors");
    for (const std::string args : {"$B plan --preset 8b --gpus 8 --format json > /dev/full", "$B presets > /dev/full",
                             "$B predict --preset 8b --format json >&-", "$B presets >&-", "$B presets show 8b >&-"}) {
      CAPTURE(args);
      const CliResult r = in(d, args);
      CAPTURE(r.err);
      CHECK(r.exit_code == 1);
      CHECK(one_clean_error_line(r, {"standard output"}));
    }
    // Before: exit 0 with the log cut mid-line.
    CliResult r = in(d, "$B calibrate --gemm-only --quick --quiet --out g.yaml --raw /dev/full", 120);
    CHECK(r.exit_code == 1);
    CHECK(one_clean_error_line(r, {"--raw /dev/full", "No space left"}));
    CHECK(!fs::exists(d / "g.yaml"));
    // Beyond the list: past `ulimit -f` the process was killed by SIGXFSZ (exit 153); now a write error.
    r = run_script("ulimit -f 8; timeout 30 $B plan --preset 8b --gpus 8 --format json > big.json", d);
    CHECK(r.exit_code == 1);
    CHECK(one_clean_error_line(r, {"standard output", "File too large"}));
    r = run_script("ulimit -f 8; timeout 30 $B simulate --preset 8b --trace t.json", d);
    CHECK(r.exit_code == 1);
    CHECK(one_clean_error_line(r, {"--trace t.json", "File too large"}));
    CHECK(!fs::exists(d / "t.json"));
    // Nothing to print, nothing to fail: a closed stdout is fine when the output goes to a file.
    REQUIRE(in(d, "$B predict --preset 8b --format json > doc.json").exit_code == 0);
    CHECK(in(d, "$B report doc.json -o r.md >&-").exit_code == 0);
  }

  TEST_CASE("item 2: simulate bounds what it plays and says so; plan's extrapolation is untouched") {
    const fs::path d = scratch("simulate");
    // Before: 4.4 kB per micro-batch until the OOM killer (here: a 2 GB bound, 60 s).
    const std::string limit = shardplan::test::kAddressSanitizer ? "" : "ulimit -v 2000000; ";
    for (const char* batch : {"4294967296", "1048576"}) {
      const CliResult r = run_script(limit + "timeout 60 $B simulate --preset 8b --gpus 8 --global-batch " + batch, d);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, {"--global-batch", "micro-batches", "predict"}));
    }
    CHECK(run_script(limit + "timeout 60 $B simulate --preset 8b --gpus 8 --global-batch 4096", d).exit_code == 0);
  }

  TEST_CASE("item 23: COLUMNS narrows presets and validate; long simulated steps keep their columns apart") {
    const fs::path d = scratch("columns");
    std::ofstream(d / "ok.jsonl") << "{\"step\": 0, \"step_s\": 1.5, \"peak_bytes\": 1000000}\n{\"step\": 1, \"step_s\": 1.4}\n";
    for (const std::string args : {"env COLUMNS=40 $B presets", "env COLUMNS=40 $B presets models",
                                   "env COLUMNS=40 $B validate --preset tiny --measurements ok.jsonl"}) {
      CAPTURE(args);
      const CliResult r = in(d, args);
      CHECK(r.exit_code == 0);
      CHECK(widest_line(r.out) <= 40);
    }
    // Without COLUMNS (not a terminal) the output is what it always was: wider than 40.
    CHECK(widest_line(in(d, "$B presets").out) > 80);
    // A five-hour step: "37302708.13 ms37575910.03 ms" before.
    const CliResult r = in(d, "$B simulate --preset llama3-70b --gpus 8 --global-batch 16384 --framework torchtitan");
    REQUIRE(r.exit_code == 0);
    const size_t step = r.out.find("  step  ");
    REQUIRE(step != std::string::npos);
    const std::string line = r.out.substr(step, r.out.find('\n', step) - step);
    CAPTURE(line);
    CHECK(line.find("ms ") != std::string::npos);  // the two figures are apart
    CHECK(line.find(" ms") != line.rfind(" ms"));
    CHECK(line.find("ms1") == std::string::npos);
    CHECK(line.find("ms2") == std::string::npos);
    CHECK(line.find("ms3") == std::string::npos);
  }

  TEST_CASE("item 22: two writers racing for one new --emit folder both succeed, all files there") {
    // Before: the loser's rename failed with "Directory not empty; choose a folder you can write to".
    const fs::path d = scratch("race");
    const std::vector<shardplan::io::FolderFile> files = {{"a.sh", "echo a\n", true}, {"b.toml", "b = 1\n", false}};
    for (int round = 0; round < 20; ++round) {
      const fs::path target = d / ("launch" + std::to_string(round));
      std::latch start(4);
      std::atomic<int> failures{0};
      std::vector<std::thread> writers;
      for (int w = 0; w < 4; ++w)
        writers.emplace_back([&] {
          start.arrive_and_wait();
          try {
            shardplan::io::write_folder_atomically(target.string(), files, "--emit");
          } catch (const std::exception& e) {
            MESSAGE(std::string(e.what()));
            ++failures;
          }
        });
      for (std::thread& t : writers) t.join();
      CHECK(failures == 0);
      CHECK(read_all(target / "a.sh") == "echo a\n");
      CHECK(read_all(target / "b.toml") == "b = 1\n");
    }
    size_t leftovers = 0;  // no staging folder stays beside the targets
    for (const auto& e : fs::directory_iterator(d)) leftovers += e.path().filename().string()[0] == '.';
    CHECK(leftovers == 0);
  }
}
