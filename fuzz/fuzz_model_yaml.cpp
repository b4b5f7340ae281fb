// Fuzz target: model YAML → ModelSpec → a prediction. Bad input must end as InputError, never a crash, a hang,
// an overflow or undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  static const PresetStore store = PresetStore::builtin();
  static const ClusterSpec cluster = store.cluster("dgx-h100");
  try {
    const ModelSpec m = parse_model_yaml(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    Strategy s;
    s.gpus = 8;
    s.dp = 8;
    s.seq = m.seq;
    s.global_batch = 8;
    (void)predict(m, s, cluster);
  } catch (const InputError&) {
  }
  return 0;
}
