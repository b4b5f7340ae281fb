// Fuzz target: Hugging Face config.json text → HfModel → a prediction. Bad input must end as InputError (one line
// naming the file), never a crash, a hang, an overflow, undefined behaviour or another exception type.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/hf_config.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  static const PresetStore store = PresetStore::builtin();
  static const ClusterSpec cluster = store.cluster("dgx-h100");
  try {
    const HfModel hf = parse_hf_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    Strategy s;
    s.gpus = 8;
    s.dp = 8;
    s.seq = hf.spec.seq;
    s.global_batch = 8;
    (void)predict(hf.spec, s, cluster);
  } catch (const InputError& e) {
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) std::abort();  // the contract: one line
  }
  return 0;
}
