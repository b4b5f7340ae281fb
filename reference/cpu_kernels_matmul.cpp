// GEMM kernels of the reference loop (Eigen, fp32).
#include <Eigen/Core>

#include "reference/cpu_kernels.hpp"

namespace shardplan::reference {

namespace {
using MatR = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapR = Eigen::Map<MatR>;
using CMapR = Eigen::Map<const MatR>;
}  // namespace

void matmul_forward(float* out, const float* in, const float* w, const float* bias, int64_t n, int64_t in_dim,
                    int64_t out_dim) {
  MapR o(out, n, out_dim);                                  // [N,O]
  o.noalias() = CMapR(in, n, in_dim) * CMapR(w, out_dim, in_dim).transpose();
  if (bias) o.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, out_dim);
}

void matmul_backward(float* din, float* dw, float* dbias, const float* dout, const float* in, const float* w,
                     int64_t n, int64_t in_dim, int64_t out_dim) {
  CMapR d(dout, n, out_dim);                                // [N,O]
  MapR(din, n, in_dim).noalias() = d * CMapR(w, out_dim, in_dim);
  MapR(dw, out_dim, in_dim).noalias() += d.transpose() * CMapR(in, n, in_dim);
  if (dbias) Eigen::Map<Eigen::RowVectorXf>(dbias, out_dim) += d.colwise().sum();
}

void residual_accumulate(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace shardplan::reference
