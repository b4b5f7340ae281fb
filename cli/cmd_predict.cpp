// `shardplan predict`: evaluate one fully specified configuration.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/config_flags.hpp"
#include "cli/render_prediction.hpp"
#include "cli/report_option.hpp"
#include "cli/terminal.hpp"
#include "planner/predict.hpp"

namespace shardplan::cli {

void add_predict_command(CLI::App& app, const GlobalOptions& global) {
  struct Options {
    ConfigFlags config;
    std::string format = "table";
    std::string report;  // --report FILE.md|FILE.html (cli/report_option.hpp)
    TerminalFlags terminal;  // --color / --no-color (cli/terminal.hpp)
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("predict", "Evaluate one fully given configuration: memory (and FLOPs) per GPU");
  add_config_flags(*cmd, opts->config);
  cmd->add_option("--format", opts->format, "table | json | yaml | csv | markdown (default table)");
  add_report_option(*cmd, opts->report);
  add_terminal_flags(*cmd, opts->terminal);
  cmd->callback([opts, &global] {
    const PresetStore store = load_presets(global);
    const ResolvedConfig cfg = resolve_config(opts->config, store);
    Prediction p = predict(cfg.model, cfg.strategy, cfg.cluster);
    p.memory.max_hbm_fraction = resolve_max_hbm_fraction(opts->config);
    const Terminal term = opts->format == "table" ? stdout_terminal(opts->terminal) : kPlainTerminal;
    std::string text = render_prediction(p, opts->format, resolve_training_goal(opts->config), term);
    if (cfg.cluster_defaulted && opts->format == "table")
      text = fit_lines("note: no --cluster or --gpu given; using " + std::string(kDefaultCluster) + "\n", term.width) + text;
    write_report_option(opts->report, prediction_json(p, resolve_training_goal(opts->config)));
    std::cout << text;
  });
}

}  // namespace shardplan::cli
