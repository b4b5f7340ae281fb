// shardplan: plan distributed LLM training before spending a GPU-hour.
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "planner/error.hpp"

namespace {

// CLI11's messages can span lines; the contract wants one.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Under mpirun every rank parses the same command line and fails the same way: rank 0 alone says so (the launcher's
// rank variables; OpenMPI, MPICH/PMI, Slurm), every rank exits with the code.
bool is_secondary_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::string(v) != "0";
  return false;
}

int fail(int code, const std::string& message) {
  if (!is_secondary_rank()) {
    std::cerr << "error: " << one_line(message) << "\n";
  } else {
    // mpirun ends the job when a rank exits non-zero: give rank 0 a moment to print the line first.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardplan;
  CLI::App app{"shardplan — will it fit, with which strategy, how fast, and why", "shardplan"};
  app.require_subcommand(1);
  cli::GlobalOptions global;
  app.add_option("--presets-dir", global.presets_dirs,
                 "Extra preset folder(s) with models/, gpus/, clusters/ (*.yaml); repeatable")
      ->check(CLI::ExistingDirectory);
  cli::add_presets_command(app, global);
  cli::add_predict_command(app, global);
  cli::add_plan_command(app, global);
  cli::add_calibrate_command(app, global);
  cli::add_simulate_command(app, global);
  cli::add_report_command(app, global);
  cli::add_validate_command(app, global);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return fail(2, std::string(e.what()) + " (see `shardplan " + "--help`)");
  } catch (const InputError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  return 0;
}
