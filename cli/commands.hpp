#pragma once
// Each subcommand registers itself on the app. Callbacks throw InputError for bad input (main prints
// `error: ...` and exits 2) and std::runtime_error for runtime failures (exit 1).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/preset_store.hpp"

namespace shardplan::cli {

struct GlobalOptions {
  std::vector<std::string> presets_dirs;  // --presets-dir, repeatable
};

// The embedded presets plus every --presets-dir.
PresetStore load_presets(const GlobalOptions& global);

void add_presets_command(CLI::App& app, const GlobalOptions& global);
void add_predict_command(CLI::App& app, const GlobalOptions& global);
void add_plan_command(CLI::App& app, const GlobalOptions& global);
void add_calibrate_command(CLI::App& app, const GlobalOptions& global);
void add_simulate_command(CLI::App& app, const GlobalOptions& global);
void add_report_command(CLI::App& app, const GlobalOptions& global);
void add_validate_command(CLI::App& app, const GlobalOptions& global);

}  // namespace shardplan::cli
