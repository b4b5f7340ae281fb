// reference/ CUDA backend: every kernel of the Backend interface against its CPU twin on the same random inputs
// (fixed seeds), through the backends' own memory functions; and the caching allocator. Without a GPU (or
// without the CUDA toolkit at configure time) each test says why in a MESSAGE and returns: skipped, passing.
//
// Tolerances: |gpu − cpu| ≤ rtol·(|cpu| + rms(cpu)) elementwise. The rms term covers outputs that are sums of
// terms of both signs (GEMMs, norm gradients, attention), whose small values lose relative precision in any
// summation order; rtol 1e-5 for pointwise fp32 formulas (CUDA's expf/tanhf are within 2 ulp; nvcc contracts
// a·b + c into FMA), 1e-4 where sums of tens to hundreds of terms are reordered (GEMM tiles, atomics,
// per-block partials, online softmax). Every kernel case runs with fp32 and with bf16 tensors (TEST_CASE_TEMPLATE;
// both backends made with the same dtype): in bf16 both sides compute in fp32 from the same bf16 inputs and round
// once, so the bound grows by one bf16 ulp, 2^-7 relative (kernel_compare::tol<T>). The bf16 GEMMs are cuBLASLt's
// tensor-core kernels (bf16 products, fp32 accumulation, one rounding of α·A·B + β·C) against Eigen in fp32 on the
// widened operands.
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
using kernel_compare::is_bf16;
using kernel_compare::kBf16Ulp;
using kernel_compare::random_tokens;
using kernel_compare::random_vec;
using kernel_compare::stored;
using kernel_compare::tol;
using kernel_compare::widened;
using shardplan::DType;

