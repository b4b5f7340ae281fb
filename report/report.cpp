#include "report/report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/search.hpp"
#include "report/document.hpp"
#include "report/parts.hpp"
#include "report/svg.hpp"

namespace shardplan::report {

using nlohmann::json;

const char* to_string(Format f) { return f == Format::html ? "html" : "markdown"; }

const char* to_string(DocKind k) {
  switch (k) {
    case DocKind::prediction: return "predict";
    case DocKind::plan: return "plan";
    case DocKind::validation: return "validate";
    case DocKind::calibration: return "calibrate";
  }
  return "?";
}

std::optional<Format> format_from_path(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".md" || ext == ".markdown") return Format::markdown;
  if (ext == ".html" || ext == ".htm") return Format::html;
  return std::nullopt;
}

std::optional<Format> parse_format(const std::string& s) {
  if (s == "markdown" || s == "md") return Format::markdown;
  if (s == "html") return Format::html;
  return std::nullopt;
}

const char* zero_label(int64_t z) {
  static const char* const labels[] = {"DDP (ZeRO-0)", "ZeRO-1", "ZeRO-2 (SHARD_GRAD_OP)", "ZeRO-3 (FULL_SHARD)"};
  return z >= 0 && z <= 3 ? labels[z] : "?";
}

// --- Series ----------------------------------------------------------------------------------------------------

const std::vector<Series>& memory_series() {
  static const std::vector<Series> s = {
      {"params", "parameters", "#1f4e79"},      {"grads", "gradients", "#4e79a7"},
      {"master", "master weights", "#9cbfe3"},  {"optimizer", "optimizer states", "#7b5ea7"},
      {"activations", "activations", "#f28e2b"}, {"logits", "logits and loss", "#edc948"},
      {"buffers", "buffers", "#59a14f"},        {"runtime", "runtime (CUDA, NCCL)", "#9c755f"},
      {"fragmentation", "fragmentation", "#c9c3bd"}};
  return s;
}

const std::vector<Series>& time_series() {
  static const std::vector<Series> s = {{"compute", "compute", "#4e79a7"},
                                        {"slowdown", "compute slowed by overlapped comm.", "#a0cbe8"},
                                        {"tp", "TP comm. (exposed)", "#e15759"},
                                        {"cp", "CP ring (exposed)", "#ff9da7"},
                                        {"ep", "EP all-to-all (exposed)", "#d37295"},
                                        {"pp", "PP sends (exposed)", "#f28e2b"},
                                        {"dp", "DP comm. (exposed)", "#59a14f"},
                                        {"bubble", "pipeline bubble", "#bab0ac"},
                                        {"optimizer", "optimizer step", "#b07aa1"}};
  return s;
}

// --- The parts of a predict object -------------------------------------------------------------------------------


// planner/partial_recompute.hpp recompute_label, from the JSON's fields.
std::string recompute_named(const Reader& r, const json& c, const char* fallback) {
  Strategy s;
  const std::string name = r.str_or(c, "recompute", fallback);
  if (name != "full") return name;
  s.recompute = Recompute::full;
  s.recompute_layers = static_cast<int64_t>(r.num_or(c, "recompute_layers", 0));
  s.recompute_every = static_cast<int64_t>(r.num_or(c, "recompute_every", 0));
  return recompute_label(s);
}

