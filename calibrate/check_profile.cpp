// shardplan_profile_check PROFILE.yaml MAX_TYPICAL_PCT BAND_MARGIN_PCT [MAX_OUTSIDE]: checks that a calibration profile's
// fitted lines reproduce its raw medians. For every collective:
//  - the typical error, the median over the sizes of |fit − median|/median, ≤ MAX_TYPICAL_PCT (a median, not an
//    rms: a rank descheduled on a shared machine makes single sizes heavy-tailed; the rms is printed too), and
//  - at every size the fit lies inside the measured spread widened by the margin:
//    p10·(1 − margin) ≤ fit ≤ p90·(1 + margin), but for at most MAX_OUTSIDE sizes (default 0: a size whose every
//    repeat was hit by descheduling lies off the trend, spread and all).
// The profile must also load as `--cluster FILE.yaml` does (io/preset_store.cpp). Prints one line per
// collective; exit 0 when all pass, 1 otherwise, 2 for a profile that does not load. Used by tests/mpi/*.sh.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "io/preset_store.hpp"

int main(int argc, char** argv) {
  using namespace shardplan;
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: shardplan_profile_check PROFILE.yaml MAX_TYPICAL_PCT BAND_MARGIN_PCT [MAX_OUTSIDE]\n");
    return 2;
  }
  const double max_typical = std::atof(argv[2]), margin = std::atof(argv[3]) / 100;
  const int max_outside = argc == 5 ? std::atoi(argv[4]) : 0;
  try {
    const PresetStore store = PresetStore::builtin();
    const ClusterSpec c = parse_profile_yaml(read_text_file(argv[1]), argv[1], store);
    if (!c.comm_calibration || c.comm_calibration->collectives.empty()) {
      std::fprintf(stderr, "error: %s has no fitted collectives\n", argv[1]);
      return 1;
    }
    const YAML::Node doc = YAML::LoadFile(argv[1]);
    bool ok = true;
    for (const YAML::Node& e : doc["collectives"]) {
      double sum_sq = 0, worst = 0;
      std::vector<double> abs_err;  // [sizes]
      int outside = 0;
      const YAML::Node fit = e["fit"], points = e["points"];
      for (const YAML::Node& row : points) {
        const double bytes = row[0].as<double>(), median = row[1].as<double>();
        const double p10 = row[2].as<double>(), p90 = row[3].as<double>();
        // The fitted line that covers this size (as the planner picks it outside the measured range).
        // (Indices, not Node assignment: assigning a yaml-cpp Node writes through to the document.)
        std::size_t at = fit.size() - 1;
        for (std::size_t i = 0; i < fit.size(); ++i)
          if (bytes <= fit[i]["to_bytes"].as<double>()) {
            at = i;
            break;
          }
        const double t = fit[at]["alpha_s"].as<double>() + fit[at]["beta_s_per_byte"].as<double>() * bytes;
        const double err = 100 * (t - median) / median;
        sum_sq += err * err;
        worst = std::max(worst, std::abs(err));
        abs_err.push_back(std::abs(err));
        if (t < p10 * (1 - margin) || t > p90 * (1 + margin)) ++outside;
      }
      const double rms = std::sqrt(sum_sq / static_cast<double>(points.size()));
      std::sort(abs_err.begin(), abs_err.end());
      const std::size_t n = abs_err.size();
      const double typical = n % 2 ? abs_err[n / 2] : 0.5 * (abs_err[n / 2 - 1] + abs_err[n / 2]);
      const bool pass = typical <= max_typical && outside <= max_outside;
      ok = ok && pass;
      std::printf("%-15s %-10s ranks %-3d sizes %-3zu segments %zu  typical %5.1f %%  rms %6.1f %%  max %6.1f %%  "
                  "outside p10-p90 %d  %s\n",
                  e["op"].as<std::string>().c_str(), e["scope"].as<std::string>().c_str(), e["ranks"].as<int>(),
                  points.size(), fit.size(), typical, rms, worst, outside, pass ? "ok" : "FAIL");
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
