#pragma once
// Reports: a saved `predict`, `plan`, `simulate` or `validate` JSON document (CONTRACT.md), or a calibration
// profile, rendered as Markdown (for PRs and terminals) or as one self-contained HTML file (inline CSS and SVG
// only: no scripts, no fonts, no network).
//
// The input is the JSON the CLI prints, so `shardplan report` renders saved files and `--report FILE` renders
// the document the command has just built; both go through the same code. What kind of document it is follows
// from its keys: "candidates" (plan), "predicted" and "measured" (validate), "config" and "memory" (predict or
// simulate), "kind: calibration-profile" (a `calibrate` profile, read from its YAML).
// A predict document may carry an optional "timeline" (one simulated step; report/README.md) which adds the
// timeline and memory-over-step charts.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/atomic_write.hpp"
#include "report/charts.hpp"

namespace shardplan::report {

enum class Format { markdown, html };
const char* to_string(Format f);
// .md / .markdown → markdown, .html / .htm → html (case-insensitive); nothing otherwise.
std::optional<Format> format_from_path(const std::string& path);
// "markdown" / "md" / "html"; nothing otherwise.
std::optional<Format> parse_format(const std::string& s);

enum class DocKind { prediction, plan, validation, calibration };
const char* to_string(DocKind k);

struct RenderOptions {
  std::string origin;  // where the document came from (a file, or the command line), shown in the footer
  std::string title;   // replaces the generated title when not empty
};

// Throws InputError naming `origin` and what is missing when the document is none of the three kinds, or a
// field a report needs is missing or of the wrong type.
DocKind detect_kind(const nlohmann::json& doc, const std::string& origin);
std::string render_report(const nlohmann::json& doc, Format format, const RenderOptions& options);

// The JSON in a file ("-": standard input); a .yaml / .yml file (a calibration profile) is read as YAML and
// returned as the same tree in JSON. InputError naming the file when it cannot be read or parsed.
nlohmann::json read_json_file(const std::string& path);

// Atomic writes (temporary name, fsync, rename; several files all or none) live in io/atomic_write.hpp, the one
// writer of the whole program; report's callers keep their names.
using io::AtomicWriter;
using io::write_file_atomically;

// A simulated step from a document's "timeline" object (report/README.md); InputError naming the field.
Timeline timeline_from_json(const nlohmann::json& j, const std::string& origin);
// ... and back: the object a document carries so that its report draws the timeline.
nlohmann::json timeline_json(const Timeline& t);

}  // namespace shardplan::report
