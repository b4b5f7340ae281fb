#include "calibrate/plan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <tuple>

#include <sys/stat.h>

#include <fmt/format.h>

#include "calibrate/profile.hpp"
#include "io/input_file.hpp"
#include "planner/model.hpp"

namespace shardplan::calibrate {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t size_flag(const std::string& text, const char* flag, int64_t fallback) {
  if (text.empty()) return fallback;
  const int64_t v = parse_size(text);
  if (v <= 0)
    throw BadInputError(fmt::format("{} '{}' is not a size (write bytes, or with a unit: 64K, 4MiB, 1G)", flag, text));
  return v;
}

// Largest power of two ≤ x (x ≥ 1).
int64_t floor_pow2(double x) {
  int64_t p = 1;
  while (static_cast<double>(p) * 2 <= x) p *= 2;
  return p;
}

}  // namespace

std::string human_bytes(int64_t b) {
  if (b >= (1 << 30) && b % (1 << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (1 << 20) && b % (1 << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1 << 10) && b % (1 << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

int64_t parse_size(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return -1;
  const int64_t value = std::stoll(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "B") return value;
  if (unit == "K" || unit == "KB" || unit == "KIB") return value << 10;
  if (unit == "M" || unit == "MB" || unit == "MIB") return value << 20;
  if (unit == "G" || unit == "GB" || unit == "GIB") return value << 30;
  return -1;
}

std::vector<GemmShapeSpec> model_gemm_shapes(const ModelSpec& m, int64_t tp, int64_t tokens) {
  const int64_t h = m.hidden, q = model_q_width(m) / tp;
  const int64_t kv = std::max<int64_t>(m.kv_heads / tp, 1) * model_head_dim(m);
  const int64_t f = m.ffn_hidden / tp, v = model_padded_vocab(m) / tp;
  // Linear layers as [n = out features, k = in features] on one TP rank (planner/microbatch_costs.cpp): QKV,
  // attention output, MLP up (+ gate), MLP down, LM head.
  const int64_t layers[][2] = {{q + 2 * kv, h}, {h, q}, {(model_mlp_matrices(m) - 1) * f, h}, {h, f}, {v, h}};
  std::vector<GemmShapeSpec> out;
  for (const auto& l : layers) {
    out.push_back({tokens, l[0], l[1]});  // forward Y[T×n] = X[T×k]·W[k×n]
    out.push_back({tokens, l[1], l[0]});  // backward dX[T×k] = dY[T×n]·Wᵀ
    out.push_back({l[1], l[0], tokens});  // backward dW[k×n] = Xᵀ[k×T]·dY[T×n]
  }
  return out;
}

RunPlan resolve_plan(const CalibrateFlags& flags, const PresetStore& store, int ranks) {
  if (!flags.extras.empty())
    throw BadInputError(fmt::format("unknown argument '{}' (see shardplan calibrate --help)", flags.extras.front()));
  RunPlan p;
  p.backend = lower(flags.backend);
  if (p.backend != "mpi" && p.backend != "nccl")
    throw BadInputError(fmt::format("--backend '{}' is not known (choose mpi for CPUs or nccl for GPUs)", flags.backend));
  if (!comm::backend_available(p.backend))
    throw BadInputError("--backend nccl: this shardplan was built without the CUDA toolkit and NCCL; use --backend "
                        "mpi, or rebuild with -DSHARDPLAN_CUDA=ON on a machine with the toolkit");
  if (flags.out.empty()) throw BadInputError("--out FILE.yaml is required (where to write the profile)");
  p.out = flags.out;
  if (!flags.raw.empty()) {
    p.raw = flags.raw;
  } else {
    const std::size_t dot = p.out.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : p.out.substr(dot);
    p.raw = (ext == ".yaml" || ext == ".yml" ? p.out.substr(0, dot) : p.out) + ".raw.csv";
  }
  // One file by two spellings (same.yaml, ./same.yaml; a hard link) is one file: compare files, not strings.
  if (p.raw == p.out || io::same_file(p.raw, p.out))
    throw BadInputError(fmt::format("--raw {} and --out {} name the same file: the raw CSV would replace the profile; "
                                    "give --raw another file",
                                    io::escape_for_line(p.raw), io::escape_for_line(p.out)));
  // --out /dev/null (or a FIFO) is written in place, but "/dev/null.raw.csv" is no place for the raw CSV.
  if (flags.raw.empty()) {
    struct stat st {};
    if (::stat(p.out.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
      throw BadInputError(fmt::format("--out {} is not a regular file, so the raw CSV has no default beside it; give "
                                      "--raw FILE.csv",
                                      io::escape_for_line(p.out)));
  }
  try {
    std::size_t used = 0;
    p.timeout_s = std::stod(flags.timeout, &used);
    if (used != flags.timeout.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw BadInputError(fmt::format("--timeout '{}' is not a number of seconds", flags.timeout));
  }
  if (!(p.timeout_s >= 1 && p.timeout_s <= 86400))
    throw BadInputError(fmt::format("--timeout {} is outside [1, 86400] seconds", flags.timeout));
  if (flags.gemm_only && flags.no_gemm) throw BadInputError("--gemm-only and --no-gemm exclude each other");
  p.gemm_only = flags.gemm_only;
  p.no_gemm = flags.no_gemm;
  p.quick = flags.quick;
  if (ranks < 2 && !p.gemm_only)
    throw BadInputError(fmt::format("the collectives need at least 2 ranks and this run has {}: start it under "
                                    "mpirun -np 2 (or more), or add --gemm-only to measure GEMMs alone",
                                    ranks));
  const bool gpu = p.backend == "nccl";
  const int64_t elem = gpu ? 2 : 4;
  // Sizes (issue: 1 KiB … 1 GiB on GPU, smaller on CPU). A CPU rank holds ~3 S of buffers; 1 GiB at most.
  const int64_t limit = gpu ? (int64_t{16} << 30) : (int64_t{1} << 30);
  p.min_bytes = size_flag(flags.min_bytes, "--min-bytes", 1 << 10);
  p.max_bytes = size_flag(flags.max_bytes, "--max-bytes", gpu ? (p.quick ? 64 << 20 : 1 << 30) : (p.quick ? 1 << 20 : 64 << 20));
  p.size_factor = 2;
  if (p.min_bytes < elem * std::max(ranks, 1))
    throw BadInputError(fmt::format("--min-bytes {} is less than one {}-byte element per rank ({} ranks): use at least {}",
                                    p.min_bytes, elem, ranks, elem * std::max(ranks, 1)));
  if (p.max_bytes > limit)
    throw BadInputError(fmt::format("--max-bytes {} is above the {} this backend allows", p.max_bytes, human_bytes(limit)));
  if (p.min_bytes > p.max_bytes)
    throw BadInputError(fmt::format("--min-bytes {} is larger than --max-bytes {}", p.min_bytes, p.max_bytes));

  // Timing (REFERENCE-FACTS "Calibration practice": ≥ 5 warm-ups, ≥ 20 timed, 3–5 repeats); --quick trades
  // precision for a run of seconds.
  if (p.quick) {
    p.collective_timing = {2, 15, 0.001, 2, 1000};
    p.gemm_timing = {1, 3, 0.002, 1, 100};
  } else {
    p.collective_timing = {5, 5, 0.02, 20, 5000};
    p.gemm_timing = {2, 5, 0.02, 1, 1000};
  }
  if (gpu) p.gemm_grid = p.quick ? std::vector<int64_t>{256, 1024, 4096, 16384}
                                 : std::vector<int64_t>{128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  else p.gemm_grid = p.quick ? std::vector<int64_t>{64, 192, 512} : std::vector<int64_t>{64, 256, 1024, 2048};
  p.gemm_flop_budget = gpu ? 0 : (p.quick ? 0.1e9 : 2e9);
  p.copy_bytes = gpu ? (p.quick ? int64_t{256} << 20 : int64_t{1} << 30) : (p.quick ? 16 << 20 : 64 << 20);

  if (!flags.preset.empty()) {
    const ModelSpec m = store.model(flags.preset);
    for (int64_t tp : {1, 2, 4, 8}) {
      if (m.heads % tp != 0 || m.ffn_hidden % tp != 0) continue;
      int64_t tokens = m.seq;
      if (p.gemm_flop_budget > 0) {
        // Cut the tokens (a power of two, ≥ 16) so that the GEMMs of this tp fit the budget; those that do not
        // even at 16 tokens (the LM head of a large vocabulary) are left to the table's nearest shapes.
        double widest = 0;
        for (const GemmShapeSpec& s : model_gemm_shapes(m, tp, 1)) widest = std::max(widest, 2.0 * s.n * s.k * s.m);
        tokens = std::clamp<int64_t>(floor_pow2(p.gemm_flop_budget / widest), 16, m.seq);
      }
      for (const GemmShapeSpec& s : model_gemm_shapes(m, tp, tokens))
        if (p.gemm_flop_budget <= 0 || 2.0 * s.m * s.n * s.k <= p.gemm_flop_budget) p.model_shapes.push_back(s);
    }
  }
  if (!flags.base_cluster.empty()) {
    if (store.find(PresetKind::cluster, flags.base_cluster) == nullptr)
      throw BadInputError(fmt::format("--base-cluster '{}' is not a cluster preset (see shardplan presets clusters)",
                                      flags.base_cluster));
    p.base_cluster = flags.base_cluster;
  } else if (!gpu) {
    p.base_cluster = "a800x8";  // the CLI's default cluster (cli/config_flags.hpp kDefaultCluster)
  }
  if (!p.base_cluster.empty() && gpu) p.preset_peak_flops = store.cluster(p.base_cluster).gpu.bf16_tflops * 1e12;
  return p;
}

std::vector<RawRecord> plan_steps(const RunPlan& plan, const comm::WorldInfo& world, std::size_t element_bytes) {
  std::vector<RawRecord> steps;
  const int64_t elem = static_cast<int64_t>(element_bytes);
  if (!plan.gemm_only) {
    struct Scope {
      const char* name;
      int64_t ranks, per_node;
    };
    std::vector<Scope> scopes = {{"world", world.size, world.local_size}};
    if (world.nodes > 1) {
      if (world.local_size >= 2) scopes.push_back({"intra_node", world.local_size, world.local_size});
      scopes.push_back({"rail", world.nodes, 1});
    }
    for (const Scope& s : scopes) {
      for (const char* op : {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv"}) {
        int64_t last = 0;
        for (int64_t bytes = plan.min_bytes; bytes <= plan.max_bytes; bytes *= plan.size_factor) {
          const int64_t count = collective_count(op, bytes, s.ranks, elem);
          if (count < 1) continue;
          const bool per_rank = std::string(op) == "all_reduce" || std::string(op) == "send_recv";
          const int64_t actual = per_rank ? count * elem : count * elem * s.ranks;
          if (actual == last) continue;
          last = actual;
          RawRecord r;
          r.kind = "collective";
          r.op = op;
          r.scope = s.name;
          r.ranks = s.ranks;
          r.ranks_per_node = s.per_node;
          r.bytes = actual;
          steps.push_back(r);
        }
      }
    }
  }
  if (!plan.no_gemm) {
    std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
    // The shared fields set once (assigning literals inside the lambda trips GCC 12's false -Wrestrict).
    RawRecord gemm;
    gemm.kind = "gemm";
    gemm.op = elem == 4 ? "fp32" : "bf16";
    gemm.scope = "-";
    gemm.ranks = world.size;
    gemm.ranks_per_node = world.local_size;
    auto add = [&](int64_t m, int64_t n, int64_t k) {
      if (!seen.insert({m, n, k}).second) return;
      RawRecord r = gemm;
      r.m = m;
      r.n = n;
      r.k = k;
      steps.push_back(r);
    };
    for (int64_t m : plan.gemm_grid)
      for (int64_t n : plan.gemm_grid)
        for (int64_t k : plan.gemm_grid) add(m, n, k);
    for (const GemmShapeSpec& s : plan.model_shapes) add(s.m, s.n, s.k);
    RawRecord c;
    c.kind = "copy";
    c.op = "copy";
    c.scope = "-";
    c.ranks = world.size;
    c.ranks_per_node = world.local_size;
    c.bytes = plan.copy_bytes;
    steps.push_back(c);
    if (plan.backend != "nccl") {  // Device::elementwise: measured on CPU ranks only
      RawRecord e = c;
      e.kind = "elementwise";
      e.op = "adamw";
      steps.push_back(e);
    }
  }
  return steps;
}

std::string summary_text(const Profile& p, const std::string& out, const std::string& raw) {
  std::string s = fmt::format("wrote {} (raw measurements: {})\n", out, raw);
  if (!p.collectives.empty()) {
    s += fmt::format("{:<15} {:<10} {:>5} {:>9} {:>11} {:>13} {:>9} {:>9} {:>6}\n", "collective", "scope", "ranks",
                     "alpha us", "breakpoint", "busbw GB/s", "rms err%", "max err%", "wrong");
    for (const CollectiveSummary& c : p.collectives) {
      if (c.fit.segments.empty()) continue;
      const RawRecord& big = c.points.back();
      int64_t wrong = 0;
      for (const RawRecord& r : c.points) wrong += r.wrong;
      s += fmt::format("{:<15} {:<10} {:>5} {:>9.2f} {:>11} {:>13.3g} {:>9.1f} {:>9.1f} {:>6}\n", c.op, c.scope, c.ranks,
                       c.fit.segments.front().alpha_s * 1e6,
                       c.fit.segments.size() > 1 ? human_bytes(static_cast<int64_t>(c.fit.segments[1].from_bytes)) : "-",
                       busbw_gbps(c.op, c.ranks, static_cast<double>(big.bytes), big.median_s), c.fit.rms_error_pct,
                       c.fit.max_error_pct, wrong);
    }
  }
  if (!p.gemms.empty())
    s += fmt::format("gemm: {} shapes ({}), best {:.4g} TFLOP/s; copy {:.3g} GB/s\n", p.gemms.size(), p.meta.dtype,
                     p.peak_flops / 1e12, p.copy_bytes_per_s / 1e9);
  return s;
}

}  // namespace shardplan::calibrate
