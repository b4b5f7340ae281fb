#pragma once
// Time of one collective on the cluster's links: latency + bytes / bandwidth, with the nccl-tests bus-bandwidth
// factors, per link class, and hierarchical decomposition for groups that span nodes.
#include <cstdint>

#include "planner/hardware.hpp"

namespace shardplan {

enum class Collective { all_gather, reduce_scatter, all_reduce, broadcast, send_recv };
const char* to_string(Collective c);

// Where the ranks of one process group sit.
struct GroupLayout {
  int64_t size = 1;            // ranks in the group
  int64_t ranks_per_node = 1;  // group members on each node (size / ranks_per_node nodes)
  // GPUs of the node that run the same collective at the same time on other groups (they share the node's NICs):
  // e.g. the 8 DP groups of a TP=8 layout all cross the network together. 1 = this group alone.
  int64_t concurrent_groups_per_node = 1;
};

// `bytes` is the collective's total buffer S in the nccl-tests convention: the full gathered/reduced tensor for
// all-gather, reduce-scatter and all-reduce; the message for broadcast and send/recv.
double collective_time_s(const ClusterSpec& c, Collective op, double bytes, const GroupLayout& g);

// Bus bandwidth a collective reaches on one link class when bandwidth-bound: algbw = S/t, busbw = algbw × factor
// (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n, broadcast 1.
double bus_factor(Collective op, int64_t n);

// Additions (comm_cost.cpp documents the figures):
// Fraction of the per-direction link rate a ring collective sustains on this link class (nvswitch 0.78, nvlink
// 0.75, pcie 0.8), calibrated on nccl-tests busbw.
double link_efficiency(LinkKind k);
// Achievable per-GPU intra-node bandwidth, bytes/s: intra.gbps × link_efficiency.
double intra_node_bytes_per_s(const ClusterSpec& c);
// Achievable network bandwidth of one GPU of the group, bytes/s: the node's NICs shared by the
// ranks_per_node × concurrent_groups_per_node GPUs sending at once, at most the NICs near one GPU and its PCIe
// link, × 0.92 (NCCL efficiency on InfiniBand).
double network_bytes_per_s_per_gpu(const ClusterSpec& c, const GroupLayout& g);
// nccl-tests bus bandwidth in GB/s of a collective of `bytes` over n ranks that took `seconds`.
double bus_bandwidth_gbps(Collective op, int64_t n, double bytes, double seconds);

}  // namespace shardplan
