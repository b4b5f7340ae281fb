#include "cli/render_network.hpp"

#include <fmt/format.h>

#include "planner/groups.hpp"

namespace shardplan::cli {

using nlohmann::json;

json network_json(const Prediction& p) {
  const ClusterSpec& c = p.cluster;
  json groups = json::array();
  json crossing = json::array();
  for (const GroupPlacement& g : group_placements(p.strategy, c)) {
    groups.push_back({{"group", g.group},
                      {"size", g.layout.size},
                      {"collectives", g.collectives},
                      {"ranks_per_domain", g.layout.ranks_per_node},
                      {"leaf_groups", g.layout.leaf_groups},
                      {"gpus_per_spine_flow", g.layout.gpus_per_spine_flow},
                      {"tier", to_string(g.tier)},
                      {"spine_bandwidth_factor", g.spine_factor}});
    if (g.tier == NetworkTier::spine) crossing.push_back(g.group);
  }
  return {{"nvlink_domain_gpus", nvlink_domain_size(c)},
          {"gpus_per_leaf", c.inter.gpus_per_leaf},
          {"spine_oversubscription", c.inter.spine_oversubscription},
          {"groups", groups},
          {"crosses_spine", crossing}};
}

std::string network_lines(const Prediction& p) {
  const ClusterSpec& c = p.cluster;
  const int64_t domain = nvlink_domain_size(c);
  std::string out = fmt::format("\nNetwork: NVLink domain of {} GPUs{}", domain,
                                domain > c.gpus_per_node ? fmt::format(" ({} hosts of {})", domain / c.gpus_per_node,
                                                                       c.gpus_per_node)
                                                         : std::string());
  if (c.inter.gpus_per_leaf > 0)
    out += fmt::format(", leaf groups of {} GPUs, spine {}:1", c.inter.gpus_per_leaf,
                       fmt::format("{:g}", c.inter.spine_oversubscription));
  out += "\n";
  for (const GroupPlacement& g : group_placements(p.strategy, c)) {
    std::string where;
    switch (g.tier) {
      case NetworkTier::nvlink: where = "inside one NVLink domain"; break;
      case NetworkTier::leaf:
        where = c.inter.gpus_per_leaf > 0 ? "across NVLink domains under one leaf" : "across NVLink domains";
        break;
      case NetworkTier::spine:
        where = g.spine_factor < 1
                    ? fmt::format("crosses the spine at {:.0f} % of the NIC rate ({:g} leaf GPUs per uplink flow, {}:1)",
                                  100 * g.spine_factor, g.layout.gpus_per_spine_flow,
                                  fmt::format("{:g}", c.inter.spine_oversubscription))
                    : fmt::format("crosses the spine at the full NIC rate ({} leaf groups)", g.layout.leaf_groups);
        break;
    }
    out += fmt::format("  {} ({} ranks, {} per domain): {} {}\n", g.group, g.layout.size, g.layout.ranks_per_node,
                       g.collectives, where);
  }
  return out;
}

std::string spine_summary(const Prediction& p) {
  std::string parts;
  for (const GroupPlacement& g : group_placements(p.strategy, p.cluster)) {
    if (g.tier != NetworkTier::spine) continue;
    if (!parts.empty()) parts += "; ";
    parts += g.spine_factor < 1 ? fmt::format("{} {} at {:.0f} % of the NIC rate ({:g}:1 oversubscribed)", g.group,
                                              g.collectives, 100 * g.spine_factor, p.cluster.inter.spine_oversubscription)
                                : fmt::format("{} {} at the full rate", g.group, g.collectives);
  }
  return parts.empty() ? std::string() : "  Crossing the spine: " + parts + ".\n";
}

}  // namespace shardplan::cli
