#pragma once
// Time of one collective on the cluster's links: latency + bytes / bandwidth, with the nccl-tests bus-bandwidth
// factors, per link class, and hierarchical decomposition for groups that span nodes.
#include <cstdint>

#include "planner/hardware.hpp"

namespace shardplan {

enum class Collective { all_gather, reduce_scatter, all_reduce, broadcast, send_recv, all_to_all };
const char* to_string(Collective c);

// Where the ranks of one process group sit. "Node" here is the NVLink domain: one host, or the hosts that NVLink
// switches join (ClusterSpec::nvlink_domain_gpus, GB200 NVL72: 72 GPUs on 18 hosts). NCCL treats such a domain as one
// NVLink island (multi-node NVLink, NCCL docs NCCL_MNNVL_ENABLE) and leaves it only over the NICs.
struct GroupLayout {
  int64_t size = 1;            // ranks in the group
  int64_t ranks_per_node = 1;  // group members in each NVLink domain (size / ranks_per_node domains)
  // GPUs of the domain that run the same collective at the same time on other groups (they share its NICs):
  // e.g. the 8 DP groups of a TP=8 layout all cross the network together. 1 = this group alone.
  int64_t concurrent_groups_per_node = 1;
  // A leaf/spine fabric (ClusterSpec inter.gpus_per_leaf): the leaf groups the group's traffic spans (1 = it stays
  // under one leaf, or there is no leaf tier) and, when more, how many GPUs of a leaf share each flow that leaves it
  // for the spine (groups.cpp derives both per group kind; spine_bandwidth_factor turns them into a rate).
  int64_t leaf_groups = 1;
  double gpus_per_spine_flow = 0;
};

// The highest tier of the network a group's collectives cross.
enum class NetworkTier { nvlink, leaf, spine };
const char* to_string(NetworkTier t);
NetworkTier network_tier(const ClusterSpec& c, const GroupLayout& g);
// Share of the NIC bandwidth left to a group's network leg by an oversubscribed spine: 1 inside one leaf group or at
// full bisection; min(1, gpus_per_spine_flow / o) across leaves, o = the oversubscription (comm_cost.cpp).
double spine_bandwidth_factor(const ClusterSpec& c, const GroupLayout& g);

// `bytes` is the collective's total buffer S in the nccl-tests convention: the full gathered/reduced tensor for
// all-gather, reduce-scatter and all-reduce; the message for broadcast and send/recv; for all-to-all each rank's
// whole send buffer (nccl-tests alltoall: count per rank, 1/n of it to each peer, its own share staying local).
double collective_time_s(const ClusterSpec& c, Collective op, double bytes, const GroupLayout& g);

// A one-shot exchange in which every rank of the group sends `nvlink_bytes` to peers in its NVLink domain and
// `net_bytes` over its share of the NICs, all peers at once (NCCL's grouped sends of an all-to-all; DeepEP's and
// HybridEP's dispatch and combine kernels): one latency, the slower link class sets the time.
double exchange_time_s(const ClusterSpec& c, double nvlink_bytes, double net_bytes, const GroupLayout& g);

// Bus bandwidth a collective reaches on one link class when bandwidth-bound: algbw = S/t, busbw = algbw × factor
// (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n−1)/n, all-gather, reduce-scatter and all-to-all (n−1)/n,
// broadcast 1.
double bus_factor(Collective op, int64_t n);

// Additions (comm_cost.cpp documents the figures):
// Fraction of the per-direction link rate a ring collective sustains on this link class (nvswitch 0.78, nvlink
// 0.75, xgmi 0.75, pcie 0.8), calibrated on nccl-tests busbw.
double link_efficiency(LinkKind k);
// Achievable per-GPU intra-node bandwidth, bytes/s: intra.gbps × link_efficiency.
double intra_node_bytes_per_s(const ClusterSpec& c);
// Achievable network bandwidth of one GPU of the group, bytes/s: the NVLink domain's NICs shared by the
// ranks_per_node × concurrent_groups_per_node GPUs sending at once, at most the NICs near one GPU and its PCIe
// link, × 0.92 (NCCL efficiency on InfiniBand). Before the spine's share (spine_bandwidth_factor).
double network_bytes_per_s_per_gpu(const ClusterSpec& c, const GroupLayout& g);
// nccl-tests bus bandwidth in GB/s of a collective of `bytes` over n ranks that took `seconds`.
double bus_bandwidth_gbps(Collective op, int64_t n, double bytes, double seconds);

}  // namespace shardplan
