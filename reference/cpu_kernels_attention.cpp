// Rotary embedding and causal grouped-query attention (forward and backward), fp32, per (sequence, head) with
// Eigen GEMMs on strided views of the fused qkv buffer.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<MatR, 0, Eigen::OuterStride<>>;
using CStrided = Eigen::Map<const MatR, 0, Eigen::OuterStride<>>;

// Rotates the first `heads` head_dim-wide slices of every row of x[B·T, stride] by ±θ(t, i);
// θ(t, i) = t · 10000^(−2i/HD) for the pair (i, i + HD/2) (RoFormer eq. 34, rotate-half layout).
void rope_rotate(float* x, int64_t stride, int64_t heads, const AttentionShape& s, float sign) {
  const int64_t half = s.head_dim / 2;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq; ++t) {
      float* row = x + (b * s.seq + t) * stride;  // [stride]
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) /
                                                                            static_cast<double>(s.head_dim));
        const float c = static_cast<float>(std::cos(theta)), sn = sign * static_cast<float>(std::sin(theta));
        for (int64_t h = 0; h < heads; ++h) {
          float* v = row + h * s.head_dim;  // [HD]
          const float x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c - x2 * sn;
          v[i + half] = x1 * sn + x2 * c;
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* qkv, const AttentionShape& s) {
  // q and k heads are adjacent in qkv (NH then KVH slices): rotate NH + KVH slices from the row start.
  rope_rotate(qkv, s.qkv_width(), s.heads + s.kv_heads, s, 1.0f);
}

void rope_backward(float* dqkv, const AttentionShape& s) {
  // The rotation is orthogonal: its transpose (angle −θ) maps the gradient back.
  rope_rotate(dqkv, s.qkv_width(), s.heads + s.kv_heads, s, -1.0f);
}

void attention_forward(float* out, float* lse, const float* qkv, float* work, const AttentionShape& s) {
  const int64_t T = s.seq, HD = s.head_dim, W = s.qkv_width(), QW = s.q_width(), KW = s.kv_width();
  const int64_t group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  Eigen::Map<MatR> S(work, T, T);  // [T,T] scores, then probabilities
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* base = qkv + b * T * W;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      CStrided q(base + h * HD, T, HD, Eigen::OuterStride<>(W));            // [T,HD]
      CStrided k(base + QW + g * HD, T, HD, Eigen::OuterStride<>(W));       // [T,HD]
      CStrided v(base + QW + KW + g * HD, T, HD, Eigen::OuterStride<>(W));  // [T,HD]
      S.noalias() = (q * k.transpose()) * scale;
      float* l = lse + (b * s.heads + h) * T;  // [T]
      for (int64_t i = 0; i < T; ++i) {
        float* r = S.data() + i * T;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) mx = r[j] > mx ? r[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          r[j] = std::exp(r[j] - mx);
          sum += r[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) r[j] *= inv;
        for (int64_t j = i + 1; j < T; ++j) r[j] = 0.0f;  // causal mask
        l[i] = mx + static_cast<float>(std::log(sum));
      }
      Strided o(out + b * T * QW + h * HD, T, HD, Eigen::OuterStride<>(QW));  // [T,HD]
      o.noalias() = S * v;
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                        float* work, const AttentionShape& s) {
  const int64_t T = s.seq, HD = s.head_dim, W = s.qkv_width(), QW = s.q_width(), KW = s.kv_width();
  const int64_t group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  Eigen::Map<MatR> P(work, T, T);       // [T,T] probabilities, recomputed
  Eigen::Map<MatR> dP(work + T * T, T, T);  // [T,T] ∂loss/∂P, then ∂loss/∂scores
  for (int64_t i = 0; i < s.batch * T * W; ++i) dqkv[i] = 0.0f;  // kv heads accumulate over their group
  for (int64_t b = 0; b < s.batch; ++b) {
    const float* base = qkv + b * T * W;
    float* dbase = dqkv + b * T * W;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      CStrided q(base + h * HD, T, HD, Eigen::OuterStride<>(W));            // [T,HD]
      CStrided k(base + QW + g * HD, T, HD, Eigen::OuterStride<>(W));       // [T,HD]
      CStrided v(base + QW + KW + g * HD, T, HD, Eigen::OuterStride<>(W));  // [T,HD]
      CStrided o(out + b * T * QW + h * HD, T, HD, Eigen::OuterStride<>(QW));   // [T,HD]
      CStrided d_o(dout + b * T * QW + h * HD, T, HD, Eigen::OuterStride<>(QW));  // [T,HD]
      Strided dq(dbase + h * HD, T, HD, Eigen::OuterStride<>(W));
      Strided dk(dbase + QW + g * HD, T, HD, Eigen::OuterStride<>(W));
      Strided dv(dbase + QW + KW + g * HD, T, HD, Eigen::OuterStride<>(W));
      const float* l = lse + (b * s.heads + h) * T;  // [T]
      P.noalias() = (q * k.transpose()) * scale;
      for (int64_t i = 0; i < T; ++i) {
        float* r = P.data() + i * T;
        for (int64_t j = 0; j <= i; ++j) r[j] = std::exp(r[j] - l[i]);
        for (int64_t j = i + 1; j < T; ++j) r[j] = 0.0f;
      }
      dv.noalias() += P.transpose() * d_o;
      dP.noalias() = d_o * v.transpose();
      // Softmax backward (FlashAttention-2 Algorithm 2): dS = P ∘ (dP − D), D_i = Σ_d dO_id · O_id.
      for (int64_t i = 0; i < T; ++i) {
        const float D = d_o.row(i).dot(o.row(i));
        float* pr = P.data() + i * T;
        float* dr = dP.data() + i * T;
        for (int64_t j = 0; j < T; ++j) dr[j] = pr[j] * (dr[j] - D) * scale;
      }
      dq.noalias() += dP * k;
      dk.noalias() += dP.transpose() * q;
    }
  }
}

}  // namespace shardplan::reference
