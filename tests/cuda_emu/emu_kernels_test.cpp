// The CUDA kernels of the reference GPT (reference/cuda_kernels_*.cu, compiled unchanged as C++ against the host
// emulator of cuda_emu.hpp) against their CPU twins (reference/cpu_kernels.hpp), on every CI run, GPU or not.
// Every gpu:: launcher of cuda_kernels.cuh runs here on host memory, with the edge cases of
// tests/test_reference_cuda.cpp (GQA 4→2 and 4→1, odd sequence lengths, head_dim 16/40/64/256, a padded vocabulary,
// accumulate-vs-overwrite, null bias / wpe, rows not a multiple of a block) but smaller shapes: every emulated
// thread is a coroutine, and each shuffle or __syncthreads is a context switch per thread.
//
// Not here: the GEMMs, which the CUDA backend hands to cuBLASLt (a library, not our kernel code) — where the
// backend combines a GEMM with a kernel (bias broadcast into the GEMM's C operand, bias gradient), the CPU GEMM
// stands in for it.
//
// Every kernel case runs twice (TEST_CASE_TEMPLATE): storage T = float, and T = bf16 (reference/bf16.hpp), the
// emulated GPU kernel in bf16 against the CPU kernel in bf16 on the same bf16 inputs.
//
// Tolerances as tests/test_reference_cuda.cpp: |emu − cpu| ≤ rtol·(|cpu| + rms(cpu)) elementwise; rtol 1e-5 for
// pointwise formulas (on a GPU expf/tanhf differ by up to 2 ulp and nvcc contracts to FMA, so the bound is the one
// the GPU must meet too), 1e-4 where sums are reordered (warp butterflies, per-block partials, online softmax),
// 1e-7 (identical) for a single float addition. In bf16 both sides compute in fp32 from the same inputs and round
// once: values within the fp32 tolerance before rounding are within that plus one bf16 ulp after it (rounding to
// nearest moves each by at most half an ulp; 8 significant bits, so one ulp ≤ 2^-7·|x|): rtol + 2^-7
// (kernel_compare::tol<T>). The single additions (residual, embedding forward) stay identical: the same fp32 sum
// rounded the same way. Pointwise kernels are also held to at most one ulp apart in the bit patterns (max_ulps):
// here both sides run the same float operations with the same libm and agree to the bit; the one ulp allows for a
// compiler that contracts a·b + c differently in the two files.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/cpu_kernels.hpp"
#include "reference/cuda_kernels.cuh"
#include "tests/kernel_compare.hpp"

using namespace shardplan::reference;
using Vec = std::vector<float>;
using kernel_compare::is_bf16;
using kernel_compare::kBf16Ulp;
using kernel_compare::random_tokens;
using kernel_compare::random_vec;
using kernel_compare::stored;
using kernel_compare::tol;
using kernel_compare::widened;

namespace {

constexpr cudaStream_t kStream = nullptr;  // the emulator's one synchronous stream

// Random data of kernel_compare::random_vec (same seeds as the fp32 cases), stored as T.
template <typename T>
std::vector<T> random_t(std::size_t n, unsigned seed, float scale = 1.0f, float shift = 0.0f) {
  return stored<T>(random_vec(n, seed, scale, shift));
}
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

// |emu − cpu| ≤ rtol·(|cpu| + rms(cpu)) on the widened values (float statistics: T = float).
template <typename T>
void compare(const std::string& what, const std::vector<T>& cpu, const std::vector<T>& emu, double rtol) {
  kernel_compare::compare(what, cpu, emu, rtol, "emulated gpu");
}

// The largest distance in representable steps between cpu[i] and emu[i] (bf16 bit patterns, sign-magnitude mapped
// to a monotonic integer line; 0 for float, where the bound is the relative tolerance alone).
template <typename T>
int max_ulps(const std::vector<T>& cpu, const std::vector<T>& emu) {
  if constexpr (!is_bf16<T>) {
    return 0;
  } else {
    const auto line = [](bf16 x) {
      const int magnitude = x.bits & 0x7fff;
      return x.bits & 0x8000 ? -magnitude : magnitude;
    };
    int worst = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      const int d = std::abs(line(cpu[i]) - line(emu[i]));
      worst = d > worst ? d : worst;
    }
    return worst;
  }
}

