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
    const auto goal = resolve_training_goal(opts->config);
    // The default batch's rule travels with the answer: a line under the table, a field in the documents.
    nlohmann::json doc = prediction_json(p, goal);
    if (!cfg.batch_note.empty()) doc["config"]["global_batch_rule"] = cfg.batch_note;
    if (!cfg.layout_note.empty()) doc["config"]["pipeline_split_rule"] = cfg.layout_note;
    std::string text = opts->format == "json"   ? doc.dump(2) + "\n"
                       : opts->format == "yaml" ? json_to_yaml(doc)
                       : opts->format == "csv"  ? json_to_csv(doc)
                                                : render_prediction(p, opts->format, goal, term);
    if ((opts->format == "table" || opts->format == "markdown") && !cfg.batch_note.empty())
      text += fit_lines("\n" + cfg.batch_note + "\n", term.width);
    if ((opts->format == "table" || opts->format == "markdown") && !cfg.layout_note.empty())
      text += fit_lines("Pipeline split: " + cfg.layout_note + "\n", term.width);
    write_report_option(opts->report, doc);
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
