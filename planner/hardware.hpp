#pragma once
// GPUs and clusters: the hardware figures the memory and time models need.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardplan {

enum class Collective;  // planner/comm_cost.hpp
enum class DType;       // planner/precision.hpp

// ---- Measured figures from a calibration profile (`shardplan calibrate`, schema in calibrate/README.md) -------
// The io layer fills these when --cluster names a profile; the cost models use them instead of the presets'.

// One line t = alpha + beta·S of a collective's time, fitted on sizes [from_bytes, to_bytes].
struct CollectiveFitSegment {
  double from_bytes = 0, to_bytes = 0;
  double alpha_s = 0;          // latency, s (>= 0)
  double beta_s_per_byte = 0;  // 1 / algbw, s per byte of the nccl-tests buffer S
};

// One collective measured on one group shape: `ranks` ranks, `ranks_per_node` of them per node.
struct CollectiveCalibration {
  Collective op{};
  int64_t ranks = 0, ranks_per_node = 0;
  std::vector<CollectiveFitSegment> fit;  // ascending sizes, one or two segments (breakpoint)
  std::vector<double> bytes;              // raw medians: S (ascending) ...
  std::vector<double> seconds;            // ... and the slowest rank's median time
};

struct CommCalibration {
  std::string origin;  // the profile file
  std::vector<CollectiveCalibration> collectives;
};

// A measured GEMM: C[m×n] = A[m×k]·B[k×n] reached flops_per_s.
struct GemmCalibrationPoint {
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
};

struct GemmCalibration {
  DType dtype{};                  // what was measured (bf16 on GPU, fp32 on CPU)
  bool cpu = false;               // measured on CPU ranks: the table is the device, whatever the dtype
  double peak_flops_per_s = 0;    // the device's peak for dtype (GPU: the preset's; CPU: the best measured)
  double memory_bytes_per_s = 0;  // measured large-copy bandwidth (read + write), 0 = not measured
  // Measured rate of an elementwise kernel (an AdamW pass, read + write bytes per second; CPU ranks), 0 = not
  // measured. Where present it prices the memory-bound work instead of the copy: on CPU cores that work is
  // compute-bound (sqrt, exp, division per element).
  double elementwise_bytes_per_s = 0;
  std::vector<GemmCalibrationPoint> points;
};

// The chip family a preset names (`architecture`): Ada counts as Ampere-class (as L40S and RTX 4090 did by peak);
// Blackwell Ultra (B300, GB300: a new die of the same generation) is Blackwell-class with its own sustained fraction
// (compute_cost.cpp sustained_tensor_fraction).
enum class GpuArchitecture { unknown, volta, ampere, ada, hopper, blackwell, blackwell_ultra, cdna3, cdna4 };
std::optional<GpuArchitecture> parse_gpu_architecture(const std::string& s);
const char* to_string(GpuArchitecture a);

struct GpuSpec {
  std::string name;
  std::string description;
  std::string source;
  double memory_gib = 0;     // HBM capacity in GiB (2^30 bytes), as the vendor states it
  GpuArchitecture architecture{};  // unknown = classified by peak (gpu_generation)
  // The ranks are CPU processes (a calibration profile of CPU ranks, `validate --backend cpu`): no CUDA context,
  // cuBLAS workspace or NCCL buffers are resident (framework_traits(f, device)).
  bool cpu_ranks = false;
  double bf16_tflops = 0;    // dense (no sparsity) tensor-core peak; 0 = no bf16 support
  double fp16_tflops = 0;    // dense tensor-core peak
  double tf32_tflops = 0;    // dense tensor-core peak; 0 = none
  // Dense FP8 tensor-core peak (E4M3/E5M2, no sparsity); 0 = no FP8 or not stated. Recorded from the datasheets
  // for the FP8 GEMMs of --fp8 (planner/fp8.cpp).
  double fp8_tflops = 0;
  double fp32_tflops = 0;    // non-tensor-core fp32 peak
  double hbm_gbps = 0;       // memory bandwidth, GB/s (10^9 bytes/s)
  int64_t sm_count = 0;
  double l2_mib = 0;
  double nvlink_gbps = 0;    // NVLink bandwidth per GPU, per direction, GB/s; 0 = no NVLink
  double pcie_gbps = 0;      // PCIe bandwidth per GPU, per direction, GB/s
  double host_link_gbps = 0; // GPU ↔ host memory per direction, GB/s, where it is not PCIe (GB200: NVLink-C2C); 0 = pcie
  // Board power: the datasheet's maximum (the clock its peaks assume) and the limit the GPU runs at; 0 = unknown,
  // taken as running at the datasheet's (compute_cost.hpp power_limit_clock_factor).
  double tdp_w = 0;
  double power_limit_w = 0;
  // The board power at which the datasheet's tensor peak holds under dense tensor-core load, where the datasheet quotes
  // a rate its own board power does not sustain (GB200: the 2.5 PFLOP/s NVIDIA also quotes for the 1,400 W GB300);
  // 0 = tdp_w. Below it the sustained clock scales as the cube root of the power (power_limit_clock_factor).
  double full_clock_power_w = 0;
  // The fraction of the benchmark tensor throughput (gemm_base_efficiency, the flash-attention figures) that a
  // training run sustains; 0 = the GPU generation's fitted value (compute_cost.hpp training_device). Not a preset key: the accuracy bench sets it to refit them and for leave-one-source-out checks.
  double sustained_tensor_fraction = 0;
  // How much longer compute runs while communication kernels share the GPU (step_time.hpp overlap_compute_slowdown);
  // 0 = the fitted value, kOverlapComputeSlowdown. Not a preset key: the accuracy bench sets it to refit it.
  double comm_overlap_slowdown = 0;
  // The share of sustained_tensor_fraction that FP8 GEMMs keep (compute_cost.hpp training_device); 0 = the fitted
  // value, kFp8OverBf16Sustained. Not a preset key: the accuracy bench sets it to refit it.
  double fp8_sustained_ratio = 0;
  // The share of the sustained rate the routed experts' grouped GEMMs keep against a dense GEMM of the same shape
  // (moe_costs.cpp moe_mlp_time); 0 = the fitted value, kGroupedOverDenseSustained. Not a preset key: the
  // accuracy bench sets it to refit it.
  double grouped_gemm_ratio = 0;
  // The share of the fused attention kernels' benchmark rates a training step sustains, one for every generation
  // (compute_cost.cpp kAttentionSustained); 0 = the fitted value. Not a preset key: the accuracy bench sets it to
  // refit it.
  double attention_sustained_fraction = 0;
  // Set by training_device: that share over the tensor fraction it scaled the tensor rates by, which the attention's
  // time divides back out (compute_cost.cpp flash_time); 1 on a spec training_device did not make.
  double attention_over_tensor_rate = 1;
  // Measured GEMM throughput and copy bandwidth (calibration profile); null = the analytic model.
  std::shared_ptr<const GemmCalibration> gemm_calibration;
};

