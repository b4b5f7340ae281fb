#include "comm/groups.hpp"

#include <fmt/format.h>

namespace shardplan::comm {

SplitKey tp_split(const ParallelLayout& l, int rank) { return {rank / l.tp, rank % l.tp}; }

SplitKey dp_split(const ParallelLayout& l, int rank) {
  const int pp_i = rank / (l.tp * l.dp), tp_i = rank % l.tp, dp_i = (rank / l.tp) % l.dp;
  return {pp_i * l.tp + tp_i, dp_i};
}

SplitKey pp_split(const ParallelLayout& l, int rank) {
  const int pp_i = rank / (l.tp * l.dp);
  return {rank % (l.tp * l.dp), pp_i};
}

SplitKey intra_node_split(const WorldInfo& w) { return {w.node, w.local_rank}; }

SplitKey rail_split(const WorldInfo& w) { return {w.local_rank, w.node}; }

ProcessGroups make_process_groups(Communicator& world, const WorldInfo& info, const ParallelLayout& layout) {
  if (layout.tp < 1 || layout.pp < 1 || layout.dp < 1 || layout.tp * layout.pp * layout.dp != world.size())
    throw CommError(fmt::format("layout tp {} × pp {} × dp {} does not cover the {} ranks", layout.tp, layout.pp,
                                layout.dp, world.size()));
  ProcessGroups g;
  const int r = world.rank();
  SplitKey s = tp_split(layout, r);
  g.tp = world.split(s.color, s.key);
  s = dp_split(layout, r);
  g.dp = world.split(s.color, s.key);
  s = pp_split(layout, r);
  g.pp = world.split(s.color, s.key);
  s = intra_node_split(info);
  g.intra_node = world.split(s.color, s.key);
  s = rail_split(info);
  g.rail = world.split(s.color, s.key);
  return g;
}

}  // namespace shardplan::comm
