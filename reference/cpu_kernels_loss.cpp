// Token/position embedding and the fused softmax cross-entropy. Inputs are widened to fp32 as they are read, outputs
// rounded once when stored (reference/bf16.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "reference/cpu_kernels.hpp"
#include "reference/fp32_views.hpp"

namespace shardplan::reference {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b, int64_t t, int64_t c) {
  for (int64_t i = 0; i < b * t; ++i) {
    const T* e = wte + static_cast<int64_t>(tokens[i]) * c;  // [C]
    const T* p = wpe ? wpe + (i % t) * c : nullptr;          // [C]
    T* o = out + i * c;                                      // [C]
    for (int64_t j = 0; j < c; ++j) o[j] = store_as<T>(load(e[j]) + (p ? load(p[j]) : 0.0f));
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t b, int64_t t, int64_t c) {
  // Every occurrence of a token adds to its dwte row: the rows are visited token by token (occurrences in
  // position order, as a plain loop over positions adds them), so that each row sums in fp32 and rounds once
  // (Fp32Out accumulate). The vocabulary size is not an argument: only the rows of tokens present are touched.
  std::vector<int64_t> order(static_cast<std::size_t>(b * t));  // [B·T] positions sorted by token
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return tokens[x] < tokens[y]; });
  for (std::size_t k = 0; k < order.size();) {
    const int32_t tok = tokens[order[k]];
    Fp32Out<T> row(dwte + static_cast<int64_t>(tok) * c, c, OutMode::accumulate);  // [C]
    for (; k < order.size() && tokens[order[k]] == tok; ++k) {
      const T* d = dout + order[k] * c;  // [C]
      for (int64_t j = 0; j < c; ++j) row.data()[j] += load(d[j]);
    }
    row.commit();
  }
  if (dwpe) {
    Fp32Out<T> dp32(dwpe, t * c, OutMode::accumulate);  // [T,C]
    for (int64_t i = 0; i < b * t; ++i) {
      const T* d = dout + i * c;             // [C]
      float* dp = dp32.data() + (i % t) * c;  // [C]
      for (int64_t j = 0; j < c; ++j) dp[j] += load(d[j]);
    }
    dp32.commit();
  }
}

template <typename T>
double softmax_xent_forward_backward(T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                     int64_t vocab, float scale) {
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    T* r = logits + i * padded_vocab;  // [Vp]
    float mx = load(r[0]);
    for (int64_t j = 1; j < vocab; ++j) mx = load(r[j]) > mx ? load(r[j]) : mx;
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(load(r[j]) - mx));
    const double log_z = mx + std::log(sum);
    loss += log_z - load(r[targets[i]]);
    // ∂(−log softmax_target)/∂logit_j = p_j − [j = target] (written in place over the logits; the target's −1 is
    // applied in fp32 before the one rounding).
    for (int64_t j = 0; j < vocab; ++j) {
      float gj = static_cast<float>(std::exp(load(r[j]) - log_z)) * scale;
      if (j == targets[i]) gj -= scale;
      r[j] = store_as<T>(gj);
    }
    for (int64_t j = vocab; j < padded_vocab; ++j) r[j] = store_as<T>(0.0f);
  }
  return loss;
}

#define SHARDPLAN_INSTANTIATE(T)                                                                             \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t);    \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t);         \
  template double softmax_xent_forward_backward<T>(T*, const int32_t*, int64_t, int64_t, int64_t, float);
SHARDPLAN_INSTANTIATE(float)
SHARDPLAN_INSTANTIATE(bf16)
#undef SHARDPLAN_INSTANTIATE

}  // namespace shardplan::reference
