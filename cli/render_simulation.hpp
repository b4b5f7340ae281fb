#pragma once
// A simulated step rendered for people (table, markdown) and programs (json, yaml, csv).
#include <string>

#include <nlohmann/json.hpp>

#include "cli/terminal.hpp"
#include "sim/simulate.hpp"

namespace shardplan::cli {

nlohmann::json simulation_json(const sim::SimResult& r);
// table | json | yaml | csv | markdown; anything else throws InputError naming --format. `term` fits the table to
// a terminal and colours it (cli/terminal.hpp); plain by default.
std::string render_simulation(const sim::SimResult& r, const std::string& format, const Terminal& term = kPlainTerminal);

}  // namespace shardplan::cli
