#include "calibrate/records.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "planner/comm_cost.hpp"

namespace shardplan::calibrate {

namespace {

constexpr const char* kMagic = "# shardplan calibrate raw v1 ";
constexpr std::size_t kMaxRecords = 200000;
constexpr const char* kColumns =
    "kind,op,scope,ranks,ranks_per_node,bytes,m,n,k,iters,repeats,median_s,p10_s,p90_s,wrong";

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) fields.push_back(f);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

int64_t to_int(const std::string& s, const std::string& where) {
  std::size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw std::runtime_error(fmt::format("{}: '{}' is not an integer", where, s));
  return v;
}

double to_double(const std::string& s, const std::string& where) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw std::runtime_error(fmt::format("{}: '{}' is not a number", where, s));
  return v;
}

// What a measurement can be (an edited or corrupted CSV is refused here, naming the line, rather than fitted into a
// profile that predict refuses, or into NaN): times finite, up to an hour; sizes and counts within their kinds.
void check_ranges(const RawRecord& r, const std::string& where) {
  for (auto [name, v] : {std::pair{"median_s", r.median_s}, {"p10_s", r.p10_s}, {"p90_s", r.p90_s}})
    if (!(v >= 0 && v <= 3600))
      throw std::runtime_error(fmt::format("{}: {} = {} is not a time between 0 and 3600 s", where, name, v));
  if (r.median_s < 1e-9)  // no kernel launch or message takes under a nanosecond
    throw std::runtime_error(fmt::format("{}: median_s = {} is below 1 ns, not a measurement", where, r.median_s));
  constexpr int64_t kMaxShape = int64_t{1} << 40;
  for (auto [name, v, hi] : {std::tuple{"ranks", r.ranks, int64_t{1} << 24}, {"ranks_per_node", r.ranks_per_node, int64_t{1} << 24},
                             {"bytes", r.bytes, kMaxShape}, {"m", r.m, kMaxShape}, {"n", r.n, kMaxShape}, {"k", r.k, kMaxShape},
                             {"iters", r.iters, int64_t{1} << 30}, {"repeats", r.repeats, int64_t{1} << 30},
                             {"wrong", r.wrong, int64_t{1} << 62}})
    if (v < 0 || v > hi) throw std::runtime_error(fmt::format("{}: {} = {} is outside 0..{}", where, name, v, hi));
}

}  // namespace

std::string RawRecord::key() const {
  return fmt::format("{},{},{},{},{},{},{},{},{}", kind, op, scope, ranks, ranks_per_node, bytes, m, n, k);
}

std::string csv_header(const std::string& setup) { return fmt::format("{}{}\n{}\n", kMagic, setup, kColumns); }

std::string csv_line(const RawRecord& r) {
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.kind, r.op, r.scope, r.ranks,
                     r.ranks_per_node, r.bytes, r.m, r.n, r.k, r.iters, r.repeats, r.median_s, r.p10_s, r.p90_s,
                     r.wrong);
}

