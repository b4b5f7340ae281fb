// Collective cost model: α + β·S per collective, NCCL-style.
//
// Sources (see the shared REFERENCE-FACTS.md, "Communication"):
//  - nccl-tests doc/PERFORMANCE.md: bus factors, busbw = algbw × factor.
//  - NCCL src/graph/tuning.cc (ncclTopoTuneModel): latency = baseLat + per-step hop latencies; a ring takes
//    2(n−1) steps for all-reduce and n−1 for all-gather / reduce-scatter, of which 2(nodes−1) / nodes−1 cross the
//    network; a tree all-reduce takes 2·((ranks_per_node−1)·intra + log2(nodes)·inter). NCCL times both and
//    runs the faster.
//  - Measured nccl-tests busbw (issue threads of NVIDIA/nccl, nccl-tests): 8×A100 NVSwitch ≈ 230 GB/s of 300,
//    8×H100 365–370 of 450, 8×A800 ≈ 150 of 200, multi-node A100 with 8× HDR 200 ≈ 192 GB/s of 200, NDR 400 NIC
//    46–49 GB/s of 50.
#include "planner/comm_cost.hpp"

#include <algorithm>
#include <cmath>

namespace shardplan {

namespace {

// NCCL tuning.cc baseLat, ring: 6.6 µs (LL) … 8.4 µs (Simple). The latency term only matters for small messages,
// where NCCL runs LL, so the LL figure.
constexpr double kBaseLatencyS = 6.6e-6;

// NCCL tuning.cc: tree all-reduce bus bandwidth = 0.9 × the ring's (busBw*.9), and a tree moves 2S per rank.
constexpr double kTreeBandwidthRatio = 0.9;

// Fraction of the network link rate an NCCL ring sustains per NIC: multi-node A100 (8× HDR 200 Gb/s = 200 GB/s
// per node) reaches busbw ≈ 192 GB/s (0.96); one NDR 400 NIC 46–49 GB/s of 50 (0.92–0.98). 0.92 sits at the low
// end of both, leaving room for congestion on a shared fabric.
constexpr double kNetworkEfficiency = 0.92;

// A node listed without NICs still has its management Ethernet (1 Gb/s = 0.125 GB/s): a group that spans such
// nodes gets a finite, very slow time instead of a division by zero.
constexpr double kFallbackNetworkBytesPerS = 0.125e9;

constexpr double kMinBandwidthBytesPerS = 1e6;  // floor against zero/garbage link figures (never divide by 0)

double ceil_log2(int64_t n) {
  int64_t steps = 0;
  for (int64_t v = 1; v < n; v *= 2) ++steps;
  return static_cast<double>(steps);
}

struct Layout {
  int64_t n = 1;      // ranks
  int64_t r = 1;      // ranks per node
  int64_t nodes = 1;  // nodes spanned
};

Layout normalise(const GroupLayout& g) {
  Layout l;
  l.n = std::max<int64_t>(g.size, 1);
  l.r = std::clamp<int64_t>(g.ranks_per_node, 1, l.n);
  l.nodes = (l.n + l.r - 1) / l.r;
  return l;
}

// Ring steps and how many of them cross the network (NCCL tuning.cc nsteps / nInterSteps). Broadcast is a
// pipelined chain: n−1 hops.
void ring_steps(Collective op, const Layout& l, double& steps, double& inter_steps) {
  const double n = static_cast<double>(l.n), nodes = static_cast<double>(l.nodes);
  if (op == Collective::all_reduce) {
    steps = 2 * (n - 1);
    inter_steps = 2 * (nodes - 1);
  } else {
    steps = n - 1;
    inter_steps = nodes - 1;
  }
}

// ---- measured collectives (calibration profile) ---------------------------------------------------------------

// The fitted segment that covers S: the first below the table, the last above it.
const CollectiveFitSegment& segment_at(const CollectiveCalibration& e, double bytes) {
  for (const CollectiveFitSegment& seg : e.fit)
    if (bytes <= seg.to_bytes) return seg;
  return e.fit.back();
}

// The measured group time at S: inside the measured range the medians interpolated linearly in log(S)-log(t)
// (exact at every measured size), outside it the fitted line α + β·S (calibrate/README.md).
double measured_time_s(const CollectiveCalibration& e, double bytes) {
  const std::vector<double>& x = e.bytes;
  const std::vector<double>& y = e.seconds;
  if (x.size() >= 2 && bytes >= x.front() && bytes <= x.back()) {
    std::size_t i = 1;
    while (i + 1 < x.size() && x[i] < bytes) ++i;
    const double f = std::log(bytes / x[i - 1]) / std::log(x[i] / x[i - 1]);
    return std::exp(std::log(y[i - 1]) + f * std::log(y[i] / y[i - 1]));
  }
  const CollectiveFitSegment& seg = segment_at(e, bytes);
  return seg.alpha_s + seg.beta_s_per_byte * bytes;
}

// Measured entry for this collective and layout: the same op, within one node or across nodes like the group;
// among those the same ranks per node, then the nearest group size (in log). Null when none was measured.
const CollectiveCalibration* find_calibration(const CommCalibration& cal, Collective op, const Layout& l) {
  const CollectiveCalibration* best = nullptr;
  double best_score = HUGE_VAL;
  for (const CollectiveCalibration& e : cal.collectives) {
    if (e.op != op || e.fit.empty() || e.ranks < 2) continue;
    const int64_t nodes = (e.ranks + std::max<int64_t>(e.ranks_per_node, 1) - 1) / std::max<int64_t>(e.ranks_per_node, 1);
    if ((nodes > 1) != (l.nodes > 1)) continue;
    const double score = (e.ranks_per_node == l.r ? 0.0 : 100.0) +
                         std::abs(std::log(static_cast<double>(l.n) / static_cast<double>(e.ranks)));
    if (score < best_score) {
      best_score = score;
      best = &e;
    }
  }
  return best;
}

// Measured time rescaled from the measured group of m ranks to this one of n: the latency α by the ring's step
// count, (n−1)/(m−1) (NCCL tuning.cc), the bandwidth part t − α by the nccl-tests bus factor, which is the
// share of S each rank sends (nccl-tests doc/PERFORMANCE.md).
double calibrated_time_s(const CollectiveCalibration& e, Collective op, double bytes, const Layout& l) {
  const double t = measured_time_s(e, bytes);
  // A point-to-point hop costs the same in a ring of any size (each rank sends one neighbour its S).
  if (e.ranks == l.n || op == Collective::send_recv) return t;
  const double alpha = std::min(segment_at(e, bytes).alpha_s, t);
  const double steps = static_cast<double>(l.n - 1) / static_cast<double>(e.ranks - 1);
  const double factor = bus_factor(op, l.n) / bus_factor(op, e.ranks);
  return alpha * steps + (t - alpha) * factor;
}

}  // namespace

const char* to_string(Collective c) {
  switch (c) {
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_reduce: return "all_reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::send_recv: return "send_recv";
    case Collective::all_to_all: return "all_to_all";
  }
  return "?";
}

double bus_factor(Collective op, int64_t n) {
  if (n <= 1) return 0.0;
  const double dn = static_cast<double>(n);
  switch (op) {
    case Collective::all_reduce: return 2.0 * (dn - 1) / dn;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return (dn - 1) / dn;  // nccl-tests PERFORMANCE.md: alltoall as all-gather
    case Collective::broadcast:
    case Collective::send_recv: return 1.0;
  }
  return 1.0;
}

double link_efficiency(LinkKind k) {
  switch (k) {
    // Measured ring busbw / per-direction NVLink rate: A100 230/300 = 0.77, H100 367/450 = 0.82, A800 150/200 =
    // 0.75. 0.78 is their mean; the worst of the three is then off by 5 %.
    case LinkKind::nvswitch: return 0.78;
    // Direct NVLink without a switch (hybrid cube mesh, bridges): rings are routed over fewer links than the
    // GPU has, so a little below NVSwitch. Assumed 0.75 (no measurement in REFERENCE-FACTS).
    case LinkKind::nvlink: return 0.75;
    // AMD Infinity Fabric: a direct link to each peer, RCCL rings and trees over them as NCCL's over NVLink (RCCL is
    // NCCL's port: ROCm docs "RCCL"). Assumed as direct NVLink, 0.75: no measured busbw in REFERENCE-FACTS.
    case LinkKind::xgmi: return 0.75;
    // PCIe: payload efficiency of a x16 link after TLP headers and flow control ≈ 0.8 of the link rate
    // (32 GB/s PCIe 4 → ~25 GB/s, what nccl-tests reaches on 8×4090 per their preset's source). Applied to
    // the link rate, so a preset stating an already-achieved figure is discounted twice.
    case LinkKind::pcie: return 0.8;
  }
  return 0.8;
}

double intra_node_bytes_per_s(const ClusterSpec& c) {
  return std::max(c.intra.gbps * kGB * link_efficiency(c.intra.kind), kMinBandwidthBytesPerS);
}

double network_bytes_per_s_per_gpu(const ClusterSpec& c, const GroupLayout& g) {
  const double node = c.inter.node_gbps() / 8.0 * kGB;  // Gb/s → bytes/s
  if (!(node > 0)) return kFallbackNetworkBytesPerS;
  // The NICs of every host of the NVLink domain are shared by every GPU of the domain that sends at the same time
  // (rail-aligned NCCL rings spread channels over the NICs; across hosts of one domain, PXN reaches another host's
  // NIC over NVLink). One host: the node's NICs.
  const double hosts = static_cast<double>(nvlink_domain_size(c) / std::max<int64_t>(c.gpus_per_node, 1));
  const double sharing = static_cast<double>(std::max<int64_t>(1, std::max<int64_t>(g.ranks_per_node, 1) *
                                                                      std::max<int64_t>(g.concurrent_groups_per_node, 1)));
  double bw = node * std::max(hosts, 1.0) / sharing;
  // A GPU alone cannot drive every NIC of the node: it uses the NICs near it (its fair share of the node, at
  // least one NIC), and GPUDirect RDMA goes through its own PCIe x16 link.
  const double gpus = static_cast<double>(std::max<int64_t>(c.gpus_per_node, 1));
  const double near = std::max(c.inter.nic_gbps / 8.0 * kGB, node / gpus);
  bw = std::min(bw, near);
  if (c.gpu.pcie_gbps > 0) bw = std::min(bw, c.gpu.pcie_gbps * kGB);
  return std::max(bw * kNetworkEfficiency, kMinBandwidthBytesPerS);
}

const char* to_string(NetworkTier t) {
  switch (t) {
    case NetworkTier::nvlink: return "nvlink";
    case NetworkTier::leaf: return "leaf";
    case NetworkTier::spine: return "spine";
  }
  return "?";
}

NetworkTier network_tier(const ClusterSpec& c, const GroupLayout& g) {
  if (normalise(g).nodes <= 1) return NetworkTier::nvlink;
  return c.inter.gpus_per_leaf > 0 && g.leaf_groups > 1 ? NetworkTier::spine : NetworkTier::leaf;
}

// An oversubscribed spine (o:1 = a leaf group's downlinks : its uplinks, so G GPUs under a leaf share G/o NICs' worth
// of uplink). Every GPU under a leaf runs its group's collective at the same time (SPMD: each rank is in one group of
// each kind), so a leaf sends G / gpus_per_spine_flow flows up at once and each gets min(1, gpus_per_spine_flow / o)
// of a NIC. A ring moves at its slowest edge (NCCL: busBw = nChannels × the bottleneck of the ring graph, tuning.cc),
// so the whole network leg runs at that share; NCCL's double binary tree, whose lower levels pair neighbouring nodes,
// crosses about as often and is priced alike. groups.cpp gives the flows: a ring visits the members leaf by leaf in
// rank order (NCCL rings follow the rank order between nodes, NCCL docs NCCL_ALGO; ranks placed in topology order),
// one edge per channel leaving each leaf, so one flow per domain-column of members (gpus_per_spine_flow = the group's
// domains per leaf); pipeline neighbours a leaf apart send every GPU's activation across (1: the full 1/o).
double spine_bandwidth_factor(const ClusterSpec& c, const GroupLayout& g) {
  if (network_tier(c, g) != NetworkTier::spine || !(c.inter.spine_oversubscription > 1)) return 1.0;
  return std::min(1.0, std::max(g.gpus_per_spine_flow, 1.0) / c.inter.spine_oversubscription);
}

double collective_time_s(const ClusterSpec& c, Collective op, double bytes, const GroupLayout& g) {
  const Layout l = normalise(g);
  if (l.n <= 1 || !(bytes > 0) || !std::isfinite(bytes)) return 0.0;
  if (c.comm_calibration) {
    if (const CollectiveCalibration* e = find_calibration(*c.comm_calibration, op, l))
      return calibrated_time_s(*e, op, bytes, l);
  }
  const double intra_lat = std::max(c.intra.latency_us, 0.0) * 1e-6;
  const double inter_lat = std::max(c.inter.latency_us, 0.0) * 1e-6;
  const double bw_intra = intra_node_bytes_per_s(c);

  // Point to point: one hop, on NVLink/PCIe when both ranks share a node, else on the network.
  if (op == Collective::send_recv) {
    if (l.r >= 2) return kBaseLatencyS + intra_lat + bytes / bw_intra;
    return kBaseLatencyS + inter_lat + bytes / (network_bytes_per_s_per_gpu(c, g) * spine_bandwidth_factor(c, g));
  }

  const double factor = bus_factor(op, l.n);
  if (op == Collective::all_to_all) {
    // NCCL runs all-to-all as n−1 grouped sends and receives at once (ncclGroupStart/ncclSend/ncclRecv; nccl-tests
    // src/alltoall.cu), not as a ring: one latency, and each rank sends S/n to every peer — (r−1)/n·S to the peers in
    // its NVLink domain, (n−r)/n·S over its NIC share, both links at once (the slower sets the time). Every member of
    // the domain sends across at the same time (network_bytes_per_s_per_gpu shares the NICs by ranks_per_node).
    const double n = static_cast<double>(l.n), r = static_cast<double>(l.r);
    return exchange_time_s(c, bytes * (r - 1) / n, bytes * (n - r) / n, g);
  }
  double steps = 0, inter_steps = 0;
  ring_steps(op, l, steps, inter_steps);

  if (l.nodes == 1) {
    // One node: ring over NVLink/PCIe; every rank sends factor·S on its link (nccl-tests bus bandwidth).
    return kBaseLatencyS + steps * intra_lat + factor * bytes / bw_intra;
  }

  // Across nodes: the two-level split of the traffic. NCCL runs one ring per rail (channel), each entering and
  // leaving every node once, so of the factor·S a rank sends, the share 1/r leaves on its NIC and (r−1)/r stays
  // on NVLink (r = ranks per node; r = 1: everything on the network). The channels pipeline chunks through
  // both link classes at once, so the slower leg sets the rate (NCCL's own model: busBw = nChannels × the
  // bottleneck link speed of the ring graph).
  //
  // Why not the sequential hierarchical sum (intra reduce-scatter, then inter all-reduce of S/r, then intra
  // all-gather, one after another)? On 2 DGX A100 nodes it gives busbw ≈ 146 GB/s where nccl-tests measure
  // ≈ 192; the pipelined form gives ≈ 184. The hierarchical form is still right for frameworks that issue the
  // two levels as separate collectives (HSDP): cost those as two calls.
  const double r = static_cast<double>(l.r);
  // Three tiers: NVLink inside the domain, the leaf's NICs between domains, the spine between leaf groups at its
  // oversubscribed share (spine_bandwidth_factor).
  const double bw_net = network_bytes_per_s_per_gpu(c, g) * spine_bandwidth_factor(c, g);
  const double nvlink_bytes = factor * bytes * (r - 1) / r;
  const double net_bytes = factor * bytes / r;
  // Over PCIe the NIC traffic (GPUDirect RDMA) crosses the same x16 link of the GPU as the intra-node traffic.
  const double intra_link_bytes = c.intra.kind == LinkKind::pcie ? nvlink_bytes + net_bytes : nvlink_bytes;
  const double transfer = std::max(intra_link_bytes / bw_intra, net_bytes / bw_net);
  const double ring = kBaseLatencyS + (steps - inter_steps) * intra_lat + inter_steps * inter_lat + transfer;
  if (op != Collective::all_reduce) return ring;

  // All-reduce across nodes: NCCL also has the double binary tree, log2(nodes) network hops instead of
  // 2(nodes−1), at 0.9 of the ring's bus bandwidth and 2S per rank (tuning.cc: ratio .5). It wins for small and
  // medium messages at scale; NCCL picks the faster of the two.
  const double busbw = factor * bytes / transfer;
  const double tree = kBaseLatencyS +
                      2 * ((r - 1) * intra_lat + ceil_log2(l.nodes) * inter_lat) +
                      2 * bytes / (kTreeBandwidthRatio * busbw);
  return std::min(ring, tree);
}

double exchange_time_s(const ClusterSpec& c, double nvlink_bytes, double net_bytes, const GroupLayout& g) {
  const Layout l = normalise(g);
  if (l.n <= 1) return 0.0;
  const double bw_intra = intra_node_bytes_per_s(c);
  if (l.nodes == 1) return kBaseLatencyS + std::max(c.intra.latency_us, 0.0) * 1e-6 + nvlink_bytes / bw_intra;
  const double bw_net = network_bytes_per_s_per_gpu(c, g) * spine_bandwidth_factor(c, g);
  // Over PCIe the NIC traffic (GPUDirect RDMA) crosses the same x16 link of the GPU as the intra-node traffic.
  const double intra_link_bytes = c.intra.kind == LinkKind::pcie ? nvlink_bytes + net_bytes : nvlink_bytes;
  return kBaseLatencyS + std::max(c.inter.latency_us, 0.0) * 1e-6 +
         std::max(intra_link_bytes / bw_intra, net_bytes / bw_net);
}

double bus_bandwidth_gbps(Collective op, int64_t n, double bytes, double seconds) {
  if (!(seconds > 0) || !(bytes > 0)) return 0.0;
  return bytes / seconds * bus_factor(op, n) / kGB;
}

}  // namespace shardplan
