#pragma once
// A report as a neutral document — title, key figures, sections of paragraphs, tables and charts — rendered to
// Markdown (charts left out) or to one self-contained HTML page. Text may use **bold**; everything else is
// escaped.
#include <string>
#include <vector>

namespace shardplan::report {

struct Table {
  std::vector<std::string> header;
  std::vector<bool> numeric;     // right-aligned columns
  std::vector<std::vector<std::string>> rows;
  std::vector<bool> highlight;   // per row (may be shorter than rows)
};

struct Block {
  enum class Kind { paragraph, table, chart } kind = Kind::paragraph;
  std::string text;  // paragraph; caption of a chart
  Table table;
  std::string svg;   // chart: one <svg> element
  Table fallback;    // chart: what Markdown shows instead (nothing when it has no header)
};

struct Section {
  std::string heading;
  std::vector<Block> blocks;
};

struct Card {
  std::string label, value, detail;
  std::string tone;  // "", "good", "warn", "bad", "accent"
};

struct Document {
  std::string title;
  std::vector<std::string> subtitle;
  std::vector<Card> cards;
  std::vector<Section> sections;
  std::string origin;  // shown in the footer
};

std::string render_markdown(const Document& d);
std::string render_html(const Document& d);

}  // namespace shardplan::report
