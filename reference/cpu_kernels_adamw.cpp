// AdamW on a contiguous shard (the whole model under DDP, the rank's shard under ZeRO-1/2/3). The update is fp32
// whatever the storage: g and p are widened, the moments are float, and p is rounded once when stored.
#include <cmath>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

template <typename T>
void adamw_step_shard(T* p, float* master, const T* g, float* m, float* v, int64_t n, const AdamWParams& a) {
  // Loshchilov & Hutter 2019, Algorithm 2: decoupled weight decay, bias-corrected moments.
  const float c1 = 1.0f - static_cast<float>(std::pow(a.beta1, static_cast<double>(a.t)));
  const float c2 = 1.0f - static_cast<float>(std::pow(a.beta2, static_cast<double>(a.t)));
  for (int64_t i = 0; i < n; ++i) {
    const float gi = load(g[i]) * a.grad_scale;
    m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
    v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
    const float mhat = m[i] / c1, vhat = v[i] / c2;
    // The weight being updated: the fp32 master copy when there is one (amp-bf16; Micikevicius et al. 2018 §3.1),
    // else p itself, widened (fp32, or pure-bf16 where the update is rounded away when smaller than half an ulp).
    float w = master ? master[i] : load(p[i]);
    w -= a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weight_decay * w);
    if (master) master[i] = w;
    p[i] = store_as<T>(w);
  }
}

template void adamw_step_shard<float>(float*, float*, const float*, float*, float*, int64_t, const AdamWParams&);
template void adamw_step_shard<bf16>(bf16*, float*, const bf16*, float*, float*, int64_t, const AdamWParams&);

}  // namespace shardplan::reference