std::vector<RawRecord> parse_csv(const std::string& text, const std::string& origin, std::string& setup) {
  std::vector<RawRecord> out;
  std::stringstream ss(text);
  std::string line;
  int number = 0;
  while (std::getline(ss, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a CSV saved with CRLF line ends
    const std::string where = fmt::format("{}:{}", origin, number);
    if (number == 1) {
      if (line.rfind(kMagic, 0) != 0)
        throw std::runtime_error(fmt::format("{}: not a shardplan raw calibration CSV (first line must start '{}')",
                                             where, kMagic));
      setup = line.substr(std::string(kMagic).size());
      continue;
    }
    if (number == 2) {
      if (line != kColumns) throw std::runtime_error(fmt::format("{}: expected the columns '{}'", where, kColumns));
      continue;
    }
    if (line.empty()) continue;
    // Bounded in parsed size as in bytes: no calibration measures more than ~10 k steps (64 MiB of short lines
    // would otherwise be 3 M records, 600 MB).
    if (out.size() >= kMaxRecords)
      throw std::runtime_error(fmt::format("{}: more than {} measurements, more than any calibration takes", where,
                                           kMaxRecords));
    const std::vector<std::string> f = split_commas(line);
    // A run killed mid-write leaves at most one partial last line: ignore it (it is measured again).
    if (f.size() != 15) {
      if (ss.peek() == std::char_traits<char>::eof()) break;
      throw std::runtime_error(fmt::format("{}: expected 15 fields, got {}", where, f.size()));
    }
    RawRecord r;
    r.kind = f[0];
    r.op = f[1];
    r.scope = f[2];
    r.ranks = to_int(f[3], where);
    r.ranks_per_node = to_int(f[4], where);
    r.bytes = to_int(f[5], where);
    r.m = to_int(f[6], where);
    r.n = to_int(f[7], where);
    r.k = to_int(f[8], where);
    r.iters = to_int(f[9], where);
    r.repeats = to_int(f[10], where);
    r.median_s = to_double(f[11], where);
    r.p10_s = to_double(f[12], where);
    r.p90_s = to_double(f[13], where);
    r.wrong = to_int(f[14], where);
    if (r.kind != "collective" && r.kind != "gemm" && r.kind != "copy" && r.kind != "elementwise")
      throw std::runtime_error(fmt::format("{}: unknown kind '{}'", where, r.kind));
    if (!(r.median_s > 0)) throw std::runtime_error(fmt::format("{}: median_s must be positive", where));
    check_ranges(r, where);
    out.push_back(r);
  }
  if (number < 2) throw std::runtime_error(fmt::format("{}: empty or truncated header", origin));
  return out;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double algbw_gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

double busbw_gbps(const std::string& op, int64_t ranks, double bytes, double seconds) {
  Collective c = Collective::all_reduce;
  if (op == "all_gather") c = Collective::all_gather;
  else if (op == "reduce_scatter") c = Collective::reduce_scatter;
  else if (op == "all_to_all") c = Collective::all_to_all;  // busbw factor (n−1)/n (nccl-tests PERFORMANCE.md)
  else if (op == "send_recv") c = Collective::send_recv;    // busbw = algbw (nccl-tests sendrecv.cu: factor 1)
  return bus_bandwidth_gbps(c, ranks, bytes, seconds);
}

std::string nccl_tests_table(const std::vector<RawRecord>& records, const std::string& dtype, int64_t dtype_bytes) {
  std::string out;
  std::string group;
  for (const RawRecord& r : records) {
    if (r.kind != "collective") continue;
    const std::string this_group = fmt::format("{} {} {}", r.op, r.scope, r.ranks);
    if (this_group != group) {
      group = this_group;
      out += fmt::format("#\n# {}, {} ({} ranks, {} per node)\n", r.op, r.scope, r.ranks, r.ranks_per_node);
      out += fmt::format("# {:>12} {:>12} {:>6} {:>10} {:>8} {:>8} {:>7}\n", "size", "count", "type", "time", "algbw",
                         "busbw", "#wrong");
      out += fmt::format("# {:>12} {:>12} {:>6} {:>10} {:>8} {:>8} {:>7}\n", "(B)", "(elements)", "", "(us)", "(GB/s)",
                         "(GB/s)", "");
    }
    const double bytes = static_cast<double>(r.bytes);
    out += fmt::format("  {:>12} {:>12} {:>6} {:>10.2f} {:>8.2f} {:>8.2f} {:>7}\n", r.bytes,
                       r.bytes / std::max<int64_t>(dtype_bytes, 1), dtype, r.median_s * 1e6,
                       algbw_gbps(bytes, r.median_s), busbw_gbps(r.op, r.ranks, bytes, r.median_s), r.wrong);
  }
  return out;
}

}  // namespace shardplan::calibrate
