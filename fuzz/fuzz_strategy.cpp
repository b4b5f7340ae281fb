// Fuzz target: arbitrary strategies (every field from the input bytes) on a few models: validation must refuse
// what it cannot evaluate, and evaluation must never overflow, divide by zero or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"

namespace {

// Reads fields from the fuzz input, zero once it runs out.
struct Reader {
  const uint8_t* data;
  size_t size;
  int64_t next(int64_t bits) {
    uint64_t v = 0;
    const size_t n = std::min<size_t>(8, size);
    std::memcpy(&v, data, n);
    data += n;
    size -= n;
    return static_cast<int64_t>(v & ((uint64_t{1} << bits) - 1));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  static const PresetStore store = PresetStore::builtin();
  static const ModelSpec models[] = {store.model("8b"), store.model("llama3-405b"), store.model("gpt-1t")};
  static const ClusterSpec cluster = store.cluster("dgx-a100-80g");
  Reader r{data, size};
  const ModelSpec& m = models[r.next(8) % 3];
  Strategy s;
  s.tp = r.next(20) - 2;
  s.pp = r.next(20) - 2;
  s.dp = r.next(24) - 2;
  int64_t product = 0;
  if (__builtin_mul_overflow(s.tp, s.pp, &product) || __builtin_mul_overflow(product, s.dp, &product)) product = 8;
  s.gpus = product + (r.next(1) ? 0 : r.next(4));
  s.vpp = r.next(8);
  s.schedule = static_cast<Schedule>(r.next(8) % 3);
  s.sp = r.next(1);
  s.zero = static_cast<int>(r.next(3)) - 1;
  s.hsdp = r.next(16) - 1;
  s.recompute = static_cast<Recompute>(r.next(8) % 3);
  s.flash_attn = r.next(1);
  s.micro_batch = r.next(20) - 1;
  s.global_batch = r.next(30) - 1;
  s.seq = r.next(24) - 1;
  s.precision = static_cast<Precision>(r.next(8) % 7);
  s.framework = static_cast<Framework>(r.next(8) % 4);
  s.offload_optimizer = r.next(1);
  s.loss = static_cast<LossKind>(r.next(1));
  // Partial recomputation (planner/partial_recompute.hpp): negative, zero, beyond a chunk, both at once.
  if (r.next(1)) s.recompute_layers = r.next(6) - 1;
  if (r.next(1)) s.recompute_every = r.next(6) - 1;
  try {
    const Prediction p = predict(m, s, cluster);
    if (!(p.time.step_s > 0) || p.peak_bytes() <= 0) __builtin_trap();  // a valid config must have a real answer
  } catch (const InputError&) {
  }
  return 0;
}
