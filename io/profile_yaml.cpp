// Calibration profiles (`shardplan calibrate`; schema in calibrate/README.md): measured collectives (t = α + β·S per
// op and scope, with the raw medians), GEMM tables and rates, read over the preset cluster they refine. Split from
// preset_store.cpp, which finds them (`--cluster FILE` with kind: calibration-profile).
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "io/preset_detail.hpp"
#include "planner/comm_cost.hpp"
#include "planner/error.hpp"
#include "planner/precision.hpp"

namespace shardplan::preset_detail {

using yaml::Bound;

namespace {

// A row of numbers ([bytes, median_s, ...]) of exactly `width` entries.
std::vector<double> read_row(const YAML::Node& row, const std::string& origin, const std::string& what,
                             std::size_t width) {
  if (!row.IsSequence() || row.size() != width)
    throw InputError(fmt::format("{}: each entry of '{}' must be a list of {} numbers, got {}", yaml::where(origin, row),
                                 what, width, yaml::describe(row)));
  std::vector<double> out;
  for (const YAML::Node& cell : row) {
    std::optional<double> v = cell.IsScalar() ? yaml::parse_strict_double(cell.Scalar()) : std::nullopt;
    if (!v) throw InputError(fmt::format("{}: '{}' holds {}, not a number", yaml::where(origin, cell), what, yaml::describe(cell)));
    out.push_back(*v);
  }
  return out;
}

std::optional<Collective> parse_collective(const std::string& s) {
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all,
                       Collective::send_recv})
    if (s == to_string(c)) return c;
  return std::nullopt;
}

std::optional<DType> parse_profile_dtype(const std::string& s) {
  if (s == "fp32") return DType::fp32;
  if (s == "bf16") return DType::bf16;
  return std::nullopt;
}

CollectiveCalibration read_collective_calibration(const YAML::Node& node, const std::string& origin, std::size_t i) {
  const std::string prefix = fmt::format("collectives[{}].", i);
  if (!node.IsMap())
    throw InputError(fmt::format("{}: 'collectives' entries must be mappings, got {}", yaml::where(origin, node),
                                 yaml::describe(node)));
  yaml::MapReader r(node, origin, "collective", prefix);
  r.check_keys({"op", "scope", "ranks", "ranks_per_node", "min_bytes", "max_bytes", "rms_error_pct", "max_error_pct",
                "fit", "points"});
  CollectiveCalibration e;
  e.op = r.choice("op", parse_collective, "all_gather, reduce_scatter, all_reduce, all_to_all, send_recv");
  e.ranks = r.integer("ranks", Bound::positive);
  e.ranks_per_node = r.integer("ranks_per_node", Bound::positive);
  if (e.ranks < 2 || e.ranks_per_node > e.ranks)
    throw InputError(fmt::format("{}: '{}ranks' must be ≥ 2 and ≥ ranks_per_node", r.where("ranks"), prefix));
  const YAML::Node fit = node["fit"];
  if (!fit || !fit.IsSequence() || fit.size() == 0)
    throw InputError(fmt::format("{}: '{}fit' must be a list of one or more segments", r.where("fit"), prefix));
  for (std::size_t j = 0; j < fit.size(); ++j) {
    if (!fit[j].IsMap())
      throw InputError(fmt::format("{}: '{}fit' entries must be mappings", yaml::where(origin, fit[j]), prefix));
    yaml::MapReader sr(fit[j], origin, "fit segment", fmt::format("{}fit[{}].", prefix, j));
    sr.check_keys({"from_bytes", "to_bytes", "alpha_s", "beta_s_per_byte"});
    CollectiveFitSegment seg;
    seg.from_bytes = sr.number("from_bytes", Bound::positive);
    seg.to_bytes = sr.number("to_bytes", Bound::positive);
    seg.alpha_s = sr.number("alpha_s", Bound::non_negative);
    seg.beta_s_per_byte = sr.number("beta_s_per_byte", Bound::non_negative);
    // Fits may put a term at 0, but not beyond physics: a fixed cost over a minute, or a per-byte time under
    // 1e-15 s (1 PB/s) is a unit slip or a broken measurement, and would make every prediction from it wrong.
    if (seg.alpha_s > 60)
      throw InputError(fmt::format("{}: '{}fit[{}].alpha_s' = {} s is implausible (at most 60 s); check the unit (seconds)",
                                   sr.where("alpha_s"), prefix, j, seg.alpha_s));
    if (seg.beta_s_per_byte > 0 && seg.beta_s_per_byte < 1e-15)
      throw InputError(fmt::format("{}: '{}fit[{}].beta_s_per_byte' = {} is faster than 1 PB/s; check the unit (s/byte)",
                                   sr.where("beta_s_per_byte"), prefix, j, seg.beta_s_per_byte));
    e.fit.push_back(seg);
  }
  const YAML::Node points = node["points"];
  if (!points || !points.IsSequence())
    throw InputError(fmt::format("{}: '{}points' must be a list of [bytes, median_s, ...] rows", r.where("points"), prefix));
  for (const YAML::Node& row : points) {
    const std::vector<double> v = read_row(row, origin, prefix + "points", 8);
    if (!(v[0] > 0) || !(v[1] > 0) || (!e.bytes.empty() && v[0] <= e.bytes.back()))
      throw InputError(fmt::format("{}: '{}points' need positive sizes and times, sizes ascending",
                                   yaml::where(origin, row), prefix));
    // No collective between processes takes under 100 ns or moves more than 1 PB/s; none should take an hour.
    if (v[1] < 1e-7 || v[1] > 3600 || v[0] / v[1] > 1e15)
      throw InputError(fmt::format("{}: '{}points' row [{}, {}]: {} s for {} bytes is not a plausible measurement "
                                   "(100 ns to 1 h, at most 1 PB/s)",
                                   yaml::where(origin, row), prefix, v[0], v[1], v[1], v[0]));
    e.bytes.push_back(v[0]);
    e.seconds.push_back(v[1]);
  }
  return e;
}

}  // namespace