Config read_config(const Reader& r, const json& c, const std::string& where) {
  Config k;
  k.model = r.str_or(c, "model", "?");
  k.cluster = r.str_or(c, "cluster", "?");
  k.gpu = r.str_or(c, "gpu", "?");
  k.precision = r.str_or(c, "precision", "");
  k.framework = r.str_or(c, "framework", "");
  k.recompute = recompute_named(r, c, "none");
  k.schedule = r.str_or(c, "schedule", "");
  k.gpus = static_cast<int64_t>(r.num(c, "gpus", where));
  k.tp = static_cast<int64_t>(r.num_or(c, "tp", 1));
  k.pp = static_cast<int64_t>(r.num_or(c, "pp", 1));
  k.cp = static_cast<int64_t>(r.num_or(c, "cp", 1));
  k.dp = static_cast<int64_t>(r.num_or(c, "dp", 1));
  k.vpp = static_cast<int64_t>(r.num_or(c, "vpp", 1));
  k.zero = static_cast<int64_t>(r.num_or(c, "zero", 0));
  k.hsdp = static_cast<int64_t>(r.num_or(c, "hsdp", 0));
  k.ep = static_cast<int64_t>(r.num_or(c, "ep", 1));
  k.micro_batch = static_cast<int64_t>(r.num_or(c, "micro_batch", 1));
  k.global_batch = static_cast<int64_t>(r.num_or(c, "global_batch", 0));
  k.seq = static_cast<int64_t>(r.num_or(c, "seq", 0));
  k.grad_accum = static_cast<int64_t>(r.num_or(c, "grad_accum", 0));
  k.nodes = static_cast<int64_t>(r.num_or(c, "nodes", 1));
  k.sp = r.flag_or(c, "sp", false);
  k.offload = r.flag_or(c, "offload_optimizer", false);
  k.flash = r.flag_or(c, "flash_attn", true);
  return k;
}

std::string family(const Config& c) {
  Strategy s;
  s.zero = static_cast<int>(c.zero);
  s.hsdp = c.hsdp;
  s.ep = c.ep;
  s.tp = c.tp;
  s.pp = c.pp;
  s.cp = c.cp;
  s.offload_optimizer = c.offload;
  return family_of(s);
}

std::string layout(int64_t tp, int64_t pp, int64_t dp, int64_t vpp, bool sp, int64_t hsdp) {
  std::string out = fmt::format("tp {} pp {} dp {}", tp, pp, dp);
  if (vpp > 1) out += fmt::format(" vpp {}", vpp);
  if (sp) out += " sp";
  if (hsdp > 0) out += fmt::format(" hsdp {}", hsdp);
  return out;
}
std::string layout(const Config& c) {
  std::string out = layout(c.tp, c.pp, c.dp, c.vpp, c.sp, c.hsdp);
  if (c.cp > 1) out.insert(out.find(" dp "), fmt::format(" cp {}", c.cp));  // "tp 8 pp 16 cp 16 dp 8"
  return out + (c.ep > 1 ? fmt::format(" ep {}", c.ep) : "");
}

Time read_time(const Reader& r, const json& p, const std::string& where) {
  Time t;
  const json& j = r.object(p, "time", where);
  t.modelled = r.flag_or(j, "modelled", true);
  t.step = r.num(j, "step_s", sub(where, "time"));
  t.compute = r.num(j, "compute_s", sub(where, "time"));
  t.slowdown = r.num_or(j, "overlap_slowdown_s", 0);
  t.bubble = r.num(j, "bubble_s", sub(where, "time"));
  t.optimizer = r.num(j, "optimizer_s", sub(where, "time"));
  if (r.find(j, "exposed_comm_by_group_s")) {
    t.tp = r.num_or(j, "exposed_comm_by_group_s.tp", 0);
    t.cp = r.num_or(j, "exposed_comm_by_group_s.cp", 0);
    t.ep = r.num_or(j, "exposed_comm_by_group_s.ep", 0);
    t.pp = r.num_or(j, "exposed_comm_by_group_s.pp", 0);
    t.dp = r.num_or(j, "exposed_comm_by_group_s.dp", 0);
  } else {
    t.dp = r.num(j, "exposed_comm_s", sub(where, "time"));  // the contract's total only: shown as one part
  }
  t.dp_total = r.num_or(j, "dp_comm_total_s", 0);
  return t;
}

