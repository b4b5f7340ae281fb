#pragma once
// `validate --measurements FILE.jsonl`: per-step measurements of a training run, one JSON object per line,
// from shardplan's reference loop or any other job (e.g. a PyTorch FSDP script that logs
// torch.cuda.max_memory_allocated()). Schema (io/README.md):
//
//   {"step": 12, "step_s": 1.84, "peak_bytes": 61203283968, "warmup": false,
//    "components": {"params": ..., "grads": ..., "optimizer": ..., "activations": ...}}
//
//   step        integer ≥ 0, required; steps need not be consecutive but must not repeat
//   step_s      seconds the step took (> 0), optional
//   peak_bytes  the rank's (or the busiest rank's) memory high-water mark, optional
//   warmup      true: dropped from the step time (the first --warmup steps are dropped too)
//   components  bytes by CONTRACT.md component name (params grads master optimizer activations logits buffers
//               runtime fragmentation), optional, taken from the line with the highest peak_bytes
// Other keys (loss, lr, tokens, ...) are allowed and ignored. Blank lines are skipped.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardplan {

struct MeasuredStep {
  int64_t step = 0;
  std::optional<double> step_s;
  std::optional<int64_t> peak_bytes;
  bool warmup = false;
  std::map<std::string, int64_t> components;
};

// What a run measured, summarised the way `validate` compares it.
struct Measurement {
  std::optional<double> step_s;                 // median over the steps kept (not warm-up)
  std::optional<int64_t> peak_bytes;            // max over every step
  std::map<std::string, int64_t> components;    // at the step with the highest peak (may be empty)
  int64_t steps_timed = 0;                      // steps behind step_s
  int64_t steps_total = 0;
};

// Parses the text of a measurement log. `origin` names it in errors ("run.jsonl"). Throws InputError naming
// origin:line and the key for anything malformed: not JSON, not an object, a key of the wrong type, a negative or
// non-finite number, an unknown component name, a repeated step, no steps at all.
std::vector<MeasuredStep> parse_measurements(const std::string& text, const std::string& origin);

// Reads the file (InputError when it cannot be read) and parses it.
std::vector<MeasuredStep> load_measurements(const std::string& path);

// Drops warm-up steps (flagged, and the first `warmup` by step number) from the timing; takes the median step
// time and the highest peak. Throws InputError when no timed step remains while some step has step_s.
Measurement summarise_measurements(const std::vector<MeasuredStep>& steps, int64_t warmup, const std::string& origin);

// The component names a measurement may use (CONTRACT.md order).
const std::vector<std::string>& measurement_component_names();

}  // namespace shardplan
