// LayerNorm / RMSNorm forward and backward on the GPU (llm.c layernorm_forward_kernel3 / layernorm_backward: one
// warp per row), and the deterministic column sums that give the parameter gradients dw, dbias of the norms and
// the bias gradient of a matmul. Twins of cpu_kernels_norm.cpp and the dbias line of cpu_kernels_matmul.cpp.
// Templates over the storage type T (float, bf16): inputs widened as read, outputs rounded once when stored.
#include "reference/cuda_kernels.cuh"

namespace shardplan::reference::gpu {

namespace {

constexpr int kWarpsPerBlock = 8;        // 256 threads: 8 rows per block for the warp-per-row kernels
constexpr int64_t kRowsPerPartial = 256;  // rows one column_partials block sums (32 per thread of its 8 y-lanes),
                                          // more when N > 256 · 65535 (gridDim.y is at most 65535)
constexpr float kEps = 1e-5f;             // as cpu_kernels_norm.cpp

// One warp per row i of x[N,C]. Mean and variance are accumulated in double as the CPU code does (its sums are
// double), so that rstd agrees to the last float bit on all but ties; the output is formed in float.
template <typename T>
__global__ void norm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* w, const T* bias,
                                    int64_t n, int64_t c, bool rms) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together: the shuffles below see all 32 lanes
  const T* xi = x + row * c;  // [C]
  T* oi = out + row * c;      // [C]
  double mu = 0;
  if (!rms) {
    for (int64_t j = lane; j < c; j += 32) mu += load(xi[j]);
    mu = warp_sum(mu) / static_cast<double>(c);
  }
  double var = 0;  // E[(x − μ)²]; μ = 0 for RMSNorm
  for (int64_t j = lane; j < c; j += 32) {
    const double d = load(xi[j]) - mu;
    var += d * d;
  }
  var = warp_sum(var) / static_cast<double>(c);
  const float r = static_cast<float>(1.0 / sqrt(var + static_cast<double>(kEps)));
  const float muf = static_cast<float>(mu);
  for (int64_t j = lane; j < c; j += 32)
    oi[j] = store_as<T>((load(xi[j]) - muf) * r * load(w[j]) + (bias ? load(bias[j]) : 0.0f));
  if (lane == 0) {
    if (mean) mean[row] = muf;
    rstd[row] = r;
  }
}

// dx[N,C] += r·(dnorm − mean(dnorm) − x̂·mean(dnorm·x̂)), one warp per row (the row means in double as on CPU).
template <typename T>
__global__ void norm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* mean,
                                        const float* rstd, int64_t n, int64_t c, bool rms) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xi = x + row * c;     // [C]
  const T* di = dout + row * c;  // [C]
  T* dxi = dx + row * c;         // [C]
  const float mu = rms ? 0.0f : mean[row];
  const float r = rstd[row];
  double dnorm_mean = 0, dnorm_xhat_mean = 0;
  for (int64_t j = lane; j < c; j += 32) {
    const float xhat = (load(xi[j]) - mu) * r;
    const float dnorm = load(w[j]) * load(di[j]);
    dnorm_mean += dnorm;
    dnorm_xhat_mean += dnorm * xhat;
  }
  dnorm_mean = rms ? 0.0 : warp_sum(dnorm_mean) / static_cast<double>(c);
  dnorm_xhat_mean = warp_sum(dnorm_xhat_mean) / static_cast<double>(c);
  const float a = static_cast<float>(dnorm_mean), b = static_cast<float>(dnorm_xhat_mean);
  for (int64_t j = lane; j < c; j += 32) {
    const float xhat = (load(xi[j]) - mu) * r;
    const float dnorm = load(w[j]) * load(di[j]);
    accumulate(dxi[j], r * (dnorm - a - xhat * b));
  }
}

