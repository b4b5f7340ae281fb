// The CPU backend (backend.hpp): host memory and the kernels of cpu_kernels.hpp, run at once, instantiated for the
// backend's tensor dtype (fp32, or bf16 storage with fp32 compute).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "reference/arena.hpp"
#include "reference/backend.hpp"

namespace shardplan::reference {

namespace {

constexpr std::size_t kAlignment = 256;

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
int64_t memory_available_read() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<int64_t>(kib) * 1024;
}

// The typed view of an opaque floatX tensor, for the kernel instantiation chosen by the tag's type (T{}).
template <typename T>
T* typed(T, floatX* p) {
  return reinterpret_cast<T*>(p);
}
template <typename T>
const T* typed(T, const floatX* p) {
  return reinterpret_cast<const T*>(p);
}

class CpuBackend final : public Backend {
  DType dtype_;

  // Calls f(bf16{}) or f(float{}) as the tensors' dtype says; returns what f returns. (Defined before the kernels:
  // they deduce its return type.)
  template <typename F>
  auto run(F&& f) {
    if (dtype_ == DType::bf16) return f(bf16{});
    return f(float{});
  }

 public:
  explicit CpuBackend(DType dtype) : dtype_(dtype) {}
  const char* name() const override { return "cpu"; }
  DType dtype() const override { return dtype_; }
  std::string description() const override {
    return dtype_ == DType::bf16 ? "cpu (bf16 storage, fp32 compute, Eigen)" : "cpu (fp32, Eigen)";
  }

  void* memory_allocate(std::size_t bytes) override {
    const std::size_t rounded = ((bytes + kAlignment - 1) / kAlignment) * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded > 0 ? rounded : kAlignment);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void memory_release(void* p) override { std::free(p); }
  void memory_zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }
  void memory_copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void memory_upload(void* dst, const void* host, std::size_t bytes) override { std::memcpy(dst, host, bytes); }
  void memory_download(void* host, const void* src, std::size_t bytes) override { std::memcpy(host, src, bytes); }
  void synchronize() override {}
  int64_t device_memory_used() const override { return rss_bytes_read(); }
  int64_t device_memory_available() const override { return memory_available_read(); }

