#include "planner/hardware.hpp"

#include <algorithm>
#include <cmath>

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
  c.intra.kind = nvlink ? LinkKind::nvswitch : LinkKind::pcie;
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
  }
  return "?";
}

void validate_gpu(const GpuSpec& g) {
  const std::string where = fmt::format("gpu '{}'", g.name);
  require_range(where, "memory_gib", g.memory_gib, 1, 4096, "GiB");
  require_range(where, "bf16_tflops", g.bf16_tflops, 0, 100000, "TFLOP/s");
  require_range(where, "fp16_tflops", g.fp16_tflops, 1, 100000, "TFLOP/s");
  require_range(where, "tf32_tflops", g.tf32_tflops, 0, 100000, "TFLOP/s");
  require_range(where, "fp32_tflops", g.fp32_tflops, 0.1, 100000, "TFLOP/s");
  require_range(where, "hbm_gbps", g.hbm_gbps, 10, 100000, "GB/s");
  require_range(where, "nvlink_gbps", g.nvlink_gbps, 0, 100000, "GB/s");
  require_range(where, "pcie_gbps", g.pcie_gbps, 1, 10000, "GB/s");
  require_range(where, "l2_mib", g.l2_mib, 0, 65536, "MiB");
  require_range(where, "tdp_w", g.tdp_w, 0, 100000, "W");
  require_range(where, "power_limit_w", g.power_limit_w, 0, 100000, "W");
  if (g.power_limit_w > 0 && g.tdp_w > 0 && g.power_limit_w > g.tdp_w)
    throw InputError(fmt::format("{}: 'power_limit_w' ({} W) exceeds 'tdp_w' ({} W); the limit is at most the board's "
                                 "maximum power",
                                 where, g.power_limit_w, g.tdp_w));
  if (g.power_limit_w > 0 && !(g.tdp_w > 0))
    throw InputError(fmt::format("{}: 'power_limit_w' needs 'tdp_w' (the datasheet's board power the peaks assume)", where));
  if (g.sm_count <= 0 || g.sm_count > 100000)
    throw InputError(fmt::format("{}: 'sm_count' must be a positive integer, got {}", where, g.sm_count));
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
}

const char* to_string(LinkKind k) {
  switch (k) {
    case LinkKind::nvswitch: return "nvswitch";
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::pcie: return "pcie";
  }
  return "?";
}

}  // namespace shardplan
