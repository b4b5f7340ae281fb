#include "cli/render_simulation.hpp"

#include <cmath>

#include <algorithm>

#include <fmt/format.h>

#include "cli/render_prediction.hpp"
#include "planner/error.hpp"

namespace shardplan::cli {

namespace {

using nlohmann::json;
using sim::SimResult;
using sim::StageTime;

int64_t rounded(double v) { return static_cast<int64_t>(std::llround(v)); }
double pct(double sim, double analytic) { return analytic > 0 ? 100.0 * (sim - analytic) / analytic : 0.0; }
double exposed(const StageTime& t) {
  return t.exposed_tp_s + t.exposed_cp_s + t.exposed_pp_s + t.exposed_dp_s + t.exposed_ep_s;
}

json time_json(const StageTime& t, double step) {
  return {{"step_s", step},
          {"compute_s", t.busy_compute_s},
          {"exposed_comm_s", exposed(t)},
          {"bubble_s", t.bubble_s},
          {"optimizer_s", t.optimizer_s},
          {"overlap_slowdown_s", t.overlap_slowdown_s},
          {"exposed_comm_by_group_s",
           {{"tp", t.exposed_tp_s}, {"cp", t.exposed_cp_s}, {"pp", t.exposed_pp_s}, {"dp", t.exposed_dp_s},
            {"ep", t.exposed_ep_s}}},
          {"stage", t.stage}};
}

json memory_json(const SimResult& r) {
  const sim::StagePeak& p = r.peak_stage();
  json components = json::object();
  for (const NamedBytes& nb : component_bytes(p.components)) components[nb.name] = nb.bytes;
  json live = json::array();
  for (const sim::LiveItem& it : p.live)
    live.push_back({{"what", sim::to_string(it.kind)}, {"component", sim::component_of(it.kind)},
                    {"bytes", rounded(it.bytes)}, {"allocations", it.count}});
  if (p.fragmentation > 0)
    live.push_back({{"what", "caching allocator reserve"}, {"component", "fragmentation"},
                    {"bytes", rounded(p.fragmentation)}, {"allocations", 0}});
  json stages = json::array();
  for (size_t i = 0; i < r.memory.size(); ++i) {
    const int64_t analytic = i < r.analytic.memory.stages.size() ? peak_bytes(r.analytic.memory.stages[i].peak) : 0;
    stages.push_back({{"stage", r.memory[i].stage},
                      {"peak_bytes", peak_bytes(r.memory[i].components)},
                      {"analytic_peak_bytes", analytic},
                      {"time_s", r.memory[i].time_s}});
  }
  return {{"peak_bytes", peak_bytes(p.components)},
          {"capacity_bytes", r.analytic.memory.capacity_bytes},
          {"peak_stage", p.stage},
          {"peak_time_s", p.time_s},
          {"peak_during", p.during},
          {"peak_moment", moment_name(p.moment, p.block)},
          {"analytic_peak_moment", moment_name(r.analytic.memory.peak_stage().peak_phase, r.analytic.memory.peak_stage().peak_block)},
          {"components", components},
          {"live_at_peak", live},
          {"stages", stages}};
}

std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / kGB); }
std::string ms(double s) { return fmt::format("{:.2f} ms", s * 1e3); }

