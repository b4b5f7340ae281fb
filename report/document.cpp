#include "report/document.hpp"

#include <fmt/format.h>

#include "report/svg.hpp"

#ifndef SHARDPLAN_VERSION
#define SHARDPLAN_VERSION "dev"
#endif

namespace shardplan::report {

namespace {

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

// Escaped HTML with **bold** turned into <strong>.
std::string html_inline(const std::string& s) {
  std::string e = xml_escape(s), out;
  bool open = false;
  for (size_t i = 0; i < e.size(); ++i) {
    if (e.compare(i, 2, "**") == 0) {
      out += open ? "</strong>" : "<strong>";
      open = !open;
      ++i;
    } else {
      out += e[i];
    }
  }
  if (open) out += "</strong>";
  return out;
}

std::string md_table(const Table& t) {
  std::string out = "|";
  // Appended piece by piece: GCC 12 warns, falsely (-Wrestrict), about " " + string.
  for (const std::string& h : t.header) out.append(" ").append(md_cell(h)).append(" |");
  out += "\n|";
  for (size_t i = 0; i < t.header.size(); ++i) out += i < t.numeric.size() && t.numeric[i] ? "---:|" : "---|";
  out += "\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const bool hl = r < t.highlight.size() && t.highlight[r];
    out += "|";
    for (const std::string& c : t.rows[r]) {
      const bool bold = hl && !c.empty() && c.rfind("**", 0) != 0;
      out.append(bold ? " **" : " ").append(md_cell(c)).append(bold ? "** |" : " |");
    }
    out += "\n";
  }
  return out;
}

std::string html_table(const Table& t) {
  std::string out = "<div class=\"table\"><table>\n<thead><tr>";
  for (size_t i = 0; i < t.header.size(); ++i)
    out += fmt::format("<th{}>{}</th>", i < t.numeric.size() && t.numeric[i] ? " class=\"n\"" : "", xml_escape(t.header[i]));
  out += "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    out += r < t.highlight.size() && t.highlight[r] ? "<tr class=\"hl\">" : "<tr>";
    for (size_t i = 0; i < t.rows[r].size(); ++i)
      out += fmt::format("<td{}>{}</td>", i < t.numeric.size() && t.numeric[i] ? " class=\"n\"" : "",
                         html_inline(t.rows[r][i]));
    out += "</tr>\n";
  }
  return out + "</tbody></table></div>\n";
}

constexpr const char* kStyle = R"(:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0;background:#f5f6f8;color:#1f2328;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","Liberation Sans",sans-serif}
main{max-width:1000px;margin:0 auto;padding:28px 20px 40px}
header .kicker{margin:0;color:#57606a;font-size:12px;letter-spacing:.06em;text-transform:uppercase}
h1{margin:2px 0 6px;font-size:26px;line-height:1.25}
header p.sub{margin:0;color:#57606a;font-size:14px}
h2{margin:0 0 10px;font-size:18px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(140px,1fr));gap:12px;margin:20px 0 4px}
.card{background:#fff;border:1px solid #d8dee4;border-left:4px solid #8c959f;border-radius:8px;padding:10px 14px}
.card.good{border-left-color:#1a7f37}.card.warn{border-left-color:#bf8700}.card.bad{border-left-color:#cf222e}.card.accent{border-left-color:#0969da}
.card .label{color:#57606a;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:20px;font-weight:600;margin:2px 0}
.card .detail{color:#57606a;font-size:13px}
section{background:#fff;border:1px solid #d8dee4;border-radius:8px;padding:18px 20px;margin:16px 0}
section p{margin:0 0 12px}
figure{margin:8px 0 16px;overflow-x:auto}
figure svg{display:block;max-width:100%;height:auto}
figcaption{color:#57606a;font-size:13px;margin-top:4px}
.table{overflow-x:auto;margin:8px 0 4px}
table{border-collapse:collapse;width:100%;font-size:13.5px;font-variant-numeric:tabular-nums}
th,td{padding:5px 10px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
th{color:#57606a;font-weight:600;border-bottom:1px solid #d0d7de;white-space:nowrap}
td{white-space:nowrap}td:last-child{white-space:normal}
td.n,th.n{text-align:right}
tr.hl td{background:#eaf2fe;font-weight:600}
footer{color:#6e7781;font-size:12.5px;margin-top:20px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:.92em}
@media print{body{background:#fff}section{border:none;padding:0}}
)";

}  // namespace

std::string render_markdown(const Document& d) {
  std::string out = "# " + d.title + "\n\n";
  for (const std::string& s : d.subtitle) out += s + "  \n";
  if (!d.subtitle.empty()) out += "\n";
  for (const Card& c : d.cards)
    out += fmt::format("- **{}:** {}{}\n", c.label, c.value, c.detail.empty() ? "" : " — " + c.detail);
  if (!d.cards.empty()) out += "\n";
  for (const Section& s : d.sections) {
    out += "## " + s.heading + "\n\n";
    for (const Block& b : s.blocks) {
      if (b.kind == Block::Kind::paragraph) out += b.text + "\n\n";
      else if (b.kind == Block::Kind::table) out += md_table(b.table) + "\n";
      else if (!b.fallback.header.empty()) out += md_table(b.fallback) + "\n";  // the chart's numbers
    }
  }
  out += fmt::format("_Generated by shardplan {}{}. The HTML form of this report (`--report FILE.html`) draws the "
                     "charts._\n",
                     SHARDPLAN_VERSION, d.origin.empty() ? "" : " from " + d.origin);
  return out;
}

std::string render_html(const Document& d) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<meta name=\"generator\" content=\"shardplan {}\">\n", SHARDPLAN_VERSION);
  out += "<link rel=\"icon\" href=\"data:,\">\n";  // no favicon request
  out += "<title>" + xml_escape(d.title) + " — shardplan</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  out += "<header>\n<p class=\"kicker\">shardplan report</p>\n<h1>" + xml_escape(d.title) + "</h1>\n";
  for (const std::string& s : d.subtitle) out += "<p class=\"sub\">" + html_inline(s) + "</p>\n";
  out += "</header>\n";
  if (!d.cards.empty()) {
    out += "<div class=\"cards\">\n";
    for (const Card& c : d.cards)
      out += fmt::format("<div class=\"card{}\"><div class=\"label\">{}</div><div class=\"value\">{}</div>"
                         "<div class=\"detail\">{}</div></div>\n",
                         c.tone.empty() ? "" : " " + c.tone, xml_escape(c.label), xml_escape(c.value),
                         html_inline(c.detail));
    out += "</div>\n";
  }
  for (const Section& s : d.sections) {
    out += "<section>\n<h2>" + xml_escape(s.heading) + "</h2>\n";
    for (const Block& b : s.blocks) {
      if (b.kind == Block::Kind::paragraph) out += "<p>" + html_inline(b.text) + "</p>\n";
      else if (b.kind == Block::Kind::table) out += html_table(b.table);
      else
        out += "<figure>\n" + b.svg + (b.text.empty() ? "" : "<figcaption>" + html_inline(b.text) + "</figcaption>\n") +
               "</figure>\n";
    }
    out += "</section>\n";
  }
  out += fmt::format("<footer>Generated by shardplan {}{}. One self-contained file: inline CSS and SVG, no scripts, "
                     "no network access. Hover a bar for its exact value.</footer>\n",
                     SHARDPLAN_VERSION, d.origin.empty() ? "" : " from " + xml_escape(d.origin));
  out += "</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace shardplan::report
