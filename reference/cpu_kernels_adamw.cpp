// AdamW on a contiguous shard (the whole model under DDP, the rank's shard under ZeRO-1/2/3).
#include <cmath>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

void adamw_step_shard(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a) {
  // Loshchilov & Hutter 2019, Algorithm 2: decoupled weight decay, bias-corrected moments.
  const float c1 = 1.0f - static_cast<float>(std::pow(a.beta1, static_cast<double>(a.t)));
  const float c2 = 1.0f - static_cast<float>(std::pow(a.beta2, static_cast<double>(a.t)));
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * a.grad_scale;
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
    const float mhat = m[i] / c1, vhat = v[i] / c2;
    p[i] -= a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weight_decay * p[i]);
  }
}

}  // namespace shardplan::reference
