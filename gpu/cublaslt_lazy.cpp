// cuBLASLt, opened on first use. Linking libcublasLt (540 MB) into the shardplan binary costs every process about
// 75 ms of the library's own start-up, whether or not it multiplies anything: `shardplan plan` on a machine with
// the CUDA toolkit took 130 ms instead of 55 (over the planner's 100 ms target). Only `validate --backend cuda`
// and `calibrate --backend nccl` call cuBLASLt, so these definitions of the functions they use open the library
// (dlopen, by the soname of the toolkit the build used) at the first call and forward to it.
// A machine without the library gets a std::runtime_error naming it and the loader's reason, at that first call.
#include <dlfcn.h>

#include <cublasLt.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace {

void* cublaslt_library() {
  static void* handle = nullptr;
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    handle = dlopen(SHARDPLAN_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!handle) failure = dlerror();
  });
  if (!handle)
    throw std::runtime_error(std::string("cannot load " SHARDPLAN_CUBLASLT_SONAME " (cuBLASLt, for the GPU GEMMs): ") +
                             failure);
  return handle;
}

// The library's own definition of `name`, as a pointer of type F.
template <typename F>
F cublaslt_symbol(const char* name) {
  void* p = dlsym(cublaslt_library(), name);
  if (!p) throw std::runtime_error(std::string(SHARDPLAN_CUBLASLT_SONAME " has no ") + name);
  return reinterpret_cast<F>(p);
}

}  // namespace

// Each function: resolved once (thread-safe static), then a plain call.
#define SHARDPLAN_CUBLASLT_FORWARD(ret, name, params, args)                             \
  extern "C" ret CUBLASWINAPI name params {                                            \
    static const auto real = cublaslt_symbol<decltype(&name)>(#name);                  \
    return real args;                                                                   \
  }

SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
SHARDPLAN_CUBLASLT_FORWARD(const char*, cublasLtGetStatusString, (cublasStatus_t status), (status))
SHARDPLAN_CUBLASLT_FORWARD(size_t, cublasLtGetVersion, (void), ())
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmul,
                           (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                            cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                            const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                            cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream),
                           (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                            workspace_bytes, stream))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                           (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                            cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                            cublasLtMatmulPreference_t preference, int requested,
                            cublasLtMatmulHeuristicResult_t results[], int* returned),
                           (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results, returned))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescCreate,
                           (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
                           (desc, compute, scale))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescSetAttribute,
                           (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                            size_t bytes),
                           (desc, attr, buf, bytes))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),
                           (pref))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref),
                           (pref))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                           (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                            const void* buf, size_t bytes),
                           (pref, attr, buf, bytes))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutCreate,
                           (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,
                            int64_t ld),
                           (layout, type, rows, cols, ld))
SHARDPLAN_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
