// The CUDA backend (backend.hpp): device memory through a caching allocator, fp32 or bf16 GEMMs (fp32 compute)
// through cuBLASLt, the other kernels of cuda_kernels_*.cu — all on one non-blocking stream, in issue order
// (README_cuda.md). Tensors are of the backend's dtype (fp32 or bf16): every call picks the kernel instantiation.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "reference/backend.hpp"
#include "reference/cuda_kernels.cuh"

namespace shardplan::reference {

namespace {

using gpu::check;

constexpr std::size_t kRounding = 512;                    // allocation granularity (a multiple of 256)
constexpr std::size_t kWorkspaceBytes = 32u << 20;        // cuBLASLt workspace, as PyTorch's default on Hopper

void lt_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt error in ") + what + ": " + cublasLtGetStatusString(s));
}

// Largest power of two ≤ 256 dividing the address, at least the element size: cuBLASLt picks only kernels whose
// vector loads this allows (weights are views at element offsets into flat unit buffers, so 4-byte alignment
// happens in fp32 and 2-byte alignment in bf16).
uint32_t alignment_of(const void* p, uint32_t element_bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  uint32_t al = 256;
  while (al > element_bytes && a % al != 0) al /= 2;
  return al;
}

// A floatX tensor as the element type of the backend's dtype (float or bf16, reference/bf16.hpp).
template <typename T>
T* as(floatX* p) {
  return reinterpret_cast<T*>(p);
}
template <typename T>
const T* as(const floatX* p) {
  return reinterpret_cast<const T*>(p);
}

// One column-major GEMM shape with its descriptors and the heuristic's first algorithm, made once and reused.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
// (trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c)
using GemmKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t,
                           uint32_t>;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, DType dtype) : device_(device), dtype_(dtype) {
    try {
      check(cudaSetDevice(device_), "cudaSetDevice");
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      lt_check(cublasLtCreate(&lt_), "cublasLtCreate");
      check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~CudaBackend() override { destroy(); }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  DType dtype() const override { return dtype_; }
  // "NVIDIA H200 (sm_90, CUDA 13.0, bf16)"
  std::string description() const override {
    cudaDeviceProp prop{};
    int runtime = 0;
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", CUDA " +
           std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ", " + to_string(dtype_) + ")";
  }

  // --- memory: a caching allocator ------------------------------------------------------------------------------
  // Sizes round up to a multiple of 512 B; released blocks go to a free list keyed by that rounded size and are
  // handed out again for the same size (the loop allocates the same shapes every step). Reusing a block without
  // waiting is safe because every kernel and copy runs on stream_, in issue order: work enqueued after the
  // reallocation runs after the work enqueued before the release. cudaFree (which synchronizes the device) is
  // called only on out-of-memory (all cached blocks, then one retry) and in the destructor.
  void* memory_allocate(std::size_t bytes) override {
    if (bytes > (std::size_t{1} << 62)) throw std::bad_alloc();  // no device has this; avoids overflow below
    const std::size_t size = bytes == 0 ? kRounding : (bytes + kRounding - 1) / kRounding * kRounding;
    std::lock_guard<std::mutex> lock(mutex_);
    auto f = free_.find(size);
    if (f != free_.end() && !f->second.empty()) {
      void* p = f->second.back();
      f->second.pop_back();
      cached_bytes_ -= size;
      live_[p] = size;
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the error before retrying
      cached_release();
      e = cudaMalloc(&p, size);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw std::bad_alloc();
      }
    }
    check(e, "cudaMalloc");
    live_[p] = size;
    return p;
  }
  void memory_release(void* p) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) throw std::runtime_error("CUDA backend: memory_release of a pointer it did not allocate");
    free_[it->second].push_back(p);
    cached_bytes_ += it->second;
    live_.erase(it);
  }
  void memory_zero(void* p, std::size_t bytes) override {
    if (bytes) check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
  }
  void memory_copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (D2D)");
  }
  // Waits for the copy, so the caller may reuse or free its host buffer at once (pinned or not).
  void memory_upload(void* dst, const void* host, std::size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (H2D)");
    synchronize();
  }
  void memory_download(void* host, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (D2H)");
    synchronize();
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  int64_t device_memory_used() const override {
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return static_cast<int64_t>(total - free);
  }
  // What cudaMalloc could still give plus the blocks this allocator holds for reuse (freed on out-of-memory).
  int64_t device_memory_available() const override {
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(free + cached_bytes_);
  }

  // --- GEMMs ----------------------------------------------------------------------------------------------------
  // cuBLASLt is column-major; a row-major X[r,c] is the column-major Xᵀ[c,r] with the same leading dimension c.
  //   forward  out[N,O] = in[N,I]·w[O,I]ᵀ  ⇔  outᵀ(O×N, ld O) = (wᵀ(I×O, ld I))ᵀ · inᵀ(I×N, ld I)
  //            m = O, n = N, k = I, A = w transposed, B = in as is.
  //   backward din[N,I] = dout[N,O]·w[O,I]  ⇔  dinᵀ(I×N, ld I) = wᵀ(I×O, ld I) · doutᵀ(O×N, ld O)
  //            m = I, n = N, k = O, neither transposed.
  //            dw[O,I] += dout[N,O]ᵀ·in[N,I]  ⇔  dwᵀ(I×O, ld I) += inᵀ(I×N, ld I) · (doutᵀ(O×N, ld O))ᵀ
  //            m = I, n = O, k = N, B transposed, β = 1.
  // CUBLAS_COMPUTE_32F: true fp32 FMAs (no TF32) on fp32 matrices; on bf16 matrices the tensor cores multiply bf16
  // and accumulate in fp32, and D = α·A·B + β·C is formed in fp32 and rounded once to bf16 (cuBLAS docs,
  // cublasLtMatmul), as the CPU kernels round. The bias is the C operand (out = bias broadcast, then β = 1), so a
  // biased output is also rounded once; dbias by the deterministic column sums.
  void matmul_forward(floatX* out, const floatX* in, const floatX* w, const floatX* bias, int64_t n, int64_t in_dim,
                      int64_t out_dim) override {
    float beta = 0.0f;
    if (bias) {
      with_dtype([&](auto tag) {
        using T = decltype(tag);
        gpu::bias_broadcast(as<T>(out), as<T>(bias), n, out_dim, stream_);
      });
      beta = 1.0f;
    }
    gemm(true, false, out_dim, n, in_dim, w, in_dim, in, in_dim, out, out_dim, beta);
  }
  void matmul_backward(floatX* din, floatX* dw, floatX* dbias, const floatX* dout, const floatX* in, const floatX* w,
                       int64_t n, int64_t in_dim, int64_t out_dim) override {
    gemm(false, false, in_dim, n, out_dim, w, in_dim, dout, out_dim, din, in_dim, 0.0f);
    gemm(false, true, in_dim, out_dim, n, in, in_dim, dout, out_dim, dw, in_dim, 1.0f);
    if (dbias) {
      Temp partial(this, sizeof(float) * gpu::column_partials_rows(n) * out_dim);  // [P,O]
      with_dtype([&](auto tag) {
        using T = decltype(tag);
        gpu::column_sums_accumulate(as<T>(dbias), as<T>(dout), partial.f(), n, out_dim, stream_);
      });
    }
  }
  void residual_accumulate(floatX* x, const floatX* y, int64_t n) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::residual_accumulate(as<T>(x), as<T>(y), n, stream_);
    });
  }
  double sum_squares(const floatX* x, int64_t n) override {
    const int blocks = gpu::sum_squares_blocks(n);
    Temp sums(this, sizeof(double) * blocks);  // [blocks]
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::sum_squares(sums.d(), as<T>(x), n, stream_);
    });
    std::vector<double> host(static_cast<std::size_t>(blocks));
    memory_download(host.data(), sums.p, sizeof(double) * host.size());
    double s = 0;
    for (double v : host) s += v;
    return s;
  }

  // --- norms, attention, MLP ------------------------------------------------------------------------------------
  void norm_forward(floatX* out, float* mean, float* rstd, const floatX* x, const floatX* w, const floatX* bias,
                    int64_t n, int64_t c, bool rms) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::norm_forward(as<T>(out), mean, rstd, as<T>(x), as<T>(w), as<T>(bias), n, c, rms, stream_);
    });
  }
  void norm_backward_accumulate(floatX* dx, floatX* dw, floatX* dbias, const floatX* dout, const floatX* x,
                                const floatX* w, const float* mean, const float* rstd, int64_t n, int64_t c,
                                bool rms) override {
    Temp partial(this, sizeof(float) * gpu::column_partials_rows(n) * c);  // [P,C]
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::norm_backward_accumulate(as<T>(dx), as<T>(dw), as<T>(dbias), as<T>(dout), as<T>(x), as<T>(w), mean, rstd,
                                    partial.f(), n, c, rms, stream_);
    });
  }
  void rope_forward(floatX* qkv, const AttentionShape& s) override { rope(qkv, s, 1.0f); }
  void rope_backward(floatX* dqkv, const AttentionShape& s) override { rope(dqkv, s, -1.0f); }
  // Online softmax keeps no score matrix: the loop allocates no `work` on the GPU.
  int64_t attention_work_floats(const AttentionShape&, bool) const override { return 0; }
  void attention_forward(floatX* out, float* lse, const floatX* qkv, float* /*work*/,
                         const AttentionShape& s) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::attention_forward(as<T>(out), lse, as<T>(qkv), dims(s), attention_scale(s), stream_);
    });
  }
  void attention_backward(floatX* dqkv, const floatX* dout, const floatX* out, const float* lse, const floatX* qkv,
                          float* /*work*/, const AttentionShape& s) override {
    Temp delta(this, sizeof(float) * s.batch * s.heads * s.seq);  // D[B,NH,T]
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::attention_backward(as<T>(dqkv), as<T>(dout), as<T>(out), lse, as<T>(qkv), delta.f(), dims(s),
                              attention_scale(s), stream_);
    });
  }
  void gelu_forward(floatX* out, const floatX* in, int64_t n) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::gelu_forward(as<T>(out), as<T>(in), n, stream_);
    });
  }
  void gelu_backward(floatX* din, const floatX* in, const floatX* dout, int64_t n) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::gelu_backward(as<T>(din), as<T>(in), as<T>(dout), n, stream_);
    });
  }
  void swiglu_forward(floatX* out, const floatX* fc1, int64_t n, int64_t f) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::swiglu_forward(as<T>(out), as<T>(fc1), n, f, stream_);
    });
  }
  void swiglu_backward(floatX* dfc1, const floatX* fc1, const floatX* dout, int64_t n, int64_t f) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::swiglu_backward(as<T>(dfc1), as<T>(fc1), as<T>(dout), n, f, stream_);
    });
  }

  // --- embedding, loss, optimizer -------------------------------------------------------------------------------
  void embedding_forward(floatX* out, const int32_t* tokens, const floatX* wte, const floatX* wpe, int64_t b,
                         int64_t t, int64_t c) override {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::embedding_forward(as<T>(out), tokens, as<T>(wte), as<T>(wpe), b, t, c, stream_);
    });
  }
  void embedding_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int32_t* tokens, int64_t b, int64_t t,
                          int64_t c) override {
    if (b * t <= 0) return;
    Temp links(this, sizeof(int32_t) * 2 * b * t);  // [2, B·T]: next occurrence, first-occurrence flag
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::embedding_backward(as<T>(dwte), as<T>(dwpe), as<T>(dout), tokens, links.i(), b, t, c, stream_);
    });
  }
  double softmax_xent_forward_backward(floatX* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                       int64_t vocab, float scale) override {
    if (n <= 0) return 0.0;
    Temp row_loss(this, sizeof(double) * n);  // [N]
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::softmax_xent_forward_backward(as<T>(logits), row_loss.d(), targets, n, padded_vocab, vocab, scale,
                                         stream_);
    });
    std::vector<double> host(static_cast<std::size_t>(n));
    memory_download(host.data(), row_loss.p, sizeof(double) * host.size());
    double loss = 0;  // rows in order, as the CPU loop adds them
    for (double v : host) loss += v;
    return loss;
  }
  void adamw_step_shard(floatX* p, float* master, const floatX* g, float* m, float* v, int64_t n,
                        const AdamWParams& a) override {
    // The bias corrections exactly as cpu_kernels_adamw.cpp forms them (pow in double, then float).
    const float c1 = 1.0f - static_cast<float>(std::pow(a.beta1, static_cast<double>(a.t)));
    const float c2 = 1.0f - static_cast<float>(std::pow(a.beta2, static_cast<double>(a.t)));
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::adamw_step(as<T>(p), master, as<T>(g), m, v, n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                      a.grad_scale, c1, c2, stream_);
    });
  }

 private:
  // A scratch buffer from the caching allocator for the duration of one call: released when the call has
  // enqueued its kernels, which is safe in stream order (see memory_allocate).
  struct Temp {
    Temp(CudaBackend* be, std::size_t bytes) : be(be), p(be->memory_allocate(bytes)) {}
    ~Temp() {
      try {
        be->memory_release(p);
      } catch (...) {  // cannot fail for a pointer memory_allocate returned
      }
    }
    Temp(const Temp&) = delete;
    Temp& operator=(const Temp&) = delete;
    float* f() const { return static_cast<float*>(p); }
    double* d() const { return static_cast<double*>(p); }
    int32_t* i() const { return static_cast<int32_t*>(p); }
    CudaBackend* be;
    void* p;
  };

  // Calls f(T{}) with T the element type of dtype_: float or bf16 (make_cuda_backend admits no other).
  template <typename F>
  void with_dtype(F&& f) const {
    if (dtype_ == DType::bf16)
      f(bf16{});
    else
      f(0.0f);
  }
  uint32_t element_bytes() const { return static_cast<uint32_t>(dtype_bytes(dtype_)); }
  cudaDataType_t cuda_type() const { return dtype_ == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

  void rope(floatX* qkv, const AttentionShape& s, float sign) {
    with_dtype([&](auto tag) {
      using T = decltype(tag);
      gpu::rope_rotate(as<T>(qkv), dims(s), sign, stream_);
    });
  }

  static gpu::AttentionDims dims(const AttentionShape& s) {
    return {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
  }
  // 1/√HD exactly as cpu_kernels_attention.cpp computes it (float sqrt of a float).
  static float attention_scale(const AttentionShape& s) {
    return 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  }

  // C(m×n, ldc) = op(A)·op(B) + β·C, column-major, matrices of dtype_, fp32 compute and scalars; A is m×k (k×m
  // stored when trans_a), B is k×n (n×k stored when trans_b).
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const floatX* a, int64_t lda,
            const floatX* b, int64_t ldb, floatX* c, int64_t ldc, float beta) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // an empty sum: C = β·C
      if (beta == 0.0f) memory_zero(c, element_bytes() * static_cast<std::size_t>(ldc * n));
      return;
    }
    const uint32_t e = element_bytes();
    const GemmPlan& plan = gemm_plan(trans_a, trans_b, m, n, k, lda, ldb, ldc, alignment_of(a, e), alignment_of(b, e),
                                     alignment_of(c, e));
    const float alpha = 1.0f;
    lt_check(cublasLtMatmul(lt_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c, plan.c, &plan.algo,
                            workspace_, kWorkspaceBytes, stream_),
             "cublasLtMatmul");
  }

  const GemmPlan& gemm_plan(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                            uint32_t align_a, uint32_t align_b, uint32_t align_c) {
    const GemmKey key{ta, tb, m, n, k, lda, ldb, ldc, align_a, align_b, align_c};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    GemmPlan plan;
    cublasLtMatmulPreference_t pref = nullptr;
    try {
      lt_check(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
      const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      lt_check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
               "cublasLtMatmulDescSetAttribute(TRANSA)");
      lt_check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
               "cublasLtMatmulDescSetAttribute(TRANSB)");
      // Stored shapes: A is (ta ? k×m : m×k), B is (tb ? n×k : k×n), C is m×n; all column-major, of dtype_ (C and D
      // share one layout: D = C in place).
      const cudaDataType_t type = cuda_type();
      lt_check(cublasLtMatrixLayoutCreate(&plan.a, type, ta ? k : m, ta ? m : k, lda), "layout A");
      lt_check(cublasLtMatrixLayoutCreate(&plan.b, type, tb ? n : k, tb ? k : n, ldb), "layout B");
      lt_check(cublasLtMatrixLayoutCreate(&plan.c, type, m, n, ldc), "layout C");
      lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
      const std::size_t ws = kWorkspaceBytes;
      lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
               "preference workspace");
      const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
      for (const auto& [attr, value] : aligns)
        lt_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)), "preference alignment");
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      lt_check(cublasLtMatmulAlgoGetHeuristic(lt_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found),
               "cublasLtMatmulAlgoGetHeuristic");
      if (found == 0)
        throw std::runtime_error(std::string("cuBLASLt has no ") + to_string(dtype_) + " algorithm for m=" +
                                 std::to_string(m) + " n=" +
                                 std::to_string(n) + " k=" + std::to_string(k));
      plan.algo = result.algo;
      cublasLtMatmulPreferenceDestroy(pref);
    } catch (...) {
      if (pref) cublasLtMatmulPreferenceDestroy(pref);
      plan_destroy(plan);
      throw;
    }
    return plans_.emplace(key, plan).first->second;
  }

  static void plan_destroy(GemmPlan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    p = GemmPlan{};
  }

  // Frees every cached block (caller holds mutex_): waits for the stream first, since a cached block may still be
  // read by enqueued work of the caller that released it.
  void cached_release() {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) (void)cudaFree(p);
    free_.clear();
    cached_bytes_ = 0;
  }

  // Never throws: used by the destructor and by a failed constructor.
  void destroy() {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    cached_release();
    for (auto& [p, size] : live_) (void)cudaFree(p);
    live_.clear();
    for (auto& [key, plan] : plans_) plan_destroy(plan);
    plans_.clear();
    if (workspace_) (void)cudaFree(workspace_);
    workspace_ = nullptr;
    if (lt_) cublasLtDestroy(lt_);
    lt_ = nullptr;
    if (stream_) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  int device_ = 0;
  DType dtype_ = DType::fp32;  // of every floatX tensor
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;  // [kWorkspaceBytes]
  mutable std::mutex mutex_;   // guards live_, free_, cached_bytes_
  std::unordered_map<void*, std::size_t> live_;                 // pointer → rounded size, in use
  std::unordered_map<std::size_t, std::vector<void*>> free_;    // rounded size → cached blocks
  std::size_t cached_bytes_ = 0;
  std::map<GemmKey, GemmPlan> plans_;
};

}  // namespace

bool cuda_backend_built() { return true; }

std::unique_ptr<Backend> make_cuda_backend(DType dtype) {
  if (dtype != DType::fp32 && dtype != DType::bf16)
    throw std::runtime_error(std::string("the CUDA backend stores fp32 or bf16 tensors, not ") + to_string(dtype));
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw std::runtime_error(std::string("no GPU is visible to the CUDA runtime (") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
                             "): check the driver and CUDA_VISIBLE_DEVICES, or use --backend cpu");
  }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return std::make_unique<CudaBackend>(device, dtype);
}

}  // namespace shardplan::reference
