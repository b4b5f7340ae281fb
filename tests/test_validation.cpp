// validate's pieces: the measurement log (io/measurements.hpp) and predicted-vs-measured (planner/validation.hpp),
// checked on hand-made logs with hand-computed medians and errors.
#include <doctest/doctest.h>

#include <string>

#include "io/measurements.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"
#include "planner/validation.hpp"

using namespace shardplan;

namespace {

// Throws InputError whose message contains `needle`.
bool fails_with(const std::string& text, const std::string& needle) {
  try {
    parse_measurements(text, "run.jsonl");
  } catch (const InputError& e) {
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

ModelSpec small_model() {
  ModelSpec m;
  m.name = "small";
  m.layers = 2;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 1024;
  m.vocab = 1000;
  m.seq = 128;
  return m;
}

}  // namespace

TEST_CASE("a measurement log: median after warm-up, highest peak with its components") {
  // Steps out of order; step 0 flagged warm-up, step 1 dropped by warmup = 1 (the first unflagged by number is
  // step 0 itself, so warmup 1 drops step 0 only) → timed steps 1..4: 2.0 3.0 5.0 4.0 → median (3+4)/2 = 3.5.
  const std::string log =
      "{\"step\": 2, \"step_s\": 3.0, \"peak_bytes\": 900, \"loss\": 4.1}\n"
      "\n"
      "{\"step\": 0, \"step_s\": 9.0, \"peak_bytes\": 1000, \"warmup\": true, \"components\": {\"params\": 10}}\n"
      "{\"step\": 1, \"step_s\": 2.0, \"peak_bytes\": 1200, \"components\": {\"params\": 400, \"activations\": 800}}\n"
      "{\"step\": 3, \"step_s\": 5.0}\n"
      "{\"step\": 4, \"step_s\": 4.0, \"peak_bytes\": 1100}\n";
  const std::vector<MeasuredStep> steps = parse_measurements(log, "run.jsonl");
  REQUIRE(steps.size() == 5);
  CHECK(steps.front().step == 0);
  const Measurement m = summarise_measurements(steps, 1, "run.jsonl");
  REQUIRE(m.step_s);
  CHECK(*m.step_s == doctest::Approx(3.5));
  CHECK(m.steps_timed == 4);
  CHECK(m.peak_bytes == 1200);
  CHECK(m.components.at("params") == 400);
  CHECK(m.components.at("activations") == 800);
  // warmup 3 drops steps 0, 1, 2 → 5.0 and 4.0 → 4.5
  CHECK(*summarise_measurements(steps, 3, "run.jsonl").step_s == doctest::Approx(4.5));
  CHECK_THROWS_AS(summarise_measurements(steps, 5, "run.jsonl"), InputError);
}

TEST_CASE("a measurement log: memory only is fine, malformed lines name file:line and key") {
  const Measurement m = summarise_measurements(parse_measurements("{\"step\": 0, \"peak_bytes\": 7}\n", "x"), 1, "x");
  CHECK(!m.step_s);
  CHECK(m.peak_bytes == 7);
  CHECK(fails_with("{\"step\": 0}\nnot json\n", "run.jsonl:2"));
  CHECK(fails_with("[1, 2]\n", "run.jsonl:1"));
  CHECK(fails_with("{\"step_s\": 1}\n", "'step' is missing"));
  CHECK(fails_with("{\"step\": 0}\n{\"step\": 0}\n", "appears twice"));
  CHECK(fails_with("{\"step\": 0, \"step_s\": -1}\n", "step_s"));
  CHECK(fails_with("{\"step\": 0, \"step_s\": 1e9}\n", "step_s"));
  CHECK(fails_with("{\"step\": 0, \"peak_bytes\": 1.5}\n", "peak_bytes"));
  CHECK(fails_with("{\"step\": 0, \"peak_bytes\": 1e30}\n", "peak_bytes"));
  CHECK(fails_with("{\"step\": 0, \"peak_bytes\": \"12\"}\n", "peak_bytes"));
  CHECK(fails_with("{\"step\": 0, \"components\": {\"weights\": 1}}\n", "unknown component 'weights'"));
  CHECK(fails_with("{\"step\": -1}\n", "'step'"));
  CHECK(fails_with("{\"step\": 0, \"warmup\": 1}\n", "warmup"));
  CHECK(fails_with("\n  \n", "no measurements"));
}

TEST_CASE("error percent: (predicted - measured) / measured") {
  CHECK(*error_percent(110, 100) == doctest::Approx(10));
  CHECK(*error_percent(90, 100) == doctest::Approx(-10));
  CHECK(*error_percent(0, 0) == 0);
  CHECK(!error_percent(5, 0));
}

TEST_CASE("compare_with_measurement: every predicted component, measured ones beside them") {
  Strategy s;
  s.gpus = 2;
  s.dp = 2;
  s.zero = 3;
  s.seq = 128;
  s.micro_batch = 1;
  s.global_batch = 2;
  s.precision = Precision::fp32;
  s.framework = Framework::reference;
  ClusterSpec c = PresetStore::builtin().cluster("a800x8");
  c.gpu.cpu_ranks = true;
  const Prediction p = predict(small_model(), s, c);
  // CPU ranks: nothing of CUDA is resident.
  CHECK(p.memory.peak_stage().peak.runtime == 0);
  MeasuredFigures m;
  m.peak_bytes = p.peak_bytes() / 2;
  m.step_s = 2.0;
  m.components["params"] = 1000;
  m.components["runtime"] = 0;
  const Validation v = compare_with_measurement(p, m, false);
  CHECK(*v.peak.error_pct == doctest::Approx(100).epsilon(1e-6));
  CHECK(!v.step.predicted);
  CHECK(!v.step.error_pct);
  CHECK(*v.step.measured == 2.0);
  double sum = 0;
  bool saw_params = false;
  for (const ComparedFigure& f : v.components) {
    sum += f.predicted.value_or(0);
    if (f.name == "params") {
      saw_params = true;
      CHECK(*f.measured == 1000);
      // ZeRO-3 over 2 ranks, fp32: half the parameters × 4 B, plus whatever is gathered — at least the shard.
      CHECK(*f.predicted >= static_cast<double>(p.params.total) * 4 / 2);
    }
  }
  CHECK(saw_params);
  CHECK(sum == doctest::Approx(static_cast<double>(p.peak_bytes())));
}