std::vector<Segment> time_segments(const Time& t, bool with_compute) {
  std::vector<Segment> s;
  if (with_compute) s.push_back({"compute", t.compute - t.slowdown});
  s.push_back({"slowdown", t.slowdown});
  s.push_back({"tp", t.tp});
  s.push_back({"cp", t.cp});
  s.push_back({"ep", t.ep});
  s.push_back({"pp", t.pp});
  s.push_back({"dp", t.dp});
  s.push_back({"bubble", t.bubble});
  s.push_back({"optimizer", t.optimizer});
  return s;
}

Memory read_memory(const Reader& r, const json& p, const std::string& where) {
  Memory m;
  const json& j = r.object(p, "memory", where);
  m.peak = r.num(j, "peak_bytes", sub(where, "memory"));
  m.capacity = r.num(j, "capacity_bytes", sub(where, "memory"));
  const json& comp = r.object(j, "components", sub(where, "memory"));
  for (const Series& s : memory_series()) m.components.push_back({s.key, r.num_or(comp, s.key, 0)});
  m.fits = r.flag_or(j, "fits", m.peak <= m.capacity);
  m.safe = r.flag_or(j, "within_safety_margin", m.peak <= 0.8 * m.capacity);
  m.phase = r.str_or(j, "peak_phase", "");
  m.stage = static_cast<int64_t>(r.num_or(j, "peak_stage", 0));
  return m;
}

Rates read_rates(const Reader& r, const json& p, const std::string& where) {
  Rates t;
  const json& j = r.object(p, "throughput", where);
  t.tokens_per_s = r.num(j, "tokens_per_s", sub(where, "throughput"));
  t.per_gpu = r.num(j, "tokens_per_s_per_gpu", sub(where, "throughput"));
  t.mfu = r.num(j, "mfu", sub(where, "throughput"));
  t.hfu = r.num_or(j, "hfu", 0);
  t.model_tflops = r.num_or(j, "model_tflops_per_gpu", 0);
  return t;
}

Pred read_prediction(const Reader& r, const json& p, const std::string& where) {
  if (!p.is_object()) r.fail("", where.empty() ? "(document)" : where, "is not an object");
  Pred out;
  out.config = read_config(r, r.object(p, "config", where), sub(where, "config"));
  out.memory = read_memory(r, p, where);
  out.time = read_time(r, p, where);
  // `simulate --format json` has neither rates nor parameter counts; the contract's predict object has both.
  out.simulated = p.contains("simulation");
  if (!out.simulated || p.contains("throughput")) out.rates = read_rates(r, p, where);
  out.has_rates = !out.simulated || p.contains("throughput");
  out.params = out.simulated ? r.num_or(p, "model.params", 0) : r.num(p, "model.params", where);
  out.raw = &p;
  return out;
}

// --- Charts built from the parts ----------------------------------------------------------------------------------

std::vector<RefLine> capacity_lines(double capacity) {
  return {{0.8 * capacity, fmt::format("80 % line {} GB", gb(0.8 * capacity)), "#bf8700"},
          {capacity, fmt::format("capacity {} GB", gb(capacity)), "#cf222e"}};
}

// The value of a memory bar in red past the capacity and in amber past the 80 % line.
std::string memory_value_color(double total, double capacity) {
  return total > capacity ? "#cf222e" : total > 0.8 * capacity ? "#9a6700" : "";
}

BarChart memory_chart(const std::string& id, double capacity) {
  BarChart c;
  c.id = id;
  c.title = "Per-rank memory at the peak, by component";
  c.axis_label = "GB per GPU (busiest rank, 10^9 bytes)";
  c.scale = 1e9;
  c.unit = " GB";
  c.series = memory_series();
  c.lines = capacity_lines(capacity);
  c.clip_at = 1.5 * capacity;
  return c;
}

BarChart time_chart(const std::string& id, bool with_compute) {
  BarChart c;
  c.id = id;
  c.title = with_compute ? "Step time by part" : "Step time beyond compute";
  c.axis_label = with_compute ? "seconds per optimizer step (slowest pipeline stage)"
                              : "seconds per optimizer step beyond compute";
  c.scale = 1;
  c.decimals = 2;
  c.unit = " s";
  c.series = time_series();
  return c;
}

