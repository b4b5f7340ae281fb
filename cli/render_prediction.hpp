#pragma once
// A Prediction rendered for people (table, markdown) and for programs (json, yaml, csv).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/terminal.hpp"
#include "planner/cost.hpp"
#include "planner/predict.hpp"

namespace shardplan::cli {

// CONTRACT.md `predict --format json`, plus explanatory extras; with a training goal (--tokens) also
// "training": {"tokens", "tokens_per_s", "gpus", "seconds", "days", "gpu_hours", "steps", "gpu_hour_price", "cost"}.
nlohmann::json prediction_json(const Prediction& p, const std::optional<TrainingGoal>& goal = std::nullopt);

// The training estimate of a prediction (nullopt without a goal or without modelled time).
std::optional<TrainingEstimate> prediction_training(const Prediction& p, const std::optional<TrainingGoal>& goal);
// "2 T tokens: 12.3 days on 64 GPUs, 18,900 GPU-hours, cost 47,250.00 at 2.50 per GPU-hour" (no newline).
std::string training_line(const TrainingEstimate& e);

// `term` fits the tables to a terminal and colours them (cli/terminal.hpp); plain by default.
std::string render_prediction_table(const Prediction& p, const std::optional<TrainingGoal>& goal = std::nullopt,
                                    const Terminal& term = kPlainTerminal);
std::string render_prediction_markdown(const Prediction& p, const std::optional<TrainingGoal>& goal = std::nullopt);

// Generic renderings of any JSON document (used by every command's --format yaml|csv).
std::string json_to_yaml(const nlohmann::json& j);
std::string json_to_csv(const nlohmann::json& j);  // rows "key.path,value", arrays indexed

// table | json | yaml | csv | markdown; anything else throws InputError naming --format.
std::string render_prediction(const Prediction& p, const std::string& format,
                              const std::optional<TrainingGoal>& goal = std::nullopt,
                              const Terminal& term = kPlainTerminal);

}  // namespace shardplan::cli
