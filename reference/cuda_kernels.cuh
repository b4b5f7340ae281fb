#pragma once
// Launchers of the CUDA kernels of the reference GPT (reference/cuda_kernels_*.cu), the GPU twins of
// cpu_kernels.hpp: same functions, same row-major layouts, same accumulate-vs-overwrite semantics. Every launcher
// enqueues its kernels on `stream` and returns at once; every pointer is device memory. Scratch buffers
// (`partial`, `delta`, `row_loss`, `block_sums`) are passed in by the backend, which takes them from its caching
// allocator; their sizes are given by column_partials_rows and sum_squares_blocks below.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace shardplan::reference::gpu {

// Throws std::runtime_error naming the call and CUDA's reason.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
// After a launch: a bad configuration (grid too large, too much shared memory) shows up here.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Device code: compiled by nvcc, or as C++ by the host emulation of tests/cuda_emu (SHARDPLAN_CUDA_EMULATION), which
// runs these very kernels in CI without a GPU.
#if defined(__CUDACC__) || defined(SHARDPLAN_CUDA_EMULATION)
// Sum over the 32 lanes of a warp (butterfly: every lane ends with the total); float or double.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
template <typename T>
__device__ inline T warp_max(T v) {
  for (int off = 16; off > 0; off /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
// Blocks needed for `n` items at `per_block` each (grid sizes are ≤ 2³¹ − 1 for every shape the loop uses).
inline unsigned blocks_for(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}
// kernel<<<grid, block, shared_bytes, stream>>>(args...): every launch of cuda_kernels_*.cu goes through here, the
// one place that picks the real launch or the emulated one (which runs the grid on the host before returning).
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
                   A... args) {
#ifdef SHARDPLAN_CUDA_EMULATION
  cuda_emu::launch(kernel, grid, block, shared_bytes, stream, args...);
#else
  kernel<<<grid, block, shared_bytes, stream>>>(args...);
#endif
}
#endif

// --- column sums (cuda_kernels_norm.cu) ---------------------------------------------------------------------
// Rows summed per block by column_sums: partial buffers hold column_partials_rows(n) × C floats.
int64_t column_partials_rows(int64_t n);
// dst[C] += Σ_rows a[N,C] (the bias gradient of a matmul); deterministic (fixed order). partial[P,C] scratch.
void column_sums_accumulate(float* dst, const float* a, float* partial, int64_t n, int64_t c, cudaStream_t stream);

// --- norms (cuda_kernels_norm.cu) -----------------------------------------------------------------------------
// out[N,C], mean[N] (may be null), rstd[N]; x[N,C], w[C], bias[C] (may be null). LayerNorm, or RMSNorm if rms.
void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* bias,
                  int64_t n, int64_t c, bool rms, cudaStream_t stream);
// dx[N,C] +=, dw[C] +=, dbias[C] += (may be null); dout[N,C], x[N,C], w[C], mean[N] (ignored when rms), rstd[N].
// partial[P,C] scratch with P = column_partials_rows(n).
void norm_backward_accumulate(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                              const float* mean, const float* rstd, float* partial, int64_t n, int64_t c, bool rms,
                              cudaStream_t stream);

// --- rotary embedding and attention (cuda_kernels_attention.cu) -----------------------------------------------
// The largest head_dim the attention kernels hold in registers (a warp of 32 lanes × kMaxHeadDimPerLane).
constexpr int kMaxHeadDimPerLane = 8;
constexpr int64_t kMaxHeadDim = 32 * kMaxHeadDimPerLane;
struct AttentionDims {
  int64_t batch, seq, heads, kv_heads, head_dim;
};
// qkv[B,T,QKV] rotated in place (sign +1 forward, −1 backward on dqkv).
void rope_rotate(float* qkv, const AttentionDims& s, float sign, cudaStream_t stream);
// out[B,T,NH·HD], lse[B,NH,T] from qkv[B,T,QKV]; scale = 1/√HD as computed by the CPU code.
void attention_forward(float* out, float* lse, const float* qkv, const AttentionDims& s, float scale,
                       cudaStream_t stream);
// dqkv[B,T,QKV] overwritten; dout[B,T,NH·HD], out[B,T,NH·HD], lse[B,NH,T], qkv[B,T,QKV]; delta[B,NH,T] scratch.
void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                        float* delta, const AttentionDims& s, float scale, cudaStream_t stream);

// --- pointwise (cuda_kernels_pointwise.cu) --------------------------------------------------------------------
// out[N,O] += bias[O] broadcast over rows (after the bias-less GEMM).
void bias_add(float* out, const float* bias, int64_t n, int64_t o, cudaStream_t stream);
void residual_accumulate(float* x, const float* y, int64_t n, cudaStream_t stream);  // x[n] += y[n]
void gelu_forward(float* out, const float* in, int64_t n, cudaStream_t stream);
void gelu_backward(float* din, const float* in, const float* dout, int64_t n, cudaStream_t stream);
void swiglu_forward(float* out, const float* fc1, int64_t n, int64_t f, cudaStream_t stream);  // out[N,F], fc1[N,2F]
void swiglu_backward(float* dfc1, const float* fc1, const float* dout, int64_t n, int64_t f, cudaStream_t stream);
// AdamW with the bias corrections c1 = 1 − β1^t, c2 = 1 − β2^t computed on the host as the CPU code does.
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, float grad_scale, float c1, float c2, cudaStream_t stream);

// --- embedding, loss, reductions (cuda_kernels_loss.cu) -------------------------------------------------------
// out[B·T,C] = wte[tokens] + wpe[t] (wpe may be null); tokens[B·T].
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t b, int64_t t,
                       int64_t c, cudaStream_t stream);
// dwte[V,C] +=, dwpe[T,C] += (may be null), with atomicAdd (tokens repeat).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t b, int64_t t,
                        int64_t c, cudaStream_t stream);
// logits[N,Vp] overwritten by the scaled gradient; row_loss[N] (double) = −log p(target) per row.
void softmax_xent_forward_backward(float* logits, double* row_loss, const int32_t* targets, int64_t n,
                                   int64_t padded_vocab, int64_t vocab, float scale, cudaStream_t stream);
// Number of block sums sum_squares writes (its scratch holds that many doubles).
int sum_squares_blocks(int64_t n);
// block_sums[sum_squares_blocks(n)] (double) = per-block Σ x[i]²; the host adds them up.
void sum_squares(double* block_sums, const float* x, int64_t n, cudaStream_t stream);

}  // namespace shardplan::reference::gpu
