#include "calibrate/fit.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace shardplan::calibrate {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Weighted least squares of z ≈ α + β·S with weights w (on squared residuals), α ≥ 0, β ≥ 0.
// Columns are scaled (S / S_max, z / z_max) so that QR sees numbers near 1 whatever the units.
LineFit solve_weighted(const std::vector<FitPoint>& p, const std::vector<double>& z, const std::vector<double>& w) {
  const std::size_t n = p.size();
  double s_max = 0, z_max = 0;
  for (std::size_t i = 0; i < n; ++i) {
    s_max = std::max(s_max, p[i].bytes);
    z_max = std::max(z_max, std::abs(z[i]));
  }
  if (!(z_max > 0)) z_max = 1;
  Eigen::MatrixXd a(n, 2);  // [n × 2]: √w·[1, S/s_max]
  Eigen::VectorXd b(n);     // [n]: √w·z/z_max
  for (std::size_t i = 0; i < n; ++i) {
    const double sw = std::sqrt(w[i]);
    a(static_cast<Eigen::Index>(i), 0) = sw;
    a(static_cast<Eigen::Index>(i), 1) = sw * p[i].bytes / s_max;
    b(static_cast<Eigen::Index>(i)) = sw * z[i] / z_max;
  }
  Eigen::Vector2d x = a.colPivHouseholderQr().solve(b);
  // Active set: a negative coefficient is pinned at 0 and the other refitted alone (1-D least squares).
  if (x(0) < 0 || x(1) < 0) {
    const double slope = a.col(1).squaredNorm() > 0 ? a.col(1).dot(b) / a.col(1).squaredNorm() : 0;
    const double level = a.col(0).squaredNorm() > 0 ? a.col(0).dot(b) / a.col(0).squaredNorm() : 0;
    const double loss_slope = (b - slope * a.col(1)).squaredNorm();
    const double loss_level = (b - level * a.col(0)).squaredNorm();
    if (slope >= 0 && (level < 0 || loss_slope <= loss_level)) x = {0.0, slope};
    else x = {std::max(level, 0.0), 0.0};
  }
  LineFit f;
  f.alpha_s = x(0) * z_max;
  f.beta_s_per_byte = x(1) * z_max / s_max;
  f.from_bytes = p.front().bytes;
  f.to_bytes = p.back().bytes;
  return f;
}

double predicted(const LineFit& f, const FitPoint& q) { return f.alpha_s + f.beta_s_per_byte * q.bytes; }

// log(fit / measured): the relative error made symmetric (a fit 4× too high and one 4× too low weigh the same;
// the plain (fit − t)/t caps under-estimates at −100 % and so drags a least-squares line towards low outliers).
double log_error(const LineFit& f, const FitPoint& q) {
  return std::log(std::max(predicted(f, q), 1e-300) / q.seconds);
}

// Sum of Huber losses of the log errors (the robust objective a split is judged by).
double huber_loss(const LineFit& f, const std::vector<FitPoint>& p, double c) {
  double loss = 0;
  for (const FitPoint& q : p) {
    const double r = std::abs(log_error(f, q));
    loss += r <= c ? 0.5 * r * r : c * (r - 0.5 * c);
  }
  return loss;
}

constexpr double kHuberK = 1.345;       // 95 % efficiency under Gaussian noise (Huber 1964)
constexpr double kMadToSigma = 1.4826;  // σ = 1.4826·MAD for Gaussian noise
constexpr double kMinScale = 0.01;      // 1 %: below this the measurement noise itself dominates

}  // namespace

double FitResult::time_s(double bytes) const {
  for (const LineFit& s : segments)
    if (bytes <= s.to_bytes) return s.alpha_s + s.beta_s_per_byte * bytes;
  return segments.back().alpha_s + segments.back().beta_s_per_byte * bytes;
}

