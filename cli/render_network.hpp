#pragma once
// Where a prediction's process groups sit on the network: inside an NVLink domain, across domains under one leaf,
// or across the spine of a leaf/spine fabric, and what share of the NIC rate the spine leaves them
// (planner/groups.hpp group_placements).
#include <string>

#include <nlohmann/json.hpp>

#include "planner/predict.hpp"

namespace shardplan::cli {

// "network": {"nvlink_domain_gpus", "gpus_per_leaf", "spine_oversubscription", "groups": [{"group", "size",
// "collectives", "ranks_per_domain", "leaf_groups", "gpus_per_spine_flow", "tier", "spine_bandwidth_factor"}], "crosses_spine": [...]}
nlohmann::json network_json(const Prediction& p);

// The table's "Network" lines (each ends in a newline).
std::string network_lines(const Prediction& p);

}  // namespace shardplan::cli