bool is_profile(const YAML::Node& doc) {
  return doc.IsMap() && doc["kind"] && doc["kind"].IsScalar() && doc["kind"].Scalar() == "calibration-profile";
}

ClusterSpec read_profile(const std::string& text, const std::string& origin, const PresetStore& store) {
  yaml::MapReader r(yaml::load_document(text, origin), origin, "profile");
  r.check_keys({"kind", "version", "name", "base_cluster", "gpus_per_node", "meta", "hardware", "collectives", "gemm"});
  if (r.integer("version", Bound::positive) != 1)
    throw InputError(fmt::format("{}: 'version' {} is not known (this shardplan reads version 1 profiles)",
                                 r.where("version"), r.integer("version", Bound::positive)));
  const std::string base = r.string("base_cluster");
  if (store.find(PresetKind::cluster, base) == nullptr)
    throw InputError(fmt::format("{}: 'base_cluster': {}", r.where("base_cluster"),
                                 unknown_preset_message(PresetKind::cluster, base, store.names(PresetKind::cluster))));
  ClusterSpec c = store.cluster(base);
  c.name = r.string("name");
  c.description = fmt::format("calibrated profile {} (measured on top of the {} preset)", origin, base);
  c.source = origin;
  c.gpus_per_node = r.integer("gpus_per_node", Bound::positive);

  const yaml::MapReader hw = r.map("hardware");
  hw.check_keys({"device", "dtype", "peak_tflops", "copy_gbps", "elementwise_gbps", "wrong"});
  auto gemm = std::make_shared<GemmCalibration>();
  gemm->cpu = hw.string("device") == "cpu";
  c.gpu.cpu_ranks = gemm->cpu;
  // Measured on CPU ranks: say so wherever the device is named ("2 × cpu-rank", not "2 × a800-80g").
  if (gemm->cpu) c.gpu.name = "cpu-rank", c.gpu.description = "a CPU process (calibrated on CPU ranks)";
  gemm->dtype = hw.choice("dtype", parse_profile_dtype, "fp32, bf16");
  gemm->peak_flops_per_s = hw.number_or("peak_tflops", 0, Bound::non_negative) * 1e12;
  gemm->memory_bytes_per_s = hw.number_or("copy_gbps", 0, Bound::non_negative) * 1e9;
  gemm->elementwise_bytes_per_s = hw.number_or("elementwise_gbps", 0, Bound::non_negative) * 1e9;
  if (gemm->elementwise_bytes_per_s > 1e14)
    throw InputError(fmt::format("{}: 'hardware': elementwise_gbps ≤ 100000 (got {}); check the units (GB/s)",
                                 hw.where("elementwise_gbps"), gemm->elementwise_bytes_per_s / 1e9));
  // The same ceilings as a GPU preset (validate_gpu): 100000 TFLOP/s, 100000 GB/s.
  if (gemm->peak_flops_per_s > 1e17 || gemm->memory_bytes_per_s > 1e14)
    throw InputError(fmt::format("{}: 'hardware': peak_tflops ≤ 100000 and copy_gbps ≤ 100000 (got {} and {}); check "
                                 "the units (TFLOP/s, GB/s)",
                                 hw.where("peak_tflops"), gemm->peak_flops_per_s / 1e12, gemm->memory_bytes_per_s / 1e9));

  auto comm = std::make_shared<CommCalibration>();
  comm->origin = origin;
  const YAML::Node collectives = r.node()["collectives"];
  if (collectives && !collectives.IsSequence())
    throw InputError(fmt::format("{}: 'collectives' must be a list", r.where("collectives")));
  if (collectives)
    for (std::size_t i = 0; i < collectives.size(); ++i)
      comm->collectives.push_back(read_collective_calibration(collectives[i], origin, i));

  if (r.has("gemm")) {
    const yaml::MapReader g = r.map("gemm");
    g.check_keys({"dtype", "table"});
    const YAML::Node table = g.node()["table"];
    if (!table || !table.IsSequence())
      throw InputError(fmt::format("{}: 'gemm.table' must be a list of [m, n, k, median_s, ...] rows", g.where("table")));
    for (const YAML::Node& row : table) {
      const std::vector<double> v = read_row(row, origin, "gemm.table", 8);
      if (!(v[0] >= 1 && v[1] >= 1 && v[2] >= 1 && v[3] > 0))
        throw InputError(fmt::format("{}: 'gemm.table' needs m, n, k ≥ 1 and a positive time", yaml::where(origin, row)));
      // Shapes beyond 2^40 would overflow as integers; over 10 PFLOP/s per device (10× any GPU) is a unit slip.
      if (v[0] > 1099511627776.0 || v[1] > 1099511627776.0 || v[2] > 1099511627776.0 ||
          2.0 * v[0] * v[1] * v[2] / v[3] > 1e16)
        throw InputError(fmt::format("{}: 'gemm.table' row m={} n={} k={} in {} s is not a plausible measurement "
                                     "(shapes up to 2^40, at most 10 PFLOP/s)",
                                     yaml::where(origin, row), v[0], v[1], v[2], v[3]));
      GemmCalibrationPoint p;
      p.m = static_cast<int64_t>(v[0]);
      p.n = static_cast<int64_t>(v[1]);
      p.k = static_cast<int64_t>(v[2]);
      p.flops_per_s = 2.0 * v[0] * v[1] * v[2] / v[3];
      gemm->points.push_back(p);
    }
  }
  if (!gemm->points.empty() || gemm->memory_bytes_per_s > 0) c.gpu.gemm_calibration = gemm;
  if (!comm->collectives.empty()) c.comm_calibration = comm;
  validate_in_file(r, [&] { validate_cluster(c); });
  return c;
}

}  // namespace shardplan::preset_detail