LineFit fit_line(const std::vector<FitPoint>& points, int huber_iterations) {
  if (points.size() < 2) throw std::invalid_argument("a line needs at least 2 measured sizes");
  for (const FitPoint& q : points)
    if (!(q.seconds > 0) || !(q.bytes > 0) || !std::isfinite(q.seconds))
      throw std::invalid_argument("measured sizes and times must be positive and finite");
  const std::size_t n = points.size();
  // Start: least squares of the relative error (weights 1/t²).
  std::vector<double> z(n), w(n);
  for (std::size_t i = 0; i < n; ++i) {
    z[i] = points[i].seconds;
    w[i] = 1.0 / (z[i] * z[i]);
  }
  LineFit f = solve_weighted(points, z, w);
  // Then Gauss-Newton steps on the log error, each a weighted least squares: log(ŷ'/t) ≈ r + (ŷ' − ŷ)/ŷ, so
  // minimising Σ h·(ŷ' − ŷ(1 − r))²/ŷ² moves to the robust log-error fit; h are Huber weights (IRLS) with the
  // scale from the median absolute deviation.
  for (int it = 0; it < huber_iterations; ++it) {
    std::vector<double> r(n), abs_r(n);
    for (std::size_t i = 0; i < n; ++i) abs_r[i] = std::abs(r[i] = log_error(f, points[i]));
    const double c = kHuberK * std::max(kMadToSigma * median_of(abs_r), kMinScale);
    for (std::size_t i = 0; i < n; ++i) {
      const double y = std::max(predicted(f, points[i]), 1e-300);
      z[i] = y * (1 - r[i]);
      w[i] = (abs_r[i] <= c ? 1.0 : c / abs_r[i]) / (y * y);
    }
    const LineFit next = solve_weighted(points, z, w);
    const bool settled = std::abs(next.alpha_s - f.alpha_s) <= 1e-9 * std::max(f.alpha_s, 1e-12) &&
                         std::abs(next.beta_s_per_byte - f.beta_s_per_byte) <= 1e-9 * std::max(f.beta_s_per_byte, 1e-30);
    f = next;
    if (settled) break;
  }
  f.from_bytes = points.front().bytes;
  f.to_bytes = points.back().bytes;
  return f;
}

namespace {

double worst_error_pct(const std::vector<LineFit>& segments, const std::vector<FitPoint>& points) {
  FitResult tmp;
  tmp.segments = segments;
  double m = 0;
  for (const FitPoint& q : points) m = std::max(m, std::abs(tmp.time_s(q.bytes) - q.seconds) / q.seconds);
  return 100 * m;
}

double total_loss(const std::vector<LineFit>& segments, const std::vector<FitPoint>& points, double c) {
  double loss = 0;
  for (const LineFit& f : segments) {
    std::vector<FitPoint> part;
    for (const FitPoint& q : points)
      if (q.bytes >= f.from_bytes && q.bytes <= f.to_bytes) part.push_back(q);
    loss += huber_loss(f, part, c);
  }
  return loss;
}

// One line over `points`, or — when it leaves a point more than max_error_pct off — the best split into two
// ranges of ≥ 2 sizes (smallest robust loss), each fitted the same way, `depth` more times at most. A split is
// kept when it cuts both the worst error and the robust loss by 30 % (a lone outlier does not earn a line).
std::vector<LineFit> fit_segments(const std::vector<FitPoint>& points, double max_error_pct, int depth) {
  std::vector<LineFit> one = {fit_line(points)};
  const double worst = worst_error_pct(one, points);
  if (depth == 0 || worst <= max_error_pct || points.size() < 5) return one;
  const double c = kHuberK * kMinScale * 10;  // log errors beyond 0.13 (14 %) count linearly
  double best_loss = HUGE_VAL;
  std::vector<LineFit> best;
  for (std::size_t j = 2; j + 2 <= points.size(); ++j) {
    const std::vector<FitPoint> lo(points.begin(), points.begin() + static_cast<std::ptrdiff_t>(j));
    const std::vector<FitPoint> hi(points.begin() + static_cast<std::ptrdiff_t>(j), points.end());
    std::vector<LineFit> split = fit_segments(lo, max_error_pct, depth - 1);
    const std::vector<LineFit> upper = fit_segments(hi, max_error_pct, depth - 1);
    split.insert(split.end(), upper.begin(), upper.end());
    // A tiny cost per line: of equally good splits the one with fewer lines wins.
    const double loss = total_loss(split, points, c) + 1e-9 * static_cast<double>(split.size());
    if (loss < best_loss) {
      best_loss = loss;
      best = split;
    }
  }
  if (!best.empty() && worst_error_pct(best, points) < 0.7 * worst && best_loss < 0.7 * total_loss(one, points, c))
    return best;
  return one;
}

}  // namespace

FitResult fit_collective(const std::vector<FitPoint>& points, double max_error_pct) {
  FitResult result;
  // Two levels of splits at most (four lines): e.g. MPI's eager, rendezvous and pipelined ranges.
  result.segments = fit_segments(points, max_error_pct, 2);
  double sum_sq = 0;
  for (const FitPoint& q : points) {
    const double e = 100 * (result.time_s(q.bytes) - q.seconds) / q.seconds;
    result.error_pct.push_back(e);
    sum_sq += e * e;
  }
  result.rms_error_pct = std::sqrt(sum_sq / static_cast<double>(points.size()));
  result.max_error_pct = worst_error_pct(result.segments, points);
  return result;
}

}  // namespace shardplan::calibrate
