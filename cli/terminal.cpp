// The terminal helpers (terminal.hpp): width, colour, fitted tables, progress on stderr.
#include "cli/terminal.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace shardplan::cli {

void add_terminal_flags(CLI::App& cmd, TerminalFlags& flags) {
  CLI::Option* color = cmd.add_flag("--color", flags.color, "Colour the table output even when it is not a terminal");
  CLI::Option* no_color = cmd.add_flag("--no-color", flags.no_color, "No colour (as the NO_COLOR environment variable)");
  color->excludes(no_color);
}

size_t terminal_width(int fd) {
  // COLUMNS first: a user (or a script) that sets it means it, terminal or not.
  if (const char* env = std::getenv("COLUMNS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != nullptr && *end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  if (::isatty(fd) == 0) return 0;
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

bool terminal_color(int fd, const TerminalFlags& flags) {
  if (flags.no_color) return false;
  if (flags.color) return true;  // a per-run flag overrides NO_COLOR (no-color.org)
  if (const char* env = std::getenv("NO_COLOR"); env != nullptr && *env != '\0') return false;
  if (const char* term = std::getenv("TERM"); term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  return ::isatty(fd) != 0;
}

Terminal stdout_terminal(const TerminalFlags& flags) { return {terminal_width(STDOUT_FILENO), terminal_color(STDOUT_FILENO, flags)}; }

size_t display_width(std::string_view s) {
  size_t w = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0x1b && i + 1 < s.size() && s[i + 1] == '[') {  // SGR and other CSI sequences: no width
      i += 2;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) < 0x40 || static_cast<unsigned char>(s[i]) > 0x7e)) ++i;
      continue;
    }
    if ((c & 0xc0) != 0x80) ++w;  // count lead bytes, not UTF-8 continuation bytes
  }
  return w;
}

std::string ellipsize(std::string_view s, size_t width) {
  if (display_width(s) <= width) return std::string(s);
  if (width == 0) return "";
  std::string out;
  size_t w = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xc0) != 0x80) {
      if (w == width - 1) break;
      ++w;
    }
    out += s[i];
  }
  return out + "…";
}

namespace {

std::string pad(const std::string& s, size_t width, bool right) {
  const size_t w = display_width(s);
  if (w >= width) return s;
  return right ? std::string(width - w, ' ') + s : s + std::string(width - w, ' ');
}

// Byte index just past the text of `line` that fits in `width` columns.
size_t bytes_within(std::string_view line, size_t width) {
  size_t w = 0, i = 0;
  for (; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if ((c & 0xc0) != 0x80) {
      if (w == width) break;
      ++w;
    }
  }
  return i;
}

// Where a long line continues: under the text after a "label  " column when there is one in the left half,
// else two in from the line's own indentation.
size_t hanging_indent(const std::string& line, size_t width) {
  const size_t lead = line.find_first_not_of(' ');
  if (lead == std::string::npos) return 0;
  const size_t gap = line.find("  ", lead);
  if (gap != std::string::npos) {
    const size_t text = line.find_first_not_of(' ', gap);
    if (text != std::string::npos && display_width(std::string_view(line).substr(0, text)) <= width / 2)
      return display_width(std::string_view(line).substr(0, text));
  }
  return std::min(lead + 2, width / 2);
}

void wrap_line(const std::string& line, size_t width, std::string& out) {
  const size_t hang = hanging_indent(line, width);
  std::string cur = line;
  bool first = true;
  while (display_width(cur) > width) {
    const size_t fit = bytes_within(cur, width);
    const size_t floor = first ? line.find_first_not_of(' ') : hang;
    // The last space that leaves the line within the width (a space right at the limit ends the line too).
    size_t brk = cur.rfind(' ', fit);
    if (brk != std::string::npos && brk <= floor) brk = std::string::npos;
    std::string head, rest;
    if (brk != std::string::npos) {
      head = cur.substr(0, brk);
      rest = cur.substr(brk + 1);
    } else {  // one word wider than the line: cut it
      const size_t end = cur.find(' ', fit);
      head = ellipsize(cur.substr(0, end), width);
      rest = end == std::string::npos ? "" : cur.substr(end + 1);
    }
    while (!head.empty() && head.back() == ' ') head.pop_back();
    out += head + "\n";
    const size_t start = rest.find_first_not_of(' ');
    if (start == std::string::npos) return;
    cur = std::string(hang, ' ') + rest.substr(start);
    first = false;
  }
  out += cur + "\n";
}

}  // namespace

std::string fit_lines(const std::string& text, size_t width) {
  if (width == 0) return text;
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const bool newline = end != std::string::npos;
    if (!newline) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (display_width(line) <= width) out += line + "\n";
    else wrap_line(line, width, out);
    if (!newline) out.pop_back();  // the text did not end in a newline
    start = end + 1;
  }
  return out;
}

std::string paint(std::string_view s, Style style, bool on) {
  if (!on) return std::string(s);
  const char* code = "1";
  switch (style) {
    case Style::bold: code = "1"; break;
    case Style::red: code = "31"; break;
    case Style::green: code = "32"; break;
    case Style::yellow: code = "33"; break;
    case Style::dim: code = "2"; break;
  }
  return fmt::format("\033[{}m{}\033[0m", code, s);
}

void TextTable::add_row(std::vector<std::string> cells, std::string marker, bool highlight, size_t span) {
  rows_.push_back({std::move(cells), std::move(marker), highlight, std::max<size_t>(span, 1), false});
}

