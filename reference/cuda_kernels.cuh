#pragma once
// Launchers of the CUDA kernels of the reference GPT (reference/cuda_kernels_*.cu), the GPU twins of
// cpu_kernels.hpp: same functions, same row-major layouts, same accumulate-vs-overwrite semantics. Every launcher
// enqueues its kernels on `stream` and returns at once; every pointer is device memory. Scratch buffers
// (`partial`, `delta`, `links`, `row_loss`, `block_sums`) are passed in by the backend, which takes them from its
// caching allocator; their sizes are given with each launcher (column_partials_rows, sum_squares_blocks below).
//
// Every launcher is a template over the storage type T of its tensors, float or bf16 (reference/bf16.hpp; both are
// instantiated in the .cu files), as the CPU kernels are: a kernel widens what it reads to fp32, computes exactly as
// in fp32 and rounds once when it stores (an accumulating output: x = round(x + v), v formed in fp32). Statistics
// (mean, rstd, lse), scratch and the AdamW moments and master weights are float (or double) whatever T is.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "reference/bf16.hpp"

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
// dst[C] += Σ_rows a[N,C] (the bias gradient of a matmul), the sum in fp32 and one rounding per column;
// deterministic (fixed order). partial[P,C] float scratch.
template <typename T>
void column_sums_accumulate(T* dst, const T* a, float* partial, int64_t n, int64_t c, cudaStream_t stream);

// --- norms (cuda_kernels_norm.cu) -----------------------------------------------------------------------------
// out[N,C], mean[N] (may be null), rstd[N]; x[N,C], w[C], bias[C] (may be null). LayerNorm, or RMSNorm if rms.
template <typename T>
void norm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* bias, int64_t n, int64_t c,
                  bool rms, cudaStream_t stream);
// dx[N,C] +=, dw[C] +=, dbias[C] += (may be null); dout[N,C], x[N,C], w[C], mean[N] (ignored when rms), rstd[N].
// partial[P,C] float scratch with P = column_partials_rows(n).
template <typename T>
void norm_backward_accumulate(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, const float* mean,
                              const float* rstd, float* partial, int64_t n, int64_t c, bool rms, cudaStream_t stream);

// --- rotary embedding and attention (cuda_kernels_attention.cu) -----------------------------------------------
// The largest head_dim the attention kernels hold in registers (a warp of 32 lanes × kMaxHeadDimPerLane).
constexpr int kMaxHeadDimPerLane = 8;
constexpr int64_t kMaxHeadDim = 32 * kMaxHeadDimPerLane;
struct AttentionDims {
  int64_t batch, seq, heads, kv_heads, head_dim;
};
// qkv[B,T,QKV] rotated in place (sign +1 forward, −1 backward on dqkv).
template <typename T>
void rope_rotate(T* qkv, const AttentionDims& s, float sign, cudaStream_t stream);
// out[B,T,NH·HD], lse[B,NH,T] (float) from qkv[B,T,QKV]; scale = 1/√HD as computed by the CPU code.
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, const AttentionDims& s, float scale, cudaStream_t stream);
// dqkv[B,T,QKV] overwritten; dout[B,T,NH·HD], out[B,T,NH·HD], lse[B,NH,T], qkv[B,T,QKV]; delta[B,NH,T] float
// scratch.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* out, const float* lse, const T* qkv, float* delta,
                        const AttentionDims& s, float scale, cudaStream_t stream);

// --- pointwise (cuda_kernels_pointwise.cu) --------------------------------------------------------------------
// out[N,O] = bias[O] on every row: the C operand of the GEMM that then adds in·wᵀ with β = 1, so that the biased
// output is rounded once (as the CPU kernel rounds it), not once after the GEMM and again after the bias.
template <typename T>
void bias_broadcast(T* out, const T* bias, int64_t n, int64_t o, cudaStream_t stream);
template <typename T>
void residual_accumulate(T* x, const T* y, int64_t n, cudaStream_t stream);  // x[n] += y[n]
template <typename T>
void gelu_forward(T* out, const T* in, int64_t n, cudaStream_t stream);
template <typename T>
void gelu_backward(T* din, const T* in, const T* dout, int64_t n, cudaStream_t stream);
template <typename T>
void swiglu_forward(T* out, const T* fc1, int64_t n, int64_t f, cudaStream_t stream);  // out[N,F], fc1[N,2F]
template <typename T>
void swiglu_backward(T* dfc1, const T* fc1, const T* dout, int64_t n, int64_t f, cudaStream_t stream);
// AdamW on p[n] from g[n], m[n], v[n] (float); master[n] (float) null: p updated in place (widened, rounded back);
// otherwise master is updated and p = round(master). Bias corrections c1 = 1 − β1^t, c2 = 1 − β2^t computed on the
// host as the CPU code does.
template <typename T>
void adamw_step(T* p, float* master, const T* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, float grad_scale, float c1, float c2, cudaStream_t stream);

// --- embedding, loss, reductions (cuda_kernels_loss.cu) -------------------------------------------------------
// out[B·T,C] = wte[tokens] + wpe[t] (wpe may be null); tokens[B·T].
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b, int64_t t, int64_t c,
                       cudaStream_t stream);
// dwte[V,C] +=, dwpe[T,C] += (may be null). Deterministic, no atomics: the occurrences of each token are summed in
// fp32 in position order and added with one rounding. links[2·B·T] int32 scratch (next occurrence, first flag);
// B·T < 2³¹.
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int32_t* links, int64_t b, int64_t t,
                        int64_t c, cudaStream_t stream);
// logits[N,Vp] overwritten by the scaled gradient; row_loss[N] (double) = −log p(target) per row.
template <typename T>
void softmax_xent_forward_backward(T* logits, double* row_loss, const int32_t* targets, int64_t n,
                                   int64_t padded_vocab, int64_t vocab, float scale, cudaStream_t stream);
// Number of block sums sum_squares writes (its scratch holds that many doubles).
int sum_squares_blocks(int64_t n);
// block_sums[sum_squares_blocks(n)] (double) = per-block Σ x[i]²; the host adds them up.
template <typename T>
void sum_squares(double* block_sums, const T* x, int64_t n, cudaStream_t stream);

}  // namespace shardplan::reference::gpu
