#include "planner/groups.hpp"

#include <algorithm>

namespace shardplan {

namespace {
// Members of a group with consecutive-rank stride `stride` and `size` members that share one block of `block`
// consecutive ranks (an NVLink domain, a leaf group).
int64_t members_per_block(int64_t stride, int64_t size, int64_t block) {
  if (stride >= block) return 1;
  return std::clamp<int64_t>(block / stride, 1, size);
}

// The leaf groups a group of `size` members at `stride` spans and the leaf GPUs per spine flow (comm_cost.cpp
// spine_bandwidth_factor): its ring leaves each leaf once per channel, r channels for r members per domain, so the
// flows of a leaf are (leaf GPUs / members per leaf) · r — one per (members per leaf / r) of its GPUs.
void place_on_leaves(GroupLayout& g, const ClusterSpec& c, int64_t stride) {
  const int64_t leaf = c.inter.gpus_per_leaf;
  if (leaf <= 0) return;
  const int64_t per_leaf = members_per_block(stride, g.size, leaf);
  g.leaf_groups = (g.size + per_leaf - 1) / per_leaf;
  g.gpus_per_spine_flow = static_cast<double>(per_leaf) / static_cast<double>(std::max<int64_t>(g.ranks_per_node, 1));
}

// A group of `size` members at consecutive-rank `stride`: the stride ranks of a domain each belong to a different such
// group, and they all communicate at once.
GroupLayout group_at_stride(int64_t size, int64_t stride, const ClusterSpec& c) {
  const int64_t domain = nvlink_domain_size(c);
  GroupLayout g;
  g.size = std::max<int64_t>(size, 1);
  g.ranks_per_node = members_per_block(stride, g.size, domain);
  g.concurrent_groups_per_node = std::clamp<int64_t>(stride, 1, domain);
  place_on_leaves(g, c, stride);
  return g;
}

// A group of `size` members at stride tp (CP, the sharding group).
GroupLayout group_at_tp_stride(int64_t size, const Strategy& s, const ClusterSpec& c) {
  return group_at_stride(size, s.tp, c);
}
}  // namespace

// The blocks are NVLink domains (nvlink_domain_size): TP groups fill a GB200 NVL72 domain of 72 though a host has 4.
GroupLayout tp_group(const Strategy& s, const ClusterSpec& c) {
  const int64_t domain = nvlink_domain_size(c);
  GroupLayout g;
  g.size = s.tp;
  g.ranks_per_node = members_per_block(1, s.tp, domain);
  g.concurrent_groups_per_node = std::max<int64_t>(1, domain / std::max<int64_t>(g.ranks_per_node, 1));
  place_on_leaves(g, c, 1);
  return g;
}

// Context-parallel ranks sit right outside the tensor-parallel ones: Megatron-Core's rank order "tp-cp-ep-dp-pp"
// (megatron/core/parallel_state.py initialize_model_parallel), torchtitan's mesh ["pp", "dp_replicate", "dp_shard",
// "cp", "tp"] (torchtitan/distributed/parallel_dims.py). The sharding group (dp × cp, shard_degree) is then
// consecutive at stride tp, and the replicate and pipeline groups are cp times further apart.
GroupLayout cp_group(const Strategy& s, const ClusterSpec& c) { return group_at_tp_stride(s.cp, s, c); }

// One hop of the ring: the ring's ranks all send at once, so a ring that leaves the NVLink domain runs at the pace
// of its hops across the network, shared by the domain's tp ranks (each in its own CP ring), as pp_link below.
GroupLayout cp_ring_link(const Strategy& s, const ClusterSpec& c) {
  const int64_t domain = nvlink_domain_size(c);
  const int64_t cp = std::max<int64_t>(s.cp, 1);
  GroupLayout g;
  g.size = 2;
  g.ranks_per_node = s.tp * cp <= domain ? 2 : 1;
  g.concurrent_groups_per_node = std::clamp<int64_t>(s.tp, 1, domain);
  const int64_t leaf = c.inter.gpus_per_leaf;
  if (leaf > 0 && cp * s.tp > leaf && s.tp >= domain) {
    g.leaf_groups = 2;
    g.gpus_per_spine_flow = static_cast<double>(leaf) / static_cast<double>(std::min(s.tp, leaf));
  }
  return g;
}

GroupLayout shard_group(const Strategy& s, const ClusterSpec& c) { return group_at_tp_stride(shard_degree(s), s, c); }

// The expert ranks of a stage in Megatron-Core's expert order "tp-ep-dp-pp" with tp = the expert TP size
// (parallel_state.py initialize_model_parallel, MoE Parallel Folding): EP groups at stride etp, expert-DP groups at
// stride etp·ep. With etp = tp these are the EP groups carved from dp·cp at stride tp.
GroupLayout ep_group(const Strategy& s, const ClusterSpec& c) {
  return group_at_stride(s.ep, expert_tensor_parallel(s), c);
}

GroupLayout expert_dp_group(const Strategy& s, const ClusterSpec& c) {
  GroupLayout g = group_at_stride(expert_data_parallel(s), expert_tensor_parallel(s) * std::max<int64_t>(s.ep, 1), c);
  // Every rank of a domain belongs to one expert-DP group or another, and they all reduce at once.
  g.concurrent_groups_per_node = std::clamp<int64_t>(nvlink_domain_size(c) / g.ranks_per_node, 1, nvlink_domain_size(c));
  return g;
}

GroupLayout replicate_group(const Strategy& s, const ClusterSpec& c) {
  const int64_t domain = nvlink_domain_size(c);
  GroupLayout g;
  if (s.hsdp <= 0 || s.hsdp >= s.dp) return g;
  g.size = s.dp / s.hsdp;
  const int64_t stride = s.tp * std::max<int64_t>(s.cp, 1) * s.hsdp;
  g.ranks_per_node = members_per_block(stride, g.size, domain);
  g.concurrent_groups_per_node = std::clamp<int64_t>(domain / g.ranks_per_node, 1, domain);
  place_on_leaves(g, c, stride);
  return g;
}

GroupLayout pp_link(const Strategy& s, const ClusterSpec& c) {
  const int64_t domain = nvlink_domain_size(c);
  GroupLayout g;
  g.size = 2;
  const int64_t stride = s.tp * std::max<int64_t>(s.cp, 1) * s.dp;
  g.ranks_per_node = stride < domain ? 2 : 1;
  g.concurrent_groups_per_node = std::clamp<int64_t>(stride, 1, domain);
  // Pipeline neighbours are `stride` ranks apart. Once the stages outgrow a leaf group, some boundary between two
  // stages straddles two leaves, and every GPU of the stage block on that leaf (min(stride, leaf)) sends across at
  // once: leaf / min(stride, leaf) leaf GPUs per spine flow. The slowest boundary sets the pipeline's pace.
  const int64_t leaf = c.inter.gpus_per_leaf;
  if (leaf > 0 && s.pp * stride > leaf && stride >= domain) {
    g.leaf_groups = 2;
    g.gpus_per_spine_flow = static_cast<double>(leaf) / static_cast<double>(std::min(stride, leaf));
  }
  return g;
}

GroupLayout world_group(const Strategy& s, const ClusterSpec& c) {
  const int64_t domain = nvlink_domain_size(c);
  GroupLayout g;
  g.size = s.gpus;
  g.ranks_per_node = std::min(s.gpus, domain);
  place_on_leaves(g, c, 1);
  return g;
}

std::vector<GroupPlacement> group_placements(const Strategy& s, const ClusterSpec& c) {
  std::vector<GroupPlacement> out;
  auto add = [&](const char* group, const char* collectives, const GroupLayout& g) {
    if (g.size > 1)
      out.push_back({group, collectives, g, network_tier(c, g), spine_bandwidth_factor(c, g)});
  };
  add("tp", s.sp ? "all_gather, reduce_scatter" : "all_reduce", tp_group(s, c));
  add("cp", "send_recv (ring attention K/V)", cp_group(s, c));
  add(s.hsdp > 0 ? "dp_shard" : "dp", s.zero == 0 ? "all_reduce" : "reduce_scatter, all_gather", shard_group(s, c));
  add("dp_replicate", "all_reduce", replicate_group(s, c));
  if (s.ep > 1) {
    add("ep", "all_to_all", ep_group(s, c));
    add("expert_dp", s.zero == 0 ? "all_reduce" : "reduce_scatter, all_gather", expert_dp_group(s, c));
  }
  if (s.pp > 1) add("pp", "send_recv", pp_link(s, c));
  return out;
}

}  // namespace shardplan
