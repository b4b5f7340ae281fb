// Fuzz target: cluster YAML → ClusterSpec → predictions that cross nodes.
#include <cstddef>
#include <cstdint>
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
        parse_cluster_yaml(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml", store);
    Strategy s;
    s.gpus = 32;
    s.tp = 2;
    s.pp = 2;
    s.dp = 8;
    s.seq = 2048;
    s.global_batch = 64;
    (void)predict(model, s, c);
  } catch (const InputError&) {
  }
  return 0;
}