Block chart_block(std::string svg, Table fallback, std::string caption) {
  Block b;
  b.kind = Block::Kind::chart;
  b.svg = std::move(svg);
  b.fallback = std::move(fallback);
  b.text = std::move(caption);
  return b;
}

Block paragraph(std::string s) {
  Block b;
  b.kind = Block::Kind::paragraph;
  b.text = std::move(s);
  return b;
}

Block table_block(Table t) {
  Block b;
  b.kind = Block::Kind::table;
  b.table = std::move(t);
  return b;
}

std::string config_line(const Config& c) {
  std::string out = fmt::format("{} × {} ({} node{}, cluster {})", c.gpus, c.gpu, c.nodes, c.nodes == 1 ? "" : "s",
                                c.cluster);
  if (!c.precision.empty()) out += " · " + c.precision;
  if (!c.framework.empty()) out += " · " + c.framework;
  if (c.global_batch > 0)
    out += fmt::format(" · global batch {} × {} tokens = {:.2f} M tokens per step", c.global_batch, c.seq,
                       static_cast<double>(c.global_batch * c.seq) / 1e6);
  return out;
}

std::string strategy_line(const Config& c, bool bold) {
  std::string out = fmt::format("{1}{0}{1}, {2}, micro-batch {3}", zero_label(c.zero), bold ? "**" : "", layout(c),
                                c.micro_batch);
  if (c.grad_accum > 0) out += fmt::format(" × {} accumulation steps", c.grad_accum);
  out += ", recompute " + c.recompute;
  if (c.flash) out += ", flash attention";
  if (c.offload) out += ", optimizer offloaded";
  return out;
}

// The busiest rank's memory items, as a table.
Table memory_items_table(const Reader& r, const Pred& p) {
  Table t;
  t.header = {"component", "what", "GB"};
  t.numeric = {false, false, true};
  const json* items = r.find(*p.raw, "memory.items");
  if (!items) items = r.find(*p.raw, "memory.live_at_peak");  // simulate's name for them
  if (items && items->is_array() && !items->empty()) {
    std::string last;
    for (const json& it : *items) {
      const std::string comp = r.str_or(it, "component", "");
      t.rows.push_back({comp == last ? "" : comp, r.str_or(it, "what", ""), gb(r.num_or(it, "bytes", 0), 2)});
      last = comp;
    }
  } else {
    for (const Segment& s : p.memory.components)
      if (s.value > 0) t.rows.push_back({s.key, "", gb(s.value, 2)});
  }
  t.rows.push_back({"**peak**", p.memory.phase.empty() ? "" : fmt::format("stage {}, {}", p.memory.stage, p.memory.phase),
                    "**" + gb(p.memory.peak, 2) + "**"});
  t.rows.push_back({"capacity", fmt::format("{} of HBM used", pct(p.memory.peak / p.memory.capacity)),
                    gb(p.memory.capacity, 2)});
  return t;
}

Table time_table(const Time& t) {
  Table out;
  out.header = {"part", "seconds", "share"};
  out.numeric = {false, true, true};
  auto row = [&](const std::string& what, double s) {
    out.rows.push_back({what, secs(s), t.step > 0 ? pct(s / t.step, 1) : "—"});
  };
  row("compute (incl. recomputation)", t.compute - t.slowdown);
  if (t.slowdown > 0) row("compute slowed by overlapped communication", t.slowdown);
  if (t.tp > 0) row("tensor-parallel communication (exposed)", t.tp);
  if (t.cp > 0) row("context-parallel K/V ring (exposed)", t.cp);
  if (t.pp > 0) row("pipeline sends (exposed)", t.pp);
  if (t.ep > 0) row("expert-parallel all-to-all (exposed)", t.ep);
  if (t.dp > 0 || t.dp_total > 0)
    row(t.dp_total > 0 ? fmt::format("data-parallel communication exposed (of {} s)", secs(t.dp_total))
                       : std::string("data-parallel communication (exposed)"),
        t.dp);
  if (t.bubble > 0) row("pipeline bubble", t.bubble);
  row("optimizer step", t.optimizer);
  out.rows.push_back({"**step**", "**" + secs(t.step) + "**", "100 %"});
  return out;
}