namespace {

// The backend dtype of storage type T.
template <typename T>
constexpr DType dtype_of = is_bf16<T> ? DType::bf16 : DType::fp32;

// The CUDA backend with tensors of `dtype`, or null after a MESSAGE saying why the calling test is skipped.
std::unique_ptr<Backend> cuda_or_skip(DType dtype = DType::fp32) {
  if (!cuda_backend_built()) {
    MESSAGE("this build has no CUDA backend (toolkit not found at configure time): skipped");
    return nullptr;
  }
  try {
    return make_cuda_backend(dtype);
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
  // The Backend interface's view of a tensor (T float or bf16, the backend's dtype).
  floatX* x() const { return reinterpret_cast<floatX*>(p); }
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

template <typename T>
void compare(const std::string& what, const Twin<T>& t, double rtol) {
  kernel_compare::compare(what, t.cpu.get(), t.gpu.get(), rtol, "gpu");
}

// Random data of kernel_compare::random_vec (same seeds for both dtypes), stored as T.
template <typename T>
std::vector<T> random_t(std::size_t n, unsigned seed, float scale = 1.0f, float shift = 0.0f) {
  return stored<T>(random_vec(n, seed, scale, shift));
}

}  // namespace

TEST_SUITE("reference cuda") {
  TEST_CASE("reference cuda: make_cuda_backend works or names its reason") {
    for (DType dtype : {DType::fp32, DType::bf16}) {
      CAPTURE(shardplan::to_string(dtype));
      try {
        auto be = make_cuda_backend(dtype);
        CHECK(std::string(be->name()) == "cuda");
        CHECK(be->dtype() == dtype);
        const std::string d = be->description();  // "NVIDIA H200 (sm_90, CUDA 13.0, bf16)"
        CHECK_MESSAGE(d.find("(sm_") != std::string::npos, d);
        CHECK_MESSAGE(d.find("CUDA ") != std::string::npos, d);
        CHECK_MESSAGE(d.find(std::string(", ") + shardplan::to_string(dtype) + ")") != std::string::npos, d);
      } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        CHECK_MESSAGE((m.find("no GPU is visible") != std::string::npos ||
                       m.find("no CUDA backend") != std::string::npos),
                      m);
        CHECK(m.find("--backend cpu") != std::string::npos);
      }
    }
    // fp16 tensors: refused, naming what the backend stores (before looking for a GPU, in a CUDA build).
    if (cuda_backend_built()) {
      CHECK_THROWS_WITH_AS(make_cuda_backend(DType::fp16), doctest::Contains("fp32 or bf16"), std::runtime_error);
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

  TEST_CASE_TEMPLATE("reference cuda: matmul forward and backward (bias or none, accumulation, unaligned weights)", T,
                     float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    // N = 300 rows crosses the 256-row chunks of the bias-gradient column sums; odd dimensions everywhere.
    const int64_t n = 300, in_dim = 50, out_dim = 37;
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {  // offset 1: a 4-byte (bf16: 2-byte) aligned view
        CAPTURE(with_bias);
        CAPTURE(offset);
        Twin<T> in(*cpu, *gpu, random_t<T>(n * in_dim, 10));
        Twin<T> w(*cpu, *gpu, random_t<T>(out_dim * in_dim, 11, 0.2f), offset);
        Twin<T> bias(*cpu, *gpu, random_t<T>(out_dim, 12));
        Twin<T> out(*cpu, *gpu, random_t<T>(n * out_dim, 13));  // overwritten
        cpu->matmul_forward(out.cpu.x(), in.cpu.x(), w.cpu.x(), with_bias ? bias.cpu.x() : nullptr, n, in_dim,
                            out_dim);
        gpu->matmul_forward(out.gpu.x(), in.gpu.x(), w.gpu.x(), with_bias ? bias.gpu.x() : nullptr, n, in_dim,
                            out_dim);
        compare("matmul_forward out", out, tol<T>(1e-4));

        Twin<T> dout(*cpu, *gpu, random_t<T>(n * out_dim, 14));
        Twin<T> din(*cpu, *gpu, random_t<T>(n * in_dim, 15));               // overwritten
        Twin<T> dw(*cpu, *gpu, random_t<T>(out_dim * in_dim, 16), offset);  // accumulated
        Twin<T> dbias(*cpu, *gpu, random_t<T>(out_dim, 17));                // accumulated
        cpu->matmul_backward(din.cpu.x(), dw.cpu.x(), with_bias ? dbias.cpu.x() : nullptr, dout.cpu.x(), in.cpu.x(),
                             w.cpu.x(), n, in_dim, out_dim);
        gpu->matmul_backward(din.gpu.x(), dw.gpu.x(), with_bias ? dbias.gpu.x() : nullptr, dout.gpu.x(), in.gpu.x(),
                             w.gpu.x(), n, in_dim, out_dim);
        compare("matmul_backward din", din, tol<T>(1e-4));
        compare("matmul_backward dw", dw, tol<T>(1e-4));
        compare("matmul_backward dbias", dbias, tol<T>(1e-4));  // untouched (equal) when null
      }
    }
  }

  TEST_CASE_TEMPLATE("reference cuda: residual and sum of squares", T, float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    const int64_t n = 100003;  // not a multiple of any block size
    Twin<T> x(*cpu, *gpu, random_t<T>(n, 20));
    Twin<T> y(*cpu, *gpu, random_t<T>(n, 21));
    cpu->residual_accumulate(x.cpu.x(), y.cpu.x(), n);
    gpu->residual_accumulate(x.gpu.x(), y.gpu.x(), n);
    compare("residual_accumulate", x, 1e-7);  // one float addition, rounded alike: identical
    const double sc = cpu->sum_squares(x.cpu.x(), n), sg = gpu->sum_squares(x.gpu.x(), n);
    CHECK(sc > 1.0e5);  // E[x²] = 2 for the sum of two unit normals: ≈ 2·10⁵
    CHECK(std::fabs(sg - sc) <= 1e-12 * sc);  // squares of widened values exact in double, sums reordered
    CHECK(gpu->sum_squares(x.gpu.x(), 0) == 0.0);
  }

  TEST_CASE_TEMPLATE("reference cuda: LayerNorm and RMSNorm forward and backward", T, float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    const int64_t n = 300, c = 80;  // 300 rows: two column-sum chunks; 80 channels: not a multiple of 32
    for (int rms = 0; rms < 2; ++rms) {
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        CAPTURE(rms);
        CAPTURE(with_bias);
        Twin<T> x(*cpu, *gpu, random_t<T>(n * c, 30, 2.0f, 0.7f));  // mean 0.7: the LayerNorm mean matters
        Twin<T> w(*cpu, *gpu, random_t<T>(c, 31, 0.5f, 1.0f));
        Twin<T> bias(*cpu, *gpu, random_t<T>(c, 32));
        Twin<T> out(*cpu, *gpu, random_t<T>(n * c, 33));
        TwinF mean(*cpu, *gpu, random_vec(n, 34));  // statistics: float for both dtypes
        TwinF rstd(*cpu, *gpu, random_vec(n, 35));
        const bool r = rms != 0;
        cpu->norm_forward(out.cpu.x(), r ? nullptr : mean.cpu.p, rstd.cpu.p, x.cpu.x(), w.cpu.x(),
                          with_bias ? bias.cpu.x() : nullptr, n, c, r);
        gpu->norm_forward(out.gpu.x(), r ? nullptr : mean.gpu.p, rstd.gpu.p, x.gpu.x(), w.gpu.x(),
                          with_bias ? bias.gpu.x() : nullptr, n, c, r);
        compare("norm_forward out", out, tol<T>(1e-5));
        compare("norm_forward mean", mean, 1e-6);
        compare("norm_forward rstd", rstd, 1e-6);

        Twin<T> dout(*cpu, *gpu, random_t<T>(n * c, 36));
        Twin<T> dx(*cpu, *gpu, random_t<T>(n * c, 37));    // accumulated
        Twin<T> dw(*cpu, *gpu, random_t<T>(c, 38));        // accumulated
        Twin<T> dbias(*cpu, *gpu, random_t<T>(c, 39));     // accumulated
        cpu->norm_backward_accumulate(dx.cpu.x(), dw.cpu.x(), with_bias ? dbias.cpu.x() : nullptr, dout.cpu.x(),
                                      x.cpu.x(), w.cpu.x(), r ? nullptr : mean.cpu.p, rstd.cpu.p, n, c, r);
        gpu->norm_backward_accumulate(dx.gpu.x(), dw.gpu.x(), with_bias ? dbias.gpu.x() : nullptr, dout.gpu.x(),
                                      x.gpu.x(), w.gpu.x(), r ? nullptr : mean.gpu.p, rstd.gpu.p, n, c, r);
        compare("norm_backward dx", dx, tol<T>(1e-5));
        compare("norm_backward dw", dw, tol<T>(1e-4));
        compare("norm_backward dbias", dbias, tol<T>(1e-4));
      }
    }
  }

  TEST_CASE_TEMPLATE("reference cuda: rotary embedding and causal GQA attention, forward and backward", T, float,
                     bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    // GQA (4 q heads on 2 kv heads) and plain multi-head; seq 45 and 70 (not multiples of 32); head_dim 16 (half
    // a warp), 40 (a warp and a quarter) and 64.
    const AttentionShape shapes[] = {{2, 45, 4, 2, 16}, {1, 70, 3, 3, 40}, {2, 33, 4, 1, 64}};
    unsigned seed = 40;
    for (const AttentionShape& s : shapes) {
      CAPTURE(s.seq);
      CAPTURE(s.head_dim);
      const int64_t seq_len = s.seq, rows = s.batch * seq_len;
      Twin<T> qkv(*cpu, *gpu, random_t<T>(rows * s.qkv_width(), seed++));
      cpu->rope_forward(qkv.cpu.x(), s);
      gpu->rope_forward(qkv.gpu.x(), s);
      compare("rope_forward", qkv, tol<T>(1e-5));
      // Both read the CPU's rotated qkv, so attention does not inherit the rotation's last-bit differences.
      Buf<T> qkv_g(*gpu, qkv.cpu.get());
      TwinF work(*cpu, *gpu, std::vector<float>(2 * seq_len * seq_len, 0.0f));  // the CPU's scratch; unused on the GPU
      Twin<T> out(*cpu, *gpu, random_t<T>(rows * s.q_width(), seed++));
      TwinF lse(*cpu, *gpu, random_vec(s.batch * s.heads * seq_len, seed++));
      cpu->attention_forward(out.cpu.x(), lse.cpu.p, qkv.cpu.x(), work.cpu.p, s);
      gpu->attention_forward(out.gpu.x(), lse.gpu.p, qkv_g.x(), work.gpu.p, s);
      compare("attention_forward out", out, tol<T>(1e-4));
      compare("attention_forward lse", lse, 1e-5);  // float for both dtypes

      Twin<T> dout(*cpu, *gpu, random_t<T>(rows * s.q_width(), seed++));
      Twin<T> dqkv(*cpu, *gpu, random_t<T>(rows * s.qkv_width(), seed++));  // overwritten
      // Both read the CPU's out and lse, so the backward comparison does not inherit forward differences.
      Buf<T> out_g(*gpu, out.cpu.get());
      Buf<float> lse_g(*gpu, lse.cpu.get());
      cpu->attention_backward(dqkv.cpu.x(), dout.cpu.x(), out.cpu.x(), lse.cpu.p, qkv.cpu.x(), work.cpu.p, s);
      gpu->attention_backward(dqkv.gpu.x(), dout.gpu.x(), out_g.x(), lse_g.p, qkv_g.x(), work.gpu.p, s);
      compare("attention_backward dqkv", dqkv, tol<T>(1e-4));
      cpu->rope_backward(dqkv.cpu.x(), s);
      gpu->rope_backward(dqkv.gpu.x(), s);
      // bf16: the rotated gradients already differ by up to one ulp, and the rotation rounds again: two ulps.
      compare("rope_backward", dqkv, tol<T>(1e-4) + (is_bf16<T> ? kBf16Ulp : 0.0));
    }
  }

  TEST_CASE_TEMPLATE("reference cuda: GELU and SwiGLU forward and backward", T, float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    const int64_t n = 37, f = 48;
    Twin<T> in(*cpu, *gpu, random_t<T>(n * f, 50, 2.0f));
    Twin<T> out(*cpu, *gpu, random_t<T>(n * f, 51));
    cpu->gelu_forward(out.cpu.x(), in.cpu.x(), n * f);
    gpu->gelu_forward(out.gpu.x(), in.gpu.x(), n * f);
    compare("gelu_forward", out, tol<T>(1e-5));
    Twin<T> dout(*cpu, *gpu, random_t<T>(n * f, 52));
    Twin<T> din(*cpu, *gpu, random_t<T>(n * f, 53));  // overwritten
    cpu->gelu_backward(din.cpu.x(), in.cpu.x(), dout.cpu.x(), n * f);
    gpu->gelu_backward(din.gpu.x(), in.gpu.x(), dout.gpu.x(), n * f);
    compare("gelu_backward", din, tol<T>(1e-5));

    Twin<T> fc1(*cpu, *gpu, random_t<T>(n * 2 * f, 54, 2.0f));
    Twin<T> act(*cpu, *gpu, random_t<T>(n * f, 55));
    cpu->swiglu_forward(act.cpu.x(), fc1.cpu.x(), n, f);
    gpu->swiglu_forward(act.gpu.x(), fc1.gpu.x(), n, f);
    compare("swiglu_forward", act, tol<T>(1e-5));
    Twin<T> dfc1(*cpu, *gpu, random_t<T>(n * 2 * f, 56));  // overwritten
    cpu->swiglu_backward(dfc1.cpu.x(), fc1.cpu.x(), dout.cpu.x(), n, f);
    gpu->swiglu_backward(dfc1.gpu.x(), fc1.gpu.x(), dout.gpu.x(), n, f);
    compare("swiglu_backward", dfc1, tol<T>(1e-5));
  }

  TEST_CASE_TEMPLATE("reference cuda: embedding forward and backward (positions or none)", T, float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    const int64_t b = 3, t = 45, c = 24, vocab = 20;  // 135 tokens over 20 ids: every id repeats
    Twin<int32_t> tokens(*cpu, *gpu, random_tokens(b * t, static_cast<int32_t>(vocab), 60));
    Twin<T> wte(*cpu, *gpu, random_t<T>(vocab * c, 61));
    Twin<T> wpe(*cpu, *gpu, random_t<T>(t * c, 62));
    for (int with_pos = 0; with_pos < 2; ++with_pos) {
      CAPTURE(with_pos);
      Twin<T> out(*cpu, *gpu, random_t<T>(b * t * c, 63));
      cpu->embedding_forward(out.cpu.x(), tokens.cpu.p, wte.cpu.x(), with_pos ? wpe.cpu.x() : nullptr, b, t, c);
      gpu->embedding_forward(out.gpu.x(), tokens.gpu.p, wte.gpu.x(), with_pos ? wpe.gpu.x() : nullptr, b, t, c);
      compare("embedding_forward", out, 1e-7);  // one addition, rounded alike: identical
      Twin<T> dout(*cpu, *gpu, random_t<T>(b * t * c, 64));
      Twin<T> dwte(*cpu, *gpu, random_t<T>(vocab * c, 65));  // accumulated
      Twin<T> dwpe(*cpu, *gpu, random_t<T>(t * c, 66));       // accumulated (untouched when null)
      cpu->embedding_backward(dwte.cpu.x(), with_pos ? dwpe.cpu.x() : nullptr, dout.cpu.x(), tokens.cpu.p, b, t, c);
      gpu->embedding_backward(dwte.gpu.x(), with_pos ? dwpe.gpu.x() : nullptr, dout.gpu.x(), tokens.gpu.p, b, t, c);
      compare("embedding_backward dwte", dwte, tol<T>(1e-5));
      compare("embedding_backward dwpe", dwpe, tol<T>(1e-5));
      // Deterministic (no atomics): a second run from the same start gives the same bits.
      const std::vector<T> first = dwte.gpu.get();
      Buf<T> again(*gpu, random_t<T>(vocab * c, 65));
      gpu->embedding_backward(again.x(), nullptr, dout.gpu.x(), tokens.gpu.p, b, t, c);
      CHECK(std::memcmp(again.get().data(), first.data(), sizeof(T) * first.size()) == 0);
    }
  }

  TEST_CASE_TEMPLATE("reference cuda: fused softmax cross-entropy over a padded vocabulary", T, float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    const int64_t n = 45, vocab = 300, padded = 320;  // 300 columns: more than one pass of a 256-thread block
    const float scale = 1.0f / static_cast<float>(n);
    Twin<int32_t> targets(*cpu, *gpu, random_tokens(n, static_cast<int32_t>(vocab), 70));
    Twin<T> logits(*cpu, *gpu, random_t<T>(n * padded, 71, 3.0f));  // padding columns start non-zero
    const double lc = cpu->softmax_xent_forward_backward(logits.cpu.x(), targets.cpu.p, n, padded, vocab, scale);
    const double lg = gpu->softmax_xent_forward_backward(logits.gpu.x(), targets.gpu.p, n, padded, vocab, scale);
    CHECK(lc > n * 2.0);  // logits of scale 3 over 300 classes: well above 2 nats a row
    CHECK(std::fabs(lg - lc) <= 1e-5 * lc);  // from the same (widened) logits for both dtypes
    compare("softmax_xent gradient", logits, tol<T>(1e-5));
    // Σ_j (p_j − onehot_j)·scale = 0; stored in bf16 each term moves by at most half an ulp ≤ 2^-8·|term|, and
    // Σ_j |term| = 2·(1 − p_target)·scale ≤ 2·scale: within 2^-7·scale of 0.
    const double row_tol = 1e-6 + (is_bf16<T> ? kBf16Ulp * scale : 0.0);
    const std::vector<float> g = widened(logits.gpu.get());
    for (int64_t i = 0; i < n; ++i) {
      double row = 0;
      for (int64_t j = 0; j < padded; ++j) {
        if (j >= vocab) REQUIRE(g[i * padded + j] == 0.0f);
        row += g[i * padded + j];
      }
      CHECK(std::fabs(row) <= row_tol);
    }
  }

  TEST_CASE_TEMPLATE("reference cuda: AdamW step, in place or from an fp32 master copy", T, float, bf16) {
    auto gpu = cuda_or_skip(dtype_of<T>);
    if (!gpu) return;
    auto cpu = make_cpu_backend(dtype_of<T>);
    const int64_t n = 10001;
    std::vector<float> v0 = random_vec(n, 83, 0.01f);
    for (auto& x : v0) x = x * x;  // second moments are non-negative
    for (int with_master = 0; with_master < 2; ++with_master) {
      CAPTURE(with_master);
      const std::vector<T> p0 = random_t<T>(n, 80);
      Twin<T> p(*cpu, *gpu, p0);
      Twin<T> g(*cpu, *gpu, random_t<T>(n, 81));
      TwinF m(*cpu, *gpu, random_vec(n, 82, 0.1f));
      TwinF v(*cpu, *gpu, v0);
      TwinF master(*cpu, *gpu, widened(p0));  // amp: the fp32 master starts as the widened weights
      AdamWParams a = kernel_compare::adamw_test_params();
      for (a.t = 3; a.t <= 4; ++a.t) {
        cpu->adamw_step_shard(p.cpu.x(), with_master ? master.cpu.p : nullptr, g.cpu.x(), m.cpu.p, v.cpu.p, n, a);
        gpu->adamw_step_shard(p.gpu.x(), with_master ? master.gpu.p : nullptr, g.gpu.x(), m.gpu.p, v.gpu.p, n, a);
      }
      compare("adamw p", p, tol<T>(1e-5));
      compare("adamw m", m, 1e-5);
      compare("adamw v", v, 1e-5);
      compare("adamw master", master, 1e-5);  // untouched (equal) when null
    }
  }
}