// Runs f with the emulator's threads scheduled in descending index order, then restores the ascending order.
template <typename F>
void in_reverse_thread_order(F f) {
  cuda_emu::reverse_order = true;
  try {
    f();
  } catch (...) {
    cuda_emu::reverse_order = false;
    throw;
  }
  cuda_emu::reverse_order = false;
}

// --- kernels that test the emulator itself ---------------------------------------------------------------------

// out[blockIdx] = Σ over the block's threads of (linear thread index) through gpu::warp_sum and shared memory.
__global__ void block_index_sum_kernel(double* out) {
  __shared__ double per_warp[32];
  const unsigned i = threadIdx.x + threadIdx.y * blockDim.x;
  const double s = gpu::warp_sum(static_cast<double>(i));
  if (i % 32 == 0) per_warp[i / 32] = s;
  __syncthreads();
  if (i == 0) {
    double t = 0;
    for (unsigned w = 0; w < blockDim.x * blockDim.y / 32; ++w) t += per_warp[w];
    out[blockIdx.x] = t;
  }
}

// Lanes 16..31 return, then lanes 0..15 shuffle with them: undefined on a GPU, an error in the emulator.
__global__ void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = gpu::warp_sum(1.0f);
}

// Half of a one-warp block waits in __syncthreads, the other half in a shuffle: neither barrier can complete.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = gpu::warp_sum(1.0f);
  }
}

__global__ void counter_kernel(float* counter) { atomicAdd(counter, 1.0f); }

}  // namespace

TEST_SUITE("cuda emulator") {
  TEST_CASE("cuda_emu: block and warp reductions, atomics, launch errors, deadlock and exited-lane detection") {
    // Blocks of (64, 2) threads: 128 threads, 4 warps; Σ i for i < 128 = 127·128/2 = 8128 in each of 3 blocks.
    std::vector<double> sums(3, -1.0);
    gpu::launch(block_index_sum_kernel, 3, dim3(64, 2), 0, kStream, sums.data());
    gpu::check_launch("block_index_sum_kernel");
    for (double s : sums) CHECK(s == 8128.0);
    in_reverse_thread_order([&] { gpu::launch(block_index_sum_kernel, 3, dim3(64, 2), 0, kStream, sums.data()); });
    for (double s : sums) CHECK(s == 8128.0);

    // 5 blocks of 200 threads add 1 each: 1000.
    float counter = 0.0f;
    gpu::launch(counter_kernel, 5, 200, 0, kStream, &counter);
    CHECK(counter == 1000.0f);

    // A configuration the GPU rejects is reported by cudaGetLastError (once) and runs nothing.
    gpu::launch(counter_kernel, 1, 2048, 0, kStream, &counter);
    CHECK_THROWS_WITH(gpu::check_launch("counter_kernel"),
                      "CUDA error in counter_kernel: invalid configuration argument");
    CHECK(cudaGetLastError() == cudaSuccess);
    gpu::launch(counter_kernel, dim3(1, 65536), 32, 0, kStream, &counter);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    gpu::launch(counter_kernel, 1, 32, 1024, kStream, &counter);  // dynamic shared memory: not emulated
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(counter == 1000.0f);

    Vec out(64, 0.0f);
    CHECK_THROWS_WITH_AS(gpu::launch(shuffle_after_exit_kernel, 1, 32, 0, kStream, out.data()),
                         doctest::Contains("which has returned"), std::logic_error);
    CHECK_THROWS_WITH_AS(gpu::launch(divergent_barrier_kernel, 1, 32, 0, kStream, out.data()),
                         doctest::Contains("deadlock"), std::logic_error);
    // The emulator is usable again after a failed launch.
    gpu::launch(block_index_sum_kernel, 3, dim3(64, 2), 0, kStream, sums.data());
    for (double s : sums) CHECK(s == 8128.0);
  }
}

