// `shardplan simulate`: play one step of one configuration out as a schedule (sim/), compare it with the
// analytic prediction, optionally write a Chrome/Perfetto trace.
#include <algorithm>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/config_flags.hpp"
#include "cli/render_simulation.hpp"
#include "cli/report_option.hpp"
#include "cli/terminal.hpp"
#include "io/input_file.hpp"
#include "planner/error.hpp"
#include "planner/strategy.hpp"
#include "report/report.hpp"
#include "report/sim_timeline.hpp"
#include "sim/simulate.hpp"

namespace shardplan::cli {

namespace {

// simulate plays every op of every micro-batch and keeps them (the trace, the timeline): its memory and time grow
// with micro-batches × layers, measured at 0.7 to 1.5 kB and ~3 µs per micro-batch and layer (8b and 70b layouts,
// 2026-12-02). --global-batch 2^32 would need terabytes. Past kMaxPlayedMicroBatchLayers (≈ 0.8 GB, ~2 s) the step is
// not played; predict and plan (whose re-rank extrapolates from two short steps, sim/rerank.hpp) still answer.
constexpr int64_t kMaxPlayedMicroBatchLayers = int64_t{1} << 19;

void check_played_size(const ResolvedConfig& cfg) {
  const Strategy& s = cfg.strategy;
  const int64_t per_replica = s.micro_batch * s.dp;
  const int64_t micro = per_replica > 0 ? s.global_batch / per_replica : 0;
  const int64_t layers = std::max<int64_t>(cfg.model.layers, 1);
  if (micro <= kMaxPlayedMicroBatchLayers / layers) return;
  throw InputError(fmt::format(
      "--global-batch {}: simulate would play {} micro-batches of {} layers per step, more than the {} micro-batches "
      "it plays for this model (each is kept in memory for the trace); lower --global-batch (the step grows by one "
      "steady-state period per micro-batch), raise --micro-batch, or use predict or plan --simulate-top, which "
      "extrapolate",
      s.global_batch, micro, layers, kMaxPlayedMicroBatchLayers / layers));
}

}  // namespace

void add_simulate_command(CLI::App& app, const GlobalOptions& global) {
  struct Options {
    ConfigFlags config;
    std::string format = "table";
    std::string trace;
    std::string report;     // --report FILE.md|FILE.html (cli/report_option.hpp), with the simulated timeline
    TerminalFlags terminal; // --color / --no-color (cli/terminal.hpp)
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Event-driven simulation of one training step: schedule, exposed communication, memory over time");
  add_config_flags(*cmd, opts->config);
  cmd->add_option("--format", opts->format, "table | json | yaml | csv | markdown (default table)");
  cmd->add_option("--trace", opts->trace, "Write a Chrome trace event file (chrome://tracing, ui.perfetto.dev)")
      ->check([](const std::string& v) { return v.empty() ? std::string("needs a file name, e.g. --trace step.json") : std::string(); });
  add_report_option(*cmd, opts->report);
  add_terminal_flags(*cmd, opts->terminal);
  cmd->callback([opts, &global] {
    const PresetStore store = load_presets(global);
    const ResolvedConfig cfg = resolve_config(opts->config, store);
    if (opts->format != "table" && opts->format != "json" && opts->format != "yaml" && opts->format != "csv" &&
        opts->format != "markdown")
      throw InputError("--format '" + opts->format + "' is not one of: table, json, yaml, csv, markdown");
    io::require_distinct_outputs({{"--trace", opts->trace}, {"--report", opts->report}});
    check_played_size(cfg);
    const bool record = !opts->trace.empty() || !opts->report.empty();  // memory over the step, for both
    const sim::SimResult r = sim::simulate(cfg.model, cfg.strategy, cfg.cluster, record);
    if (!opts->trace.empty()) sim::write_trace(r, opts->trace);  // a bad path: InputError, exit 2 (io/atomic_write.hpp)
    if (!opts->report.empty()) {
      // The report draws the played step (report/README.md, "The simulated timeline").
      nlohmann::json doc = simulation_json(r);
      doc["timeline"] = report::timeline_json(report::timeline_from_simulation(r));
      write_report_option(opts->report, doc);
    }
    const Terminal term = opts->format == "table" ? stdout_terminal(opts->terminal) : kPlainTerminal;
    std::string text = render_simulation(r, opts->format, term);
    if (!cfg.batch_note.empty() && opts->format == "table") text += fit_lines(cfg.batch_note + "\n", term.width);
    if (!cfg.layout_note.empty() && opts->format == "table")
      text += fit_lines("Pipeline split: " + cfg.layout_note + "\n", term.width);
    if (!opts->trace.empty() && opts->format == "table") text += "Trace written to " + opts->trace + ".\n";
    // Notes go to stderr (stdout stays the answer a script parses), only on success (a failure is one error line).
    // With --format table only: a document (json, yaml, csv) says the cluster and batch in its fields, and a script
    // that reads stderr for the one error line is not handed notes.
    if (opts->format == "table") {
      print_config_notes(opts->config, cfg.model_notes, cfg.cluster, cfg.strategy.tp);
      if (cfg.cluster_defaulted) std::cerr << "note: no --cluster or --gpu given; using " << kDefaultCluster << "\n";
    }
    std::cout << text;
  });
}

}  // namespace shardplan::cli
