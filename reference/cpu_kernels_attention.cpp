// Rotary embedding and causal grouped-query attention (forward and backward), fp32 compute, per (sequence, head)
// with Eigen GEMMs on strided views of the fused qkv buffer. bf16 storage: qkv, out and dout are widened to fp32
// copies (Fp32In), the fp32 bodies below run on them, and out/dqkv are rounded once when stored.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "reference/cpu_kernels.hpp"
#include "reference/fp32_views.hpp"

namespace shardplan::reference {

namespace {

using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<MatR, 0, Eigen::OuterStride<>>;
using CStrided = Eigen::Map<const MatR, 0, Eigen::OuterStride<>>;

// Rotates the first `heads` head_dim-wide slices of every row of x[B·T, stride] by ±θ(t, i);
// θ(t, i) = t · 10000^(−2i/HD) for the pair (i, i + HD/2) (RoFormer eq. 34, rotate-half layout).
template <typename T>
void rope_rotate(T* x, int64_t stride, int64_t heads, const AttentionShape& s, float sign) {
  const int64_t half = s.head_dim / 2;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq; ++t) {
      T* row = x + (b * s.seq + t) * stride;  // [stride]
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) /
                                                                            static_cast<double>(s.head_dim));
        const float c = static_cast<float>(std::cos(theta)), sn = sign * static_cast<float>(std::sin(theta));
        for (int64_t h = 0; h < heads; ++h) {
          T* v = row + h * s.head_dim;  // [HD]
          const float x1 = load(v[i]), x2 = load(v[i + half]);
          v[i] = store_as<T>(x1 * c - x2 * sn);
          v[i + half] = store_as<T>(x1 * sn + x2 * c);
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, const AttentionShape& s) {
  // q and k heads are adjacent in qkv (NH then KVH slices): rotate NH + KVH slices from the row start.
  rope_rotate(qkv, s.qkv_width(), s.heads + s.kv_heads, s, 1.0f);
}

template <typename T>
void rope_backward(T* dqkv, const AttentionShape& s) {
  // The rotation is orthogonal: its transpose (angle −θ) maps the gradient back.
  rope_rotate(dqkv, s.qkv_width(), s.heads + s.kv_heads, s, -1.0f);
}

namespace {

// The attention bodies, on fp32 tensors (the storage itself for float, widened copies for bf16).

void attention_forward_fp32(float* out, float* lse, const float* qkv, float* work, const AttentionShape& s) {
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

void attention_backward_fp32(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
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

}  // namespace

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, float* work, const AttentionShape& s) {
  const int64_t rows = s.batch * s.seq;
  const Fp32In<T> qkv32(qkv, rows * s.qkv_width());
  Fp32Out<T> out32(out, rows * s.q_width(), OutMode::overwrite);
  attention_forward_fp32(out32.data(), lse, qkv32.data(), work, s);
  out32.commit();
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* out, const float* lse, const T* qkv, float* work,
                        const AttentionShape& s) {
  const int64_t rows = s.batch * s.seq;
  const Fp32In<T> dout32(dout, rows * s.q_width()), out32(out, rows * s.q_width()),
      qkv32(qkv, rows * s.qkv_width());
  Fp32Out<T> dqkv32(dqkv, rows * s.qkv_width(), OutMode::overwrite);
  attention_backward_fp32(dqkv32.data(), dout32.data(), out32.data(), lse, qkv32.data(), work, s);
  dqkv32.commit();
}

#define SHARDPLAN_INSTANTIATE(T)                                                                               \
  template void rope_forward<T>(T*, const AttentionShape&);                                                    \
  template void rope_backward<T>(T*, const AttentionShape&);                                                   \
  template void attention_forward<T>(T*, float*, const T*, float*, const AttentionShape&);                     \
  template void attention_backward<T>(T*, const T*, const T*, const float*, const T*, float*, const AttentionShape&);
SHARDPLAN_INSTANTIATE(float)
SHARDPLAN_INSTANTIATE(bf16)
#undef SHARDPLAN_INSTANTIATE

}  // namespace shardplan::reference
