// LayerNorm and RMSNorm, forward and backward (llm.c layernorm_forward/backward; RMSNorm drops the mean).
#include <cmath>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

namespace {
constexpr float kEps = 1e-5f;
}

void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* bias,
                  int64_t n, int64_t c, bool rms) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * c;  // [C]
    float* oi = out + i * c;      // [C]
    double mu = 0;
    if (!rms) {
      for (int64_t j = 0; j < c; ++j) mu += xi[j];
      mu /= static_cast<double>(c);
    }
    double var = 0;  // E[(x − μ)²]; for RMSNorm μ = 0, so E[x²]
    for (int64_t j = 0; j < c; ++j) var += (xi[j] - mu) * (xi[j] - mu);
    var /= static_cast<double>(c);
    const float r = static_cast<float>(1.0 / std::sqrt(var + kEps));
    for (int64_t j = 0; j < c; ++j) {
      oi[j] = (xi[j] - static_cast<float>(mu)) * r * w[j] + (bias ? bias[j] : 0.0f);
    }
    if (mean) mean[i] = static_cast<float>(mu);
    rstd[i] = r;
  }
}

void norm_backward_accumulate(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                              const float* w, const float* mean, const float* rstd, int64_t n, int64_t c,
                              bool rms) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * c;     // [C]
    const float* di = dout + i * c;  // [C]
    float* dxi = dx + i * c;         // [C]
    const float mu = rms ? 0.0f : mean[i];
    const float r = rstd[i];
    // xhat = (x − μ)·r; dnorm = w·dout. dx = r·(dnorm − mean(dnorm) − xhat·mean(dnorm·xhat)); RMSNorm has no
    // mean(dnorm) term because μ is not subtracted.
    double dnorm_mean = 0, dnorm_xhat_mean = 0;
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xi[j] - mu) * r;
      const float dnorm = w[j] * di[j];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean = rms ? 0.0 : dnorm_mean / static_cast<double>(c);
    dnorm_xhat_mean /= static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (xi[j] - mu) * r;
      const float dnorm = w[j] * di[j];
      dxi[j] += r * (dnorm - static_cast<float>(dnorm_mean) - xhat * static_cast<float>(dnorm_xhat_mean));
      dw[j] += di[j] * xhat;
      if (dbias) dbias[j] += di[j];
    }
  }
}

}  // namespace shardplan::reference
