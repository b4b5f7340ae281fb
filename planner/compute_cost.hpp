#pragma once
// Time of compute on one GPU: GEMMs at a shape-dependent efficiency (roofline with tile and wave quantisation),
// attention kernels, and memory-bound work at HBM bandwidth.
#include <cstdint>

#include "planner/attention_kernel.hpp"
#include "planner/hardware.hpp"
#include "planner/precision.hpp"

namespace shardplan {

// C[m×n] = A[m×k] · B[k×n].
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// Peak dense tensor throughput of the GPU for the dtype, FLOP/s.
double peak_flops(const GpuSpec& g, DType d);

// The default efficiency model: fraction of peak a GEMM of this shape reaches (0, 1]. A calibration profile
// replaces it with measured tables (calibrate/ issue).
double gemm_efficiency(const GpuSpec& g, DType d, const GemmShape& s);
double gemm_time_s(const GpuSpec& g, DType d, const GemmShape& s);


// Fused (flash) attention forward for `batch` sequences of `seq` tokens, `heads` heads of `head_dim`, on one GPU;
// causal masking halves the work the kernel does. Backward ≈ 2.5× forward (FlashAttention-2, Dao 2023 §3).
double flash_attention_forward_s(const GpuSpec& g, DType d, int64_t batch, int64_t seq, int64_t heads,
                                 int64_t head_dim, bool causal, AttentionKernel k = AttentionKernel::flash2);
double flash_attention_backward_s(const GpuSpec& g, DType d, int64_t batch, int64_t seq, int64_t heads,
                                  int64_t head_dim, bool causal, AttentionKernel k = AttentionKernel::flash2);

// Memory-bound work: bytes read + written at an achievable fraction of HBM bandwidth.
double memory_bound_time_s(const GpuSpec& g, double bytes);

// Additions (compute_cost.cpp documents the figures):
// gemm_time_s includes a fixed ~2 µs per kernel (launch gap, pipeline fill/drain); so do the flash-attention
// times. Do not add another per-GEMM launch overhead on top.
// Fraction of peak a large, well-shaped GEMM reaches on this GPU (Hopper class 0.82, others 0.88), before tile and
// wave quantisation.
double gemm_base_efficiency(const GpuSpec& g, DType d);
// Fraction of peak a flash-attention kernel reaches (before wave quantisation over batch × heads × 128-row blocks).
double flash_attention_efficiency(const GpuSpec& g, int64_t seq, int64_t head_dim, bool backward,
                                  AttentionKernel k = AttentionKernel::flash2);
// The tensor cores' sustained clock at the GPU's power limit relative to the datasheet's board power (1 without
// both figures): dynamic power ∝ V²·f with V ∝ f in the DVFS range, so f ∝ P^(1/3) (compute_cost.cpp).
double power_limit_clock_factor(const GpuSpec& g);
// The fraction of the isolated-benchmark tensor throughput a training run sustains on this GPU generation: the
// figures above come from short kernels in a loop; a step runs them for hours at the power limit. Fitted on the
// public set (compute_cost.cpp gives the fit and its leave-one-source-out error).
double sustained_tensor_fraction(const GpuSpec& g);
// The share of it FP8 GEMMs keep (compute_cost.cpp kFp8OverBf16Sustained; GpuSpec::fp8_sustained_ratio overrides).
double fp8_sustained_share(const GpuSpec& g);
// The GPU as a training step sees it: tensor peaks × sustained_tensor_fraction, or × the override
// GpuSpec::sustained_tensor_fraction when set (the accuracy bench's fit). The kernel models above stay those of
// isolated benchmarks. The fused attention keeps its own share of its kernel's rate instead, one for every generation
// (compute_cost.cpp kAttentionSustained; GpuSpec::attention_over_tensor_rate carries it to flash_time). Unchanged with
// a measured GEMM table, which already is what the device did.
GpuSpec training_device(const GpuSpec& g);

}  // namespace shardplan
