// `shardplan presets [models|gpus|clusters]` and `shardplan presets show NAME`.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/terminal.hpp"
#include "planner/moe.hpp"
#include "planner/error.hpp"
#include "planner/hardware.hpp"
#include "planner/model.hpp"

namespace shardplan::cli {

PresetStore load_presets(const GlobalOptions& global) {
  PresetStore store = PresetStore::builtin();
  for (const std::string& dir : global.presets_dirs) store.add_directory(dir);
  return store;
}

namespace {

constexpr PresetKind kAllKinds[] = {PresetKind::model, PresetKind::gpu, PresetKind::cluster};

// ---- plain aligned tables -----------------------------------------------------------------------------------

struct Column {
  std::string title;
  bool right = false;  // numbers are right-aligned so that digits line up
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::size_t> column_widths(const Table& t) {
  std::vector<std::size_t> widths;
  for (const Column& c : t.columns) widths.push_back(c.title.size());
  for (const auto& row : t.rows) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  return widths;
}

std::string row_text(const Table& t, const std::vector<std::size_t>& widths, const std::vector<std::string>& cells) {
  std::string line;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) line += "  ";
    line += t.columns[i].right ? fmt::format("{:>{}}", cells[i], widths[i]) : fmt::format("{:<{}}", cells[i], widths[i]);
  }
  line.erase(line.find_last_not_of(' ') + 1);  // no trailing blanks from the last, left-aligned column
  return line + "\n";
}

// The aligned table; on a terminal narrower than it (or COLUMNS), columns from the right are dropped and the name
// cut to fit (cli/terminal.hpp TextTable; issue 19, item 23). Unfitted output is byte for byte what it was.
void print_table(const Table& t, const Terminal& term) {
  std::vector<std::size_t> widths = column_widths(t);
  std::vector<std::string> titles;
  for (const Column& c : t.columns) titles.push_back(c.title);
  std::string natural = row_text(t, widths, titles);
  std::size_t widest = natural.size() - 1;
  for (const auto& row : t.rows) {
    const std::string line = row_text(t, widths, row);
    widest = std::max(widest, display_width(line) - 1);
    natural += line;
  }
  if (t.rows.empty()) natural += "(none)\n";
  if (term.width == 0 || widest <= term.width || t.rows.empty()) {
    std::cout << natural;
    return;
  }
  std::vector<TableColumn> columns;
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    columns.push_back({t.columns[i].title, widths[i], t.columns[i].right, i < 2 ? 0 : static_cast<int>(i),
                       i == 0, i > 0 ? std::size_t{2} : std::size_t{0}});
  TextTable table("", columns);
  table.add_header();
  for (const auto& row : t.rows) table.add_row(row);
  std::cout << table.render(term);
}

// A figure with at most one decimal, without a trailing ".0" (80, 989.4).
std::string figure(double v) {
  std::string s = fmt::format("{:.1f}", v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

std::string billions(int64_t params) {
  double b = static_cast<double>(params) / 1e9;
  return b >= 1 ? fmt::format("{:.2f}", b) : fmt::format("{:.3f}", b);  // keep 3 digits for small models
}

// "46,702,792,704": digits grouped by thousands, as model cards print counts.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The counts the planner derives, as a YAML comment above the preset (planner/moe.hpp defines "active").
std::string model_count_comment(const ModelSpec& m) {
  const ParamCounts p = count_params(m);
  std::string out = fmt::format("# parameters (computed): {} total", grouped(p.total));
  if (model_is_moe(m))
    out += fmt::format(", {} active per token ({} without the input embedding)", grouped(p.active),
                       grouped(active_params_excluding_embedding(m, p)));
  if (p.mtp > 0) out += fmt::format(", multi-token prediction modules {} more", grouped(p.mtp));
  return out + "\n";
}

// ---- the three lists ----------------------------------------------------------------------------------------

Table models_table(const PresetStore& store) {
  Table t{{{"name"}, {"params(B)", true}, {"active(B)", true}, {"layers", true}, {"hidden", true}, {"heads/kv", true}, {"ffn", true},
           {"vocab", true}, {"mlp"}, {"norm"}},
          {}};
  for (const std::string& name : store.names(PresetKind::model)) {
    ModelSpec m = store.model(name);
    const ParamCounts p = count_params(m);
    t.rows.push_back({name, billions(p.total), billions(p.active), std::to_string(m.layers), std::to_string(m.hidden),
                      fmt::format("{}/{}", m.heads, m.kv_heads), std::to_string(m.ffn_hidden), std::to_string(m.vocab),
                      to_string(m.mlp), to_string(m.norm)});
  }
  return t;
}

Table gpus_table(const PresetStore& store) {
  // The source last: on a narrow terminal it is the first column dropped.
  Table t{{{"name"}, {"memory GiB", true}, {"bf16 TFLOP/s", true}, {"fp8 TFLOP/s", true}, {"HBM GB/s", true},
           {"NVLink GB/s", true}, {"class"}, {"source"}},
          {}};
  for (const std::string& name : store.names(PresetKind::gpu)) {
    GpuSpec g = store.gpu(name);
    t.rows.push_back({name, figure(g.memory_gib), figure(g.bf16_tflops), g.fp8_tflops > 0 ? figure(g.fp8_tflops) : "-",
                      figure(g.hbm_gbps), figure(g.nvlink_gbps), to_string(gpu_generation(g)), g.source});
  }
  return t;
}

Table clusters_table(const PresetStore& store) {
  Table t{{{"name"}, {"gpu"}, {"gpus/node", true}, {"NVLink domain", true}, {"intra link"}, {"intra GB/s", true},
           {"inter Gb/s/node", true}, {"leaf GPUs", true}, {"spine"}, {"source"}},
          {}};
  for (const std::string& name : store.names(PresetKind::cluster)) {
    ClusterSpec c = store.cluster(name);
    const bool leaf = c.inter.gpus_per_leaf > 0;
    t.rows.push_back({name, c.gpu_name, std::to_string(c.gpus_per_node), std::to_string(nvlink_domain_size(c)),
                      to_string(c.intra.kind), figure(c.intra.gbps), figure(c.inter.node_gbps()),
                      leaf ? std::to_string(c.inter.gpus_per_leaf) : "-",
                      leaf ? figure(c.inter.spine_oversubscription) + ":1" : "-", c.source});
  }
  return t;
}

Table table_of(const PresetStore& store, PresetKind kind) {
  switch (kind) {
    case PresetKind::model: return models_table(store);
    case PresetKind::gpu: return gpus_table(store);
    case PresetKind::cluster: return clusters_table(store);
  }
  return {};
}

// "model", "models", "gpu", ... → the kind.
std::optional<PresetKind> parse_kind(const std::string& word) {
  for (PresetKind k : kAllKinds) {
    std::string singular = to_string(k);
    if (word == singular || word == singular + "s") return k;
  }
  return std::nullopt;
}

// The flag that selects a preset of this kind elsewhere, for the list headings.
const char* flag_for(PresetKind kind) {
  switch (kind) {
    case PresetKind::model: return "--preset NAME";
    case PresetKind::gpu: return "--gpu NAME";
    case PresetKind::cluster: return "--cluster NAME";
  }
  return "";
}

void print_lists(const PresetStore& store, const std::string& which) {
  const Terminal term = stdout_terminal(TerminalFlags{});
  if (!which.empty()) {
    std::optional<PresetKind> kind = parse_kind(which);
    if (!kind) {
      throw InputError(fmt::format("presets: unknown list '{}' (choose models, gpus or clusters, or 'presets show NAME')",
                                   which));
    }
    print_table(table_of(store, *kind), term);
    return;
  }
  // All tables are built before printing: a broken preset then gives an error and no half-printed list.
  std::vector<Table> tables;
  for (PresetKind kind : kAllKinds) tables.push_back(table_of(store, kind));
  for (std::size_t i = 0; i < tables.size(); ++i) {
    if (i > 0) std::cout << "\n";
    std::cout << fmt::format("{}s ({})\n", to_string(kAllKinds[i]), flag_for(kAllKinds[i]));
    print_table(tables[i], term);
  }
}

// ---- show ---------------------------------------------------------------------------------------------------

std::string known_names(const PresetStore& store, PresetKind kind) {
  std::vector<std::string> names = store.names(kind);
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::vector<std::string> near = near_names(name, candidates);
  return near.empty() ? std::string() : fmt::format("did you mean '{}'? ", fmt::join(near, "', '"));
}

[[noreturn]] void throw_unknown(const PresetStore& store, const std::string& name, std::optional<PresetKind> kind) {
  if (kind) {
    throw InputError(fmt::format("presets show: unknown {} preset '{}' ({}known: {})", to_string(*kind), name,
                                 did_you_mean(name, store.names(*kind)), known_names(store, *kind)));
  }
  std::vector<std::string> all;
  for (PresetKind k : kAllKinds) {
    for (std::string& n : store.names(k)) all.push_back(std::move(n));
  }
  throw InputError(fmt::format("presets show: unknown preset '{}' ({}models: {}; gpus: {}; clusters: {})", name,
                               did_you_mean(name, all), known_names(store, PresetKind::model),
                               known_names(store, PresetKind::gpu), known_names(store, PresetKind::cluster)));
}

// NAME, or KIND:NAME when a GPU and a cluster (say) share a name.
const PresetEntry& find_for_show(const PresetStore& store, const std::string& query) {
  std::size_t colon = query.find(':');
  if (colon != std::string::npos) {
    if (std::optional<PresetKind> kind = parse_kind(query.substr(0, colon))) {
      std::string name = query.substr(colon + 1);
      if (const PresetEntry* entry = store.find(*kind, name)) return *entry;
      throw_unknown(store, name, kind);
    }
  }
  std::vector<const PresetEntry*> matches;
  for (PresetKind k : kAllKinds) {
    if (const PresetEntry* entry = store.find(k, query)) matches.push_back(entry);
  }
  if (matches.empty()) throw_unknown(store, query, std::nullopt);
  if (matches.size() > 1) {
    std::vector<std::string> qualified;
    for (const PresetEntry* e : matches) qualified.push_back(fmt::format("'{}:{}'", to_string(e->kind), query));
    throw InputError(fmt::format("presets show: '{}' names presets of several kinds; say {}", query,
                                 fmt::join(qualified, " or ")));
  }
  return *matches.front();
}

// The header is a YAML comment so that `presets show X > my.yaml` gives a file that loads as is.
void show_preset(const PresetStore& store, const std::string& query) {
  const PresetEntry& entry = find_for_show(store, query);
  // Parsed first: a broken preset is an error naming its file and line, and its bytes never reach the terminal.
  switch (entry.kind) {
    case PresetKind::model: (void)store.model(entry.name); break;
    case PresetKind::gpu: (void)store.gpu(entry.name); break;
    case PresetKind::cluster: (void)store.cluster(entry.name); break;
  }
  // std::cout, not fmt::print: a failed write is reported by main (exit 1), not thrown as "cannot write to file".
  std::cout << fmt::format("# {} preset '{}' from {}{}\n", to_string(entry.kind), entry.name, entry.origin,
                           entry.embedded ? " (built into shardplan)" : "");
  if (!entry.replaces.empty()) std::cout << fmt::format("# (replaces {})\n", entry.replaces);
  if (entry.kind == PresetKind::model) std::cout << model_count_comment(store.model(entry.name));
  std::cout << entry.text;
  if (!entry.text.empty() && entry.text.back() != '\n') std::cout << "\n";
}

}  // namespace

void add_presets_command(CLI::App& app, const GlobalOptions& global) {
  CLI::App* presets = app.add_subcommand("presets", "List the presets (models, GPUs, clusters) or show one");
  // Option values live as long as the callbacks that read them.
  auto which = std::make_shared<std::string>();
  presets->add_option("list", *which, "models | gpus | clusters (default: all three)");

  CLI::App* show = presets->add_subcommand("show", "Print a preset's YAML and the file it comes from");
  auto name = std::make_shared<std::string>();
  show->add_option("name", *name, "preset name; model:NAME, gpu:NAME or cluster:NAME when kinds share a name")
      ->required();

  show->callback([&global, name] { show_preset(load_presets(global), *name); });
  presets->callback([&global, which, show] {
    if (show->parsed()) return;  // the parent's callback also runs after `presets show`
    print_lists(load_presets(global), *which);
  });
}

}  // namespace shardplan::cli
