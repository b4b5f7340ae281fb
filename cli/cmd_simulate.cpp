// `shardplan simulate`: play one step of one configuration out as a schedule (sim/), compare it with the
// analytic prediction, optionally write a Chrome/Perfetto trace.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/config_flags.hpp"
#include "cli/render_simulation.hpp"
#include "planner/error.hpp"
#include "sim/simulate.hpp"

namespace shardplan::cli {

void add_simulate_command(CLI::App& app, const GlobalOptions& global) {
  struct Options {
    ConfigFlags config;
    std::string format = "table";
    std::string trace;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Event-driven simulation of one training step: schedule, exposed communication, memory over time");
  add_config_flags(*cmd, opts->config);
  cmd->add_option("--format", opts->format, "table | json | yaml | csv | markdown (default table)");
  cmd->add_option("--trace", opts->trace, "Write a Chrome trace event file (chrome://tracing, ui.perfetto.dev)");
  cmd->callback([opts, &global] {
    const PresetStore store = load_presets(global);
    const ResolvedConfig cfg = resolve_config(opts->config, store);
    if (opts->format != "table" && opts->format != "json" && opts->format != "yaml" && opts->format != "csv" &&
        opts->format != "markdown")
      throw InputError("--format '" + opts->format + "' is not one of: table, json, yaml, csv, markdown");
    const sim::SimResult r = sim::simulate(cfg.model, cfg.strategy, cfg.cluster, !opts->trace.empty());
    if (!opts->trace.empty()) sim::write_trace(r, opts->trace);  // std::runtime_error → exit 1
    std::string text = render_simulation(r, opts->format);
    if (cfg.cluster_defaulted && opts->format == "table")
      text = "note: no --cluster or --gpu given; using " + std::string(kDefaultCluster) + "\n" + text;
    if (!opts->trace.empty() && opts->format == "table") text += "Trace written to " + opts->trace + ".\n";
    std::cout << text;
  });
}

}  // namespace shardplan::cli