// partial[p, j] = Σ over rows i of chunk p (kRowsPerPartial rows) of a[i,j], or of a[i,j]·x̂[i,j] when x is not
// null (x̂ = (x − mean)·rstd; mean null means 0, RMSNorm). Block (32, 8): x-lanes take 32 adjacent columns
// (coalesced loads), y-lanes stride over the chunk's rows; the 8 y-partials are added in shared memory in a
// fixed order, so the result does not depend on scheduling. Grid (⌈C/32⌉, P). Partials are float for every T.
template <typename T>
__global__ void column_partials_kernel(float* partial, const T* a, const T* x, const float* mean, const float* rstd,
                                       int64_t n, int64_t c, int64_t rows_per_partial) {
  __shared__ float acc[8][33];  // +1 column: no bank conflicts on the transposed read
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_partial;
  const int64_t last = first + rows_per_partial < n ? first + rows_per_partial : n;
  float s = 0.0f;
  if (j < c) {
    for (int64_t i = first + threadIdx.y; i < last; i += 8) {
      float v = load(a[i * c + j]);
      if (x) v *= (load(x[i * c + j]) - (mean ? mean[i] : 0.0f)) * rstd[i];
      s += v;
    }
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += acc[k][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * c + j] = t;
  }
}

// dst[j] = round(dst[j] + Σ_p partial[p, j]), one thread per column, p in order.
template <typename T>
__global__ void column_finalize_kernel(T* dst, const float* partial, int64_t p, int64_t c) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float s = 0.0f;
  for (int64_t k = 0; k < p; ++k) s += partial[k * c + j];
  accumulate(dst[j], s);
}

int64_t rows_per_partial(int64_t n) {
  const int64_t needed = (n + 65534) / 65535;
  return needed > kRowsPerPartial ? needed : kRowsPerPartial;
}

// dst[C] += column sums of a[N,C] (times x̂ when x is given), through partial[P,C].
template <typename T>
void column_sums(T* dst, const T* a, const T* x, const float* mean, const float* rstd, float* partial, int64_t n,
                 int64_t c, cudaStream_t stream) {
  if (n <= 0 || c <= 0) return;
  const int64_t p = column_partials_rows(n);
  launch(column_partials_kernel<T>, dim3(blocks_for(c, 32), static_cast<unsigned>(p)), dim3(32, 8), 0, stream,
         partial, a, x, mean, rstd, n, c, rows_per_partial(n));
  check_launch("column_partials_kernel");
  launch(column_finalize_kernel<T>, blocks_for(c, 256), 256, 0, stream, dst, partial, p, c);
  check_launch("column_finalize_kernel");
}

}  // namespace

int64_t column_partials_rows(int64_t n) {
  if (n <= 0) return 1;
  const int64_t per = rows_per_partial(n);
  return (n + per - 1) / per;
}

template <typename T>
void column_sums_accumulate(T* dst, const T* a, float* partial, int64_t n, int64_t c, cudaStream_t stream) {
  column_sums<T>(dst, a, nullptr, nullptr, nullptr, partial, n, c, stream);
}

template <typename T>
void norm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* bias, int64_t n, int64_t c,
                  bool rms, cudaStream_t stream) {
  if (n <= 0) return;
  launch(norm_forward_kernel<T>, blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream, out, mean, rstd, x, w,
         bias, n, c, rms);
  check_launch("norm_forward_kernel");
}

template <typename T>
void norm_backward_accumulate(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, const float* mean,
                              const float* rstd, float* partial, int64_t n, int64_t c, bool rms, cudaStream_t stream) {
  if (n <= 0) return;
  launch(norm_backward_dx_kernel<T>, blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream, dx, dout, x, w,
         mean, rstd, n, c, rms);
  check_launch("norm_backward_dx_kernel");
  // dw[j] += Σ_i dout[i,j]·x̂[i,j]; dbias[j] += Σ_i dout[i,j]. The two passes share `partial` (stream order).
  column_sums<T>(dw, dout, x, rms ? nullptr : mean, rstd, partial, n, c, stream);
  if (dbias) column_sums<T>(dbias, dout, nullptr, nullptr, nullptr, partial, n, c, stream);
}

// Both storage types (reference/bf16.hpp).
#define SHARDPLAN_NORM_INSTANTIATE(T)                                                                             \
  template void column_sums_accumulate<T>(T*, const T*, float*, int64_t, int64_t, cudaStream_t);                 \
  template void norm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t, bool,         \
                                cudaStream_t);                                                                   \
  template void norm_backward_accumulate<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, \
                                            float*, int64_t, int64_t, bool, cudaStream_t);
SHARDPLAN_NORM_INSTANTIATE(float)
SHARDPLAN_NORM_INSTANTIATE(bf16)
#undef SHARDPLAN_NORM_INSTANTIATE

}  // namespace shardplan::reference::gpu
