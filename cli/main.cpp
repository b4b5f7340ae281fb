// shardplan: plan distributed LLM training before spending a GPU-hour.
#include <chrono>
#include <cstdlib>
#include <exception>
#include <new>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/process_guard.hpp"
#include "planner/error.hpp"

#ifndef SHARDPLAN_VERSION
#define SHARDPLAN_VERSION "unknown"
#endif

namespace {

// Under mpirun every rank parses the same command line and fails the same way: rank 0 alone says so (the launcher's
// rank variables; OpenMPI, MPICH/PMI, Slurm), every rank exits with the code.
bool is_secondary_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::string(v) != "0";
  return false;
}

int fail(int code, const std::string& message) {
  if (!is_secondary_rank()) {
    std::cerr << shardplan::cli::error_line(message) << std::flush;  // one line, control bytes escaped
  } else {
    // mpirun ends the job when a rank exits non-zero: give rank 0 a moment to print the line first.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardplan;
  cli::guard_process();  // closed descriptors, SIGPIPE (cli/process_guard.hpp)
  CLI::App app{"shardplan — will it fit, with which strategy, how fast, and why", "shardplan"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shardplan ") + SHARDPLAN_VERSION);
  app.footer("Exit codes: 0 success; 1 runtime failure; 2 bad usage or bad input (one `error:` line naming the flag); "
             "3 valid input but no feasible plan (plan: the line names the changes that fit).");
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
  cli::add_strict_integer_checks(app);  // after every command has registered its flags
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    const int code = app.exit(e);
    return cli::finish_stdout() != 0 ? 1 : code;
  } catch (const CLI::CallForAllHelp& e) {
    const int code = app.exit(e);
    return cli::finish_stdout() != 0 ? 1 : code;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      const int code = app.exit(e);
      return cli::finish_stdout() != 0 ? 1 : code;
    }
    return fail(2, std::string(e.what()) + " (see `shardplan " + "--help`)");
  } catch (const InputError& e) {
    return fail(2, e.what());
  } catch (const NoFeasiblePlan& e) {
    return fail(3, e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, "out of memory: the input asks for more than this machine has (check the sizes and files given)");
  } catch (const std::exception& e) {
    return fail(1, e.what());
  } catch (...) {
    return fail(1, "internal error (an unknown exception); please report the command line");
  }
  // Everything printed must have reached stdout: a full disk or a closed stdout is a failure (exit 1).
  return cli::finish_stdout();
}
