#pragma once
// fp32 views of the T storage (float or bf16) of the CPU kernels (cpu_kernels_*.cpp only): the kernels keep their
// fp32 bodies and see every tensor as float. For T = float a view IS the storage (no copy, no extra operation, so
// the fp32 results stay bit-identical to the fp32-only kernels); for T = bf16 it is a widened copy, and an output
// view is rounded into the storage once, when committed (reference/bf16.hpp: round to nearest even).
#include <cstdint>
#include <type_traits>
#include <vector>

#include "reference/bf16.hpp"

namespace shardplan::reference {

// Input view: x[n] as fp32 (null stays null).
template <typename T>
class Fp32In {
 public:
  Fp32In(const T* x, int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      data_ = x;
    } else if (x) {
      buf_.resize(static_cast<std::size_t>(n));  // [n] widened copy
      for (int64_t i = 0; i < n; ++i) buf_[i] = load(x[i]);
      data_ = buf_.data();
    }
  }
  const float* data() const { return data_; }

 private:
  const float* data_ = nullptr;
  std::vector<float> buf_;
};

// Output view of dst[n] (null stays null). `overwrite`: the kernel writes every element, commit stores round(y).
// `accumulate`: the kernel adds its contributions into the view, commit stores round(dst + Σ) — one rounding per
// element whatever the number of contributions (a bf16 running sum would drop terms below half an ulp of the
// total); for float the view is dst itself, so the contributions add in the order of the fp32 kernels.
enum class OutMode { overwrite, accumulate };

template <typename T>
class Fp32Out {
 public:
  Fp32Out(T* dst, int64_t n, OutMode mode) : dst_(dst), n_(n), mode_(mode) {
    if constexpr (std::is_same_v<T, float>) {
      data_ = dst;
    } else if (dst) {
      buf_.assign(static_cast<std::size_t>(n), 0.0f);  // [n] fp32 values, or the fp32 sum of contributions
      data_ = buf_.data();
    }
  }
  float* data() const { return data_; }
  void commit() {
    if constexpr (!std::is_same_v<T, float>) {
      if (!dst_) return;
      if (mode_ == OutMode::overwrite) {
        for (int64_t i = 0; i < n_; ++i) dst_[i] = store_as<T>(buf_[i]);
      } else {
        for (int64_t i = 0; i < n_; ++i) accumulate(dst_[i], buf_[i]);
      }
    }
  }

 private:
  T* dst_;
  int64_t n_;
  OutMode mode_;
  float* data_ = nullptr;
  std::vector<float> buf_;
};

}  // namespace shardplan::reference
