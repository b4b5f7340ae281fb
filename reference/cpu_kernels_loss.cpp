// Token/position embedding and the fused softmax cross-entropy.
#include <cmath>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t b,
                       int64_t t, int64_t c) {
  for (int64_t i = 0; i < b * t; ++i) {
    const float* e = wte + static_cast<int64_t>(tokens[i]) * c;  // [C]
    const float* p = wpe ? wpe + (i % t) * c : nullptr;          // [C]
    float* o = out + i * c;                                      // [C]
    for (int64_t j = 0; j < c; ++j) o[j] = e[j] + (p ? p[j] : 0.0f);
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t b, int64_t t,
                        int64_t c) {
  for (int64_t i = 0; i < b * t; ++i) {
    float* de = dwte + static_cast<int64_t>(tokens[i]) * c;  // [C]
    const float* d = dout + i * c;                           // [C]
    for (int64_t j = 0; j < c; ++j) de[j] += d[j];
    if (dwpe) {
      float* dp = dwpe + (i % t) * c;
      for (int64_t j = 0; j < c; ++j) dp[j] += d[j];
    }
  }
}

double softmax_xent_forward_backward(float* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                     int64_t vocab, float scale) {
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    float* r = logits + i * padded_vocab;  // [Vp]
    float mx = r[0];
    for (int64_t j = 1; j < vocab; ++j) mx = r[j] > mx ? r[j] : mx;
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(r[j] - mx));
    const double log_z = mx + std::log(sum);
    loss += log_z - r[targets[i]];
    // ∂(−log softmax_target)/∂logit_j = p_j − [j = target] (written in place over the logits).
    for (int64_t j = 0; j < vocab; ++j) r[j] = static_cast<float>(std::exp(r[j] - log_z)) * scale;
    r[targets[i]] -= scale;
    for (int64_t j = vocab; j < padded_vocab; ++j) r[j] = 0.0f;
  }
  return loss;
}

}  // namespace shardplan::reference
