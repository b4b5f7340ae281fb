#pragma once
// A simulated step rendered for people (table, markdown) and programs (json, yaml, csv).
#include <string>

#include <nlohmann/json.hpp>

#include "sim/simulate.hpp"

namespace shardplan::cli {

nlohmann::json simulation_json(const sim::SimResult& r);
// table | json | yaml | csv | markdown; anything else throws InputError naming --format.
std::string render_simulation(const sim::SimResult& r, const std::string& format);

}  // namespace shardplan::cli
