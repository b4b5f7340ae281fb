// The terminal (cli/terminal.hpp): widths, fitted tables, wrapped prose, colour only where asked, and the real
// binary on a pseudo-terminal of a known size and through a pipe.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/terminal.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan::cli;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

size_t widest_line(const std::string& text) {
  size_t w = 0;
  for (const std::string& l : lines_of(text)) w = std::max(w, display_width(l));
  return w;
}

bool has_escape(const std::string& s) { return s.find('\x1b') != std::string::npos; }

// The ranked-plan layout of cli/render_plan.cpp, with two rows.
TextTable plan_like_table() {
  TextTable t("  ", {{"#", 3, false, 0},
                     {"strategy", 24, false, 0, true},
                     {"layout", 34, false, 0, true},
                     {"mb", 4, true, 4},
                     {"recompute", 11, true, 5},
                     {"peak GB", 9, true, 0},
                     {"HBM%", 6, true, 6},
                     {"step s", 9, true, 0},
                     {"tok/s/GPU", 11, true, 2},
                     {"MFU", 7, true, 3}});
  t.add_header();
  t.add_row({"1", "ZeRO-3 HSDP + TP + PP", "tp 8 pp 2 dp 1024 vpp 21 sp hsdp 16", "1", "selective", "68.2", "79%", "7.28",
             "141", "37.3%"},
            "→ ", true);
  t.add_row({"2", "ZeRO-2", "tp 1 pp 1 dp 8", "2", "none", "63.8", "74%", "134.19", "3907", "66.6%"});
  return t;
}

// Runs `command` (shell syntax, the binary's path first) with stdout to a file; stderr discarded.
std::string run_piped(const std::string& env, const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path out = fs::temp_directory_path() / fmt::format("shardplan_term_{}.out", ::getpid());
  const std::string cmd = fmt::format("env -u COLUMNS -u NO_COLOR {} '{}' {} >'{}' 2>/dev/null </dev/null", env,
                                      SHARDPLAN_BIN, args, out.string());
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string text = shardplan::test::read_all(out);
  fs::remove(out);
  return text;
}

// Runs the binary on a pseudo-terminal of `cols` columns (stdout a TTY; stderr to /dev/null, so no progress bar,
// unless keep_stderr);
// returns what the terminal received, with the TTY's "\r\n" turned back into "\n".
std::string run_on_pty(int cols, const std::vector<std::string>& args, const char* no_color = nullptr,
                       bool keep_stderr = false) {
  struct winsize ws {};
  ws.ws_col = static_cast<unsigned short>(cols);
  ws.ws_row = 50;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
  if (pid < 0) {  // a sandbox without /dev/ptmx: nothing to test here (the pipe cases still run)
    MESSAGE("no pseudo-terminal available (forkpty failed): skipping the TTY checks");
    return "";
  }
  if (pid == 0) {
    if (!keep_stderr) ::dup2(::open("/dev/null", O_WRONLY), STDERR_FILENO);
    ::unsetenv("COLUMNS");
    ::unsetenv("NO_COLOR");
    ::setenv("TERM", "xterm", 1);
    if (no_color != nullptr) ::setenv("NO_COLOR", no_color, 1);
    std::vector<char*> argv{const_cast<char*>(SHARDPLAN_BIN)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(SHARDPLAN_BIN, argv.data());
    ::_exit(127);
  }
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    got.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::string out;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == '\r' && i + 1 < got.size() && got[i + 1] == '\n')) out += got[i];
  return out;
}

}  // namespace