std::vector<Card> prediction_cards(const Pred& p) {
  std::vector<Card> cards;
  const double used = p.memory.peak / p.memory.capacity;
  cards.push_back({"peak memory per GPU", gb(p.memory.peak) + " GB",
                   fmt::format("{} of {} GB — {}", pct(used), gb(p.memory.capacity),
                               !p.memory.fits  ? "does not fit"
                               : p.memory.safe ? "under the 80 % line"
                                               : "fits, above the 80 % line"),
                   !p.memory.fits ? "bad" : p.memory.safe ? "good" : "warn"});
  if (p.time.modelled) {
    cards.push_back({"step time", secs(p.time.step) + " s",
                     fmt::format("compute {} of the step", pct((p.time.compute) / p.time.step)), ""});
    if (p.has_rates) {
      cards.push_back({"tokens/s per GPU", fmt::format("{:.0f}", p.rates.per_gpu),
                       fmt::format("{:.0f} tokens/s on all {} GPUs", p.rates.tokens_per_s, p.config.gpus), ""});
      cards.push_back({"MFU", pct(p.rates.mfu, 1),
                       fmt::format("{:.0f} model TFLOP/s per GPU, HFU {}", p.rates.model_tflops, pct(p.rates.hfu, 1)), ""});
    }
  }
  // Time to train, with --tokens (and cost, with --gpu-hour-price).
  const json* tr = p.raw && p.raw->contains("training") ? &p.raw->at("training") : nullptr;
  if (tr && tr->is_object() && tr->contains("days") && tr->at("days").is_number()) {
    const double days = tr->at("days").get<double>();
    const double hours = tr->value("gpu_hours", 0.0);
    std::string detail = fmt::format("{:.0f} GPU-hours", hours);
    if (tr->contains("tokens") && tr->at("tokens").is_number())
      detail = fmt::format("{:.3g} T tokens, ", tr->at("tokens").get<double>() / 1e12) + detail;
    if (tr->contains("cost") && tr->at("cost").is_number()) detail += fmt::format(", cost {:.0f}", tr->at("cost").get<double>());
    cards.push_back({"time to train", fmt::format("{:.1f} days", days), detail, ""});
  }
  return cards;
}

// --- Timeline (an optional "timeline" object) -----------------------------------------------------------------

const std::vector<Series>& timeline_default_categories() {
  static const std::vector<Series> s = {
      {"forward", "forward", "#4e79a7"},        {"backward", "backward", "#2f5d8a"},
      {"recompute", "recomputation", "#a0cbe8"}, {"tp", "TP collective", "#e15759"},
      {"pp", "pipeline send", "#f28e2b"},       {"dp_gather", "DP all-gather", "#59a14f"},
      {"dp_reduce", "DP reduce", "#8cd17d"},    {"dp", "DP communication", "#59a14f"},
      {"optimizer", "optimizer", "#b07aa1"},    {"other", "other", "#bab0ac"}};
  return s;
}

