#pragma once
// What one calibration run measures: the options resolved and checked, and the list of steps (collective
// sizes per scope, GEMM shapes, copies), identical on every rank.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibrate/bench.hpp"
#include "calibrate/records.hpp"
#include "calibrate/run.hpp"
#include "comm/comm.hpp"

namespace shardplan::calibrate {

// Bad input found while resolving the options: printed once (rank 0), exit 2.
struct BadInputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RunPlan {
  std::string backend, out, raw, base_cluster;
  bool quick = false, gemm_only = false, no_gemm = false;
  int64_t min_bytes = 0, max_bytes = 0;
  int64_t size_factor = 2;          // consecutive sizes differ by this factor
  double timeout_s = 120;
  TimingConfig collective_timing, gemm_timing;
  std::vector<int64_t> gemm_grid;   // each of m, n, k takes these values
  std::vector<GemmShapeSpec> model_shapes;
  double gemm_flop_budget = 0;      // CPU: a model GEMM larger than this has its token count cut (0 = none)
  int64_t copy_bytes = 0;
  double preset_peak_flops = 0;     // GPU: dense bf16 peak of the base cluster's GPU
};

// Throws BadInputError (or InputError from the presets) for anything wrong; `ranks` is the world size.
RunPlan resolve_plan(const CalibrateFlags& flags, const PresetStore& store, int ranks);

// Steps in the order they run: collectives (per scope, op, size), GEMMs, copy. Record identity fields only.
std::vector<RawRecord> plan_steps(const RunPlan& plan, const comm::WorldInfo& world, std::size_t element_bytes);

// The table rank 0 prints at the end.
struct Profile;
std::string summary_text(const Profile& p, const std::string& out, const std::string& raw);

std::string human_bytes(int64_t bytes);

}  // namespace shardplan::calibrate
