// LayerNorm and RMSNorm, forward and backward (llm.c layernorm_forward/backward; RMSNorm drops the mean). Inputs
// are widened to fp32 as they are read, outputs rounded once when stored (reference/bf16.hpp).
#include <cmath>

#include "reference/cpu_kernels.hpp"
#include "reference/fp32_views.hpp"

namespace shardplan::reference {

namespace {
constexpr float kEps = 1e-5f;
}

template <typename T>
void norm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* bias, int64_t n, int64_t c,
                  bool rms) {
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * c;  // [C]
    T* oi = out + i * c;      // [C]
    double mu = 0;
    if (!rms) {
      for (int64_t j = 0; j < c; ++j) mu += load(xi[j]);
      mu /= static_cast<double>(c);
    }
    double var = 0;  // E[(x − μ)²]; for RMSNorm μ = 0, so E[x²]
    for (int64_t j = 0; j < c; ++j) var += (load(xi[j]) - mu) * (load(xi[j]) - mu);
    var /= static_cast<double>(c);
    const float r = static_cast<float>(1.0 / std::sqrt(var + kEps));
    for (int64_t j = 0; j < c; ++j) {
      oi[j] = store_as<T>((load(xi[j]) - static_cast<float>(mu)) * r * load(w[j]) + (bias ? load(bias[j]) : 0.0f));
    }
    if (mean) mean[i] = static_cast<float>(mu);
    rstd[i] = r;
  }
}

template <typename T>
void norm_backward_accumulate(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, const float* mean,
                              const float* rstd, int64_t n, int64_t c, bool rms) {
  // dw and dbias sum over the N rows in fp32 and round once (Fp32Out accumulate); dx gets one term per element.
  Fp32Out<T> dw32(dw, c, OutMode::accumulate), dbias32(dbias, c, OutMode::accumulate);
  float* dwf = dw32.data();        // [C]
  float* dbiasf = dbias32.data();  // [C] or null
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * c;     // [C]
    const T* di = dout + i * c;  // [C]
    T* dxi = dx + i * c;         // [C]
    const float mu = rms ? 0.0f : mean[i];
    const float r = rstd[i];
    // xhat = (x − μ)·r; dnorm = w·dout. dx = r·(dnorm − mean(dnorm) − xhat·mean(dnorm·xhat)); RMSNorm has no
    // mean(dnorm) term because μ is not subtracted.
    double dnorm_mean = 0, dnorm_xhat_mean = 0;
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (load(xi[j]) - mu) * r;
      const float dnorm = load(w[j]) * load(di[j]);
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean = rms ? 0.0 : dnorm_mean / static_cast<double>(c);
    dnorm_xhat_mean /= static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      const float xhat = (load(xi[j]) - mu) * r;
      const float dij = load(di[j]);
      const float dnorm = load(w[j]) * dij;
      accumulate(dxi[j], r * (dnorm - static_cast<float>(dnorm_mean) - xhat * static_cast<float>(dnorm_xhat_mean)));
      dwf[j] += dij * xhat;
      if (dbiasf) dbiasf[j] += dij;
    }
  }
  dw32.commit();
  dbias32.commit();
}

#define SHARDPLAN_INSTANTIATE(T)                                                                                  \
  template void norm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t, bool);        \
  template void norm_backward_accumulate<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, \
                                            int64_t, int64_t, bool);
SHARDPLAN_INSTANTIATE(float)
SHARDPLAN_INSTANTIATE(bf16)
#undef SHARDPLAN_INSTANTIATE

}  // namespace shardplan::reference
