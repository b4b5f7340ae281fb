// MLP activations: GELU (tanh form) and SwiGLU, forward and backward. Inputs are widened to fp32 as they are read,
// outputs rounded once when stored (reference/bf16.hpp).
#include <cmath>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

namespace {
// √(2/π), the constant of the tanh approximation (Hendrycks & Gimpel 2016 §2).
constexpr float kGeluScale = 0.7978845608028654f;
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(in[i]);
    out[i] = store_as<T>(0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

template <typename T>
void gelu_backward(T* din, const T* in, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(in[i]);
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = std::tanh(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = store_as<T>(grad * load(dout[i]));
  }
}

template <typename T>
void swiglu_forward(T* out, const T* fc1, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = fc1 + i * 2 * f;  // [F]
    const T* up = gate + f;           // [F]
    T* o = out + i * f;               // [F]
    for (int64_t j = 0; j < f; ++j) {
      const float g = load(gate[j]);
      const float sig = 1.0f / (1.0f + std::exp(-g));
      o[j] = store_as<T>(g * sig * load(up[j]));
    }
  }
}

template <typename T>
void swiglu_backward(T* dfc1, const T* fc1, const T* dout, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = fc1 + i * 2 * f;  // [F]
    const T* up = gate + f;           // [F]
    const T* d = dout + i * f;        // [F]
    T* dgate = dfc1 + i * 2 * f;      // [F]
    T* dup = dgate + f;               // [F]
    for (int64_t j = 0; j < f; ++j) {
      const float g = load(gate[j]), dj = load(d[j]);
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float silu = g * sig;
      // d silu / dg = σ(g)·(1 + g·(1 − σ(g))).
      dgate[j] = store_as<T>(dj * load(up[j]) * sig * (1.0f + g * (1.0f - sig)));
      dup[j] = store_as<T>(dj * silu);
    }
  }
}

#define SHARDPLAN_INSTANTIATE(T)                                            \
  template void gelu_forward<T>(T*, const T*, int64_t);                     \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);          \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);          \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t);
SHARDPLAN_INSTANTIATE(float)
SHARDPLAN_INSTANTIATE(bf16)
#undef SHARDPLAN_INSTANTIATE

}  // namespace shardplan::reference
