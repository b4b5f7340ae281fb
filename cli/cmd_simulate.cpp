// `shardplan simulate`: play one step of one configuration out as a schedule (sim/), compare it with the
// analytic prediction, optionally write a Chrome/Perfetto trace.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/config_flags.hpp"
#include "cli/render_simulation.hpp"
#include "cli/report_option.hpp"
#include "cli/terminal.hpp"
#include "planner/error.hpp"
#include "report/report.hpp"
#include "report/sim_timeline.hpp"
#include "sim/simulate.hpp"

namespace shardplan::cli {

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
    if (cfg.cluster_defaulted && opts->format == "table")
      text = fit_lines("note: no --cluster or --gpu given; using " + std::string(kDefaultCluster) + "\n", term.width) + text;
    if (!opts->trace.empty() && opts->format == "table") text += "Trace written to " + opts->trace + ".\n";
    std::cout << text;
  });
}

}  // namespace shardplan::cli
