#pragma once
// Where each process group's ranks sit, under Megatron's rank order: tensor-parallel ranks innermost
// (consecutive), then data-parallel, then pipeline stages outermost (Narayanan et al. 2021, §3.2: TP within a
// node, PP across nodes). A "node" is the NVLink domain (hardware.hpp nvlink_domain_size); leaf groups of a
// leaf/spine fabric hold consecutive domains.
#include <vector>

#include "planner/comm_cost.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

GroupLayout tp_group(const Strategy& s, const ClusterSpec& c);
// The context-parallel group (cp ranks at stride tp) that passes K/V around the ring.
GroupLayout cp_group(const Strategy& s, const ClusterSpec& c);
// One hop of that ring (size 2), at the pace of its slowest hop: what each ring step's send/recv costs.
GroupLayout cp_ring_link(const Strategy& s, const ClusterSpec& c);
// The group that shards model states: all of dp, or the HSDP shard group.
GroupLayout shard_group(const Strategy& s, const ClusterSpec& c);
// Expert parallelism (issue 17), Megatron-Core's rank order tp-cp-ep-dp-pp (parallel_state.py
// initialize_model_parallel, order="tp-cp-ep-dp-pp"): the EP group is `ep` ranks at stride tp, so it stays in one
// NVLink domain while tp·ep fits; the expert-data-parallel group (ranks holding the same experts) dp/ep ranks at
// stride tp·ep. The expert group's all-to-all and the expert-DP gradient reduction run on them.
GroupLayout ep_group(const Strategy& s, const ClusterSpec& c);
GroupLayout expert_dp_group(const Strategy& s, const ClusterSpec& c);
// HSDP's replicate group (dp / hsdp ranks holding the same shard); size 1 without HSDP.
GroupLayout replicate_group(const Strategy& s, const ClusterSpec& c);
// A point-to-point link between consecutive pipeline stages (size 2).
GroupLayout pp_link(const Strategy& s, const ClusterSpec& c);
// Every rank (the gradient norm's all-reduce).
GroupLayout world_group(const Strategy& s, const ClusterSpec& c);

// One process group of the layout and the tier of the network its collectives reach: what `predict` reports under
// "network" (which collective crosses the spine, and at what share of the NIC rate).
struct GroupPlacement {
  const char* group;        // tp, cp, dp, dp_shard, dp_replicate, pp
  const char* collectives;  // what the group runs
  GroupLayout layout;
  NetworkTier tier;
  double spine_factor;      // comm_cost.hpp spine_bandwidth_factor
};
std::vector<GroupPlacement> group_placements(const Strategy& s, const ClusterSpec& c);

}  // namespace shardplan
