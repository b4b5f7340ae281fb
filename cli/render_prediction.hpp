#pragma once
// A Prediction rendered for people (table, markdown) and for programs (json, yaml, csv).
#include <string>

#include <nlohmann/json.hpp>

#include "planner/predict.hpp"

namespace shardplan::cli {

// CONTRACT.md `predict --format json`, plus explanatory extras.
nlohmann::json prediction_json(const Prediction& p);

std::string render_prediction_table(const Prediction& p);
std::string render_prediction_markdown(const Prediction& p);

// Generic renderings of any JSON document (used by every command's --format yaml|csv).
std::string json_to_yaml(const nlohmann::json& j);
std::string json_to_csv(const nlohmann::json& j);  // rows "key.path,value", arrays indexed

// table | json | yaml | csv | markdown; anything else throws InputError naming --format.
std::string render_prediction(const Prediction& p, const std::string& format);

}  // namespace shardplan::cli
