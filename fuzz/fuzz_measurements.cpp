// Fuzz target: a `validate --measurements` log (JSON lines, io/measurements.hpp) → steps → the summary validate
// compares. Bad input must end as InputError (one line naming origin:line), never a crash, a hang, undefined
// behaviour or another exception type.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/measurements.hpp"
#include "planner/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardplan;
  try {
    const std::vector<MeasuredStep> steps =
        parse_measurements(std::string(reinterpret_cast<const char*>(data), size), "run.jsonl");
    for (int64_t warmup : {0, 1, 3}) {
      const Measurement m = summarise_measurements(steps, warmup, "run.jsonl");
      if (m.step_s && !(*m.step_s > 0)) std::abort();           // a median of positive times is positive
      if (m.peak_bytes && *m.peak_bytes < 0) std::abort();
      if (m.steps_timed > m.steps_total) std::abort();
    }
  } catch (const InputError& e) {
    const std::string m = e.what();
    if (m.empty() || m.find('\n') != std::string::npos) std::abort();  // the contract: one line
  }
  return 0;
}
