#pragma once
// The calibration profile: raw records fitted (per collective and scope: α + β·S), the GEMM table, the copy
// bandwidth, and the environment, written as YAML (schema: calibrate/README.md). `--cluster FILE.yaml` reads it
// (io/preset_store.cpp) so that measured parameters replace the preset's.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/fit.hpp"
#include "calibrate/records.hpp"

namespace shardplan::calibrate {

struct ProfileMeta {
  std::string name;          // the profile's name (the --out file's stem)
  std::string date;          // UTC, ISO 8601
  std::string command;       // the command line
  std::string backend;       // mpi | nccl
  std::string base_cluster;  // the cluster preset it refines (everything not measured comes from it)
  std::string dtype;         // fp32 | bf16
  bool cpu = true;
  bool quick = false;
  int ranks = 1, nodes = 1, ranks_per_node = 1;
  std::vector<std::string> hostnames;                            // one per node
  std::vector<std::string> devices;                              // one per distinct device name
  std::vector<std::pair<std::string, std::string>> versions;     // mpi, cuda, nccl, ...
  std::vector<std::pair<std::string, std::string>> environment;  // NCCL_* and OMPI_MCA_* variables
  double preset_peak_flops = 0;  // GPU: the base cluster GPU's dense peak for dtype (0 on CPU)
};

struct CollectiveSummary {
  std::string op, scope;
  int64_t ranks = 0, ranks_per_node = 0;
  std::vector<RawRecord> points;  // ascending bytes
  FitResult fit;
};

struct Profile {
  ProfileMeta meta;
  std::vector<CollectiveSummary> collectives;
  std::vector<RawRecord> gemms;
  std::vector<RawRecord> copies;
  double peak_flops = 0;         // GPU: the preset peak; CPU: the best measured GEMM throughput
  double copy_bytes_per_s = 0;   // read + written bytes per second of the largest copy, 0 = none
  double elementwise_bytes_per_s = 0;  // read + written bytes per second of the largest AdamW pass (CPU), 0 = none
  int64_t wrong = 0;             // total #wrong over every collective
};

// Groups and fits the records. Collectives with fewer than 2 sizes are kept unfitted (and left out of the YAML).
Profile build_profile(const ProfileMeta& meta, const std::vector<RawRecord>& records);
std::string profile_yaml(const Profile& p);

// Writes `text` to a temporary file beside `path`, flushes it to disk, renames it over `path` (POSIX rename is
// atomic): a reader sees the old file or the new one, never half of one. io::write_file_atomically underneath;
// throws InputError for a path that cannot be written, std::runtime_error otherwise.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace shardplan::calibrate
