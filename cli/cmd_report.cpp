// `shardplan report`: a saved `predict`, `plan`, `simulate` or `validate` JSON document, or a calibration profile,
// as Markdown or self-contained HTML with SVG charts; and the `--report FILE` option that plan and predict share.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/report_option.hpp"
#include "io/input_file.hpp"
#include "planner/error.hpp"
#include "report/report.hpp"

namespace shardplan::cli {

namespace {

// The command line that made the document, for the report's footer ("shardplan plan --preset 8b ...").
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string raw = ss.str();
  std::string out;
  size_t start = 0;
  bool first = true;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(start, end - start);
    if (first) arg = "shardplan";
    else if (arg.empty() || arg.find_first_of(" \t'\"$`\\") != std::string::npos) {
      std::string q = "'";
      for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = q + "'";
    }
    out += (first ? "" : " ") + arg;
    first = false;
    start = end + 1;
  }
  return out.empty() ? "shardplan" : out;
}

CLI::Validator report_path_validator(const std::string& /*flag: CLI11 names it in the message*/) {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (report::format_from_path(path)) return "";
        // CLI11 puts "<flag>: " in front already.
        return fmt::format("{}: the file name must end in .md (Markdown) or .html (self-contained HTML)", path);
      },
      "FILE.md|FILE.html");
}

}  // namespace

void add_report_option(CLI::App& cmd, std::string& path) {
  cmd.add_option("--report", path,
                 "Also write a report: FILE.md (Markdown) or FILE.html (self-contained HTML with SVG charts)")
      ->check(report_path_validator("--report"));
}

void write_report_option(const std::string& path, const nlohmann::json& doc) {
  if (path.empty()) return;
  const auto format = report::format_from_path(path);
  if (!format) throw InputError(fmt::format("--report {}: the file name must end in .md or .html", path));
  report::RenderOptions o;
  o.origin = "`" + command_line() + "`";
  report::write_file_atomically(path, report::render_report(doc, *format, o), "--report");
}

void add_report_command(CLI::App& app, const GlobalOptions&) {
  struct Options {
    std::string input;
    std::vector<std::string> outputs, html, markdown;
    std::string format = "markdown";
    std::string title;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Render a saved predict, plan, simulate or validate JSON document, or a calibration profile, as Markdown or "
      "self-contained HTML with SVG charts (report/README.md)");
  cmd->add_option("input", opts->input,
                  "The JSON of `predict`, `plan`, `simulate` or `validate --format json`, a calibration profile "
                  "(.yaml), or - for stdin")
      ->required();
  cmd->add_option("-o,--output", opts->outputs, "Write the report to FILE.md or FILE.html (format from the extension); repeatable")
      ->check(report_path_validator("--output"));
  cmd->add_option("--html", opts->html, "Write self-contained HTML to FILE, whatever its extension; repeatable");
  cmd->add_option("--md,--markdown", opts->markdown, "Write Markdown to FILE, whatever its extension; repeatable");
  cmd->add_option("--format", opts->format, "Standard output when no file is given: markdown (default) | html");
  cmd->add_option("--title", opts->title, "Replace the report's title");
  cmd->callback([opts] {
    const auto stdout_format = report::parse_format(opts->format);
    if (!stdout_format) throw InputError(fmt::format("--format '{}' is not one of: markdown, html", opts->format));
    // An output that is the input would replace the document it renders (two outputs that are one file: the writer).
    for (const auto& [flag, paths] : {std::pair{"--output", &opts->outputs}, {"--html", &opts->html}, {"--md", &opts->markdown}})
      for (const std::string& p : *paths)
        if (opts->input != "-" && io::same_file(opts->input, p))
          throw InputError(fmt::format("{} {} is the input document {}; write the report to another file", flag,
                                       io::escape_for_line(p), io::escape_for_line(opts->input)));
    const nlohmann::json doc = report::read_json_file(opts->input);
    report::RenderOptions o;
    o.origin = opts->input == "-" ? "standard input" : opts->input;
    o.title = opts->title;
    // Render each format once; then write every file, all or none.
    std::optional<std::string> md, html;
    auto text = [&](report::Format f) -> const std::string& {
      auto& slot = f == report::Format::html ? html : md;
      if (!slot) slot = report::render_report(doc, f, o);
      return *slot;
    };
    if (opts->outputs.empty() && opts->html.empty() && opts->markdown.empty()) {
      std::cout << text(*stdout_format);
      return;
    }
    report::AtomicWriter writer;
    for (const std::string& p : opts->outputs) writer.stage(p, text(*report::format_from_path(p)), "--output");
    for (const std::string& p : opts->html) writer.stage(p, text(report::Format::html), "--html");
    for (const std::string& p : opts->markdown) writer.stage(p, text(report::Format::markdown), "--md");
    writer.commit();
  });
}

}  // namespace shardplan::cli