std::string TextTable::render(const Terminal& term) const {
  const size_t n = cols_.size();
  std::vector<size_t> width(n);
  std::vector<bool> shown(n, true);
  for (size_t i = 0; i < n; ++i) width[i] = cols_[i].width;
  bool fitting = false;
  // A cell: padded to its width; cut (leaving one space) only when fitting.
  auto cell = [&](const std::string& text, size_t w, bool right) {
    return pad(fitting && display_width(text) + 1 > w ? ellipsize(text, w > 0 ? w - 1 : 0) : text, w, right);
  };
  auto render_rows = [&] {
    std::string out;
    for (const Row& r : rows_) {
      std::string line = r.marker.empty() ? indent_ : r.marker;
      std::vector<std::string> header;
      if (r.header)
        for (const TableColumn& c : cols_) header.push_back(c.header);
      const std::vector<std::string>& cells = r.header ? header : r.cells;
      size_t first = 0;  // the spanning first cell
      if (r.span > 1 && !cells.empty()) {
        size_t w = 0;
        bool any = false;
        for (size_t i = 0; i < std::min(r.span, n); ++i) {
          if (!shown[i]) continue;
          w += (any ? cols_[i].gap : 0) + width[i];
          if (!any) line += std::string(cols_[i].gap, ' ');
          any = true;
        }
        line += cell(cells[0], w, false);
        first = 1;
      }
      for (size_t k = first; k < cells.size(); ++k) {
        const size_t i = r.span > 1 ? r.span - 1 + k : k;
        if (i >= n || !shown[i]) continue;
        line += std::string(cols_[i].gap, ' ') + cell(cells[k], width[i], cols_[i].right);
      }
      if (fitting) {
        while (!line.empty() && line.back() == ' ') line.pop_back();
        line = ellipsize(line, term.width);
      }
      out += (r.highlight ? paint(line, Style::bold, term.color) : line) + "\n";
    }
    return out;
  };
  // Unfitted: exactly the fixed columns (cells wider than their column push the rest right, as fmt does).
  const std::string natural = render_rows();
  size_t widest = 0;
  for (size_t a = 0, b; a < natural.size(); a = b + 1) {
    b = natural.find('\n', a);
    widest = std::max(widest, display_width(std::string_view(natural).substr(a, b - a)));
  }
  if (term.width == 0 || widest <= term.width) return natural;

  fitting = true;
  const size_t indent = display_width(indent_);
  auto line_width = [&] {
    size_t w = indent;
    for (size_t i = 0; i < n; ++i)
      if (shown[i]) w += cols_[i].gap + width[i];
    return w;
  };
  // 1. Columns take their widest cell and one space.
  for (size_t i = 0; i < n; ++i) {
    size_t content = display_width(cols_[i].header);
    for (const Row& r : rows_) {
      if (r.header) continue;
      if (r.span > 1 && i < r.span) continue;  // a spanning first cell sizes no column
      const size_t c = r.span > 1 ? i - (r.span - 1) : i;
      if (c < r.cells.size()) content = std::max(content, display_width(r.cells[c]));
    }
    width[i] = content + 1;  // a cell wider than its natural column (fmt let it push the rest right) keeps its room
  }
  // 2. The least important columns go, highest priority number first (the rightmost of equals).
  while (line_width() > term.width) {
    std::optional<size_t> drop;
    for (size_t i = 0; i < n; ++i)
      if (shown[i] && cols_[i].priority > 0 && (!drop || cols_[i].priority >= cols_[*drop].priority)) drop = i;
    if (!drop) break;
    shown[*drop] = false;
  }
  // 3. Long text is cut: the widest shrinkable column gives up columns, down to 6.
  while (line_width() > term.width) {
    std::optional<size_t> cut;
    for (size_t i = 0; i < n; ++i)
      if (shown[i] && cols_[i].shrinkable && width[i] > 6 && (!cut || width[i] > width[*cut])) cut = i;
    if (!cut) break;
    width[*cut] -= std::min(width[*cut] - 6, line_width() - term.width);
  }
  // 4. Whatever is still too wide is cut at the width (each line, in render_rows).
  return render_rows();
}

namespace {

// SHARDPLAN_PROGRESS_DELAY_MS overrides the delay (tests: a bar drawn whatever the machine's speed).
std::chrono::milliseconds progress_delay(std::chrono::milliseconds fallback) {
  const char* env = std::getenv("SHARDPLAN_PROGRESS_DELAY_MS");
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long ms = std::strtol(env, &end, 10);
  return *end == '\0' && ms >= 0 ? std::chrono::milliseconds(ms) : fallback;
}

}  // namespace

ProgressBar::ProgressBar(std::string label, size_t total, std::chrono::milliseconds delay)
    : label_(std::move(label)), total_(total), delay_(progress_delay(delay)),
      enabled_(total > 0 && ::isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()), last_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(size_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < delay_) return;
  if (!drawn_ && done >= total_) return;  // finished before the bar was ever needed: no flash
  if (drawn_ && now - last_ < std::chrono::milliseconds(50) && done < total_) return;
  last_ = now;
  const size_t columns = std::max<size_t>(terminal_width(STDERR_FILENO), 40);
  const std::string counts = fmt::format(" {}/{} {:.1f} s", done, total_,
                                         std::chrono::duration<double>(now - start_).count());
  const size_t room = columns - 1 - std::min(columns - 1, display_width(label_) + counts.size() + 3);
  const size_t bar = std::min<size_t>(30, room);
  const size_t filled = total_ > 0 ? bar * std::min(done, total_) / total_ : 0;
  std::string line = "\r" + ellipsize(label_, columns / 2);
  if (bar >= 5) line += " [" + std::string(filled, '#') + std::string(bar - filled, ' ') + "]";
  line += counts + "\033[K";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);  // erase: only the command's own output stays
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace shardplan::cli
