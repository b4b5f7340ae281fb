// Pointwise kernels on the GPU: matmul bias, residual, GELU, SwiGLU, AdamW — twins of cpu_kernels_matmul.cpp
// (bias, residual), cpu_kernels_mlp.cpp and cpu_kernels_adamw.cpp, the same float formulas term by term.
// Each kernel is a grid-stride loop, one element per thread per iteration, 256 threads per block; the grid is
// capped at kMaxBlocks (enough to fill any current GPU many times) so that no element count overflows it.
// Templates over the storage type T (float, bf16): inputs widened as read, outputs rounded once when stored.
#include "reference/cuda_kernels.cuh"

namespace shardplan::reference::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;
constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π) (Hendrycks & Gimpel 2016 §2), as cpu_kernels_mlp.cpp

unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

#define GRID_STRIDE(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// out[N,O] = bias[O] per row: element i is column i mod O (a copy: exact in any T).
template <typename T>
__global__ void bias_broadcast_kernel(T* out, const T* bias, int64_t total, int64_t o) {
  GRID_STRIDE(i, total) out[i] = bias[i % o];
}

template <typename T>
__global__ void residual_kernel(T* x, const T* y, int64_t n) {
  GRID_STRIDE(i, n) accumulate(x[i], load(y[i]));
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  GRID_STRIDE(i, n) {
    const float x = load(in[i]);
    out[i] = store_as<T>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

// d gelu/dx = ½(1 + tanh u) + ½x·sech²u·√(2/π)(1 + 3·0.044715·x²), u = √(2/π)(x + 0.044715x³).
template <typename T>
__global__ void gelu_backward_kernel(T* din, const T* in, const T* dout, int64_t n) {
  GRID_STRIDE(i, n) {
    const float x = load(in[i]);
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = store_as<T>(grad * load(dout[i]));
  }
}

// Element i of out[N,F] is (row r, column j) = (i / F, i mod F); fc1 row r is [gate F | up F].
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* fc1, int64_t total, int64_t f) {
  GRID_STRIDE(i, total) {
    const int64_t r = i / f, j = i % f;
    const float g = load(fc1[r * 2 * f + j]), up = load(fc1[r * 2 * f + f + j]);
    const float sig = 1.0f / (1.0f + expf(-g));
    out[i] = store_as<T>(g * sig * up);
  }
}

// dgate = dout·up·σ(g)(1 + g(1 − σ(g))), dup = dout·silu(g); dfc1[N,2F] fully overwritten.
template <typename T>
__global__ void swiglu_backward_kernel(T* dfc1, const T* fc1, const T* dout, int64_t total, int64_t f) {
  GRID_STRIDE(i, total) {
    const int64_t r = i / f, j = i % f;
    const float g = load(fc1[r * 2 * f + j]), up = load(fc1[r * 2 * f + f + j]);
    const float sig = 1.0f / (1.0f + expf(-g));
    const float silu = g * sig;
    const float d = load(dout[i]);
    dfc1[r * 2 * f + j] = store_as<T>(d * up * sig * (1.0f + g * (1.0f - sig)));
    dfc1[r * 2 * f + f + j] = store_as<T>(d * silu);
  }
}

// AdamW (Loshchilov & Hutter 2019, Algorithm 2), decoupled weight decay, exactly as cpu_kernels_adamw.cpp. The
// update is formed in fp32 from the master weight when there is one (Micikevicius et al. 2018 §3.1), else from
// the widened p; p is stored rounded.
template <typename T>
__global__ void adamw_kernel(T* p, float* master, const T* g, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float grad_scale, float c1, float c2) {
  GRID_STRIDE(i, n) {
    const float gi = load(g[i]) * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / c1, vhat = vi / c2;
    const float pi = master ? master[i] : load(p[i]);
    const float updated = pi - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * pi);
    if (master) master[i] = updated;
    p[i] = store_as<T>(updated);
  }
}

#undef GRID_STRIDE

}  // namespace

template <typename T>
void bias_broadcast(T* out, const T* bias, int64_t n, int64_t o, cudaStream_t stream) {
  if (n * o <= 0) return;
  launch(bias_broadcast_kernel<T>, grid_for(n * o), kThreads, 0, stream, out, bias, n * o, o);
  check_launch("bias_broadcast_kernel");
}

template <typename T>
void residual_accumulate(T* x, const T* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch(residual_kernel<T>, grid_for(n), kThreads, 0, stream, x, y, n);
  check_launch("residual_kernel");
}

template <typename T>
void gelu_forward(T* out, const T* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch(gelu_forward_kernel<T>, grid_for(n), kThreads, 0, stream, out, in, n);
  check_launch("gelu_forward_kernel");
}

template <typename T>
void gelu_backward(T* din, const T* in, const T* dout, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch(gelu_backward_kernel<T>, grid_for(n), kThreads, 0, stream, din, in, dout, n);
  check_launch("gelu_backward_kernel");
}

template <typename T>
void swiglu_forward(T* out, const T* fc1, int64_t n, int64_t f, cudaStream_t stream) {
  if (n * f <= 0) return;
  launch(swiglu_forward_kernel<T>, grid_for(n * f), kThreads, 0, stream, out, fc1, n * f, f);
  check_launch("swiglu_forward_kernel");
}

template <typename T>
void swiglu_backward(T* dfc1, const T* fc1, const T* dout, int64_t n, int64_t f, cudaStream_t stream) {
  if (n * f <= 0) return;
  launch(swiglu_backward_kernel<T>, grid_for(n * f), kThreads, 0, stream, dfc1, fc1, dout, n * f, f);
  check_launch("swiglu_backward_kernel");
}

template <typename T>
void adamw_step(T* p, float* master, const T* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float weight_decay, float grad_scale, float c1, float c2, cudaStream_t stream) {
  if (n <= 0) return;
  launch(adamw_kernel<T>, grid_for(n), kThreads, 0, stream, p, master, g, m, v, n, lr, beta1, beta2, eps, weight_decay,
         grad_scale, c1, c2);
  check_launch("adamw_kernel");
}

// Both storage types (reference/bf16.hpp).
#define SHARDPLAN_POINTWISE_INSTANTIATE(T)                                                                       \
  template void bias_broadcast<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                                 \
  template void residual_accumulate<T>(T*, const T*, int64_t, cudaStream_t);                                     \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);                                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                                 \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                                 \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t);                      \
  template void adamw_step<T>(T*, float*, const T*, float*, float*, int64_t, float, float, float, float, float,   \
                              float, float, float, cudaStream_t);
SHARDPLAN_POINTWISE_INSTANTIATE(float)
SHARDPLAN_POINTWISE_INSTANTIATE(bf16)
#undef SHARDPLAN_POINTWISE_INSTANTIATE

}  // namespace shardplan::reference::gpu
