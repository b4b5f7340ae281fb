// Token/position embedding, the fused softmax cross-entropy and the sum of squares on the GPU — twins of
// cpu_kernels_loss.cpp and of sum_squares in cpu_kernels_matmul.cpp. Losses and squares are summed in double
// (per row / per block on the device, the rest on the host) as the CPU code sums in double. Templates over the
// storage type T (float, bf16): inputs widened as read, outputs rounded once when stored.
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
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t total,
                                         int64_t t, int64_t c) {
  GRID_STRIDE(e, total) {
    const int64_t i = e / c, j = e % c;
    const float p = wpe ? load(wpe[(i % t) * c + j]) : 0.0f;
    out[e] = store_as<T>(load(wte[static_cast<int64_t>(tokens[i]) * c + j]) + p);
  }
}

// Embedding backward without atomics (a token may repeat in the batch): atomicAdd on bf16 would round at every
// addition, in a varying order. Instead the occurrences of each token are linked in position order and summed by
// the block of the first one (llm.c's encoder_backward buckets tokens on the host for the same reason).
// next[i] = the next position i' > i with tokens[i'] = tokens[i], or −1; first[i] = 1 when no earlier position
// holds tokens[i]. Thread per position; O(N) scans each, early exit (N = B·T tokens, 64 KiB for 16k tokens, in
// cache): far below the attention's O(B·NH·T²·HD).
__global__ void embedding_links_kernel(int32_t* next, int32_t* first, const int32_t* tokens, int64_t total) {
  GRID_STRIDE(i, total) {
    const int32_t id = tokens[i];
    int32_t nx = -1;
    for (int64_t k = i + 1; k < total; ++k) {
      if (tokens[k] == id) {
        nx = static_cast<int32_t>(k);
        break;
      }
    }
    int32_t f = 1;
    for (int64_t k = i - 1; k >= 0; --k) {
      if (tokens[k] == id) {
        f = 0;
        break;
      }
    }
    next[i] = nx;
    first[i] = f;
  }
}

// Grid (N, ⌈C/kThreads⌉): block (i, chunk) does nothing unless position i is the first occurrence of its token;
// then thread j sums dout[p, j] over p = i, next[i], next[next[i]], … in fp32 (position order, as the CPU loop)
// and adds the sum to dwte[tokens[i], j] with one rounding. Every element of dwte has at most one writer.
template <typename T>
__global__ void embedding_backward_wte_kernel(T* dwte, const T* dout, const int32_t* tokens, const int32_t* next,
                                              const int32_t* first, int64_t c) {
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (!first[i] || j >= c) return;
  float s = 0.0f;
  for (int64_t p = i; p >= 0; p = next[p]) s += load(dout[p * c + j]);
  accumulate(dwte[static_cast<int64_t>(tokens[i]) * c + j], s);
}

// dwpe[t', j] += Σ_b dout[b·T + t', j]: thread per element of dwpe[T,C], sequences in order, one rounding.
template <typename T>
__global__ void embedding_backward_wpe_kernel(T* dwpe, const T* dout, int64_t b, int64_t t, int64_t c) {
  GRID_STRIDE(e, t * c) {
    float s = 0.0f;
    for (int64_t k = 0; k < b; ++k) s += load(dout[k * t * c + e]);
    accumulate(dwpe[e], s);
  }
}

// One block per row of logits[N,Vp]: max over the first `vocab` columns, Σ exp(x − max) (double), log Z; writes
// row_loss[row] = log Z − x[target] and overwrites the row with (softmax − onehot(target))·scale, 0 in the
// padding columns [vocab, Vp).
template <typename T>
__global__ void softmax_xent_kernel(T* logits, double* row_loss, const int32_t* targets, int64_t padded_vocab,
                                    int64_t vocab, float scale) {
  __shared__ double sum_shared[kWarps];
  __shared__ float max_shared[kWarps];
  T* r = logits + static_cast<int64_t>(blockIdx.x) * padded_vocab;  // [Vp]
  const int64_t target = targets[blockIdx.x];
  const float x_target = load(r[target]);  // read before any thread overwrites the row (the reductions below sync)
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) mx = fmaxf(mx, load(r[j]));
  mx = block_max(mx, max_shared);
  double s = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) s += static_cast<double>(expf(load(r[j]) - mx));
  s = block_sum(s, sum_shared);
  const double log_z = static_cast<double>(mx) + log(s);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = log_z - static_cast<double>(x_target);
  for (int64_t j = threadIdx.x; j < padded_vocab; j += kThreads) {
    float g = 0.0f;
    if (j < vocab) {
      g = expf(static_cast<float>(static_cast<double>(load(r[j])) - log_z)) * scale;
      if (j == target) g -= scale;
    }
    r[j] = store_as<T>(g);
  }
}

