#pragma once
// `--report FILE` on the commands that produce a document (plan, predict): FILE.md is Markdown, FILE.html a
// self-contained HTML page with SVG charts (report/report.hpp). The extension is checked while the flags are
// parsed, so a bad name fails before any work is done.
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace shardplan::cli {

void add_report_option(CLI::App& cmd, std::string& path);

// Renders `doc` (the command's --format json document) and writes it atomically to `path`; nothing when `path`
// is empty. Throws InputError naming --report when the file cannot be written (nothing is left behind).
void write_report_option(const std::string& path, const nlohmann::json& doc);

}  // namespace shardplan::cli
