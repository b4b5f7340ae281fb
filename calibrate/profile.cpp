#include "calibrate/profile.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "io/atomic_write.hpp"

namespace shardplan::calibrate {

namespace {

// A YAML double-quoted scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// Order of collectives and scopes in the file.
int op_rank(const std::string& op) {
  return op == "all_gather" ? 0 : op == "reduce_scatter" ? 1 : op == "all_reduce" ? 2 : op == "all_to_all" ? 3 : 4;
}
int scope_rank(const std::string& s) { return s == "world" ? 0 : s == "intra_node" ? 1 : 2; }

}  // namespace

Profile build_profile(const ProfileMeta& meta, const std::vector<RawRecord>& records) {
  Profile p;
  p.meta = meta;
  std::map<std::tuple<int, int, int64_t, int64_t>, CollectiveSummary> groups;
  for (const RawRecord& r : records) {
    if (r.kind == "collective") {
      CollectiveSummary& g = groups[{op_rank(r.op), scope_rank(r.scope), r.ranks, r.ranks_per_node}];
      g.op = r.op;
      g.scope = r.scope;
      g.ranks = r.ranks;
      g.ranks_per_node = r.ranks_per_node;
      g.points.push_back(r);
      p.wrong += r.wrong;
    } else if (r.kind == "gemm") {
      p.gemms.push_back(r);
    } else if (r.kind == "copy") {
      p.copies.push_back(r);
    }
  }
  for (auto& [key, g] : groups) {
    std::sort(g.points.begin(), g.points.end(), [](const RawRecord& a, const RawRecord& b) { return a.bytes < b.bytes; });
    if (g.points.size() >= 2) {
      std::vector<FitPoint> pts;
      for (const RawRecord& r : g.points) pts.push_back({static_cast<double>(r.bytes), r.median_s});
      g.fit = fit_collective(pts);
    }
    p.collectives.push_back(g);
  }
  std::sort(p.gemms.begin(), p.gemms.end(), [](const RawRecord& a, const RawRecord& b) {
    return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
  });
  double best = 0;
  for (const RawRecord& g : p.gemms) best = std::max(best, 2.0 * g.m * g.n * g.k / g.median_s);
  p.peak_flops = meta.cpu || !(meta.preset_peak_flops > 0) ? best : meta.preset_peak_flops;
  int64_t largest_elementwise = 0;
  for (const RawRecord& e : records) {
    if (e.kind != "elementwise" || e.bytes <= largest_elementwise) continue;
    largest_elementwise = e.bytes;
    p.elementwise_bytes_per_s = static_cast<double>(e.bytes) / e.median_s;  // bytes already counts read + write
  }
  int64_t largest = 0;
  for (const RawRecord& c : p.copies) {
    if (c.bytes > largest) {
      largest = c.bytes;
      p.copy_bytes_per_s = 2.0 * static_cast<double>(c.bytes) / c.median_s;  // read + write
    }
  }
  return p;
}

std::string profile_yaml(const Profile& p) {
  const ProfileMeta& m = p.meta;
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("# shardplan calibration profile (schema: calibrate/README.md). Use it as --cluster FILE.yaml.");
  line("kind: calibration-profile");
  line("version: 1");
  line(fmt::format("name: {}", quoted(m.name)));
  line(fmt::format("base_cluster: {}", m.base_cluster));
  line(fmt::format("gpus_per_node: {}", m.ranks_per_node));
  line("meta:");
  line(fmt::format("  date: {}", quoted(m.date)));
  line(fmt::format("  command: {}", quoted(m.command)));
  line(fmt::format("  backend: {}", m.backend));
  line(fmt::format("  quick: {}", m.quick ? "true" : "false"));
  line(fmt::format("  ranks: {}", m.ranks));
  line(fmt::format("  nodes: {}", m.nodes));
  line(fmt::format("  ranks_per_node: {}", m.ranks_per_node));
  line("  hostnames: [" + [&] {
    std::vector<std::string> q;
    for (const auto& h : m.hostnames) q.push_back(quoted(h));
    return fmt::format("{}", fmt::join(q, ", "));
  }() + "]");
  line("  devices: [" + [&] {
    std::vector<std::string> q;
    for (const auto& d : m.devices) q.push_back(quoted(d));
    return fmt::format("{}", fmt::join(q, ", "));
  }() + "]");
  line("  versions:");
  for (const auto& [k, v] : m.versions) line(fmt::format("    {}: {}", k, quoted(v)));
  if (m.versions.empty()) y.back() = ' ', y += "{}\n";
  line("  environment:");
  for (const auto& [k, v] : m.environment) line(fmt::format("    {}: {}", k, quoted(v)));
  if (m.environment.empty()) y.back() = ' ', y += "{}\n";
  line("hardware:");
  line(fmt::format("  device: {}", m.cpu ? "cpu" : "gpu"));
  line(fmt::format("  dtype: {}", m.dtype));
  line(fmt::format("  peak_tflops: {:.6g}", p.peak_flops / 1e12));
  line(fmt::format("  copy_gbps: {:.6g}", p.copy_bytes_per_s / 1e9));
  if (p.elementwise_bytes_per_s > 0) line(fmt::format("  elementwise_gbps: {:.6g}", p.elementwise_bytes_per_s / 1e9));
  line(fmt::format("  wrong: {}", p.wrong));
  line("collectives:");
  bool any = false;
  for (const CollectiveSummary& c : p.collectives) {
    if (c.fit.segments.empty()) continue;
    any = true;
    line(fmt::format("  - op: {}", c.op));
    line(fmt::format("    scope: {}", c.scope));
    line(fmt::format("    ranks: {}", c.ranks));
    line(fmt::format("    ranks_per_node: {}", c.ranks_per_node));
    line(fmt::format("    min_bytes: {}", c.points.front().bytes));
    line(fmt::format("    max_bytes: {}", c.points.back().bytes));
    line(fmt::format("    rms_error_pct: {:.3g}", c.fit.rms_error_pct));
    line(fmt::format("    max_error_pct: {:.3g}", c.fit.max_error_pct));
    line("    fit:");
    for (const LineFit& s : c.fit.segments)
      line(fmt::format("      - {{from_bytes: {:.0f}, to_bytes: {:.0f}, alpha_s: {:.6e}, beta_s_per_byte: {:.6e}}}",
                       s.from_bytes, s.to_bytes, s.alpha_s, s.beta_s_per_byte));
    line("    # [bytes, median_s, p10_s, p90_s, algbw_gbps, busbw_gbps, fit_error_pct, wrong]");
    line("    points:");
    for (std::size_t i = 0; i < c.points.size(); ++i) {
      const RawRecord& r = c.points[i];
      const double b = static_cast<double>(r.bytes);
      line(fmt::format("      - [{}, {:.6e}, {:.6e}, {:.6e}, {:.4g}, {:.4g}, {:.3g}, {}]", r.bytes, r.median_s, r.p10_s,
                       r.p90_s, algbw_gbps(b, r.median_s), busbw_gbps(r.op, r.ranks, b, r.median_s),
                       c.fit.error_pct[i], r.wrong));
    }
  }
  if (!any) y.back() = ' ', y += "[]\n";
  line("gemm:");
  line(fmt::format("  dtype: {}", m.dtype));
  line("  # [m, n, k, median_s, p10_s, p90_s, tflops, efficiency]  C[m×n] = A[m×k]·B[k×n], efficiency = tflops / peak");
  line("  table:");
  for (const RawRecord& g : p.gemms) {
    const double flops = 2.0 * g.m * g.n * g.k / g.median_s;
    line(fmt::format("    - [{}, {}, {}, {:.6e}, {:.6e}, {:.6e}, {:.5g}, {:.4g}]", g.m, g.n, g.k, g.median_s, g.p10_s,
                     g.p90_s, flops / 1e12, p.peak_flops > 0 ? flops / p.peak_flops : 0.0));
  }
  if (p.gemms.empty()) y.back() = ' ', y += "[]\n";
  return y;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  io::write_file_atomically(path, text);  // the program's one writer (io/atomic_write.hpp)
}

}  // namespace shardplan::calibrate
