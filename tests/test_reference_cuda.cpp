// reference/ CUDA backend: every kernel of the Backend interface against its CPU twin on the same random inputs
// (fixed seeds), through the backends' own memory functions; and the caching allocator. Without a GPU (or
// without the CUDA toolkit at configure time) each test says why in a MESSAGE and returns: skipped, passing.
//
// Tolerances: |gpu − cpu| ≤ rtol·(|cpu| + rms(cpu)) elementwise. The rms term covers outputs that are sums of
// terms of both signs (GEMMs, norm gradients, attention), whose small values lose relative precision in any
// summation order; rtol 1e-5 for pointwise fp32 formulas (CUDA's expf/tanhf are within 2 ulp; nvcc contracts
// a·b + c into FMA), 1e-4 where sums of tens to hundreds of terms are reordered (GEMM tiles, atomics,
// per-block partials, online softmax).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "reference/backend.hpp"
#include "tests/kernel_compare.hpp"

using namespace shardplan::reference;
using kernel_compare::random_tokens;
using kernel_compare::random_vec;

namespace {

// The CUDA backend, or null after a MESSAGE saying why the calling test is skipped.
std::unique_ptr<Backend> cuda_or_skip() {
  if (!cuda_backend_built()) {
    MESSAGE("this build has no CUDA backend (toolkit not found at configure time): skipped");
    return nullptr;
  }
  try {
    return make_cuda_backend();
  } catch (const std::exception& e) {
    MESSAGE("no usable GPU (" << std::string(e.what()) << "): skipped");
    return nullptr;
  }
}

// n elements of T in one backend's memory, `offset` elements past a 256-byte-aligned allocation (offset 1 makes
// a 4-byte-aligned view, as the weights inside a flat parameter buffer can be).
template <typename T>
struct Buf {
  Buf(Backend& b, const std::vector<T>& host, std::size_t offset = 0) : be(b), n(host.size()) {
    base = static_cast<T*>(be.memory_allocate(sizeof(T) * (n + offset)));
    p = base + offset;
    if (n) be.memory_upload(p, host.data(), sizeof(T) * n);
  }
  ~Buf() { be.memory_release(base); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n) be.memory_download(h.data(), p, sizeof(T) * n);
    return h;
  }
  Backend& be;
  std::size_t n;
  T* base;
  T* p;
};

// The same host data in the CPU backend and in the CUDA backend.
template <typename T>
struct Twin {
  Twin(Backend& c, Backend& g, const std::vector<T>& host, std::size_t offset = 0)
      : cpu(c, host, offset), gpu(g, host, offset) {}
  Buf<T> cpu, gpu;
};
using TwinF = Twin<float>;

void compare(const std::string& what, const TwinF& t, double rtol) {
  kernel_compare::compare(what, t.cpu.get(), t.gpu.get(), rtol, "gpu");
}

}  // namespace

