// The GPU device (compiled only with the CUDA toolkit): bf16 GEMMs through cuBLASLt (fp32 accumulation, the
// heuristic's first algorithm with a 32 MiB workspace, as PyTorch's cuBLASLt path does), cudaMemcpy for the
// device memory bandwidth, bf16 buffers for the collectives. Every call is on one stream of this rank's GPU.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "calibrate/device.hpp"

namespace shardplan::calibrate {

namespace {

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw comm::CommError(fmt::format("{} failed: {}", call, cudaGetErrorString(e)));
}

void lt_check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw comm::CommError(fmt::format("{} failed: cuBLAS status {}", call, static_cast<int>(s)));
}

constexpr std::size_t kWorkspaceBytes = 32u << 20;

class GpuGemm final : public Kernel {
 public:
  GpuGemm(cublasLtHandle_t lt, cudaStream_t stream, int64_t m, int64_t n, int64_t k, std::size_t rotate_bytes)
      : lt_(lt), stream_(stream) {
    const std::size_t set_bytes = 2 * static_cast<std::size_t>(m * k + k * n + m * n);
    const std::size_t sets = std::clamp<std::size_t>((rotate_bytes + set_bytes - 1) / set_bytes, 1, 64);
    // Operands: small random bf16 values (zeros would let the tensor cores idle at lower power).
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto make = [&](int64_t elems) {
      std::vector<__nv_bfloat16> host(static_cast<std::size_t>(elems));  // [elems]
      for (auto& x : host) x = __float2bfloat16(dist(rng));
      void* d = nullptr;
      cuda_check(cudaMalloc(&d, host.size() * 2), "cudaMalloc");
      cuda_check(cudaMemcpy(d, host.data(), host.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
      buffers_.push_back(d);
      return d;
    };
    for (std::size_t i = 0; i < sets; ++i) sets_.push_back({make(m * k), make(k * n), make(m * n)});
    cuda_check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc");
    // Column-major: A [m × k] ld m, B [k × n] ld k, C [m × n] ld m.
    lt_check(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    lt_check(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, m, k, m), "cublasLtMatrixLayoutCreate");
    lt_check(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, k, n, k), "cublasLtMatrixLayoutCreate");
    lt_check(cublasLtMatrixLayoutCreate(&c_, CUDA_R_16BF, m, n, m), "cublasLtMatrixLayoutCreate");
    cublasLtMatmulPreference_t pref = nullptr;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    std::size_t ws = kWorkspaceBytes;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
             "cublasLtMatmulPreferenceSetAttribute");
    int found = 0;
    lt_check(cublasLtMatmulAlgoGetHeuristic(lt_, desc_, a_, b_, c_, c_, pref, 1, &heuristic_, &found),
             "cublasLtMatmulAlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw comm::CommError(fmt::format("cuBLASLt has no bf16 algorithm for {}x{}x{}", m, n, k));
  }
  ~GpuGemm() override {
    cudaStreamSynchronize(stream_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatmulDescDestroy(desc_);
    for (void* p : buffers_) cudaFree(p);
    cudaFree(workspace_);
  }
  void launch() override {
    const float alpha = 1.0f, beta = 0.0f;
    const Set& s = sets_[next_];
    next_ = (next_ + 1) % sets_.size();
    lt_check(cublasLtMatmul(lt_, desc_, &alpha, s.a, a_, s.b, b_, &beta, s.c, c_, s.c, c_, &heuristic_.algo,
                            workspace_, kWorkspaceBytes, stream_),
             "cublasLtMatmul");
  }

 private:
  struct Set {
    void *a, *b, *c;
  };
  cublasLtHandle_t lt_;
  cudaStream_t stream_;
  std::vector<void*> buffers_;
  std::vector<Set> sets_;
  std::size_t next_ = 0;
  void* workspace_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

class GpuCopy final : public Kernel {
 public:
  GpuCopy(cudaStream_t stream, std::size_t bytes) : stream_(stream), bytes_(bytes) {
    cuda_check(cudaMalloc(&src_, bytes), "cudaMalloc");
    cuda_check(cudaMalloc(&dst_, bytes), "cudaMalloc");
  }
  ~GpuCopy() override {
    cudaStreamSynchronize(stream_);
    cudaFree(src_);
    cudaFree(dst_);
  }
  void launch() override { cuda_check(cudaMemcpyAsync(dst_, src_, bytes_, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync"); }

 private:
  cudaStream_t stream_;
  std::size_t bytes_;
  void *src_ = nullptr, *dst_ = nullptr;
};

class GpuDevice final : public Device {
 public:
  GpuDevice() {
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    cuda_check(cudaGetDeviceProperties(&props_, device), "cudaGetDeviceProperties");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    lt_check(cublasLtCreate(&lt_), "cublasLtCreate");
  }
  ~GpuDevice() override {
    cudaStreamSynchronize(stream_);
    cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
  }
  std::string description() const override { return props_.name; }
  bool gpu() const override { return true; }
  comm::DataType dtype() const override { return comm::DataType::bf16; }
  std::size_t cache_bytes() const override { return static_cast<std::size_t>(props_.l2CacheSize); }
  std::string versions() const override {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    return fmt::format("driver CUDA {}.{}, runtime {}.{}, cuBLASLt {}", driver / 1000, driver % 1000 / 10,
                       runtime / 1000, runtime % 1000 / 10, cublasLtGetVersion());
  }
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void upload(void* dst, const std::vector<float>& values) override {
    std::vector<__nv_bfloat16> host(values.size());  // [count]
    for (std::size_t i = 0; i < values.size(); ++i) host[i] = __float2bfloat16(values[i]);
    cuda_check(cudaMemcpy(dst, host.data(), host.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  std::vector<float> download(const void* src, std::size_t count) override {
    std::vector<__nv_bfloat16> host(count);  // [count]
    cuda_check(cudaMemcpy(host.data(), src, count * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = __bfloat162float(host[i]);
    return v;
  }
  // Waits for this device's work, including the communicators' streams (cudaDeviceSynchronize).
  void synchronize() override { cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
  std::unique_ptr<Kernel> gemm(int64_t m, int64_t n, int64_t k, std::size_t rotate_bytes) override {
    return std::make_unique<GpuGemm>(lt_, stream_, m, n, k, rotate_bytes);
  }
  std::unique_ptr<Kernel> copy(std::size_t bytes) override { return std::make_unique<GpuCopy>(stream_, bytes); }

 private:
  cudaDeviceProp props_{};
  cudaStream_t stream_{};
  cublasLtHandle_t lt_ = nullptr;
};

}  // namespace

std::unique_ptr<Device> make_gpu_device() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    throw comm::CommError("no GPU is visible (use --backend mpi on CPUs)");
  return std::make_unique<GpuDevice>();
}

}  // namespace shardplan::calibrate
