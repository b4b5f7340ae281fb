// Rotary embedding and causal grouped-query attention on the GPU, twins of cpu_kernels_attention.cpp.
//
// Attention keeps no T×T matrix (the `work` buffer of the Backend interface is not used on the GPU): one warp per
// query row runs the online softmax of FlashAttention (Dao et al. 2022 §3.1; Milakov & Gimelshein 2018) over the
// keys j ≤ t, holding its q row and its output accumulator in registers (lane l holds dimensions l, l + 32, …),
// and saves the row's log-sum-exp. Backward (FlashAttention-2, Dao 2023, Algorithm 2) recomputes
// p_tj = exp(s_tj − lse_t): one warp per query row for dq (which also writes D_t = Σ_d dO_td·O_td), then one warp
// per key row j of each kv head for dk and dv, looping over the query heads of its group and t ≥ j — every
// element of dqkv is written by exactly one warp, so no atomics and no zeroing are needed (dqkv is overwritten,
// as on CPU). Plain fp32 arithmetic, no tensor cores, no tiling through shared memory: a reference, not a fast
// kernel. Templates over the storage type X (float, bf16; T is the sequence length here) of qkv, out, dout and
// dqkv: rows are widened into float registers as loaded, every output element rounded once when stored; lse and D
// stay float.
#include <cmath>

#include "reference/cuda_kernels.cuh"

namespace shardplan::reference::gpu {

namespace {

constexpr int kWarpsPerBlock = 4;  // 128 threads: 4 adjacent query rows of one (b, h) share k/v loads in L1
constexpr int kLanes = kMaxHeadDimPerLane;

// Thread per (row of qkv, pair i < HD/2); loops over the NH + KVH rotated heads so the angle is computed once.
// θ(t, i) = t · 10000^(−2i/HD) in double, as the CPU code (RoFormer eq. 34, rotate-half pairing (i, i + HD/2)).
template <typename X>
__global__ void rope_kernel(X* qkv, int64_t rows, int64_t seq, int64_t width, int64_t rotated_heads,
                            int64_t head_dim, float sign) {
  const int64_t half = head_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t row = idx / half, i = idx % half, t = row % seq;
  const double theta =
      static_cast<double>(t) * pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  const float c = static_cast<float>(cos(theta)), sn = sign * static_cast<float>(sin(theta));
  X* r = qkv + row * width;  // [QKV]
  for (int64_t h = 0; h < rotated_heads; ++h) {
    X* v = r + h * head_dim;  // [HD]
    const float x1 = load(v[i]), x2 = load(v[i + half]);
    v[i] = store_as<X>(x1 * c - x2 * sn);
    v[i + half] = store_as<X>(x1 * sn + x2 * c);
  }
}

// The query row of warp w: t = w mod T, h = ⌊w/T⌋ mod NH, b = ⌊w/(T·NH)⌋, and the kv head g = h / (NH/KVH) it
// reads (GQA, Ainslie et al. 2023).
struct QueryRow {
  int64_t b, h, t, g;
};
__device__ inline QueryRow query_row_of(int64_t warp, int64_t T, int64_t NH, int64_t KVH) {
  const int64_t h = (warp / T) % NH;
  return {warp / (T * NH), h, warp % T, h / (NH / KVH)};
}

// Loads a head_dim-wide row into the lane's float registers (dimension lane + 32k in slot k; 0 past head_dim).
template <typename X>
__device__ inline void row_load(float (&dst)[kLanes], const X* src, int64_t head_dim, int lane) {
#pragma unroll
  for (int k = 0; k < kLanes; ++k) {
    const int64_t d = lane + 32 * k;
    dst[k] = d < head_dim ? load(src[d]) : 0.0f;
  }
}
// Stores the lane's registers into a head_dim-wide row, rounded to X.
template <typename X>
__device__ inline void row_store(X* dst, const float (&src)[kLanes], int64_t head_dim, int lane) {
#pragma unroll
  for (int k = 0; k < kLanes; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < head_dim) dst[d] = store_as<X>(src[k]);
  }
}

// Σ_d a[d]·b[d] over the warp: a in registers, b in memory; every lane gets the sum.
template <typename X>
__device__ inline float row_dot(const float (&a)[kLanes], const X* b, int64_t head_dim, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kLanes; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < head_dim) s += a[k] * load(b[d]);
  }
  return warp_sum(s);
}

