#pragma once
// `shardplan calibrate`: options, validation and the run (every rank of the mpirun job runs this).
#include <cstdint>
#include <string>
#include <vector>

#include "io/preset_store.hpp"
#include "planner/model.hpp"

namespace shardplan::calibrate {

// The options as typed: numbers stay text here, so that a bad value is reported once, by rank 0, after MPI
// has started, instead of by every rank's argument parser.
struct CalibrateFlags {
  std::string backend = "mpi";
  std::string out;
  std::string raw;          // raw CSV; default: the --out path with .raw.csv for .yaml
  std::string min_bytes, max_bytes;
  std::string timeout = "120";
  std::string preset;       // model whose GEMM shapes are measured
  std::string base_cluster; // preset the profile refines
  bool quick = false, resume = false, gemm_only = false, no_gemm = false, quiet = false;
  std::vector<std::string> extras;  // anything the parser did not know
};

// Sizes like 1024, 64K, 64KiB, 1M, 1MiB, 1G (binary multiples). Returns -1 when it is not a size.
int64_t parse_size(const std::string& text);

// A GEMM shape to measure.
struct GemmShapeSpec {
  int64_t m = 0, n = 0, k = 0;
};
// The GEMMs of one transformer block and the LM head under tensor parallelism tp (forward Y = X·W [T×n×k],
// backward dX [T×k×n] and dW [k×n×T]; planner/microbatch_costs.cpp), for T tokens.
std::vector<GemmShapeSpec> model_gemm_shapes(const ModelSpec& m, int64_t tp, int64_t tokens);

// Runs the whole calibration on this rank. Returns the process exit code (0, 1 runtime failure, 2 bad input);
// only rank 0 prints (stderr: progress and the `error:` line; stdout: the summary). A hang or a dead rank ends
// every rank through MPI_Abort.
int run_calibrate(const CalibrateFlags& flags, const PresetStore& store, const std::string& command_line);

}  // namespace shardplan::calibrate