// block_sums[blockIdx] = Σ x[i]² (double) over the block's grid-stride elements.
template <typename T>
__global__ void sum_squares_kernel(double* block_sums, const T* x, int64_t n) {
  __shared__ double shared[kWarps];
  double s = 0;
  GRID_STRIDE(i, n) {
    const double xi = load(x[i]);
    s += xi * xi;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = s;
}

#undef GRID_STRIDE

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b, int64_t t, int64_t c,
                       cudaStream_t stream) {
  if (b * t * c <= 0) return;
  launch(embedding_forward_kernel<T>, grid_for(b * t * c), kThreads, 0, stream, out, tokens, wte, wpe, b * t * c, t,
         c);
  check_launch("embedding_forward_kernel");
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int32_t* links, int64_t b, int64_t t,
                        int64_t c, cudaStream_t stream) {
  const int64_t n = b * t;
  if (n * c <= 0) return;
  if (n > INT32_MAX) throw std::runtime_error("CUDA embedding_backward: more than 2^31 - 1 tokens in one batch");
  int32_t* next = links;      // [N]
  int32_t* first = links + n;  // [N]
  launch(embedding_links_kernel, grid_for(n), kThreads, 0, stream, next, first, tokens, n);
  check_launch("embedding_links_kernel");
  launch(embedding_backward_wte_kernel<T>, dim3(static_cast<unsigned>(n), blocks_for(c, kThreads)), kThreads, 0,
         stream, dwte, dout, tokens, next, first, c);
  check_launch("embedding_backward_wte_kernel");
  if (dwpe) {
    launch(embedding_backward_wpe_kernel<T>, grid_for(t * c), kThreads, 0, stream, dwpe, dout, b, t, c);
    check_launch("embedding_backward_wpe_kernel");
  }
}

template <typename T>
void softmax_xent_forward_backward(T* logits, double* row_loss, const int32_t* targets, int64_t n,
                                   int64_t padded_vocab, int64_t vocab, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  launch(softmax_xent_kernel<T>, static_cast<unsigned>(n), kThreads, 0, stream, logits, row_loss, targets,
         padded_vocab, vocab, scale);
  check_launch("softmax_xent_kernel");
}

int sum_squares_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b < kSumSquaresMaxBlocks ? b : kSumSquaresMaxBlocks));
}

template <typename T>
void sum_squares(double* block_sums, const T* x, int64_t n, cudaStream_t stream) {
  launch(sum_squares_kernel<T>, static_cast<unsigned>(sum_squares_blocks(n)), kThreads, 0, stream, block_sums, x, n);
  check_launch("sum_squares_kernel");
}

// Both storage types (reference/bf16.hpp).
#define SHARDPLAN_LOSS_INSTANTIATE(T)                                                                            \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t,          \
                                     cudaStream_t);                                                             \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int32_t*, int64_t, int64_t, int64_t,     \
                                      cudaStream_t);                                                            \
  template void softmax_xent_forward_backward<T>(T*, double*, const int32_t*, int64_t, int64_t, int64_t, float,  \
                                                 cudaStream_t);                                                 \
  template void sum_squares<T>(double*, const T*, int64_t, cudaStream_t);
SHARDPLAN_LOSS_INSTANTIATE(float)
SHARDPLAN_LOSS_INSTANTIATE(bf16)
#undef SHARDPLAN_LOSS_INSTANTIATE

}  // namespace shardplan::reference::gpu
