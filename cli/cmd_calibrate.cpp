// `shardplan calibrate`: collective and GEMM microbenchmarks under mpirun, fitted into a cluster profile
// (calibrate/README.md). Every rank runs this; rank 0 prints.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/run.hpp"
#include "cli/commands.hpp"
#include "comm/comm.hpp"

namespace shardplan::cli {

namespace {

// The command line as started (comm::own_command_line), joined by spaces, for the profile's meta.
std::string command_line_text() {
  const std::vector<std::string> args = comm::own_command_line();
  std::string line;
  for (size_t i = 0; i < args.size(); ++i) line += (i == 0 ? "" : " ") + args[i];
  while (!line.empty() && line.back() == ' ') line.pop_back();  // as before: no trailing blanks in the meta
  return line;
}

}  // namespace

void add_calibrate_command(CLI::App& app, const GlobalOptions& global) {
  auto flags = std::make_shared<calibrate::CalibrateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure collectives and GEMMs on this machine or cluster (under mpirun) and write a profile for --cluster");
  cmd->add_option("--backend", flags->backend, "mpi (CPU ranks) | nccl (one rank per GPU); default mpi");
  cmd->add_option("--out", flags->out, "Profile to write (YAML), atomically; required");
  cmd->add_option("--raw", flags->raw, "Raw measurements (CSV), written as they are taken; default OUT.raw.csv");
  cmd->add_flag("--resume", flags->resume, "Continue an interrupted run: keep what --raw already holds");
  cmd->add_flag("--quick", flags->quick, "Fewer sizes, repeats and shapes: a run of seconds (CI)");
  cmd->add_option("--min-bytes", flags->min_bytes, "Smallest collective size S (default 1KiB)");
  cmd->add_option("--max-bytes", flags->max_bytes, "Largest collective size S (default 1GiB GPU, 64MiB CPU; --quick: 64MiB, 1MiB)");
  cmd->add_option("--timeout", flags->timeout, "Seconds a rank may be late before the run ends on every rank (default 120)");
  cmd->add_option("--preset", flags->preset, "Model preset whose GEMM shapes (every TP degree) are measured too");
  cmd->add_option("--base-cluster", flags->base_cluster,
                  "Cluster preset the profile refines (default: a800x8 on CPU, the preset of the GPU found)");
  cmd->add_flag("--gemm-only", flags->gemm_only, "GEMMs and the copy only (one rank is enough)");
  cmd->add_flag("--no-gemm", flags->no_gemm, "Collectives only");
  cmd->add_flag("--quiet", flags->quiet, "No progress lines");
  cmd->allow_extras();
  cmd->callback([flags, cmd, &global] {
    flags->extras = cmd->remaining();
    const PresetStore store = load_presets(global);
    const int code = calibrate::run_calibrate(*flags, store, command_line_text());
    if (code != 0) {
      // MPI is finalised; the one error line is printed (rank 0). Leave with the code without main's printing.
      std::fflush(stdout);
      std::fflush(stderr);
      std::exit(code);
    }
  });
}

}  // namespace shardplan::cli
