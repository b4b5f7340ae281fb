#pragma once
// Shared by the tests that hold a backend's kernels against the CPU kernels (tests/test_reference_cuda.cpp on a
// GPU, tests/cuda_emu/emu_kernels_test.cpp on the host emulator): random inputs with fixed seeds, and the
// elementwise comparison |other − cpu| ≤ rtol·(|cpu| + rms(cpu)). The rms term covers outputs that are sums of
// terms of both signs (GEMMs, norm gradients, attention), whose small values lose relative precision in any
// summation order.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reference/cpu_kernels.hpp"

namespace kernel_compare {

// The AdamW step both comparisons run (t is set by the caller): clipping (grad_scale 0.5) and weight decay on.
inline shardplan::reference::AdamWParams adamw_test_params() {
  shardplan::reference::AdamWParams a{};
  a.lr = 1e-2f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  return a;
}

inline std::vector<float> random_vec(std::size_t n, unsigned seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(shift, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline std::vector<int32_t> random_tokens(std::size_t n, int32_t vocab, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Checks |other − cpu| ≤ rtol·(|cpu| + rms(cpu)) for every element, naming the worst one otherwise; `label`
// names the other side ("gpu", "emulated gpu").
inline void compare(const std::string& what, const std::vector<float>& cpu, const std::vector<float>& other,
                    double rtol, const char* label) {
  REQUIRE(cpu.size() == other.size());
  double ss = 0;
  for (float x : cpu) ss += static_cast<double>(x) * x;
  const double rms = cpu.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(cpu.size()));
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double err = std::fabs(static_cast<double>(other[i]) - cpu[i]);
    const double ratio = std::isfinite(other[i]) ? err / (rtol * (std::fabs(cpu[i]) + rms) + 1e-30) : INFINITY;
    if (!(ratio <= worst)) {
      worst = ratio;
      at = i;
    }
  }
  CHECK_MESSAGE(worst <= 1.0, what << ": worst element " << at << " cpu " << cpu[at] << " " << label << " "
                                   << other[at] << " (" << worst << " × tolerance " << rtol << ")");
}

// --- bf16 storage (reference/bf16.hpp) -------------------------------------------------------------------------
// One bf16 ulp relative to the value, at most: 8 significant bits, so the spacing in [2^e, 2^(e+1)) is 2^(e−7).
constexpr double kBf16Ulp = 1.0 / 128;

template <typename T>
constexpr bool is_bf16 = std::is_same_v<T, shardplan::reference::bf16>;

// The tolerance of a kernel whose fp32 version is held to `rtol`, for storage T. In bf16 both sides compute in fp32
// from the same inputs and round once: values within rtol before rounding are within rtol plus one ulp after it
// (round to nearest moves each by at most half an ulp).
template <typename T>
double tol(double rtol) {
  return rtol + (is_bf16<T> ? kBf16Ulp : 0.0);
}

// Host data in storage T: float as is, bf16 rounded to nearest even; and back to float (exact).
template <typename T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = shardplan::reference::store_as<T>(v[i]);
  return out;
}
template <typename T>
std::vector<float> widened(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = shardplan::reference::load(v[i]);
  return out;
}

// compare() on tensors stored as T (bf16 compared widened).
template <typename T>
void compare(const std::string& what, const std::vector<T>& cpu, const std::vector<T>& other, double rtol,
             const char* label) {
  compare(what, widened(cpu), widened(other), rtol, label);
}

}  // namespace kernel_compare

// TEST_CASE_TEMPLATE names: "<bf16>" rather than the qualified name (one definition for every test that includes
// this header).
TYPE_TO_STRING_AS("bf16", shardplan::reference::bf16);