std::string render_table(const SimResult& r, bool markdown, const Terminal& term) {
  const Strategy& s = r.analytic.strategy;
  const StageTime& t = r.critical_stage();
  const StepTime& a = r.analytic.time;
  const sim::StagePeak& p = r.peak_stage();
  const double analytic_peak = static_cast<double>(r.analytic.peak_bytes());
  std::string out;
  out += fmt::format("{}{} on {} × {} ({}): tp {} pp {} dp {}{}, ZeRO-{}, {} micro-batch{} of {} × {} tokens, {}\n",
                     markdown ? "**simulate** " : "simulate: ", r.analytic.model.name, s.gpus,
                     r.analytic.cluster.gpu.name, r.analytic.cluster.name, s.tp, s.pp, s.dp,
                     s.vpp > 1 ? fmt::format(" vpp {}", s.vpp) : "", s.zero, grad_accum_steps(s),
                     grad_accum_steps(s) == 1 ? "" : "es", s.micro_batch, s.seq,
                     s.pp > 1 ? to_string(s.schedule) : "no pipeline");
  out += "\n";
  // The table: Markdown rows, or fixed columns that fit a terminal (cli/terminal.hpp).
  // 14 columns hold "9999999.99 ms"; a longer figure widens both (else "18018546.95 ms18598714.39 ms" ran together).
  size_t figure = 14;
  for (const double v : {r.step_s, a.step_s, t.busy_compute_s, a.compute_s, t.overlap_slowdown_s, a.overlap_slowdown_s,
                         t.exposed_tp_s, a.exposed_tp_s, t.exposed_pp_s, a.exposed_pp_s, t.exposed_dp_s, a.exposed_dp_s,
                         t.bubble_s, a.bubble_s, t.optimizer_s, a.optimizer_s})
    figure = std::max(figure, ms(v).size() + 1);
  TextTable times("  ", {{"", 26, false, 0, true}, {"simulated", figure, true}, {"analytic", figure, true}});
  std::string md;
  auto row = [&](const std::string& what, double sim, double analytic) {
    if (markdown) md += fmt::format("| {} | {} | {} |\n", what, ms(sim), ms(analytic));
    else times.add_row({what, ms(sim), ms(analytic)});
  };
  if (markdown) md += "| step time (stage " + std::to_string(t.stage) + ") | simulated | analytic |\n|---|---:|---:|\n";
  else times.add_row({fmt::format("step time (stage {})", t.stage), "simulated", "analytic"});
  row("step", r.step_s, a.step_s);
  row("busy compute", t.busy_compute_s, a.compute_s);
  row("  of it overlap slowdown", t.overlap_slowdown_s, a.overlap_slowdown_s);
  row("exposed TP", t.exposed_tp_s, a.exposed_tp_s);
  if (t.exposed_cp_s > 0 || a.exposed_cp_s > 0) row("exposed CP ring", t.exposed_cp_s, a.exposed_cp_s);
  row("exposed PP", t.exposed_pp_s, a.exposed_pp_s);
  row("exposed DP", t.exposed_dp_s, a.exposed_dp_s);
  if (t.exposed_ep_s > 0 || a.exposed_ep_s > 0) row("exposed EP", t.exposed_ep_s, a.exposed_ep_s);
  row("bubble", t.bubble_s, a.bubble_s);
  row("optimizer", t.optimizer_s, a.optimizer_s);
  out += markdown ? md : times.render(term);
  const bool color = !markdown && term.color;
  std::string prose = fmt::format("\n{} simulated {} vs analytic {} ({:+.1f} %).\n", paint("Step time:", Style::bold, color),
                                  ms(r.step_s), ms(a.step_s), pct(r.step_s, a.step_s));
  // Under expandable segments the allocator's reserve cannot fail the run (memory.hpp fit_bytes).
  const double need = p.peak_bytes - (r.analytic.memory.expandable_segments ? p.fragmentation : 0.0);
  const bool over = need > static_cast<double>(r.analytic.memory.capacity_bytes);
  const StageMemory& an = r.analytic.memory.peak_stage();
  prose += fmt::format("{} {} on stage {} at {} (during {}: {}); analytic {} at {} ({:+.1f} %), capacity {}.\n",
                       paint("Peak memory:", over ? Style::red : Style::bold, color), gb(p.peak_bytes), p.stage,
                       ms(p.time_s), p.during, moment_name(p.moment, p.block), gb(analytic_peak),
                       moment_name(an.peak_phase, an.peak_block),
                       pct(p.peak_bytes, analytic_peak), gb(static_cast<double>(r.analytic.memory.capacity_bytes)));
  prose += markdown ? "\n| live at the peak | component | bytes |\n|---|---|---:|\n" : "Live at the peak:\n";
  out += markdown ? prose : fit_lines(prose, term.width);
  TextTable live("  ", {{"", 10, true}, {"", 14, false, 0, false, 2}, {"", 0, false, 0, true}});
  md.clear();
  auto live_row = [&](const std::string& bytes, const std::string& component, const std::string& what) {
    if (markdown) md += fmt::format("| {} | {} | {} |\n", what, component, bytes);
    else live.add_row({bytes, component, what});
  };
  for (const sim::LiveItem& it : p.live) {
    const std::string what = it.count > 1 ? fmt::format("{} ({} allocations)", sim::to_string(it.kind), it.count)
                                          : std::string(sim::to_string(it.kind));
    live_row(gb(it.bytes), sim::component_of(it.kind), what);
  }
  if (p.fragmentation > 0) live_row(gb(p.fragmentation), "fragmentation", "caching allocator reserve");
  out += markdown ? md : live.render(term);
  out += fmt::format("\n{} ops on {} stage{} simulated in {:.1f} ms.\n", r.ops, r.memory.size(),
                     r.memory.size() == 1 ? "" : "s", r.wall_s * 1e3);
  return out;
}

}  // namespace

json simulation_json(const SimResult& r) {
  json stages = json::array();
  for (const StageTime& t : r.stages) {
    json j = time_json(t, r.step_s);
    j["end_s"] = t.end_s;
    stages.push_back(j);
  }
  const double analytic_peak = static_cast<double>(r.analytic.peak_bytes());
  const json analytic = prediction_json(r.analytic);
  return {{"config", analytic["config"]},
          {"time", time_json(r.critical_stage(), r.step_s)},
          {"stages", stages},
          {"memory", memory_json(r)},
          {"analytic", {{"time", analytic["time"]}, {"memory", {{"peak_bytes", r.analytic.peak_bytes()}}}}},
          {"difference_pct",
           {{"step_s", pct(r.step_s, r.analytic.time.step_s)},
            {"peak_bytes", pct(r.peak_stage().peak_bytes, analytic_peak)}}},
          {"simulation", {{"ops", r.ops}, {"wall_s", r.wall_s}}}};
}

std::string render_simulation(const SimResult& r, const std::string& format, const Terminal& term) {
  if (format == "table") return fit_lines(render_table(r, false, term), term.width);
  if (format == "markdown") return render_table(r, true, kPlainTerminal);
  if (format == "json") return simulation_json(r).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(simulation_json(r));
  if (format == "csv") return json_to_csv(simulation_json(r));
  throw InputError(fmt::format("--format '{}' is not one of: table, json, yaml, csv, markdown", format));
}

}  // namespace shardplan::cli
