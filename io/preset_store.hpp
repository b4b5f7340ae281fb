#pragma once
// Reading presets (YAML) into planner specs: the embedded presets, user preset folders, single files.
// This is the I/O side; the planner never reads files itself.
#include <cstddef>
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "planner/hardware.hpp"
#include "planner/model.hpp"

namespace shardplan {

enum class PresetKind { model, gpu, cluster };
const char* to_string(PresetKind k);  // "model", "gpu", "cluster"

struct PresetEntry {
  PresetKind kind = PresetKind::model;
  std::string name;
  std::string origin;  // "presets/models/8b.yaml" (embedded) or the file path it was read from
  std::string text;    // the YAML text
  bool embedded = false;   // compiled into the binary (PresetStore::builtin)
  std::string replaces;    // origin of the preset of the same name this one replaced ("" if none)
};

// Up to `limit` of `known` that look like a misspelling of `wanted` (closest first), for "did you mean".
std::vector<std::string> near_names(const std::string& wanted, const std::vector<std::string>& known,
                                    std::size_t limit = 3);

// Parse one preset's YAML text. `origin` names the file in error messages ("origin:line: ...").
// Throws InputError (one line, naming file, line, key and the fix).
ModelSpec parse_model_yaml(const std::string& text, const std::string& origin);
GpuSpec parse_gpu_yaml(const std::string& text, const std::string& origin);
// The cluster's `gpu:` is resolved through `store`.
class PresetStore;
ClusterSpec parse_cluster_yaml(const std::string& text, const std::string& origin, const PresetStore& store);
// A calibration profile (`shardplan calibrate`, schema in calibrate/README.md): its base_cluster preset with the
// measured collectives (ClusterSpec::comm_calibration) and GEMM table / copy bandwidth (GpuSpec::gemm_calibration).
ClusterSpec parse_profile_yaml(const std::string& text, const std::string& origin, const PresetStore& store);

// Reads a whole file; throws InputError "cannot read FILE: reason" when it cannot, or when it is larger than
// kMaxInputBytes (/dev/zero, a log given by mistake: refused instead of read until memory runs out).
std::string read_text_file(const std::string& path);
inline constexpr std::size_t kMaxInputBytes = std::size_t{64} << 20;  // 64 MiB; a preset is KiB, a plan JSON MiB
// Reads `in` to its end into `out`; false (and `out` incomplete) as soon as it holds more than kMaxInputBytes.
bool read_bounded(std::istream& in, std::string& out);

class PresetStore {
 public:
  // The presets embedded in the binary at build time.
  static PresetStore builtin();

  // --presets-dir: adds DIR/models/*.yaml, DIR/gpus/*.yaml, DIR/clusters/*.yaml; a preset with the name of
  // an existing one replaces it. Throws InputError if DIR is not a readable folder.
  void add_directory(const std::string& dir);
  void add(PresetEntry entry);

  std::vector<std::string> names(PresetKind kind) const;  // sorted
  const PresetEntry* find(PresetKind kind, const std::string& name) const;

  // Resolve by preset name; an unknown name throws InputError listing the known ones.
  ModelSpec model(const std::string& name) const;
  GpuSpec gpu(const std::string& name) const;
  // A preset name, or a path to a cluster YAML file (anything ending in .yaml/.yml or containing '/').
  ClusterSpec cluster(const std::string& name_or_file) const;
  // --model FILE.yaml
  ModelSpec model_file(const std::string& path) const;

 private:
  std::map<std::string, PresetEntry> entries_[3];
};

}  // namespace shardplan