TEST_SUITE("terminal") {
  TEST_CASE("display width counts code points, not bytes, and no colour escapes") {
    CHECK(display_width("abc") == 3);
    CHECK(display_width("→ 1") == 3);            // → is 3 bytes, one column
    CHECK(display_width("8 × a800") == 8);       // × is 2 bytes
    CHECK(display_width("\x1b[1mab\x1b[0m") == 2);
    CHECK(ellipsize("abcdef", 4) == "abc…");
    CHECK(display_width(ellipsize("abcdef", 4)) == 4);
    CHECK(ellipsize("abc", 4) == "abc");
    CHECK(ellipsize("→→→→→", 3) == "→→…");
  }

  TEST_CASE("unfitted, a table is exactly the fixed columns fmt printed") {
    const std::string want =
        fmt::format("  {:<3}{:<24}{:<34}{:>4}{:>11}{:>9}{:>6}{:>9}{:>11}{:>7}\n", "#", "strategy", "layout", "mb",
                    "recompute", "peak GB", "HBM%", "step s", "tok/s/GPU", "MFU") +
        fmt::format("→ {:<3}{:<24}{:<34}{:>4}{:>11}{:>9.1f}{:>5.0f}%{:>9.2f}{:>11.0f}{:>6.1f}%\n", 1,
                    "ZeRO-3 HSDP + TP + PP", "tp 8 pp 2 dp 1024 vpp 21 sp hsdp 16", 1, "selective", 68.2, 79.0, 7.28,
                    141.0, 37.3) +
        fmt::format("  {:<3}{:<24}{:<34}{:>4}{:>11}{:>9.1f}{:>5.0f}%{:>9.2f}{:>11.0f}{:>6.1f}%\n", 2, "ZeRO-2",
                    "tp 1 pp 1 dp 8", 2, "none", 63.8, 74.0, 134.19, 3907.0, 66.6);
    CHECK(plan_like_table().render(kPlainTerminal) == want);
    CHECK(plan_like_table().render({200, false}) == want);  // 120 columns fit in 200: nothing changes
  }

  TEST_CASE("fitted at 60 and 80: no line wider, the low-priority columns go first, rows never wrap") {
    for (size_t width : {60, 80}) {
      CAPTURE(width);
      const std::string text = plan_like_table().render({width, false});
      CAPTURE(text);
      CHECK(widest_line(text) <= width);
      CHECK(lines_of(text).size() == 3);  // header and two rows: nothing wrapped
      const std::string head = lines_of(text)[0];
      CHECK(head.find("HBM%") == std::string::npos);  // priority 6: the first to go
      CHECK(head.find("step s") != std::string::npos);  // essential
      CHECK(head.find("peak GB") != std::string::npos);
      CHECK(lines_of(text)[1].rfind("→ 1", 0) == 0);
    }
    // 119 columns: one short of the natural 120. The columns shrink to their cells (2+2+22+36+3+10+8+5+7+10+6 =
    // 111) and nothing is dropped.
    const std::string at119 = plan_like_table().render({119, false});
    CHECK(widest_line(at119) == 111);
    for (const char* h : {"HBM%", "recompute", "mb", "MFU", "tok/s/GPU"}) CHECK(lines_of(at119)[0].find(h) != std::string::npos);
    // 80: HBM% (−5), recompute (−10), mb (−3), MFU (−6) go: 111 − 24 = 87 > 80, then tok/s/GPU (−10): 77.
    const std::string at80 = lines_of(plan_like_table().render({80, false}))[0];
    CHECK(at80.find("recompute") == std::string::npos);
    CHECK(at80.find("tok/s/GPU") == std::string::npos);
    CHECK(display_width(at80) == 77);
    // At 30 even the essential columns cannot fit: cells are cut with an ellipsis, still one line per row.
    const std::string at30 = plan_like_table().render({30, false});
    CHECK(widest_line(at30) <= 30);
    CHECK(lines_of(at30).size() == 3);
    CHECK(at30.find("…") != std::string::npos);
  }

  TEST_CASE("prose wraps at spaces under its label; every word survives") {
    const std::string line =
        "  ZeRO-3 HSDP:            fits (66.4 GB) but 0.9 % slower at its best (tp 1 pp 1 dp 8 hsdp 4, mb 2, recompute "
        "none): exposed data-parallel communication 1.61 s\n";
    const std::string out = fit_lines(line, 60);
    CAPTURE(out);
    CHECK(widest_line(out) <= 60);
    CHECK(lines_of(out).size() > 1);
    for (size_t i = 1; i < lines_of(out).size(); ++i) CHECK(lines_of(out)[i].rfind(std::string(26, ' '), 0) == 0);
    auto words = [](const std::string& s) {
      std::istringstream in(s);
      std::vector<std::string> w;
      std::string x;
      while (in >> x) w.push_back(x);
      return w;
    };
    CHECK(words(out) == words(line));
    CHECK(fit_lines(line, 0) == line);
    CHECK(fit_lines("short\n", 60) == "short\n");
    // One word wider than the line: cut, not wrapped mid-word.
    CHECK(fit_lines(std::string(50, 'x') + "\n", 20) == std::string(19, 'x') + "…\n");
  }

  TEST_CASE("colour: --no-color wins, --color forces (over NO_COLOR), otherwise only on a TTY") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    ::unsetenv("NO_COLOR");
    CHECK_FALSE(terminal_color(fds[1], {}));           // a pipe is not a terminal
    CHECK(terminal_color(fds[1], {true, false}));      // --color
    CHECK_FALSE(terminal_color(fds[1], {false, true}));  // --no-color
    ::setenv("NO_COLOR", "1", 1);
    CHECK(terminal_color(fds[1], {true, false}));      // a per-run flag overrides NO_COLOR (no-color.org)
    ::unsetenv("NO_COLOR");
    CHECK(paint("x", Style::red, false) == "x");
    CHECK(paint("x", Style::red, true) == "\x1b[31mx\x1b[0m");
    // Width: COLUMNS when it is a positive number; a pipe has none otherwise.
    const char* saved = std::getenv("COLUMNS");
    const std::string keep = saved ? saved : "";
    ::unsetenv("COLUMNS");
    CHECK(terminal_width(fds[1]) == 0);
    ::setenv("COLUMNS", "77", 1);
    CHECK(terminal_width(fds[1]) == 77);
    ::setenv("COLUMNS", "wide", 1);
    CHECK(terminal_width(fds[1]) == 0);
    if (saved) ::setenv("COLUMNS", keep.c_str(), 1);
    else ::unsetenv("COLUMNS");
    ::close(fds[0]);
    ::close(fds[1]);
  }

  TEST_CASE("the binary through a pipe: no colour, no fitting, unless asked") {
    const std::string plan = "plan --preset 8b --gpus 8 --cluster a800x8 --simulate-top 0";
    const std::string piped = run_piped("", plan);
    CHECK_FALSE(has_escape(piped));
    CHECK(widest_line(piped) > 120);  // the unfitted plan: the ranked table alone is 120 columns
    CHECK_FALSE(has_escape(run_piped("", plan + " --no-color")));
    CHECK(has_escape(run_piped("", plan + " --color")));
    CHECK(has_escape(run_piped("NO_COLOR=1", plan + " --color")));
    // Byte-identical but for the timing line, whatever the colour flags (the "searched ... ms" line varies).
    auto strip = [](const std::string& t) {
      std::string out;
      for (const std::string& l : lines_of(t))
        if (l.find(" ms;") == std::string::npos) out += l + "\n";
      return out;
    };
    CHECK(strip(run_piped("", plan + " --no-color")) == strip(piped));
    CHECK(strip(run_piped("COLUMNS=1000", plan)) == strip(piped));  // wide enough: nothing to fit
    for (int width : {60, 80, 200}) {
      CAPTURE(width);
      for (const std::string& args : {std::string("plan --preset 8b --gpus 8 --tokens 2T"),
                                      std::string("predict --preset 8b --gpus 8 --cluster a800x8"),
                                      std::string("simulate --preset 8b --gpus 16 --cluster dgx-h100 --tp 2 --pp 2 "
                                                  "--global-batch 32 --framework torchtitan")}) {
        CAPTURE(args);
        const std::string out = run_piped(fmt::format("COLUMNS={}", width), args);
        CHECK(widest_line(out) <= static_cast<size_t>(width));
        CHECK_FALSE(has_escape(out));
      }
    }
  }

  TEST_CASE("--color and --no-color together: one error line") {
    const auto r = shardplan::test::run_cli("plan --preset 8b --gpus 8 --color --no-color");
    CAPTURE(r.err);
    CHECK(shardplan::test::is_one_error_line(r));
  }

  TEST_CASE("the binary on a 70-column terminal: fitted (TIOCGWINSZ) and coloured; NO_COLOR and --no-color honoured") {
    const std::vector<std::string> plan = {"plan", "--preset", "8b", "--gpus", "8", "--cluster", "a800x8"};
    const std::string tty = run_on_pty(70, plan);
    if (tty.empty()) return;  // no pseudo-terminal here (see run_on_pty)
    CAPTURE(tty);
    CHECK(tty.find("Recommended:") != std::string::npos);
    CHECK(has_escape(tty));
    CHECK(widest_line(tty) <= 70);
    CHECK(widest_line(tty) > 50);  // fitted to 70, not cut to something narrower
    CHECK_FALSE(has_escape(run_on_pty(70, plan, "1")));
    std::vector<std::string> no_color = plan;
    no_color.push_back("--no-color");
    const std::string plain = run_on_pty(70, no_color);
    CHECK_FALSE(has_escape(plain));
    CHECK(widest_line(plain) <= 70);
  }
}

