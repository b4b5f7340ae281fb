#include "planner/groups.hpp"

#include <algorithm>

namespace shardplan {

namespace {
// Members of a group with consecutive-rank stride `stride` and `size` members that share one node.
int64_t members_per_node(int64_t stride, int64_t size, int64_t gpus_per_node) {
  if (stride >= gpus_per_node) return 1;
  return std::clamp<int64_t>(gpus_per_node / stride, 1, size);
}
}  // namespace

GroupLayout tp_group(const Strategy& s, const ClusterSpec& c) {
  GroupLayout g;
  g.size = s.tp;
  g.ranks_per_node = members_per_node(1, s.tp, c.gpus_per_node);
  g.concurrent_groups_per_node = std::max<int64_t>(1, c.gpus_per_node / std::max<int64_t>(g.ranks_per_node, 1));
  return g;
}

GroupLayout shard_group(const Strategy& s, const ClusterSpec& c) {
  GroupLayout g;
  g.size = shard_degree(s);
  g.ranks_per_node = members_per_node(s.tp, g.size, c.gpus_per_node);
  // The tp ranks of a node each belong to a different data-parallel group, and they all communicate at once.
  g.concurrent_groups_per_node = std::clamp<int64_t>(s.tp, 1, c.gpus_per_node);
  return g;
}

GroupLayout replicate_group(const Strategy& s, const ClusterSpec& c) {
  GroupLayout g;
  if (s.hsdp <= 0 || s.hsdp >= s.dp) return g;
  g.size = s.dp / s.hsdp;
  g.ranks_per_node = members_per_node(s.tp * s.hsdp, g.size, c.gpus_per_node);
  g.concurrent_groups_per_node = std::clamp<int64_t>(c.gpus_per_node / g.ranks_per_node, 1, c.gpus_per_node);
  return g;
}

GroupLayout pp_link(const Strategy& s, const ClusterSpec& c) {
  GroupLayout g;
  g.size = 2;
  const int64_t stride = s.tp * s.dp;
  g.ranks_per_node = stride < c.gpus_per_node ? 2 : 1;
  g.concurrent_groups_per_node = std::clamp<int64_t>(stride, 1, c.gpus_per_node);
  return g;
}

}  // namespace shardplan
