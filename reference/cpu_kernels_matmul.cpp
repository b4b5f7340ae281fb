// GEMM kernels of the reference loop (Eigen, fp32 compute). bf16 storage: the operands are widened to fp32
// temporaries (Fp32In), multiplied in fp32 — as tensor cores accumulate bf16 products in fp32 — and rounded once when
// stored; dw += doutᵀ·in is summed over all N rows in fp32 before its one rounding.
#include <Eigen/Core>

#include "reference/cpu_kernels.hpp"
#include "reference/fp32_views.hpp"

namespace shardplan::reference {

namespace {
using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatR>;
using CMapR = Eigen::Map<const MatR>;
}  // namespace

template <typename T>
void matmul_forward(T* out, const T* in, const T* w, const T* bias, int64_t n, int64_t in_dim, int64_t out_dim) {
  const Fp32In<T> in32(in, n * in_dim), w32(w, out_dim * in_dim), bias32(bias, out_dim);
  Fp32Out<T> out32(out, n * out_dim, OutMode::overwrite);
  MapR o(out32.data(), n, out_dim);                         // [N,O]
  o.noalias() = CMapR(in32.data(), n, in_dim) * CMapR(w32.data(), out_dim, in_dim).transpose();
  if (bias) o.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias32.data(), out_dim);
  out32.commit();
}

template <typename T>
void matmul_backward(T* din, T* dw, T* dbias, const T* dout, const T* in, const T* w, int64_t n, int64_t in_dim,
                     int64_t out_dim) {
  const Fp32In<T> dout32(dout, n * out_dim), in32(in, n * in_dim), w32(w, out_dim * in_dim);
  Fp32Out<T> din32(din, n * in_dim, OutMode::overwrite), dw32(dw, out_dim * in_dim, OutMode::accumulate),
      dbias32(dbias, out_dim, OutMode::accumulate);
  CMapR d(dout32.data(), n, out_dim);                       // [N,O]
  MapR(din32.data(), n, in_dim).noalias() = d * CMapR(w32.data(), out_dim, in_dim);
  MapR(dw32.data(), out_dim, in_dim).noalias() += d.transpose() * CMapR(in32.data(), n, in_dim);
  if (dbias) Eigen::Map<Eigen::RowVectorXf>(dbias32.data(), out_dim) += d.colwise().sum();
  din32.commit();
  dw32.commit();
  dbias32.commit();
}

template <typename T>
void residual_accumulate(T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) accumulate(x[i], load(y[i]));
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(load(x[i])) * load(x[i]);
  return s;
}

#define SHARDPLAN_INSTANTIATE(T)                                                                                  \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);                   \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);          \
  template void residual_accumulate<T>(T*, const T*, int64_t);                                                    \
  template double sum_squares<T>(const T*, int64_t);
SHARDPLAN_INSTANTIATE(float)
SHARDPLAN_INSTANTIATE(bf16)
#undef SHARDPLAN_INSTANTIATE

}  // namespace shardplan::reference
