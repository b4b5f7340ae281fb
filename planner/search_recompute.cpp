#include "planner/search_recompute.hpp"

#include <algorithm>

#include "planner/memory.hpp"
#include "planner/pipeline_layout.hpp"

namespace shardplan {

bool searches_partial_recompute(Framework f) {
  return f == Framework::megatron || f == Framework::fsdp || f == Framework::fsdp1;
}

std::optional<Strategy> fewest_recomputed_blocks(const ModelSpec& m, const Strategy& full, const FrameworkTraits& fw,
                                                 double limit_bytes, bool expandable_segments, int64_t hint) {
  if (full.recompute != Recompute::full || full.recompute_layers > 0 || full.recompute_every > 0) return std::nullopt;
  int64_t largest = 0;
  for (int64_t r = 0; r < full.pp; ++r)
    for (int64_t c = 0; c < full.vpp; ++c) largest = std::max(largest, chunk_layers(m, full, r, c));
  if (largest < 2) return std::nullopt;
  Strategy s = full;
  auto fits = [&](int64_t n) {
    s.recompute_layers = n;
    return fit_bytes(estimate_peak_memory(m, s, fw).peak, expandable_segments) <= limit_bytes;
  };
  // Invariant: lo does not fit (0 = no block recomputed, assumed not to: the layout without recomputation is a
  // candidate of its own), hi fits.
  int64_t lo = 0, hi = largest - 1;
  if (hint > 0 && hint < hi) {
    // Bracket from the hint: down while it fits, up while it does not, by doubling steps.
    if (fits(hint)) {
      hi = hint;
      for (int64_t step = 1; hi - step > lo; step *= 2) {
        if (!fits(hi - step)) {
          lo = hi - step;
          break;
        }
        hi -= step;
      }
    } else {
      lo = hint;
      for (int64_t step = 1;; step *= 2) {
        if (lo + step >= hi) break;
        if (fits(lo + step)) {
          hi = lo + step;
          break;
        }
        lo += step;
      }
      if (hi == largest - 1 && !fits(hi)) return std::nullopt;
    }
  } else if (!fits(hi)) {
    return std::nullopt;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  s.recompute_layers = hi;
  return s;
}

}  // namespace shardplan
