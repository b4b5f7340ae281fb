#pragma once
// The terminal, in one place: how wide it is, whether to colour, tables that fit, progress on stderr.
// The rule (cli/README.md): the layout adapts only when it can see a terminal. Piped or redirected output is
// byte-for-byte what it always was — no colour, no fitting — unless COLUMNS is set (fit to it) or --color given.
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace shardplan::cli {

// --color / --no-color as typed (both at once is a usage error CLI11 reports).
struct TerminalFlags {
  bool color = false;     // --color: colour even when stdout is not a terminal (overrides NO_COLOR)
  bool no_color = false;  // --no-color
};
void add_terminal_flags(CLI::App& cmd, TerminalFlags& flags);

// How to lay out text for one output stream.
struct Terminal {
  size_t width = 0;    // columns to fit; 0 = do not fit (not a terminal and no COLUMNS)
  bool color = false;  // ANSI colour escapes allowed
};
// Plain text: no fitting, no colour (files, pipes, JSON, the tests' renderings).
inline constexpr Terminal kPlainTerminal{};

// The width for `fd`: COLUMNS when set to a positive number, else the terminal's (ioctl TIOCGWINSZ) when `fd` is a
// TTY, else 0.
size_t terminal_width(int fd);
// Colour for `fd`: --no-color wins, then --color; otherwise only on a TTY, without NO_COLOR (non-empty), and not
// with TERM=dumb (no-color.org).
bool terminal_color(int fd, const TerminalFlags& flags);
// Both, for standard output.
Terminal stdout_terminal(const TerminalFlags& flags);

// Display columns of UTF-8 text (one per code point; ESC [ ... m sequences count none).
size_t display_width(std::string_view s);
// `s` cut to at most `width` columns, the last one an ellipsis when anything was cut.
std::string ellipsize(std::string_view s, size_t width);
// Every line of `text` no wider than `width` (0: unchanged). Long lines break at spaces, continuing under the
// line's indentation plus two; a word wider than the line is cut with an ellipsis. For prose; tables fit first.
std::string fit_lines(const std::string& text, size_t width);

// ANSI styles (SGR). paint() returns `s` unchanged when `on` is false.
enum class Style { bold, red, green, yellow, dim };
std::string paint(std::string_view s, Style style, bool on);

// A fixed-column text table, as the renderers' fmt "{:<24}{:>9}" rows were. Unfitted (width 0) it prints exactly
// that: each cell padded to its column's width, nothing cut. Fitted, when the natural line is too wide: columns
// shrink to their widest cell, then the lowest-priority columns are dropped (priority 0 never), then cells of
// shrinkable columns are cut with an ellipsis. A row is never wrapped.
struct TableColumn {
  std::string header;
  size_t width = 0;      // the natural width (padding included, as the fmt spec's)
  bool right = false;    // right-aligned
  int priority = 0;      // 0 = essential; higher numbers go first
  bool shrinkable = false;  // long cells may be cut with an ellipsis
  size_t gap = 0;        // spaces printed before the cell, outside its width (fmt's "{:>10}  {:<14}")
};

class TextTable {
 public:
  TextTable(std::string indent, std::vector<TableColumn> columns) : indent_(std::move(indent)), cols_(std::move(columns)) {}
  // `marker` replaces the indent on that row (same width: "→ " for the recommendation); `highlight` makes the row
  // bold where colour is on. The first cell spans the first `span` columns (their widths added).
  void add_row(std::vector<std::string> cells, std::string marker = "", bool highlight = false, size_t span = 1);
  // The header row from the columns' names (optional: some tables have none).
  void add_header() { rows_.push_back({{}, "", false, 1, true}); }
  std::string render(const Terminal& term) const;

 private:
  struct Row {
    std::vector<std::string> cells;
    std::string marker;
    bool highlight = false;
    size_t span = 1;
    bool header = false;
  };
  std::string indent_;
  std::vector<TableColumn> cols_;
  std::vector<Row> rows_;
};

// A progress bar on stderr, only when stderr is a terminal; silent otherwise. Drawn after `delay` (short work
// shows nothing; SHARDPLAN_PROGRESS_DELAY_MS overrides it) and at most every 50 ms; erased when done, so the terminal
// keeps only the command's output.
class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total, std::chrono::milliseconds delay = std::chrono::milliseconds(300));
  ~ProgressBar();
  void update(size_t done);
  void finish();
  bool active() const { return enabled_; }

 private:
  std::string label_;
  size_t total_;
  std::chrono::milliseconds delay_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace shardplan::cli
