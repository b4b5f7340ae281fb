#pragma once
// bfloat16 storage (header only, no dependency): here so that comm/ (the MPI bf16 sum) and reference/ (the training
// loop's kernels) round alike without the backend depending on the loop. Used for the reference loop's mixed precision (CONTRACT.md `pure-bf16`, `amp-bf16`): the top 16 bits
// of an IEEE fp32 (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training" §2), converted with
// round-to-nearest-even as cuBLASLt, NCCL and PyTorch do. Kernels store bf16 and compute in fp32. The same header
// serves the host kernels, the CUDA kernels (nvcc) and the CUDA host emulator, so that all three round alike.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SHARDPLAN_HD __host__ __device__
#else
#define SHARDPLAN_HD
#endif

namespace shardplan::numeric {

// One bf16 value: layout-compatible with CUDA's __nv_bfloat16 (CUDA_R_16BF) and with 2-byte MPI data.
struct bf16 {
  uint16_t bits;
};

SHARDPLAN_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SHARDPLAN_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Exact widening: bf16 is a truncated fp32.
SHARDPLAN_HD inline float bf16_to_float(bf16 x) { return f32_from_bits(static_cast<uint32_t>(x.bits) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN, ±Inf and overflow to ±Inf as IEEE rounding gives.
SHARDPLAN_HD inline bf16 bf16_from_float(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // NaN
  const uint32_t lsb = (u >> 16) & 1u;
  return bf16{static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16)};
}

// Generic access for kernels templated on the storage type T ∈ {float, bf16}: load widens to fp32, store rounds.
SHARDPLAN_HD inline float load(float x) { return x; }
SHARDPLAN_HD inline float load(bf16 x) { return bf16_to_float(x); }
template <typename T>
SHARDPLAN_HD inline T store_as(float f);
template <>
SHARDPLAN_HD inline float store_as<float>(float f) {
  return f;
}
template <>
SHARDPLAN_HD inline bf16 store_as<bf16>(float f) {
  return bf16_from_float(f);
}
// x = round(x + v): the read-modify-write of kernels that accumulate into T storage.
template <typename T>
SHARDPLAN_HD inline void accumulate(T& x, float v) {
  x = store_as<T>(load(x) + v);
}

}  // namespace shardplan::numeric
