// The CPU backend (backend.hpp): host memory and the fp32 kernels of cpu_kernels.hpp, run at once.
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

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  std::string description() const override { return "cpu (fp32, Eigen)"; }

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

  void matmul_forward(float* out, const float* in, const float* w, const float* bias, int64_t n, int64_t in_dim,
                      int64_t out_dim) override {
    reference::matmul_forward(out, in, w, bias, n, in_dim, out_dim);
  }
  void matmul_backward(float* din, float* dw, float* dbias, const float* dout, const float* in, const float* w,
                       int64_t n, int64_t in_dim, int64_t out_dim) override {
    reference::matmul_backward(din, dw, dbias, dout, in, w, n, in_dim, out_dim);
  }
  void residual_accumulate(float* x, const float* y, int64_t n) override { reference::residual_accumulate(x, y, n); }
  double sum_squares(const float* x, int64_t n) override { return reference::sum_squares(x, n); }
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* bias,
                    int64_t n, int64_t c, bool rms) override {
    reference::norm_forward(out, mean, rstd, x, w, bias, n, c, rms);
  }
  void norm_backward_accumulate(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                                const float* mean, const float* rstd, int64_t n, int64_t c, bool rms) override {
    reference::norm_backward_accumulate(dx, dw, dbias, dout, x, w, mean, rstd, n, c, rms);
  }
  void rope_forward(float* qkv, const AttentionShape& s) override { reference::rope_forward(qkv, s); }
  void rope_backward(float* dqkv, const AttentionShape& s) override { reference::rope_backward(dqkv, s); }
  int64_t attention_work_floats(const AttentionShape& s, bool backward) const override {
    return (backward ? 2 : 1) * s.seq * s.seq;  // [T,T] scores; backward [2,T,T] with their gradient
  }
  void attention_forward(float* out, float* lse, const float* qkv, float* work, const AttentionShape& s) override {
    reference::attention_forward(out, lse, qkv, work, s);
  }
  void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                          float* work, const AttentionShape& s) override {
    reference::attention_backward(dqkv, dout, out, lse, qkv, work, s);
  }
  void gelu_forward(float* out, const float* in, int64_t n) override { reference::gelu_forward(out, in, n); }
  void gelu_backward(float* din, const float* in, const float* dout, int64_t n) override {
    reference::gelu_backward(din, in, dout, n);
  }
  void swiglu_forward(float* out, const float* fc1, int64_t n, int64_t f) override {
    reference::swiglu_forward(out, fc1, n, f);
  }
  void swiglu_backward(float* dfc1, const float* fc1, const float* dout, int64_t n, int64_t f) override {
    reference::swiglu_backward(dfc1, fc1, dout, n, f);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t b, int64_t t,
                         int64_t c) override {
    reference::embedding_forward(out, tokens, wte, wpe, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t b, int64_t t,
                          int64_t c) override {
    reference::embedding_backward(dwte, dwpe, dout, tokens, b, t, c);
  }
  double softmax_xent_forward_backward(float* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                       int64_t vocab, float scale) override {
    return reference::softmax_xent_forward_backward(logits, targets, n, padded_vocab, vocab, scale);
  }
  void adamw_step_shard(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a) override {
    reference::adamw_step_shard(p, g, m, v, n, a);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") return make_cuda_backend();
  throw std::runtime_error("backend '" + name + "': use cpu or cuda");
}

}  // namespace shardplan::reference
