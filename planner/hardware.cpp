#include "planner/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "planner/error.hpp"

namespace shardplan {

int64_t gpu_capacity_bytes(const GpuSpec& g) { return static_cast<int64_t>(std::llround(g.memory_gib * kGiB)); }

ClusterSpec cluster_from_gpu(const GpuSpec& g) {
  ClusterSpec c;
  c.name = g.name + "-x8";
  c.description = "8 × " + g.name + " per node with its default interconnect (from --gpu)";
  c.gpu_name = g.name;
  c.gpu = g;
  c.gpus_per_node = 8;
  const bool nvlink = g.nvlink_gbps > 0;
  // AMD's 8-GPU platforms connect every GPU pair by its own Infinity Fabric link (no switch).
  const bool amd = g.architecture == GpuArchitecture::cdna3 || g.architecture == GpuArchitecture::cdna4;
  c.intra.kind = nvlink ? (amd ? LinkKind::xgmi : LinkKind::nvswitch) : LinkKind::pcie;
  c.intra.gbps = nvlink ? g.nvlink_gbps : g.pcie_gbps;
  // Collective base latencies of NCCL's tuning model (src/graph/tuning.cc): a few µs over NVLink, more over PCIe.
  c.intra.latency_us = nvlink ? 5 : 10;
  c.inter.nics_per_node = 8;
  c.inter.nic_gbps = 200;
  c.inter.latency_us = 10;
  return c;
}

// Rejects NaN/Inf and values outside [lo, hi]: a figure far outside anything built is a typo or a unit mix-up.
static void require_range(const std::string& where, const char* key, double value, double lo, double hi,
                          const char* unit) {
  if (!std::isfinite(value) || value < lo || value > hi)
    throw InputError(fmt::format("{}: '{}' = {} is outside the plausible range [{}, {}] {}; check the value and "
                                 "its unit",
                                 where, key, value, lo, hi, unit));
}

GpuGeneration gpu_generation(const GpuSpec& g) {
  switch (g.architecture) {
    case GpuArchitecture::volta: return GpuGeneration::volta;
    case GpuArchitecture::ampere:
    case GpuArchitecture::ada: return GpuGeneration::ampere;
    case GpuArchitecture::hopper: return GpuGeneration::hopper;
    case GpuArchitecture::blackwell:
    case GpuArchitecture::blackwell_ultra: return GpuGeneration::blackwell;
    case GpuArchitecture::cdna3: return GpuGeneration::cdna3;
    case GpuArchitecture::cdna4: return GpuGeneration::cdna4;
    case GpuArchitecture::unknown: break;
  }
  const double peak = std::max(g.bf16_tflops, g.fp16_tflops);
  if (!(g.bf16_tflops > 0)) return GpuGeneration::volta;  // V100 and older: no bf16
  if (peak < 500) return GpuGeneration::ampere;           // A100/A800 312, L40S 362, RTX 4090 165
  if (peak < 1500) return GpuGeneration::hopper;          // H100/H800/H200 989
  return GpuGeneration::blackwell;                        // B200 2250
}

const char* to_string(GpuGeneration g) {
  switch (g) {
    case GpuGeneration::volta: return "Volta-class";
    case GpuGeneration::ampere: return "Ampere-class";
    case GpuGeneration::hopper: return "Hopper-class";
    case GpuGeneration::blackwell: return "Blackwell-class";
    case GpuGeneration::cdna3: return "CDNA3-class";
    case GpuGeneration::cdna4: return "CDNA4-class";
  }
  return "?";
}

namespace {
constexpr std::pair<const char*, GpuArchitecture> kArchitectures[] = {
    {"volta", GpuArchitecture::volta},   {"ampere", GpuArchitecture::ampere},       {"ada", GpuArchitecture::ada},
    {"hopper", GpuArchitecture::hopper}, {"blackwell", GpuArchitecture::blackwell},
    {"blackwell-ultra", GpuArchitecture::blackwell_ultra}, {"cdna3", GpuArchitecture::cdna3},
    {"cdna4", GpuArchitecture::cdna4}};
}  // namespace

std::optional<GpuArchitecture> parse_gpu_architecture(const std::string& s) {
  for (const auto& [name, a] : kArchitectures)
    if (s == name) return a;
  return std::nullopt;
}

const char* to_string(GpuArchitecture a) {
  for (const auto& [name, value] : kArchitectures)
    if (value == a) return name;
  return "unknown";
}

int64_t nvlink_domain_size(const ClusterSpec& c) {
  return c.nvlink_domain_gpus > 0 ? std::max(c.nvlink_domain_gpus, c.gpus_per_node) : c.gpus_per_node;
}

void validate_gpu(const GpuSpec& g) {
  const std::string where = fmt::format("gpu '{}'", g.name);
  require_range(where, "memory_gib", g.memory_gib, 1, 4096, "GiB");
  require_range(where, "bf16_tflops", g.bf16_tflops, 0, 100000, "TFLOP/s");
  require_range(where, "fp16_tflops", g.fp16_tflops, 1, 100000, "TFLOP/s");
  require_range(where, "tf32_tflops", g.tf32_tflops, 0, 100000, "TFLOP/s");
  require_range(where, "fp8_tflops", g.fp8_tflops, 0, 100000, "TFLOP/s");
  require_range(where, "fp32_tflops", g.fp32_tflops, 0.1, 100000, "TFLOP/s");
  require_range(where, "hbm_gbps", g.hbm_gbps, 10, 100000, "GB/s");
  require_range(where, "nvlink_gbps", g.nvlink_gbps, 0, 100000, "GB/s");
  require_range(where, "pcie_gbps", g.pcie_gbps, 1, 10000, "GB/s");
  require_range(where, "l2_mib", g.l2_mib, 0, 65536, "MiB");
  require_range(where, "tdp_w", g.tdp_w, 0, 100000, "W");
  require_range(where, "power_limit_w", g.power_limit_w, 0, 100000, "W");
  require_range(where, "full_clock_power_w", g.full_clock_power_w, 0, 100000, "W");
  if (g.full_clock_power_w > 0 && !(g.tdp_w > 0))
    throw InputError(fmt::format("{}: 'full_clock_power_w' needs 'tdp_w' (the board power the GPU runs at)", where));
  if (g.power_limit_w > 0 && g.tdp_w > 0 && g.power_limit_w > g.tdp_w)
    throw InputError(fmt::format("{}: 'power_limit_w' ({} W) exceeds 'tdp_w' ({} W); the limit is at most the board's "
                                 "maximum power",
                                 where, g.power_limit_w, g.tdp_w));
  if (g.power_limit_w > 0 && !(g.tdp_w > 0))
    throw InputError(fmt::format("{}: 'power_limit_w' needs 'tdp_w' (the datasheet's board power the peaks assume)", where));
  if (g.sm_count <= 0 || g.sm_count > 100000)
    throw InputError(fmt::format("{}: 'sm_count' must be a positive integer, got {}", where, g.sm_count));
}

// The scale-up domain and the leaf/spine fabric (presets/README.md). Blocks nest: hosts in an NVLink domain, domains
// under a leaf group, leaf groups in the cluster; groups.cpp counts a group's members per block on that premise.
static void validate_fabric(const ClusterSpec& c, const std::string& where) {
  // NVIDIA's NVLink Switch System joins at most 576 GPUs in one NVLink domain (fifth-generation NVLink,
  // https://www.nvidia.com/en-us/data-center/nvlink/: "up to 576 fully connected GPUs").
  constexpr int64_t kMaxNvlinkDomain = 576;
  const int64_t d = c.nvlink_domain_gpus;
  if (d != 0) {
    if (d < c.gpus_per_node || d > kMaxNvlinkDomain || d % c.gpus_per_node != 0)
      throw InputError(fmt::format("{}: 'nvlink_domain_gpus' = {} must be a multiple of 'gpus_per_node' ({}) up to {} "
                                   "(an NVLink domain holds whole hosts; NVLink switches join at most {} GPUs)",
                                   where, d, c.gpus_per_node, kMaxNvlinkDomain, kMaxNvlinkDomain));
    if (d > c.gpus_per_node && c.intra.kind != LinkKind::nvswitch)
      throw InputError(fmt::format("{}: 'nvlink_domain_gpus' = {} spans hosts, which needs NVLink switches: set "
                                   "'intra_node.link' to nvswitch or drop the key (a {} domain is one host)",
                                   where, d, to_string(c.intra.kind)));
  }
  const int64_t domain = nvlink_domain_size(c);
  if (c.max_gpus < 0 || (c.max_gpus > 0 && c.max_gpus % c.gpus_per_node != 0))
    throw InputError(fmt::format("{}: 'max_gpus' = {} must be a positive multiple of 'gpus_per_node' ({})", where,
                                 c.max_gpus, c.gpus_per_node));
  if (c.max_gpus > 0 && domain > c.max_gpus)
    throw InputError(fmt::format("{}: 'nvlink_domain_gpus' = {} exceeds 'max_gpus' ({}): the NVLink domain is larger "
                                 "than the cluster; lower it to at most {}",
                                 where, domain, c.max_gpus, c.max_gpus));
  const int64_t leaf = c.inter.gpus_per_leaf;
  if (leaf < 0 || (leaf > 0 && leaf % domain != 0))
    throw InputError(fmt::format("{}: 'inter_node.gpus_per_leaf' = {} must be a positive multiple of the NVLink domain "
                                 "({} GPUs): a leaf group holds whole hosts and domains",
                                 where, leaf, domain));
  if (c.max_gpus > 0 && leaf > c.max_gpus)
    throw InputError(fmt::format("{}: 'inter_node.gpus_per_leaf' = {} exceeds 'max_gpus' ({})", where, leaf, c.max_gpus));
  // Under 1 would be a spine faster than the leaves feeding it; past 64:1 no leaf/spine design goes (Meta's Llama 3
  // cluster runs 1:7 at its aggregation layer, Llama 3 paper §3.3.1).
  require_range(where, "inter_node.spine_oversubscription", c.inter.spine_oversubscription, 1, 64, ":1");
  if (c.inter.spine_oversubscription > 1 && leaf == 0)
    throw InputError(fmt::format("{}: 'inter_node.spine_oversubscription' needs 'inter_node.gpus_per_leaf' (the GPUs "
                                 "under one leaf group, whose traffic to other leaves the spine carries)",
                                 where));
}

void validate_cluster(const ClusterSpec& c) {
  const std::string where = fmt::format("cluster '{}'", c.name);
  validate_gpu(c.gpu);
  if (c.gpus_per_node <= 0 || c.gpus_per_node > 1024)
    throw InputError(fmt::format("{}: 'gpus_per_node' must be in [1, 1024], got {}", where, c.gpus_per_node));
  require_range(where, "intra_node.gbps", c.intra.gbps, 0.1, 100000, "GB/s");
  require_range(where, "intra_node.latency_us", c.intra.latency_us, 0.01, 10000, "us");
  if (c.inter.nics_per_node < 0 || c.inter.nics_per_node > 1024)
    throw InputError(
        fmt::format("{}: 'inter_node.nics_per_node' must be in [0, 1024], got {}", where, c.inter.nics_per_node));
  require_range(where, "inter_node.nic_gbps", c.inter.nic_gbps, 0, 100000, "Gb/s");
  // A network hop under 10 ns (1e-12 s is a unit slip) is as implausible as one inside a node; 0 = single node only.
  require_range(where, "inter_node.latency_us", c.inter.latency_us, c.inter.nics_per_node > 0 ? 0.01 : 0, 100000, "us");
  require_range(where, "host_memory_gib", c.host_memory_gib, 0, 1e6, "GiB");
  validate_fabric(c, where);
}

const char* to_string(LinkKind k) {
  switch (k) {
    case LinkKind::nvswitch: return "nvswitch";
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::pcie: return "pcie";
    case LinkKind::xgmi: return "xgmi";
  }
  return "?";
}

}  // namespace shardplan
