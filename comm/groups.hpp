#pragma once
// Process groups of a parallel layout, built from world ranks: TP, DP and PP groups (Megatron-LM's rank order:
// tp fastest, then dp, then pp — megatron/core/parallel_state.py), and the intra-node and inter-node rail groups
// the planner's link classes stand for.
#include <memory>

#include "comm/comm.hpp"

namespace shardplan::comm {

struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1;  // tp·pp·dp = world size
};

// (color, key) for Communicator::split. rank = (pp_i·dp + dp_i)·tp + tp_i.
struct SplitKey {
  int color = 0, key = 0;
};
SplitKey tp_split(const ParallelLayout& l, int rank);  // same pp_i and dp_i
SplitKey dp_split(const ParallelLayout& l, int rank);  // same pp_i and tp_i
SplitKey pp_split(const ParallelLayout& l, int rank);  // same dp_i and tp_i
SplitKey intra_node_split(const WorldInfo& w);         // the ranks of one node
SplitKey rail_split(const WorldInfo& w);               // one rank per node, the same local rank: a network rail

struct ProcessGroups {
  std::unique_ptr<Communicator> tp, dp, pp, intra_node, rail;
};

// Collective over `world` (every rank calls it). Throws CommError when tp·pp·dp ≠ world size.
ProcessGroups make_process_groups(Communicator& world, const WorldInfo& info, const ParallelLayout& layout);

}  // namespace shardplan::comm
