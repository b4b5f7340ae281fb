// MLP activations: GELU (tanh form) and SwiGLU, forward and backward.
#include <cmath>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

namespace {
// √(2/π), the constant of the tanh approximation (Hendrycks & Gimpel 2016 §2).
constexpr float kGeluScale = 0.7978845608028654f;
}  // namespace

void gelu_forward(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(float* din, const float* in, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = std::tanh(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = grad * dout[i];
  }
}

void swiglu_forward(float* out, const float* fc1, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = fc1 + i * 2 * f;  // [F]
    const float* up = gate + f;           // [F]
    float* o = out + i * f;               // [F]
    for (int64_t j = 0; j < f; ++j) {
      const float sig = 1.0f / (1.0f + std::exp(-gate[j]));
      o[j] = gate[j] * sig * up[j];
    }
  }
}

void swiglu_backward(float* dfc1, const float* fc1, const float* dout, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = fc1 + i * 2 * f;  // [F]
    const float* up = gate + f;           // [F]
    const float* d = dout + i * f;        // [F]
    float* dgate = dfc1 + i * 2 * f;      // [F]
    float* dup = dgate + f;               // [F]
    for (int64_t j = 0; j < f; ++j) {
      const float g = gate[j];
      const float sig = 1.0f / (1.0f + std::exp(-g));
      const float silu = g * sig;
      // d silu / dg = σ(g)·(1 + g·(1 − σ(g))).
      dgate[j] = d[j] * up[j] * sig * (1.0f + g * (1.0f - sig));
      dup[j] = d[j] * silu;
    }
  }
}

}  // namespace shardplan::reference