Timeline timeline_from_json(const json& j, const std::string& origin) {
  const Reader r(origin, "a document with a \"timeline\" object (report/README.md)");
  Timeline t;
  t.step_s = r.num(j, "step_s", "timeline");
  for (const json& l : r.array(j, "lanes", "timeline")) {
    if (!l.is_string()) r.fail("timeline", "lanes[]", "is not a string");
    t.lanes.push_back(l.get<std::string>());
  }
  if (const json* cats = r.find(j, "categories"); cats && cats->is_array()) {
    for (const json& c : *cats) t.categories.push_back({r.str(c, "key", "timeline.categories[]"),
                                                        r.str_or(c, "name", r.str(c, "key")),
                                                        r.str_or(c, "color", "#999999")});
  } else {
    t.categories = timeline_default_categories();
  }
  size_t extra = 0;
  static const char* const palette[] = {"#76b7b2", "#ff9da7", "#9c755f", "#edc948", "#b07aa1"};
  const json& spans = r.array(j, "spans", "timeline");
  for (size_t i = 0; i < spans.size(); ++i) {
    const std::string where = fmt::format("timeline.spans[{}]", i);
    TimelineSpan s;
    s.lane = static_cast<int>(r.num(spans[i], "lane", where));
    s.start_s = r.num(spans[i], "start_s", where);
    s.end_s = r.num(spans[i], "end_s", where);
    s.category = r.str_or(spans[i], "category", "other");
    s.label = r.str_or(spans[i], "label", s.category);
    if (s.lane < 0 || static_cast<size_t>(s.lane) >= t.lanes.size()) r.fail(where, "lane", "is not an index into timeline.lanes");
    if (std::none_of(t.categories.begin(), t.categories.end(), [&](const Series& c) { return c.key == s.category; }))
      t.categories.push_back({s.category, s.category, palette[extra++ % std::size(palette)]});
    t.spans.push_back(std::move(s));
  }
  if (const json* mem = r.find(j, "memory"); mem && mem->is_array()) {
    for (size_t i = 0; i < mem->size(); ++i) {
      const std::string where = fmt::format("timeline.memory[{}]", i);
      MemoryTrack track;
      track.name = r.str_or((*mem)[i], "name", fmt::format("rank {}", i));
      const json& ts = r.array((*mem)[i], "t_s", where);
      const json& bs = r.array((*mem)[i], "bytes", where);
      if (ts.size() != bs.size()) r.fail(where, "bytes", "does not have as many entries as t_s");
      for (size_t k = 0; k < ts.size(); ++k) {
        if (!ts[k].is_number() || !bs[k].is_number()) r.fail(where, "t_s/bytes", "holds something that is not a number");
        track.samples.push_back({ts[k].get<double>(), bs[k].get<double>()});
      }
      t.memory.push_back(std::move(track));
    }
  }
  t.capacity_bytes = r.num_or(j, "capacity_bytes", 0);
  return t;
}

json timeline_json(const Timeline& t) {
  json categories = json::array(), spans = json::array(), memory = json::array();
  for (const Series& c : t.categories) categories.push_back({{"key", c.key}, {"name", c.name}, {"color", c.color}});
  for (const TimelineSpan& s : t.spans)
    spans.push_back({{"lane", s.lane}, {"start_s", s.start_s}, {"end_s", s.end_s}, {"category", s.category},
                     {"label", s.label}});
  for (const MemoryTrack& m : t.memory) {
    json ts = json::array(), bs = json::array();
    for (const MemorySample& s : m.samples) {
      ts.push_back(s.t_s);
      bs.push_back(s.bytes);
    }
    memory.push_back({{"name", m.name}, {"t_s", ts}, {"bytes", bs}});
  }
  return {{"step_s", t.step_s}, {"lanes", t.lanes},     {"categories", categories},
          {"spans", spans},     {"memory", memory},     {"capacity_bytes", t.capacity_bytes}};
}

