// Token/position embedding, the fused softmax cross-entropy and the sum of squares on the GPU — twins of
// cpu_kernels_loss.cpp and of sum_squares in cpu_kernels_matmul.cpp. Losses and squares are summed in double
// (per row / per block on the device, the rest on the host) as the CPU code sums in double.
#include <cmath>

#include "reference/cuda_kernels.cuh"

namespace shardplan::reference::gpu {

namespace {

constexpr int kThreads = 256;              // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 65536;       // grid-stride kernels: cap on the grid
constexpr int kSumSquaresMaxBlocks = 1024;  // block partial sums the host adds (8 KiB download)

unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

// Reductions over a block of kThreads threads: warp shuffles, then one value per warp through `shared` (kWarps
// slots), added / maxed by every thread in the same order. Starts and ends with __syncthreads so `shared` may be
// reused by the next call.
__device__ inline double block_sum(double v, double* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double s = 0;
  for (int w = 0; w < kWarps; ++w) s += shared[w];
  __syncthreads();
  return s;
}
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, shared[w]);
  __syncthreads();
  return m;
}

#define GRID_STRIDE(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Element e of out[B·T,C] is (token i, channel j) = (e / C, e mod C); position of token i is i mod T.
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                         int64_t total, int64_t t, int64_t c) {
  GRID_STRIDE(e, total) {
    const int64_t i = e / c, j = e % c;
    out[e] = wte[static_cast<int64_t>(tokens[i]) * c + j] + (wpe ? wpe[(i % t) * c + j] : 0.0f);
  }
}

// dwte[tokens[i], j] += dout[i, j]; dwpe[i mod T, j] += dout[i, j]. A token may repeat in the batch, and every
// sequence adds to the same positions: atomicAdd (the order of the additions, and so the last bits, may vary).
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                          int64_t total, int64_t t, int64_t c) {
  GRID_STRIDE(e, total) {
    const int64_t i = e / c, j = e % c;
    const float d = dout[e];
    atomicAdd(dwte + static_cast<int64_t>(tokens[i]) * c + j, d);
    if (dwpe) atomicAdd(dwpe + (i % t) * c + j, d);
  }
}

// One block per row of logits[N,Vp]: max over the first `vocab` columns, Σ exp(x − max) (double), log Z; writes
// row_loss[row] = log Z − x[target] and overwrites the row with (softmax − onehot(target))·scale, 0 in the
// padding columns [vocab, Vp).
__global__ void softmax_xent_kernel(float* logits, double* row_loss, const int32_t* targets, int64_t padded_vocab,
                                    int64_t vocab, float scale) {
  __shared__ double sum_shared[kWarps];
  __shared__ float max_shared[kWarps];
  float* r = logits + static_cast<int64_t>(blockIdx.x) * padded_vocab;  // [Vp]
  const int64_t target = targets[blockIdx.x];
  const float x_target = r[target];  // read before any thread overwrites the row (the reductions below sync)
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) mx = fmaxf(mx, r[j]);
  mx = block_max(mx, max_shared);
  double s = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) s += static_cast<double>(expf(r[j] - mx));
  s = block_sum(s, sum_shared);
  const double log_z = static_cast<double>(mx) + log(s);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = log_z - static_cast<double>(x_target);
  for (int64_t j = threadIdx.x; j < padded_vocab; j += kThreads) {
    float g = 0.0f;
    if (j < vocab) {
      g = expf(static_cast<float>(static_cast<double>(r[j]) - log_z)) * scale;
      if (j == target) g -= scale;
    }
    r[j] = g;
  }
}

// block_sums[blockIdx] = Σ x[i]² (double) over the block's grid-stride elements.
__global__ void sum_squares_kernel(double* block_sums, const float* x, int64_t n) {
  __shared__ double shared[kWarps];
  double s = 0;
  GRID_STRIDE(i, n) s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = s;
}

#undef GRID_STRIDE

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t b, int64_t t,
                       int64_t c, cudaStream_t stream) {
  if (b * t * c <= 0) return;
  launch(embedding_forward_kernel, grid_for(b * t * c), kThreads, 0, stream, out, tokens, wte, wpe, b * t * c, t, c);
  check_launch("embedding_forward_kernel");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t b, int64_t t,
                        int64_t c, cudaStream_t stream) {
  if (b * t * c <= 0) return;
  launch(embedding_backward_kernel, grid_for(b * t * c), kThreads, 0, stream, dwte, dwpe, dout, tokens, b * t * c, t,
         c);
  check_launch("embedding_backward_kernel");
}

void softmax_xent_forward_backward(float* logits, double* row_loss, const int32_t* targets, int64_t n,
                                   int64_t padded_vocab, int64_t vocab, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  launch(softmax_xent_kernel, static_cast<unsigned>(n), kThreads, 0, stream, logits, row_loss, targets, padded_vocab,
         vocab, scale);
  check_launch("softmax_xent_kernel");
}

int sum_squares_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b < kSumSquaresMaxBlocks ? b : kSumSquaresMaxBlocks));
}

void sum_squares(double* block_sums, const float* x, int64_t n, cudaStream_t stream) {
  launch(sum_squares_kernel, static_cast<unsigned>(sum_squares_blocks(n)), kThreads, 0, stream, block_sums, x, n);
  check_launch("sum_squares_kernel");
}

}  // namespace shardplan::reference::gpu
