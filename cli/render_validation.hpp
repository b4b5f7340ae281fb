#pragma once
// `validate` output: predicted against measured (CONTRACT.md `validate --format json`), for people and programs.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/predict.hpp"
#include "cli/terminal.hpp"
#include "planner/validation.hpp"

namespace shardplan::cli {

// Where the measurement came from and anything the reader must know, for every format.
struct ValidationSource {
  std::string what;                 // "reference loop, cpu backend, 4 ranks" | "measurements run.jsonl"
  int64_t steps_timed = 0;          // steps behind the measured step time
  std::vector<std::string> notes;   // e.g. why the step time is not predicted
  nlohmann::json steps = nlohmann::json::array();  // per-step records (reference loop), possibly empty
};

// CONTRACT.md: {"config", "predicted": {"peak_bytes", "step_s"}, "measured": {...}, "error_pct": {...},
// "components": {"<name>": {"predicted", "measured", "error_pct"}}} plus "source", "notes", "steps" and the full
// "prediction". Figures not available are null.
nlohmann::json validation_json(const Prediction& p, const Validation& v, const ValidationSource& src);

// table | json | markdown | yaml | csv; anything else throws InputError naming --format. `term` fits the table
// format to a terminal (cli/terminal.hpp); the default is the plain, unfitted text.
std::string render_validation(const Prediction& p, const Validation& v, const ValidationSource& src,
                              const std::string& format, const Terminal& term = kPlainTerminal);

}  // namespace shardplan::cli