  // Every kernel: `run` calls the lambda with a tag of the storage type, float{} or bf16{}, and the lambda calls
  // the kernel instantiation for it on typed(tag, tensor) views.
  void matmul_forward(floatX* out, const floatX* in, const floatX* w, const floatX* bias, int64_t n, int64_t in_dim,
                      int64_t out_dim) override {
    run([&](auto t) {
      reference::matmul_forward(typed(t, out), typed(t, in), typed(t, w), typed(t, bias), n, in_dim, out_dim);
    });
  }
  void matmul_backward(floatX* din, floatX* dw, floatX* dbias, const floatX* dout, const floatX* in, const floatX* w,
                       int64_t n, int64_t in_dim, int64_t out_dim) override {
    run([&](auto t) {
      reference::matmul_backward(typed(t, din), typed(t, dw), typed(t, dbias), typed(t, dout), typed(t, in),
                                 typed(t, w), n, in_dim, out_dim);
    });
  }
  void residual_accumulate(floatX* x, const floatX* y, int64_t n) override {
    run([&](auto t) { reference::residual_accumulate(typed(t, x), typed(t, y), n); });
  }
  double sum_squares(const floatX* x, int64_t n) override {
    return run([&](auto t) { return reference::sum_squares(typed(t, x), n); });
  }
  void norm_forward(floatX* out, float* mean, float* rstd, const floatX* x, const floatX* w, const floatX* bias,
                    int64_t n, int64_t c, bool rms) override {
    run([&](auto t) {
      reference::norm_forward(typed(t, out), mean, rstd, typed(t, x), typed(t, w), typed(t, bias), n, c, rms);
    });
  }
  void norm_backward_accumulate(floatX* dx, floatX* dw, floatX* dbias, const floatX* dout, const floatX* x,
                                const floatX* w, const float* mean, const float* rstd, int64_t n, int64_t c,
                                bool rms) override {
    run([&](auto t) {
      reference::norm_backward_accumulate(typed(t, dx), typed(t, dw), typed(t, dbias), typed(t, dout), typed(t, x),
                                          typed(t, w), mean, rstd, n, c, rms);
    });
  }
  void rope_forward(floatX* qkv, const AttentionShape& s) override {
    run([&](auto t) { reference::rope_forward(typed(t, qkv), s); });
  }
  void rope_backward(floatX* dqkv, const AttentionShape& s) override {
    run([&](auto t) { reference::rope_backward(typed(t, dqkv), s); });
  }
  int64_t attention_work_floats(const AttentionShape& s, bool backward) const override {
    return (backward ? 2 : 1) * s.seq * s.seq;  // [T,T] scores; backward [2,T,T] with their gradient
  }
  void attention_forward(floatX* out, float* lse, const floatX* qkv, float* work, const AttentionShape& s) override {
    run([&](auto t) { reference::attention_forward(typed(t, out), lse, typed(t, qkv), work, s); });
  }
  void attention_backward(floatX* dqkv, const floatX* dout, const floatX* out, const float* lse, const floatX* qkv,
                          float* work, const AttentionShape& s) override {
    run([&](auto t) {
      reference::attention_backward(typed(t, dqkv), typed(t, dout), typed(t, out), lse, typed(t, qkv), work, s);
    });
  }
  void gelu_forward(floatX* out, const floatX* in, int64_t n) override {
    run([&](auto t) { reference::gelu_forward(typed(t, out), typed(t, in), n); });
  }
  void gelu_backward(floatX* din, const floatX* in, const floatX* dout, int64_t n) override {
    run([&](auto t) { reference::gelu_backward(typed(t, din), typed(t, in), typed(t, dout), n); });
  }
  void swiglu_forward(floatX* out, const floatX* fc1, int64_t n, int64_t f) override {
    run([&](auto t) { reference::swiglu_forward(typed(t, out), typed(t, fc1), n, f); });
  }
  void swiglu_backward(floatX* dfc1, const floatX* fc1, const floatX* dout, int64_t n, int64_t f) override {
    run([&](auto t) { reference::swiglu_backward(typed(t, dfc1), typed(t, fc1), typed(t, dout), n, f); });
  }
  void embedding_forward(floatX* out, const int32_t* tokens, const floatX* wte, const floatX* wpe, int64_t b,
                         int64_t t_len, int64_t c) override {
    run([&](auto t) {
      reference::embedding_forward(typed(t, out), tokens, typed(t, wte), typed(t, wpe), b, t_len, c);
    });
  }
  void embedding_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int32_t* tokens, int64_t b,
                          int64_t t_len, int64_t c) override {
    run([&](auto t) {
      reference::embedding_backward(typed(t, dwte), typed(t, dwpe), typed(t, dout), tokens, b, t_len, c);
    });
  }
  double softmax_xent_forward_backward(floatX* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                       int64_t vocab, float scale) override {
    return run([&](auto t) {
      return reference::softmax_xent_forward_backward(typed(t, logits), targets, n, padded_vocab, vocab, scale);
    });
  }
  void adamw_step_shard(floatX* p, float* master, const floatX* g, float* m, float* v, int64_t n,
                        const AdamWParams& a) override {
    run([&](auto t) { reference::adamw_step_shard(typed(t, p), master, typed(t, g), m, v, n, a); });
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(DType dtype) {
  if (dtype != DType::fp32 && dtype != DType::bf16) {
    throw std::runtime_error(std::string("the cpu backend has no ") + to_string(dtype) +
                             " kernels: use an fp32 or bf16 precision (fp32, pure-bf16, amp-bf16)");
  }
  return std::make_unique<CpuBackend>(dtype);
}

std::unique_ptr<Backend> make_backend(const std::string& name, DType dtype) {
  if (name == "cpu") return make_cpu_backend(dtype);
  if (name == "cuda") return make_cuda_backend(dtype);
  throw std::runtime_error("backend '" + name + "': use cpu or cuda");
}

}  // namespace shardplan::reference
