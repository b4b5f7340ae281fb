#pragma once
// Fitting measured collective times to t = α + β·S (Eigen).
//
// Least squares on the relative error (1 µs off at 10 µs counts as much as 1 ms off at 10 ms): started with
// weights 1/t², then Gauss-Newton steps on log(fit/t), the symmetric form of the relative error, each a weighted
// least squares solved with Eigen; robust by iteratively reweighted least squares with Huber weights (Huber
// 1964; c = 1.345 σ, σ from the median absolute deviation); α ≥ 0 and β ≥ 0 (an active set of two). When one line leaves a point more than
// `max_error` off, a breakpoint splits the sizes into two lines (each side split again if needed: four lines at most) (e.g. MPI's eager → rendezvous switch or NCCL's
// LL → Simple protocol change), taken where the total robust loss is smallest.
#include <cstddef>
#include <vector>

namespace shardplan::calibrate {

struct FitPoint {
  double bytes = 0;    // S
  double seconds = 0;  // measured median (> 0)
};

struct LineFit {
  double alpha_s = 0, beta_s_per_byte = 0;
  double from_bytes = 0, to_bytes = 0;  // the sizes it was fitted on
};

struct FitResult {
  std::vector<LineFit> segments;     // one to four lines split at breakpoints; ascending
  std::vector<double> error_pct;     // per point: 100·(fit − measured)/measured, in the order given
  double rms_error_pct = 0;          // over all points
  double max_error_pct = 0;          // largest |error_pct|
  double time_s(double bytes) const;  // the fitted time (the segment covering S; the nearest beyond)
};

// One line over all points (≥ 2 points with distinct sizes; throws std::invalid_argument otherwise).
LineFit fit_line(const std::vector<FitPoint>& points, int huber_iterations = 30);

// One line, or up to four when one leaves a point more than max_error_pct off and a split (each side ≥ 2
// points) cuts both the worst error and the robust loss by 30 %. Points must be sorted by size.
FitResult fit_collective(const std::vector<FitPoint>& points, double max_error_pct = 10.0);

}  // namespace shardplan::calibrate