TEST_SUITE("terminal") {
  TEST_CASE("progress: a bar on stderr only when stderr is a terminal, erased when done") {
    // 10 simulations of the seed's case; the bar's delay is set to 0 (SHARDPLAN_PROGRESS_DELAY_MS) so that it is
    // drawn however fast the machine simulates.
    const std::string args = "plan --preset 8b --gpus 8 --cluster a800x8 --top 10 --simulate-top 10";
    const auto piped = shardplan::test::run_cli(args);
    REQUIRE(piped.exit_code == 0);
    CHECK(piped.err.empty());  // stderr is a file here: no bar, nothing at all
    ::setenv("SHARDPLAN_PROGRESS_DELAY_MS", "0", 1);
    const std::string tty = run_on_pty(100, {"plan", "--preset", "8b", "--gpus", "8", "--cluster", "a800x8", "--top", "10",
                                             "--simulate-top", "10", "--no-color"},
                                       nullptr, true);
    ::unsetenv("SHARDPLAN_PROGRESS_DELAY_MS");
    if (tty.empty()) return;  // no pseudo-terminal here
    const size_t bar = tty.find("simulating the top candidates [");
    REQUIRE(bar != std::string::npos);
    CHECK(tty.find("\r\x1b[K", bar) != std::string::npos);  // erased before the table is printed
    CHECK(tty.find("Recommended:") > bar);
    // Apart from the bar, the terminal got the plan: stdout itself has no escape (--no-color).
    const std::string after = tty.substr(tty.rfind("\x1b[K") + 3);
    CHECK_FALSE(has_escape(after));
    CHECK(after.find("Recommended:") != std::string::npos);
  }
}
