#pragma once
// Where each process group's ranks sit, under Megatron's rank order: tensor-parallel ranks innermost
// (consecutive), then data-parallel, then pipeline stages outermost (Narayanan et al. 2021, §3.2: TP within a
// node, PP across nodes).
#include "planner/comm_cost.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

GroupLayout tp_group(const Strategy& s, const ClusterSpec& c);
// The group that shards model states: all of dp, or the HSDP shard group.
GroupLayout shard_group(const Strategy& s, const ClusterSpec& c);
// HSDP's replicate group (dp / hsdp ranks holding the same shard); size 1 without HSDP.
GroupLayout replicate_group(const Strategy& s, const ClusterSpec& c);
// A point-to-point link between consecutive pipeline stages (size 2).
GroupLayout pp_link(const Strategy& s, const ClusterSpec& c);

}  // namespace shardplan
