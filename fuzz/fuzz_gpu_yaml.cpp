// Fuzz target: GPU YAML → GpuSpec → a cluster of it → a prediction.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  static const PresetStore store = PresetStore::builtin();
  static const ModelSpec model = store.model("llama3-8b");
  try {
    const GpuSpec g = parse_gpu_yaml(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    Strategy s;
    s.gpus = 16;
    s.dp = 16;
    s.seq = model.seq;
    s.global_batch = 16;
    (void)predict(model, s, cluster_from_gpu(g));
  } catch (const InputError&) {
  }
  return 0;
}
