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

// One line naming the groups whose collectives cross the spine and the share of the NIC rate they get
// ("  Spine: pp send_recv at 50 % of the NIC rate (2:1); dp reduce_scatter, all_gather at the full rate.\n"), or ""
// when none does: what `plan` says under its recommendation.
std::string spine_summary(const Prediction& p);

}  // namespace shardplan::cli