TEST_SUITE("reference cuda") {
  TEST_CASE("reference cuda: make_cuda_backend works or names its reason") {
    try {
      auto be = make_cuda_backend();
      CHECK(std::string(be->name()) == "cuda");
      const std::string d = be->description();
      CHECK_MESSAGE(d.find("(sm_") != std::string::npos, d);
      CHECK_MESSAGE(d.find("CUDA ") != std::string::npos, d);
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      CHECK_MESSAGE((m.find("no GPU is visible") != std::string::npos ||
                     m.find("no CUDA backend") != std::string::npos),
                    m);
      CHECK(m.find("--backend cpu") != std::string::npos);
    }
  }

  TEST_CASE("reference cuda: caching allocator, copies, device memory used") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    const std::vector<float> host = random_vec(250, 1);  // 1000 bytes
    auto* a = static_cast<float*>(gpu->memory_allocate(1000));
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 256 == 0);
    gpu->memory_upload(a, host.data(), 1000);
    std::vector<float> back(250, 0.0f);
    gpu->memory_download(back.data(), a, 1000);
    CHECK(std::memcmp(back.data(), host.data(), 1000) == 0);

    auto* b = static_cast<float*>(gpu->memory_allocate(1000));
    CHECK(b != a);
    gpu->memory_copy(b, a, 1000);
    gpu->memory_zero(b, 400);  // the first 100 floats
    gpu->memory_download(back.data(), b, 1000);
    for (int i = 0; i < 100; ++i) REQUIRE(back[i] == 0.0f);
    CHECK(std::memcmp(back.data() + 100, host.data() + 100, 600) == 0);

    // Released blocks are reused for the same rounded size (1000 and 1001 bytes both round to 1024).
    gpu->memory_release(b);
    auto* c = static_cast<float*>(gpu->memory_allocate(1001));
    CHECK(c == b);
    void* empty = gpu->memory_allocate(0);
    CHECK(empty != nullptr);
    gpu->memory_release(empty);
    gpu->memory_release(nullptr);  // a no-op, as free(nullptr)

    // Out of memory (1 PiB): bad_alloc after dropping the cache and retrying; the backend still works after.
    CHECK_THROWS_AS(gpu->memory_allocate(std::size_t{1} << 50), std::bad_alloc);
    gpu->memory_download(back.data(), a, 1000);
    CHECK(std::memcmp(back.data(), host.data(), 1000) == 0);

    CHECK(gpu->device_memory_used() > 32 << 20);  // at least the context and the 32 MiB cuBLASLt workspace
    CHECK(gpu->device_memory_available() > 0);
    gpu->memory_release(a);
    gpu->memory_release(c);
  }

  TEST_CASE("reference cuda: matmul forward and backward (bias or none, accumulation, unaligned weights)") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    // N = 300 rows crosses the 256-row chunks of the bias-gradient column sums; odd dimensions everywhere.
    const int64_t n = 300, in_dim = 50, out_dim = 37;
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        CAPTURE(with_bias);
        CAPTURE(offset);
        TwinF in(*cpu, *gpu, random_vec(n * in_dim, 10));
        TwinF w(*cpu, *gpu, random_vec(out_dim * in_dim, 11, 0.2f), offset);
        TwinF bias(*cpu, *gpu, random_vec(out_dim, 12));
        TwinF out(*cpu, *gpu, random_vec(n * out_dim, 13));  // overwritten
        const float* bc = with_bias ? bias.cpu.p : nullptr;
        const float* bg = with_bias ? bias.gpu.p : nullptr;
        cpu->matmul_forward(out.cpu.p, in.cpu.p, w.cpu.p, bc, n, in_dim, out_dim);
        gpu->matmul_forward(out.gpu.p, in.gpu.p, w.gpu.p, bg, n, in_dim, out_dim);
        compare("matmul_forward out", out, 1e-4);

        TwinF dout(*cpu, *gpu, random_vec(n * out_dim, 14));
        TwinF din(*cpu, *gpu, random_vec(n * in_dim, 15));               // overwritten
        TwinF dw(*cpu, *gpu, random_vec(out_dim * in_dim, 16), offset);  // accumulated
        TwinF dbias(*cpu, *gpu, random_vec(out_dim, 17));                // accumulated
        cpu->matmul_backward(din.cpu.p, dw.cpu.p, with_bias ? dbias.cpu.p : nullptr, dout.cpu.p, in.cpu.p, w.cpu.p, n,
                             in_dim, out_dim);
        gpu->matmul_backward(din.gpu.p, dw.gpu.p, with_bias ? dbias.gpu.p : nullptr, dout.gpu.p, in.gpu.p, w.gpu.p, n,
                             in_dim, out_dim);
        compare("matmul_backward din", din, 1e-4);
        compare("matmul_backward dw", dw, 1e-4);
        compare("matmul_backward dbias", dbias, 1e-4);  // untouched (equal) when null
      }
    }
  }

  TEST_CASE("reference cuda: residual and sum of squares") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    const int64_t n = 100003;  // not a multiple of any block size
    TwinF x(*cpu, *gpu, random_vec(n, 20));
    TwinF y(*cpu, *gpu, random_vec(n, 21));
    cpu->residual_accumulate(x.cpu.p, y.cpu.p, n);
    gpu->residual_accumulate(x.gpu.p, y.gpu.p, n);
    compare("residual_accumulate", x, 1e-7);  // one float addition: identical
    const double sc = cpu->sum_squares(x.cpu.p, n), sg = gpu->sum_squares(x.gpu.p, n);
    CHECK(sc > 1.0e5);  // E[x²] = 2 for the sum of two unit normals: ≈ 2·10⁵
    CHECK(std::fabs(sg - sc) <= 1e-12 * sc);  // squares exact in double, sums reordered
    CHECK(gpu->sum_squares(x.gpu.p, 0) == 0.0);
  }

  TEST_CASE("reference cuda: LayerNorm and RMSNorm forward and backward") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    const int64_t n = 300, c = 80;  // 300 rows: two column-sum chunks; 80 channels: not a multiple of 32
    for (int rms = 0; rms < 2; ++rms) {
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        CAPTURE(rms);
        CAPTURE(with_bias);
        TwinF x(*cpu, *gpu, random_vec(n * c, 30, 2.0f, 0.7f));  // mean 0.7: the LayerNorm mean matters
        TwinF w(*cpu, *gpu, random_vec(c, 31, 0.5f, 1.0f));
        TwinF bias(*cpu, *gpu, random_vec(c, 32));
        TwinF out(*cpu, *gpu, random_vec(n * c, 33));
        TwinF mean(*cpu, *gpu, random_vec(n, 34));
        TwinF rstd(*cpu, *gpu, random_vec(n, 35));
        const bool r = rms != 0;
        cpu->norm_forward(out.cpu.p, r ? nullptr : mean.cpu.p, rstd.cpu.p, x.cpu.p, w.cpu.p,
                          with_bias ? bias.cpu.p : nullptr, n, c, r);
        gpu->norm_forward(out.gpu.p, r ? nullptr : mean.gpu.p, rstd.gpu.p, x.gpu.p, w.gpu.p,
                          with_bias ? bias.gpu.p : nullptr, n, c, r);
        compare("norm_forward out", out, 1e-5);
        compare("norm_forward mean", mean, 1e-6);
        compare("norm_forward rstd", rstd, 1e-6);

        TwinF dout(*cpu, *gpu, random_vec(n * c, 36));
        TwinF dx(*cpu, *gpu, random_vec(n * c, 37));    // accumulated
        TwinF dw(*cpu, *gpu, random_vec(c, 38));        // accumulated
        TwinF dbias(*cpu, *gpu, random_vec(c, 39));     // accumulated
        cpu->norm_backward_accumulate(dx.cpu.p, dw.cpu.p, with_bias ? dbias.cpu.p : nullptr, dout.cpu.p, x.cpu.p,
                                      w.cpu.p, r ? nullptr : mean.cpu.p, rstd.cpu.p, n, c, r);
        gpu->norm_backward_accumulate(dx.gpu.p, dw.gpu.p, with_bias ? dbias.gpu.p : nullptr, dout.gpu.p, x.gpu.p,
                                      w.gpu.p, r ? nullptr : mean.gpu.p, rstd.gpu.p, n, c, r);
        compare("norm_backward dx", dx, 1e-5);
        compare("norm_backward dw", dw, 1e-4);
        compare("norm_backward dbias", dbias, 1e-4);
      }
    }
  }

  TEST_CASE("reference cuda: rotary embedding and causal GQA attention, forward and backward") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    // GQA (4 q heads on 2 kv heads) and plain multi-head; seq 45 and 70 (not multiples of 32); head_dim 16 (half
    // a warp), 40 (a warp and a quarter) and 64.
    const AttentionShape shapes[] = {{2, 45, 4, 2, 16}, {1, 70, 3, 3, 40}, {2, 33, 4, 1, 64}};
    unsigned seed = 40;
    for (const AttentionShape& s : shapes) {
      CAPTURE(s.seq);
      CAPTURE(s.head_dim);
      const int64_t T = s.seq, rows = s.batch * T;
      TwinF qkv(*cpu, *gpu, random_vec(rows * s.qkv_width(), seed++));
      cpu->rope_forward(qkv.cpu.p, s);
      gpu->rope_forward(qkv.gpu.p, s);
      compare("rope_forward", qkv, 1e-5);
      TwinF work(*cpu, *gpu, std::vector<float>(2 * T * T, 0.0f));  // the CPU's scratch; unused on the GPU
      TwinF out(*cpu, *gpu, random_vec(rows * s.q_width(), seed++));
      TwinF lse(*cpu, *gpu, random_vec(s.batch * s.heads * T, seed++));
      cpu->attention_forward(out.cpu.p, lse.cpu.p, qkv.cpu.p, work.cpu.p, s);
      gpu->attention_forward(out.gpu.p, lse.gpu.p, qkv.gpu.p, work.gpu.p, s);
      compare("attention_forward out", out, 1e-4);
      compare("attention_forward lse", lse, 1e-5);

      TwinF dout(*cpu, *gpu, random_vec(rows * s.q_width(), seed++));
      TwinF dqkv(*cpu, *gpu, random_vec(rows * s.qkv_width(), seed++));  // overwritten
      // Both read the CPU's out and lse, so the backward comparison does not inherit forward differences.
      Buf<float> out_g(*gpu, out.cpu.get()), lse_g(*gpu, lse.cpu.get());
      cpu->attention_backward(dqkv.cpu.p, dout.cpu.p, out.cpu.p, lse.cpu.p, qkv.cpu.p, work.cpu.p, s);
      gpu->attention_backward(dqkv.gpu.p, dout.gpu.p, out_g.p, lse_g.p, qkv.gpu.p, work.gpu.p, s);
      compare("attention_backward dqkv", dqkv, 1e-4);
      cpu->rope_backward(dqkv.cpu.p, s);
      gpu->rope_backward(dqkv.gpu.p, s);
      compare("rope_backward", dqkv, 1e-4);
    }
  }

  TEST_CASE("reference cuda: GELU and SwiGLU forward and backward") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    const int64_t n = 37, f = 48;
    TwinF in(*cpu, *gpu, random_vec(n * f, 50, 2.0f));
    TwinF out(*cpu, *gpu, random_vec(n * f, 51));
    cpu->gelu_forward(out.cpu.p, in.cpu.p, n * f);
    gpu->gelu_forward(out.gpu.p, in.gpu.p, n * f);
    compare("gelu_forward", out, 1e-5);
    TwinF dout(*cpu, *gpu, random_vec(n * f, 52));
    TwinF din(*cpu, *gpu, random_vec(n * f, 53));  // overwritten
    cpu->gelu_backward(din.cpu.p, in.cpu.p, dout.cpu.p, n * f);
    gpu->gelu_backward(din.gpu.p, in.gpu.p, dout.gpu.p, n * f);
    compare("gelu_backward", din, 1e-5);

    TwinF fc1(*cpu, *gpu, random_vec(n * 2 * f, 54, 2.0f));
    TwinF act(*cpu, *gpu, random_vec(n * f, 55));
    cpu->swiglu_forward(act.cpu.p, fc1.cpu.p, n, f);
    gpu->swiglu_forward(act.gpu.p, fc1.gpu.p, n, f);
    compare("swiglu_forward", act, 1e-5);
    TwinF dfc1(*cpu, *gpu, random_vec(n * 2 * f, 56));  // overwritten
    cpu->swiglu_backward(dfc1.cpu.p, fc1.cpu.p, dout.cpu.p, n, f);
    gpu->swiglu_backward(dfc1.gpu.p, fc1.gpu.p, dout.gpu.p, n, f);
    compare("swiglu_backward", dfc1, 1e-5);
  }

  TEST_CASE("reference cuda: embedding forward and backward (positions or none)") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    const int64_t b = 3, t = 45, c = 24, vocab = 20;  // 135 tokens over 20 ids: every id repeats
    Twin<int32_t> tokens(*cpu, *gpu, random_tokens(b * t, static_cast<int32_t>(vocab), 60));
    TwinF wte(*cpu, *gpu, random_vec(vocab * c, 61));
    TwinF wpe(*cpu, *gpu, random_vec(t * c, 62));
    for (int with_pos = 0; with_pos < 2; ++with_pos) {
      CAPTURE(with_pos);
      TwinF out(*cpu, *gpu, random_vec(b * t * c, 63));
      cpu->embedding_forward(out.cpu.p, tokens.cpu.p, wte.cpu.p, with_pos ? wpe.cpu.p : nullptr, b, t, c);
      gpu->embedding_forward(out.gpu.p, tokens.gpu.p, wte.gpu.p, with_pos ? wpe.gpu.p : nullptr, b, t, c);
      compare("embedding_forward", out, 1e-7);  // one addition: identical
      TwinF dout(*cpu, *gpu, random_vec(b * t * c, 64));
      TwinF dwte(*cpu, *gpu, random_vec(vocab * c, 65));  // accumulated
      TwinF dwpe(*cpu, *gpu, random_vec(t * c, 66));       // accumulated (untouched when null)
      cpu->embedding_backward(dwte.cpu.p, with_pos ? dwpe.cpu.p : nullptr, dout.cpu.p, tokens.cpu.p, b, t, c);
      gpu->embedding_backward(dwte.gpu.p, with_pos ? dwpe.gpu.p : nullptr, dout.gpu.p, tokens.gpu.p, b, t, c);
      compare("embedding_backward dwte", dwte, 1e-5);
      compare("embedding_backward dwpe", dwpe, 1e-5);
    }
  }

  TEST_CASE("reference cuda: fused softmax cross-entropy over a padded vocabulary") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    const int64_t n = 45, vocab = 300, padded = 320;  // 300 columns: more than one pass of a 256-thread block
    const float scale = 1.0f / static_cast<float>(n);
    Twin<int32_t> targets(*cpu, *gpu, random_tokens(n, static_cast<int32_t>(vocab), 70));
    TwinF logits(*cpu, *gpu, random_vec(n * padded, 71, 3.0f));  // padding columns start non-zero
    const double lc = cpu->softmax_xent_forward_backward(logits.cpu.p, targets.cpu.p, n, padded, vocab, scale);
    const double lg = gpu->softmax_xent_forward_backward(logits.gpu.p, targets.gpu.p, n, padded, vocab, scale);
    CHECK(lc > n * 2.0);  // logits of scale 3 over 300 classes: well above 2 nats a row
    CHECK(std::fabs(lg - lc) <= 1e-5 * lc);
    compare("softmax_xent gradient", logits, 1e-5);
    const std::vector<float> g = logits.gpu.get();
    for (int64_t i = 0; i < n; ++i) {
      double row = 0;
      for (int64_t j = 0; j < padded; ++j) {
        if (j >= vocab) REQUIRE(g[i * padded + j] == 0.0f);
        row += g[i * padded + j];
      }
      CHECK(std::fabs(row) <= 1e-6);  // Σ_j (p_j − onehot_j)·scale = 0
    }
  }

  TEST_CASE("reference cuda: AdamW step") {
    auto gpu = cuda_or_skip();
    if (!gpu) return;
    auto cpu = make_cpu_backend();
    const int64_t n = 10001;
    std::vector<float> v0 = random_vec(n, 83, 0.01f);
    for (auto& x : v0) x = x * x;  // second moments are non-negative
    TwinF p(*cpu, *gpu, random_vec(n, 80));
    TwinF g(*cpu, *gpu, random_vec(n, 81));
    TwinF m(*cpu, *gpu, random_vec(n, 82, 0.1f));
    TwinF v(*cpu, *gpu, v0);
    AdamWParams a = kernel_compare::adamw_test_params();
    for (a.t = 3; a.t <= 4; ++a.t) {
      cpu->adamw_step_shard(p.cpu.p, g.cpu.p, m.cpu.p, v.cpu.p, n, a);
      gpu->adamw_step_shard(p.gpu.p, g.gpu.p, m.gpu.p, v.gpu.p, n, a);
    }
    compare("adamw p", p, 1e-5);
    compare("adamw m", m, 1e-5);
    compare("adamw v", v, 1e-5);
  }
}