namespace {

// --- Documents ------------------------------------------------------------------------------------------------

Document prediction_document(const json& doc, const Reader& r) {
  const Pred p = read_prediction(r, doc, "");
  Document d;
  d.title = fmt::format("{}: {} on {} × {}", p.simulated ? "simulate" : "predict", p.config.model, p.config.gpus,
                        p.config.gpu);
  d.subtitle = {p.params > 0 ? fmt::format("{} ({} parameters) · {}", p.config.model, param_count(p.params),
                                           config_line(p.config))
                             : fmt::format("{} · {}", p.config.model, config_line(p.config)),
                strategy_line(p.config)};
  d.cards = prediction_cards(p);

  Section mem{"Memory per GPU", {}};
  mem.blocks.push_back(paragraph(fmt::format(
      "The busiest rank at its peak{}: **{} GB** of {} GB ({}). The dashed lines are the GPU's capacity and the 80 % "
      "line that planned runs keep under.",
      p.memory.phase.empty() ? "" : fmt::format(" (pipeline stage {}, {})", p.memory.stage, p.memory.phase),
      gb(p.memory.peak), gb(p.memory.capacity), pct(p.memory.peak / p.memory.capacity))));
  BarChart mc = memory_chart("memory", p.memory.capacity);
  mc.bars.push_back({family(p.config), layout(p.config) + fmt::format(" · mb {}", p.config.micro_batch),
                     p.memory.components, false, "", memory_value_color(p.memory.peak, p.memory.capacity)});
  mem.blocks.push_back(chart_block(stacked_bar_chart(mc)));
  mem.blocks.push_back(table_block(memory_items_table(r, p)));
  d.sections.push_back(std::move(mem));

  if (p.time.modelled) {
    Section time{"Step time", {}};
    BarChart tc = time_chart("step-time", true);
    tc.bars.push_back({family(p.config), layout(p.config), time_segments(p.time, true), false, "", ""});
    time.blocks.push_back(chart_block(stacked_bar_chart(tc)));
    time.blocks.push_back(table_block(time_table(p.time)));
    d.sections.push_back(std::move(time));
  }

  if (const json* tl = r.find(doc, "timeline"); tl && tl->is_object()) {
    const Timeline t = timeline_from_json(*tl, r.origin());
    Section sim{"Simulated step", {}};
    sim.blocks.push_back(paragraph(fmt::format(
        "One step played out op by op ({} s): one lane per stream, and each stage's allocated memory over the step "
        "(the caching allocator's reserve comes on top).",
        secs(t.step_s))));
    sim.blocks.push_back(chart_block(timeline_chart(t, "timeline")));
    if (!t.memory.empty()) sim.blocks.push_back(chart_block(memory_over_step_chart(t, "memory-over-step")));
    d.sections.push_back(std::move(sim));
  }
  return d;
}

}  // namespace

DocKind detect_kind(const json& doc, const std::string& origin) {
  if (doc.is_object()) {
    if (doc.value("kind", "") == "calibration-profile") return DocKind::calibration;
    if (doc.contains("candidates")) return DocKind::plan;
    if (doc.contains("predicted") && doc.contains("measured")) return DocKind::validation;
    if (doc.contains("config") && doc.contains("memory")) return DocKind::prediction;
  }
  throw InputError(fmt::format(
      "{}: not a shardplan document: expected the JSON of `predict --format json` (keys config, memory), "
      "`plan --format json` (key candidates), `validate --format json` (keys predicted, measured) or a calibration "
      "profile (kind: calibration-profile)",
      origin));
}

std::string render_report(const json& doc, Format format, const RenderOptions& options) {
  const DocKind kind = detect_kind(doc, options.origin);
  check_document_numbers(doc, options.origin);  // a document's numbers are not trusted (report/read_input.cpp)
  Document d;
  switch (kind) {
    case DocKind::prediction: d = prediction_document(doc, Reader(options.origin, "`shardplan predict --format json`")); break;
    case DocKind::plan: d = plan_document(doc, Reader(options.origin, "`shardplan plan --format json`")); break;
    case DocKind::validation: d = validation_document(doc, Reader(options.origin, "`shardplan validate --format json`")); break;
    case DocKind::calibration: d = calibration_document(doc, Reader(options.origin, "a calibration profile (calibrate/README.md)")); break;
  }
  if (!options.title.empty()) d.title = options.title;
  d.origin = options.origin;
  return format == Format::html ? render_html(d) : render_markdown(d);
}

}  // namespace shardplan::report