// One warp per query row (b, h, t) (query_row_of): out[b,t,h,:] = Σ_{j≤t} softmax_j(q_t·k_j·scale) v_j, lse[b,h,t].
// q is head h; k, v are kv head g.
template <typename X>
__global__ void attention_forward_kernel(X* out, float* lse, const X* qkv, int64_t B, int64_t T, int64_t NH,
                                         int64_t KVH, int64_t HD, float scale) {
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= B * NH * T) return;
  const QueryRow r = query_row_of(warp, T, NH, KVH);
  const int64_t t = r.t, h = r.h, b = r.b, g = r.g;
  const int64_t W = (NH + 2 * KVH) * HD, QW = NH * HD, KW = KVH * HD;
  const X* base = qkv + b * T * W;  // [T,QKV] of sequence b
  float q[kLanes], acc[kLanes];
  row_load(q, base + t * W + h * HD, HD, lane);
#pragma unroll
  for (int k = 0; k < kLanes; ++k) acc[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // running max and Σ exp(s − m)
  for (int64_t j = 0; j <= t; ++j) {
    const X* kj = base + j * W + QW + g * HD;       // [HD]
    const X* vj = base + j * W + QW + KW + g * HD;  // [HD]
    const float s = row_dot(q, kj, HD, lane) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 on the first key (m = −∞)
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int k = 0; k < kLanes; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < HD) acc[k] = acc[k] * corr + p * load(vj[d]);
    }
    m = m_new;
  }
#pragma unroll
  for (int k = 0; k < kLanes; ++k) acc[k] /= l;
  row_store(out + (b * T + t) * QW + h * HD, acc, HD, lane);
  if (lane == 0) lse[(b * NH + h) * T + t] = m + logf(l);
}

// One warp per (b, h, t): D_t = dO_t·O_t into delta[b,h,t]; dq_t = Σ_{j≤t} p_tj (dO_t·v_j − D_t)·scale · k_j
// written (not added) into dqkv's q slice.
template <typename X>
__global__ void attention_backward_dq_kernel(X* dqkv, float* delta, const X* dout, const X* out, const float* lse,
                                             const X* qkv, int64_t B, int64_t T, int64_t NH,
                                             int64_t KVH, int64_t HD, float scale) {
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= B * NH * T) return;
  const QueryRow r = query_row_of(warp, T, NH, KVH);
  const int64_t t = r.t, h = r.h, b = r.b, g = r.g;
  const int64_t W = (NH + 2 * KVH) * HD, QW = NH * HD, KW = KVH * HD;
  const X* base = qkv + b * T * W;  // [T,QKV]
  float q[kLanes], d_o[kLanes], dq[kLanes];
  row_load(q, base + t * W + h * HD, HD, lane);
  row_load(d_o, dout + (b * T + t) * QW + h * HD, HD, lane);
  const int64_t row = (b * NH + h) * T + t;  // index into lse, delta [B,NH,T]
  const float D = row_dot(d_o, out + (b * T + t) * QW + h * HD, HD, lane);
  if (lane == 0) delta[row] = D;
  const float L = lse[row];
#pragma unroll
  for (int k = 0; k < kLanes; ++k) dq[k] = 0.0f;
  for (int64_t j = 0; j <= t; ++j) {
    const X* kj = base + j * W + QW + g * HD;       // [HD]
    const X* vj = base + j * W + QW + KW + g * HD;  // [HD]
    const float s = row_dot(q, kj, HD, lane) * scale;
    const float dp = row_dot(d_o, vj, HD, lane);
    const float ds = expf(s - L) * (dp - D) * scale;
#pragma unroll
    for (int k = 0; k < kLanes; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < HD) dq[k] += ds * load(kj[d]);
    }
  }
  row_store(dqkv + (b * T + t) * W + h * HD, dq, HD, lane);
}

// One warp per (b, g, j), key row j of kv head g: over the query heads h of g's group and t ≥ j,
// dv_j = Σ p_tj dO_t, dk_j = Σ p_tj (dO_t·v_j − D_t)·scale · q_t; written (not added) into dqkv's k and v slices.
// Warp w ↦ j = w mod T, g = ⌊w/T⌋ mod KVH, b = ⌊w/(T·KVH)⌋.
template <typename X>
__global__ void attention_backward_dkv_kernel(X* dqkv, const float* delta, const X* dout, const float* lse,
                                              const X* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                                              int64_t HD, float scale) {
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= B * KVH * T) return;
  const int64_t j = warp % T, g = (warp / T) % KVH, b = warp / (T * KVH);
  const int64_t group = NH / KVH;
  const int64_t W = (NH + 2 * KVH) * HD, QW = NH * HD, KW = KVH * HD;
  const X* base = qkv + b * T * W;  // [T,QKV]
  float kr[kLanes], vr[kLanes], dk[kLanes], dv[kLanes];
  row_load(kr, base + j * W + QW + g * HD, HD, lane);
  row_load(vr, base + j * W + QW + KW + g * HD, HD, lane);
