#pragma once
// A search result rendered: the ranked table, the recommendation in words, why each other family loses.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/cost.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"

namespace shardplan::cli {

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
};

// CONTRACT.md `plan --format json`: {"candidates": [predict objects], "recommended": 0, "rejected": [...]}.
nlohmann::json plan_json(const PlanReport& r);
std::string render_plan_table(const PlanReport& r);
std::string render_plan(const PlanReport& r, const std::string& format);

}  // namespace shardplan::cli