// GPU generations. A preset's `architecture` names it; without one, by the dense 16-bit tensor peak (datasheets):
// no bf16 (Volta), under 500 TFLOP/s (Ampere, Ada), under 1500 (Hopper), more (Blackwell). The peak alone misfiles
// throttled parts (H20: Hopper at 148 TFLOP/s) and AMD's (MI300X: CDNA3 at 1307), hence the key.
enum class GpuGeneration { volta, ampere, hopper, blackwell, cdna3, cdna4 };
GpuGeneration gpu_generation(const GpuSpec& g);
const char* to_string(GpuGeneration g);


// nvswitch: every GPU pair through NVLink switches; nvlink: direct NVLink links (bridges, hybrid cube mesh); xgmi:
// AMD Infinity Fabric, a direct link from each GPU to every other of the node (fully connected mesh); pcie.
enum class LinkKind { nvswitch, nvlink, pcie, xgmi };

struct IntraNodeLink {
  LinkKind kind = LinkKind::nvswitch;
  double gbps = 0;           // per GPU, per direction, GB/s
  double latency_us = 0;
};

struct InterNodeLink {
  int64_t nics_per_node = 0;
  double nic_gbps = 0;       // per NIC, per direction, Gb/s (10^9 bits/s)
  double latency_us = 0;
  // A rail-optimised leaf/spine fabric (NVIDIA DGX SuperPOD reference architecture: NIC k of every node of a scalable
  // unit on leaf k): the GPUs under one leaf group, which reach each other in one switch hop (PXN moves other-rail
  // traffic onto NVLink first, NCCL docs NCCL_PXN_DISABLE); 0 = one non-blocking tier for any number of nodes.
  int64_t gpus_per_leaf = 0;
  // Leaf downlink : uplink bandwidth (2 = 2:1, half the bandwidth leaves the leaf group); 1 = full bisection.
  double spine_oversubscription = 1;
  // Total one-direction bandwidth per node in Gb/s (CONTRACT --inter-node-gbps).
  double node_gbps() const { return static_cast<double>(nics_per_node) * nic_gbps; }
};

struct ClusterSpec {
  std::string name;
  std::string description;
  std::string source;
  std::string gpu_name;      // key of the GPU preset
  GpuSpec gpu;               // resolved GPU
  int64_t gpus_per_node = 0;
  IntraNodeLink intra;
  InterNodeLink inter;
  double host_memory_gib = 0;  // per node; 0 = unknown
  // GPUs in one NVLink (scale-up) domain: 0 = one host (gpus_per_node); more where NVLink switches span hosts
  // (GB200 NVL72: 72 GPUs on 18 hosts of 4). A multiple of gpus_per_node.
  int64_t nvlink_domain_gpus = 0;
  int64_t max_gpus = 0;        // GPUs the cluster has (one NVL72 rack: 72); 0 = any number of nodes
  // Measured collective times (calibration profile); null = the analytic link model.
  std::shared_ptr<const CommCalibration> comm_calibration;
  // Host time an eager MoE layer costs per micro-batch beyond its GPU work (moe_costs.hpp moe_host_gap_s): a fixed
  // part and a part per local expert, in seconds; 0 = the values fitted on the public set.
  double moe_host_layer_s = 0, moe_host_local_expert_s = 0;
  // The share of the fixed part a flex dispatcher (DeepEP, HybridEP) leaves; 0 = the value fitted on the public set.
  double moe_host_fused_dispatch_share = 0;
};

// GPUs that share one NVLink domain: nvlink_domain_gpus, or one host.
int64_t nvlink_domain_size(const ClusterSpec& c);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;

// Usable capacity in bytes of one GPU.
int64_t gpu_capacity_bytes(const GpuSpec& g);

// A cluster of nodes with 8 of this GPU and its usual interconnect, for --gpu without --cluster: NVSwitch at the
// GPU's NVLink bandwidth (PCIe when it has none) and one 200 Gb/s NIC per GPU (DGX-style rails).
ClusterSpec cluster_from_gpu(const GpuSpec& g);

void validate_gpu(const GpuSpec& g);
void validate_cluster(const ClusterSpec& c);

const char* to_string(LinkKind k);

}  // namespace shardplan