TEST_SUITE("cuda kernels (emulated)") {
  TEST_CASE_TEMPLATE("cuda kernels (emulated): matmul bias and bias gradient, around the CPU GEMM", T, float, bf16) {
    using V = std::vector<T>;
    // 300 rows: two 256-row chunks of the column sums; 37 outputs: two 32-column blocks, the second mostly idle.
    const int64_t n = 300, in_dim = 50, out_dim = 37;
    const V in = random_t<T>(n * in_dim, 10), w = random_t<T>(out_dim * in_dim, 11, 0.2f);
    const V bias = random_t<T>(out_dim, 12);
    V out_cpu(n * out_dim), out_emu(n * out_dim);
    matmul_forward(out_cpu.data(), in.data(), w.data(), bias.data(), n, in_dim, out_dim);
    // The backend: out = bias broadcast, then cuBLASLt's D = in·wᵀ + 1·C in fp32, rounded once (the CPU GEMM in
    // fp32 stands in for cuBLASLt's part).
    gpu::bias_broadcast(out_emu.data(), bias.data(), n, out_dim, kStream);
    const Vec in32 = widened(in), w32 = widened(w);
    Vec product(n * out_dim);
    matmul_forward(product.data(), in32.data(), w32.data(), static_cast<const float*>(nullptr), n, in_dim, out_dim);
    for (std::size_t i = 0; i < out_emu.size(); ++i) out_emu[i] = store_as<T>(load(out_emu[i]) + product[i]);
    compare("matmul_forward + bias_broadcast", out_cpu, out_emu, tol<T>(1e-4));

    const V dout = random_t<T>(n * out_dim, 14);
    V din(n * in_dim), dw(out_dim * in_dim, store_as<T>(0.0f));
    V dbias_cpu = random_t<T>(out_dim, 17), dbias_emu = dbias_cpu;  // accumulated
    matmul_backward(din.data(), dw.data(), dbias_cpu.data(), dout.data(), in.data(), w.data(), n, in_dim, out_dim);
    CHECK(gpu::column_partials_rows(n) == 2);  // ⌈300 / 256⌉
    Vec partial(gpu::column_partials_rows(n) * out_dim);
    gpu::column_sums_accumulate(dbias_emu.data(), dout.data(), partial.data(), n, out_dim, kStream);
    compare("column_sums_accumulate (matmul dbias)", dbias_cpu, dbias_emu, tol<T>(1e-4));
    // Deterministic: the same bits whatever order the threads run in.
    V dbias_rev = random_t<T>(out_dim, 17);
    in_reverse_thread_order(
        [&] { gpu::column_sums_accumulate(dbias_rev.data(), dout.data(), partial.data(), n, out_dim, kStream); });
    CHECK(same_bits(dbias_rev, dbias_emu));
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): residual and sum of squares", T, float, bf16) {
    using V = std::vector<T>;
    const int64_t n = 100003;  // 391 blocks of 256, the last one partly idle
    V x_cpu = random_t<T>(n, 20), x_emu = x_cpu;
    const V y = random_t<T>(n, 21);
    residual_accumulate(x_cpu.data(), y.data(), n);
    gpu::residual_accumulate(x_emu.data(), y.data(), n, kStream);
    compare("residual_accumulate", x_cpu, x_emu, 1e-7);  // one float addition (rounded alike): identical

    CHECK(gpu::sum_squares_blocks(n) == 391);  // ⌈100003 / 256⌉
    std::vector<double> block_sums(gpu::sum_squares_blocks(n), -1.0);
    gpu::sum_squares(block_sums.data(), x_emu.data(), n, kStream);
    double s = 0;
    for (double b : block_sums) s += b;
    const double c = sum_squares(x_cpu.data(), n);
    CHECK(c > 1.0e5);  // E[x²] = 2 for the sum of two unit normals: ≈ 2·10⁵
    CHECK(std::fabs(s - c) <= 1e-12 * c);  // squares of widened values exact in double, sums reordered

    // 300000 elements need 1172 blocks of 256: the grid is capped at 1024 blocks, some threads take two. The cap
    // is the launcher's host code, the same for both storage types: checked once (1.2 s of emulation).
    if constexpr (!is_bf16<T>) {
      const int64_t big = 300000;
      const V z = random_t<T>(big, 22);
      CHECK(gpu::sum_squares_blocks(big) == 1024);
      std::vector<double> capped(1024, -1.0);
      gpu::sum_squares(capped.data(), z.data(), big, kStream);
      double sz = 0;
      for (double b : capped) sz += b;
      const double cz = sum_squares(z.data(), big);
      CHECK(std::fabs(sz - cz) <= 1e-12 * cz);
    }

    std::vector<double> one(1, -1.0);
    CHECK(gpu::sum_squares_blocks(0) == 1);
    gpu::sum_squares(one.data(), x_emu.data(), 0, kStream);
    CHECK(one[0] == 0.0);
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): LayerNorm and RMSNorm forward and backward", T, float, bf16) {
    using V = std::vector<T>;
    // 300 rows: 38 blocks of 8 rows, the last with 4 (its other warps return at once), two column-sum chunks;
    // 80 channels: not a multiple of 32.
    const int64_t n = 300, c = 80;
    const V x = random_t<T>(n * c, 30, 2.0f, 0.7f), w = random_t<T>(c, 31, 0.5f, 1.0f), bias = random_t<T>(c, 32);
    for (int rms = 0; rms < 2; ++rms) {
      for (int with_bias = 0; with_bias < 2; ++with_bias) {
        CAPTURE(rms);
        CAPTURE(with_bias);
        const bool r = rms != 0;
        const T* b = with_bias ? bias.data() : nullptr;
        V out_c = random_t<T>(n * c, 33), out_e = out_c;
        Vec mean_c = random_vec(n, 34), mean_e = mean_c, rstd_c = random_vec(n, 35), rstd_e = rstd_c;
        norm_forward(out_c.data(), r ? nullptr : mean_c.data(), rstd_c.data(), x.data(), w.data(), b, n, c, r);
        gpu::norm_forward(out_e.data(), r ? nullptr : mean_e.data(), rstd_e.data(), x.data(), w.data(), b, n, c, r,
                          kStream);
        compare("norm_forward out", out_c, out_e, tol<T>(1e-5));
        CHECK(max_ulps(out_c, out_e) <= 1);
        compare("norm_forward mean", mean_c, mean_e, 1e-6);  // float statistics; untouched (equal) for RMSNorm
        compare("norm_forward rstd", rstd_c, rstd_e, 1e-6);

        const V dout = random_t<T>(n * c, 36);
        V dx_c = random_t<T>(n * c, 37), dx_e = dx_c, dw_c = random_t<T>(c, 38), dw_e = dw_c;  // accumulated
        V db_c = random_t<T>(c, 39), db_e = db_c;                                              // accumulated
        Vec partial(gpu::column_partials_rows(n) * c);
        norm_backward_accumulate(dx_c.data(), dw_c.data(), with_bias ? db_c.data() : nullptr, dout.data(), x.data(),
                                 w.data(), r ? nullptr : mean_c.data(), rstd_c.data(), n, c, r);
        gpu::norm_backward_accumulate(dx_e.data(), dw_e.data(), with_bias ? db_e.data() : nullptr, dout.data(),
                                      x.data(), w.data(), r ? nullptr : mean_c.data(), rstd_c.data(), partial.data(),
                                      n, c, r, kStream);
        compare("norm_backward dx", dx_c, dx_e, tol<T>(1e-5));
        compare("norm_backward dw", dw_c, dw_e, tol<T>(1e-4));
        compare("norm_backward dbias", db_c, db_e, tol<T>(1e-4));  // untouched (equal) when null
      }
    }
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): rotary embedding and causal GQA attention, forward and backward", T,
                     float, bf16) {
    using V = std::vector<T>;
    // GQA 4→2 and 4→1, plain multi-head 3→3; odd sequence lengths (37 > 32); head_dim 16 (half a warp), 40 (a
    // warp and a quarter), 64, and 256 = kMaxHeadDim (all 8 register slots of a lane). Shorter sequences than on
    // the GPU: the cost of the emulation grows as T² (about 1.5 s per storage type here on one core).
    const AttentionShape shapes[] = {{2, 23, 4, 2, 16}, {1, 37, 3, 3, 40}, {2, 17, 4, 1, 64}, {1, 5, 2, 1, 256}};
    unsigned seed = 40;
    for (const AttentionShape& s : shapes) {
      CAPTURE(s.heads);
      CAPTURE(s.kv_heads);
      CAPTURE(s.seq);
      CAPTURE(s.head_dim);
      const int64_t seq_len = s.seq, rows = s.batch * seq_len;
      const gpu::AttentionDims d{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));  // as backend_cuda.cu
      V qkv_c = random_t<T>(rows * s.qkv_width(), seed++), qkv_e = qkv_c;
      rope_forward(qkv_c.data(), s);
      gpu::rope_rotate(qkv_e.data(), d, 1.0f, kStream);
      compare("rope_forward", qkv_c, qkv_e, tol<T>(1e-5));
      CHECK(max_ulps(qkv_c, qkv_e) <= 1);

      Vec work(2 * seq_len * seq_len);  // the CPU's scratch; the GPU keeps no T×T matrix
      V out_c = random_t<T>(rows * s.q_width(), seed++), out_e = out_c;
      Vec lse_c = random_vec(s.batch * s.heads * seq_len, seed++), lse_e = lse_c;
      attention_forward(out_c.data(), lse_c.data(), qkv_c.data(), work.data(), s);
      gpu::attention_forward(out_e.data(), lse_e.data(), qkv_c.data(), d, scale, kStream);
      compare("attention_forward out", out_c, out_e, tol<T>(1e-4));
      compare("attention_forward lse", lse_c, lse_e, 1e-5);  // float in both storage types

      // Both read the CPU's out and lse, so the backward comparison does not inherit forward differences.
      const V dout = random_t<T>(rows * s.q_width(), seed++);
      // Overwritten: different random contents before, so a slot the kernels miss shows.
      V dqkv_c = random_t<T>(rows * s.qkv_width(), seed++), dqkv_e = random_t<T>(dqkv_c.size(), seed++);
      Vec delta(s.batch * s.heads * seq_len);
      attention_backward(dqkv_c.data(), dout.data(), out_c.data(), lse_c.data(), qkv_c.data(), work.data(), s);
      gpu::attention_backward(dqkv_e.data(), dout.data(), out_c.data(), lse_c.data(), qkv_c.data(), delta.data(), d,
                              scale, kStream);
      compare("attention_backward dqkv", dqkv_c, dqkv_e, tol<T>(1e-4));
      rope_backward(dqkv_c.data(), s);
      gpu::rope_rotate(dqkv_e.data(), d, -1.0f, kStream);
      // bf16: the rotated inputs already differ by up to one ulp, and the rotation rounds again: two ulps.
      compare("rope_backward", dqkv_c, dqkv_e, tol<T>(1e-4) + (is_bf16<T> ? kBf16Ulp : 0.0));
    }
    // The host-side shape checks of the launchers.
    V dummy(16);
    Vec lse(16);
    const gpu::AttentionDims too_wide{1, 1, 1, 1, gpu::kMaxHeadDim + 8}, bad_groups{1, 1, 3, 2, 16};
    CHECK_THROWS_WITH(gpu::attention_forward(dummy.data(), lse.data(), dummy.data(), too_wide, 1.0f, kStream),
                      doctest::Contains("exceeds 256"));
    CHECK_THROWS_WITH(gpu::attention_forward(dummy.data(), lse.data(), dummy.data(), bad_groups, 1.0f, kStream),
                      doctest::Contains("multiple of kv_heads"));
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): GELU and SwiGLU forward and backward", T, float, bf16) {
    using V = std::vector<T>;
    const int64_t n = 37, f = 48;  // 1776 elements: 7 blocks of 256, the last partly idle
    const V in = random_t<T>(n * f, 50, 2.0f), dout = random_t<T>(n * f, 52);
    V out_c(n * f), out_e = random_t<T>(n * f, 51);  // overwritten
    gelu_forward(out_c.data(), in.data(), n * f);
    gpu::gelu_forward(out_e.data(), in.data(), n * f, kStream);
    compare("gelu_forward", out_c, out_e, tol<T>(1e-5));
    CHECK(max_ulps(out_c, out_e) <= 1);
    V din_c(n * f), din_e = random_t<T>(n * f, 53);  // overwritten
    gelu_backward(din_c.data(), in.data(), dout.data(), n * f);
    gpu::gelu_backward(din_e.data(), in.data(), dout.data(), n * f, kStream);
    compare("gelu_backward", din_c, din_e, tol<T>(1e-5));
    CHECK(max_ulps(din_c, din_e) <= 1);

    const V fc1 = random_t<T>(n * 2 * f, 54, 2.0f);
    V act_c(n * f), act_e = random_t<T>(n * f, 55);  // overwritten
    swiglu_forward(act_c.data(), fc1.data(), n, f);
    gpu::swiglu_forward(act_e.data(), fc1.data(), n, f, kStream);
    compare("swiglu_forward", act_c, act_e, tol<T>(1e-5));
    CHECK(max_ulps(act_c, act_e) <= 1);
    V dfc1_c(n * 2 * f), dfc1_e = random_t<T>(n * 2 * f, 56);  // overwritten, both halves
    swiglu_backward(dfc1_c.data(), fc1.data(), dout.data(), n, f);
    gpu::swiglu_backward(dfc1_e.data(), fc1.data(), dout.data(), n, f, kStream);
    compare("swiglu_backward", dfc1_c, dfc1_e, tol<T>(1e-5));
    CHECK(max_ulps(dfc1_c, dfc1_e) <= 1);
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): embedding forward and backward (positions or none)", T, float, bf16) {
    using V = std::vector<T>;
    const int64_t b = 3, t = 45, c = 24, vocab = 20;  // 135 tokens over 20 ids: every id repeats
    const std::vector<int32_t> tokens = random_tokens(b * t, static_cast<int32_t>(vocab), 60);
    const V wte = random_t<T>(vocab * c, 61), wpe = random_t<T>(t * c, 62), dout = random_t<T>(b * t * c, 64);
    std::vector<int32_t> links(2 * b * t);  // the launcher's scratch: next occurrence, first-occurrence flag
    for (int with_pos = 0; with_pos < 2; ++with_pos) {
      CAPTURE(with_pos);
      const T* pos = with_pos ? wpe.data() : nullptr;
      V out_c = random_t<T>(b * t * c, 63), out_e = out_c;
      embedding_forward(out_c.data(), tokens.data(), wte.data(), pos, b, t, c);
      gpu::embedding_forward(out_e.data(), tokens.data(), wte.data(), pos, b, t, c, kStream);
      compare("embedding_forward", out_c, out_e, 1e-7);  // one addition (rounded alike): identical
      V dwte_c = random_t<T>(vocab * c, 65), dwte_e = dwte_c, dwpe_c = random_t<T>(t * c, 66), dwpe_e = dwpe_c;
      embedding_backward(dwte_c.data(), with_pos ? dwpe_c.data() : nullptr, dout.data(), tokens.data(), b, t, c);
      gpu::embedding_backward(dwte_e.data(), with_pos ? dwpe_e.data() : nullptr, dout.data(), tokens.data(),
                              links.data(), b, t, c, kStream);
      compare("embedding_backward dwte", dwte_c, dwte_e, tol<T>(1e-5));
      compare("embedding_backward dwpe", dwpe_c, dwpe_e, tol<T>(1e-5));  // untouched (equal) when null
      // No atomics: the same bits whatever order the threads run in.
      V dwte_r = random_t<T>(vocab * c, 65);
      in_reverse_thread_order([&] {
        gpu::embedding_backward(dwte_r.data(), static_cast<T*>(nullptr), dout.data(), tokens.data(), links.data(), b,
                                t, c, kStream);
      });
      CHECK(same_bits(dwte_r, dwte_e));
    }
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): fused softmax cross-entropy over a padded vocabulary", T, float, bf16) {
    using V = std::vector<T>;
    const int64_t n = 45, vocab = 300, padded = 320;  // 300 columns: more than one pass of a 256-thread block
    const float scale = 1.0f / static_cast<float>(n);
    const std::vector<int32_t> targets = random_tokens(n, static_cast<int32_t>(vocab), 70);
    V logits_c = random_t<T>(n * padded, 71, 3.0f), logits_e = logits_c;  // padding columns start non-zero
    const V logits_in = logits_c;
    const double lc = softmax_xent_forward_backward(logits_c.data(), targets.data(), n, padded, vocab, scale);
    std::vector<double> row_loss(n, -1.0);
    gpu::softmax_xent_forward_backward(logits_e.data(), row_loss.data(), targets.data(), n, padded, vocab, scale,
                                       kStream);
    double le = 0;  // rows in order, as backend_cuda.cu adds them
    for (double v : row_loss) le += v;
    CHECK(lc > n * 2.0);  // logits of scale 3 over 300 classes: well above 2 nats a row
    CHECK(std::fabs(le - lc) <= 1e-5 * lc);  // computed from the same (widened) logits in both storage types
    compare("softmax_xent gradient", logits_c, logits_e, tol<T>(1e-5));
    // Σ_j (p_j − onehot_j)·scale = 0. Stored in bf16, each term moves by at most half an ulp ≤ 2^-8·|term|, and
    // Σ_j |term| = 2·(1 − p_target)·scale ≤ 2·scale: the row sum is within 2^-7·scale of 0.
    const double row_tol = 1e-6 + (is_bf16<T> ? kBf16Ulp * scale : 0.0);
    const Vec g = widened(logits_e);
    for (int64_t i = 0; i < n; ++i) {
      double row = 0;
      for (int64_t j = 0; j < padded; ++j) {
        if (j >= vocab) REQUIRE(g[i * padded + j] == 0.0f);
        row += g[i * padded + j];
      }
      CHECK(std::fabs(row) <= row_tol);
    }
    // The block reductions give the same bits whatever order the threads run in.
    V logits_r = logits_in;
    std::vector<double> row_loss_r(n, -1.0);
    in_reverse_thread_order([&] {
      gpu::softmax_xent_forward_backward(logits_r.data(), row_loss_r.data(), targets.data(), n, padded, vocab, scale,
                                         kStream);
    });
    CHECK(same_bits(logits_r, logits_e));
    CHECK(row_loss_r == row_loss);
  }

  TEST_CASE_TEMPLATE("cuda kernels (emulated): AdamW step, in place or from an fp32 master copy", T, float, bf16) {
    using V = std::vector<T>;
    const int64_t n = 10001;
    Vec v0 = random_vec(n, 83, 0.01f);
    for (auto& x : v0) x = x * x;  // second moments are non-negative
    for (int with_master = 0; with_master < 2; ++with_master) {
      CAPTURE(with_master);
      V p_c = random_t<T>(n, 80), p_e = p_c;
      Vec m_c = random_vec(n, 82, 0.1f), v_c = v0, m_e = m_c, v_e = v_c;
      Vec master_c = widened(p_c), master_e = master_c;  // amp: the fp32 master starts as the widened weights
      float* mc = with_master ? master_c.data() : nullptr;
      float* me = with_master ? master_e.data() : nullptr;
      const V g = random_t<T>(n, 81);
      AdamWParams a = kernel_compare::adamw_test_params();
      for (a.t = 3; a.t <= 4; ++a.t) {
        adamw_step_shard(p_c.data(), mc, g.data(), m_c.data(), v_c.data(), n, a);
        // The bias corrections as backend_cuda.cu forms them (pow in double, then float).
        const float c1 = 1.0f - static_cast<float>(std::pow(a.beta1, static_cast<double>(a.t)));
        const float c2 = 1.0f - static_cast<float>(std::pow(a.beta2, static_cast<double>(a.t)));
        gpu::adamw_step(p_e.data(), me, g.data(), m_e.data(), v_e.data(), n, a.lr, a.beta1, a.beta2, a.eps,
                        a.weight_decay, a.grad_scale, c1, c2, kStream);
      }
      compare("adamw p", p_c, p_e, tol<T>(1e-5));
      compare("adamw m", m_c, m_e, 1e-5);  // moments are float in both storage types
      compare("adamw v", v_c, v_e, 1e-5);
      compare("adamw master", master_c, master_e, 1e-5);  // untouched (equal) when null
      if (with_master) {  // p is the rounded master
        for (int64_t i = 0; i < n; ++i) REQUIRE(load(p_e[i]) == load(store_as<T>(master_e[i])));
      }
    }
  }
}