#pragma unroll
  for (int k = 0; k < kLanes; ++k) dk[k] = dv[k] = 0.0f;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const float* l = lse + (b * NH + h) * T;    // [T]
    const float* D = delta + (b * NH + h) * T;  // [T]
    for (int64_t t = j; t < T; ++t) {
      const X* qt = base + t * W + h * HD;            // [HD]
      const X* dot = dout + (b * T + t) * QW + h * HD;  // [HD]
      const float p = expf(row_dot(kr, qt, HD, lane) * scale - l[t]);
      const float ds = p * (row_dot(vr, dot, HD, lane) - D[t]) * scale;
#pragma unroll
      for (int k = 0; k < kLanes; ++k) {
        const int64_t d = lane + 32 * k;
        if (d < HD) {
          dv[k] += p * load(dot[d]);
          dk[k] += ds * load(qt[d]);
        }
      }
    }
  }
  X* dkr = dqkv + (b * T + j) * W + QW + g * HD;  // [HD]
  row_store(dkr, dk, HD, lane);
  row_store(dkr + KW, dv, HD, lane);
}

void head_dim_check(const AttentionDims& s) {
  if (s.head_dim > kMaxHeadDim)
    throw std::runtime_error("CUDA attention: head_dim " + std::to_string(s.head_dim) + " exceeds " +
                             std::to_string(kMaxHeadDim) + " (the registers of one warp)");
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    throw std::runtime_error("CUDA attention: heads must be a multiple of kv_heads");
}

}  // namespace

template <typename X>
void rope_rotate(X* qkv, const AttentionDims& s, float sign, cudaStream_t stream) {
  const int64_t rows = s.batch * s.seq, half = s.head_dim / 2;
  if (rows * half <= 0) return;
  const int64_t width = (s.heads + 2 * s.kv_heads) * s.head_dim;
  // q and k heads are adjacent in qkv: the first NH + KVH slices of each row are rotated.
  launch(rope_kernel<X>, blocks_for(rows * half, 256), 256, 0, stream, qkv, rows, s.seq, width, s.heads + s.kv_heads,
         s.head_dim, sign);
  check_launch("rope_kernel");
}

template <typename X>
void attention_forward(X* out, float* lse, const X* qkv, const AttentionDims& s, float scale, cudaStream_t stream) {
  head_dim_check(s);
  const int64_t warps = s.batch * s.heads * s.seq;
  if (warps <= 0) return;
  launch(attention_forward_kernel<X>, blocks_for(warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream, out, lse, qkv,
         s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, scale);
  check_launch("attention_forward_kernel");
}

template <typename X>
void attention_backward(X* dqkv, const X* dout, const X* out, const float* lse, const X* qkv, float* delta,
                        const AttentionDims& s, float scale, cudaStream_t stream) {
  head_dim_check(s);
  const int64_t q_warps = s.batch * s.heads * s.seq, kv_warps = s.batch * s.kv_heads * s.seq;
  if (q_warps <= 0) return;
  // dq first: it writes delta, which the dk/dv pass reads (stream order).
  launch(attention_backward_dq_kernel<X>, blocks_for(q_warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream, dqkv,
         delta, dout, out, lse, qkv, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, scale);
  check_launch("attention_backward_dq_kernel");
  launch(attention_backward_dkv_kernel<X>, blocks_for(kv_warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream, dqkv,
         delta, dout, lse, qkv, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, scale);
  check_launch("attention_backward_dkv_kernel");
}

// Both storage types (reference/bf16.hpp).
#define SHARDPLAN_ATTENTION_INSTANTIATE(X)                                                                      \
  template void rope_rotate<X>(X*, const AttentionDims&, float, cudaStream_t);                                  \
  template void attention_forward<X>(X*, float*, const X*, const AttentionDims&, float, cudaStream_t);           \
  template void attention_backward<X>(X*, const X*, const X*, const float*, const X*, float*, const AttentionDims&, \
                                      float, cudaStream_t);
SHARDPLAN_ATTENTION_INSTANTIATE(float)
SHARDPLAN_ATTENTION_INSTANTIATE(bf16)
#undef SHARDPLAN_ATTENTION_INSTANTIATE

}  // namespace shardplan::reference::gpu
