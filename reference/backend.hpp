#pragma once
// The device one rank trains on: its memory and the kernels of the reference GPT, in the style of ggml's
// backends. The CPU backend runs the kernels of cpu_kernels.hpp on host memory (Eigen + plain loops); the
// CUDA backend runs the same functions on its GPU's memory (cuBLASLt GEMMs and small kernels of its own,
// reference/cuda_*.cu), each tested against its CPU twin: on a GPU (tests/test_reference_cuda.cpp) and, on every
// CI run, under a host emulator of the CUDA execution model (tests/cuda_emu).
//
// Every pointer a backend takes is memory of that backend (host or device); shapes are those of
// cpu_kernels.hpp. Kernels may run asynchronously, in issue order: synchronize() waits for all of them. The
// functions returning a number (sum_squares, softmax_xent_forward_backward) wait for their own result.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "planner/precision.hpp"
#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

// An element of a backend's tensor dtype (Backend::dtype()), opaque so that only kernels, which know the dtype,
// read or index it: offsets into a tensor go through x_offset. (llm.c calls this type floatX, fixed at compile
// time; here the precision is chosen per run.)
struct floatX;
inline floatX* x_offset(floatX* p, int64_t elements, DType t) {
  return p ? reinterpret_cast<floatX*>(reinterpret_cast<char*>(p) + elements * dtype_bytes(t)) : nullptr;
}
inline const floatX* x_offset(const floatX* p, int64_t elements, DType t) {
  return p ? reinterpret_cast<const floatX*>(reinterpret_cast<const char*>(p) + elements * dtype_bytes(t)) : nullptr;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;         // "cpu" | "cuda"
  virtual DType dtype() const = 0;              // of every floatX tensor: fp32 or bf16
  virtual std::string description() const = 0;  // "cpu" / "NVIDIA H200 (sm_90, CUDA 13.0)"

  // --- memory ------------------------------------------------------------------------------------------------
  // `bytes` of backend memory, 256-byte aligned; throws std::bad_alloc when the device has none left. Released
  // memory may be kept for reuse (a caching allocator, as PyTorch's): release never waits for the device.
  virtual void* memory_allocate(std::size_t bytes) = 0;
  virtual void memory_release(void* p) = 0;
  virtual void memory_zero(void* p, std::size_t bytes) = 0;
  virtual void memory_copy(void* dst, const void* src, std::size_t bytes) = 0;            // backend → backend
  virtual void memory_upload(void* dst, const void* host, std::size_t bytes) = 0;         // host → backend (waits)
  virtual void memory_download(void* host, const void* src, std::size_t bytes) = 0;       // backend → host (waits)
  // Waits until every kernel and copy issued so far is done: before a collective on another stream reads what
  // they wrote, or writes memory they may still read.
  virtual void synchronize() = 0;
  // The device's own figure of memory in use, bytes: the resident set (/proc/self/statm) on CPU, total − free
  // (cudaMemGetInfo) on GPU, which includes the CUDA context, cuBLAS workspaces and NCCL buffers.
  virtual int64_t device_memory_used() const = 0;
  // Bytes the loop could still allocate: MemAvailable (/proc/meminfo) on CPU, cudaMemGetInfo's free on GPU; 0 when
  // unknown (no check before the run).
  virtual int64_t device_memory_available() const { return 0; }

  // --- kernels (cpu_kernels.hpp documents each) --------------------------------------------------------------
  // Tensors (activations, weights, their gradients) are floatX: elements of dtype() — fp32, or bf16 under mixed
  // precision. Per-row statistics (mean, rstd, lse), attention scratch, AdamW moments and the fp32 master copy are
  // float whatever dtype() is. Kernels compute in fp32 and round when they store (reference/bf16.hpp).
  virtual void matmul_forward(floatX* out, const floatX* in, const floatX* w, const floatX* bias, int64_t n,
                              int64_t in_dim, int64_t out_dim) = 0;
  virtual void matmul_backward(floatX* din, floatX* dw, floatX* dbias, const floatX* dout, const floatX* in,
                               const floatX* w, int64_t n, int64_t in_dim, int64_t out_dim) = 0;
  virtual void residual_accumulate(floatX* x, const floatX* y, int64_t n) = 0;
  virtual double sum_squares(const floatX* x, int64_t n) = 0;
  virtual void norm_forward(floatX* out, float* mean, float* rstd, const floatX* x, const floatX* w,
                            const floatX* bias, int64_t n, int64_t c, bool rms) = 0;
  virtual void norm_backward_accumulate(floatX* dx, floatX* dw, floatX* dbias, const floatX* dout, const floatX* x,
                                        const floatX* w, const float* mean, const float* rstd, int64_t n, int64_t c,
                                        bool rms) = 0;
  virtual void rope_forward(floatX* qkv, const AttentionShape& s) = 0;
  virtual void rope_backward(floatX* dqkv, const AttentionShape& s) = 0;
  // Floats of the `work` scratch attention_forward (backward: attention_backward) needs: the T×T score matrix the
  // CPU kernels keep per (sequence, head), 0 for kernels that keep none (online softmax on the GPU).
  virtual int64_t attention_work_floats(const AttentionShape& s, bool backward) const = 0;
  virtual void attention_forward(floatX* out, float* lse, const floatX* qkv, float* work,
                                 const AttentionShape& s) = 0;
  virtual void attention_backward(floatX* dqkv, const floatX* dout, const floatX* out, const float* lse,
                                  const floatX* qkv, float* work, const AttentionShape& s) = 0;
  virtual void gelu_forward(floatX* out, const floatX* in, int64_t n) = 0;
  virtual void gelu_backward(floatX* din, const floatX* in, const floatX* dout, int64_t n) = 0;
  virtual void swiglu_forward(floatX* out, const floatX* fc1, int64_t n, int64_t f) = 0;
  virtual void swiglu_backward(floatX* dfc1, const floatX* fc1, const floatX* dout, int64_t n, int64_t f) = 0;
  // tokens[B,T] in backend memory.
  virtual void embedding_forward(floatX* out, const int32_t* tokens, const floatX* wte, const floatX* wpe,
                                 int64_t b, int64_t t, int64_t c) = 0;
  virtual void embedding_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int32_t* tokens, int64_t b,
                                  int64_t t, int64_t c) = 0;
  // targets[N] in backend memory.
  virtual double softmax_xent_forward_backward(floatX* logits, const int32_t* targets, int64_t n,
                                               int64_t padded_vocab, int64_t vocab, float scale) = 0;
  // master[n] null: p is updated in place (fp32, or pure-bf16 rounding each step); otherwise the fp32 master is
  // updated and p becomes its rounded copy (amp-bf16).
  virtual void adamw_step_shard(floatX* p, float* master, const floatX* g, float* m, float* v, int64_t n,
                                const AdamWParams& a) = 0;
};

// Host memory and the kernels of cpu_kernels.hpp; tensors of `dtype` (fp32 or bf16).
std::unique_ptr<Backend> make_cpu_backend(DType dtype = DType::fp32);

// Whether this build has the CUDA backend (the CUDA toolkit was found at configure time).
bool cuda_backend_built();
// GPUs this process can see (cudaGetDeviceCount; 0 without the CUDA build or on error). Safe before MPI starts.
int cuda_devices_visible();
// The CUDA backend on the current device (comm's NCCL world has chosen it: cudaSetDevice before this call).
// Throws std::runtime_error naming the reason when the build has no CUDA or no GPU is visible.
std::unique_ptr<Backend> make_cuda_backend(DType dtype = DType::fp32);

// "cpu" or "cuda"; throws std::runtime_error for another name, a dtype other than fp32/bf16, or a backend this build
// or machine cannot run.
std::unique_ptr<Backend> make_backend(const std::string& name, DType dtype = DType::fp32);

}  // namespace shardplan::reference
