// Fuzz target: calibration profile YAML (`calibrate --out`, read by --cluster FILE.yaml) → ClusterSpec with measured
// collectives and GEMMs → predictions across nodes, which go through the calibrated cost lookups.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  static const PresetStore store = PresetStore::builtin();
  static const ModelSpec model = store.model("8b");
  try {
    const ClusterSpec c =
        parse_profile_yaml(std::string(reinterpret_cast<const char*>(data), size), "profile.yaml", store);
    Strategy s;
    s.gpus = 32;
    s.tp = 2;
    s.pp = 2;
    s.dp = 8;
    s.seq = 2048;
    s.global_batch = 64;
    (void)predict(model, s, c);
    s.tp = 1;
    s.pp = 1;
    s.dp = 32;
    s.zero = 3;
    (void)predict(model, s, c);
  } catch (const InputError& e) {
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) std::abort();  // the contract: one line
  }
  return 0;
}
