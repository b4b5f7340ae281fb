#pragma once
// Time of compute on one GPU: GEMMs at a shape-dependent efficiency (roofline with tile and wave quantisation),
// attention kernels, and memory-bound work at HBM bandwidth.
#include <cstdint>

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
                                 int64_t head_dim, bool causal);
double flash_attention_backward_s(const GpuSpec& g, DType d, int64_t batch, int64_t seq, int64_t heads,
                                  int64_t head_dim, bool causal);

// Memory-bound work: bytes read + written at an achievable fraction of HBM bandwidth.
double memory_bound_time_s(const GpuSpec& g, double bytes);

// Additions (compute_cost.cpp documents the figures):
// gemm_time_s includes a fixed ~2 µs per kernel (launch gap, pipeline fill/drain); so do the flash-attention
// times. Do not add another per-GEMM launch overhead on top.
// Fraction of peak a large, well-shaped GEMM reaches on this GPU (Hopper class 0.82, others 0.88), before tile and
// wave quantisation.
double gemm_base_efficiency(const GpuSpec& g, DType d);
// Fraction of peak a flash-attention kernel reaches (before wave quantisation over batch × heads × 128-row blocks).
double flash_attention_efficiency(const GpuSpec& g, int64_t seq, int64_t head_dim, bool backward);

}  // namespace shardplan
