#pragma once
// A search result rendered: the ranked table, the recommendation in words, why each other family loses.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/cost.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "cli/terminal.hpp"
#include "sim/rerank.hpp"

namespace shardplan::cli {

// `plan --simulate-top K`: what the simulator made of the top candidates (sim/rerank.hpp), in the order of
// PlanReport::top (already re-ranked).
struct PlanSimulation {
  size_t k = 0;        // --simulate-top
  size_t window = 0;   // positions re-ranked: min(K, ranked candidates)
  std::vector<std::optional<sim::SimulatedCandidate>> step;  // by position in top
  std::vector<size_t> analytic_rank;  // by position in top: 1-based place in the analytic order
  std::vector<std::string> skipped;   // by position: why it could not be simulated ("" otherwise)
  bool order_changed = false;
  bool recommendation_changed = false;
  std::string recommendation_note;
  double wall_ms = 0;
};

struct PlanReport {
  ModelSpec model;
  ClusterSpec cluster;
  SearchSpace space;
  SearchResult result;
  std::vector<Prediction> top;  // full predictions of result.ranked (same order), plus the recommendation if
                                // it is not among them (last: it is slower than all of them)
  size_t recommended = 0;       // index into top
  double search_ms = 0;
  bool show_all = false;        // --all: every family, fitting or not
  bool cluster_defaulted = false;
  std::optional<TrainingGoal> training;  // --tokens (--gpu-hour-price): days, GPU-hours and cost per candidate
  std::optional<PlanSimulation> simulation;  // --simulate-top K > 0
  size_t folded = 0;  // ranked candidates folded into a better variant of the same family and layout (cmd_plan.cpp)
};

// CONTRACT.md `plan --format json`: {"candidates": [predict objects], "recommended": 0, "rejected": [...]}.
nlohmann::json plan_json(const PlanReport& r);
// `term` fits the table to a terminal's width and colours it (cli/terminal.hpp); plain by default.
std::string render_plan_table(const PlanReport& r, const Terminal& term = kPlainTerminal);
std::string render_plan(const PlanReport& r, const std::string& format, const Terminal& term = kPlainTerminal);

}  // namespace shardplan::cli
