#pragma once
// Raw measurements: one record per collective size, GEMM shape or copy, saved to CSV as they are taken so that
// `--resume` continues an interrupted run. Also the statistics of repeats (median, p10, p90) and the nccl-tests
// bandwidths.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardplan::calibrate {

struct RawRecord {
  std::string kind;   // "collective" | "gemm" | "copy"
  std::string op;     // all_gather | reduce_scatter | all_reduce (collective); fp32 | bf16 (gemm); copy
  std::string scope;  // world | intra_node | rail (collective); "-" otherwise
  int64_t ranks = 0, ranks_per_node = 0;  // the group measured (collective); the world otherwise
  int64_t bytes = 0;                      // S in the nccl-tests convention (collective); bytes copied (copy)
  int64_t m = 0, n = 0, k = 0;            // GEMM shape C[m×n] = A[m×k]·B[k×n]
  int64_t iters = 0, repeats = 0;         // back-to-back iterations per repeat, repeats
  double median_s = 0, p10_s = 0, p90_s = 0;  // per iteration, the slowest rank's, over the repeats
  int64_t wrong = 0;                          // elements that came back wrong (nccl-tests #wrong), all ranks

  // Identity of the measurement (what --resume skips): everything but the results.
  std::string key() const;
};

// CSV: a header line "# shardplan calibrate raw v1 <setup>" (the run's setup, which --resume must match), the
// column names, then one line per record. Doubles in their shortest exact form, so nothing is lost between runs.
std::string csv_header(const std::string& setup);
std::string csv_line(const RawRecord& r);
// Parses a whole raw CSV. Throws std::runtime_error naming the line when it is malformed. `setup` returns the
// header's setup string.
std::vector<RawRecord> parse_csv(const std::string& text, const std::string& origin, std::string& setup);

// Quantile by linear interpolation between order statistics (numpy's default), q in [0, 1]; v non-empty.
double quantile(std::vector<double> v, double q);

// nccl-tests: algbw = S / t, busbw = algbw × factor (doc/PERFORMANCE.md), GB/s.
double algbw_gbps(double bytes, double seconds);
double busbw_gbps(const std::string& op, int64_t ranks, double bytes, double seconds);

// The collectives as nccl-tests prints them (nccl-tests/src/common.cu, out-of-place columns): one block per op, scope
// and group, one row per size: size (B), count (elements of `dtype_bytes`), type, time (us, the slowest rank's
// median), algbw and busbw (GB/s = 10^9 bytes per second; busbw by nccl-tests' PERFORMANCE.md factors), #wrong.
std::string nccl_tests_table(const std::vector<RawRecord>& records, const std::string& dtype, int64_t dtype_bytes);

}  // namespace shardplan::calibrate
