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

}  // namespace kernel_compare
