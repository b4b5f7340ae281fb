// calibrate/: the fit (known α, β with noise and outliers), statistics, raw CSV, the profile written and read
// back as --cluster reads it, and the planner's use of measured figures.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "calibrate/fit.hpp"
#include "calibrate/plan.hpp"
#include "calibrate/profile.hpp"
#include "calibrate/records.hpp"
#include "io/preset_store.hpp"
#include "planner/comm_cost.hpp"
#include "planner/compute_cost.hpp"
#include "planner/error.hpp"

using namespace shardplan;
using namespace shardplan::calibrate;

namespace {

// t = α + β·S at sizes 1 KiB … 64 MiB (×2), times (1 + 2 % Gaussian noise), fixed seed.
std::vector<FitPoint> synthetic(double alpha, double beta, double noise, unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, noise);
  std::vector<FitPoint> p;
  for (double s = 1024; s <= 64.0 * (1 << 20); s *= 2) p.push_back({s, (alpha + beta * s) * (1 + n(rng))});
  return p;
}

}  // namespace

TEST_SUITE("calibrate") {
  TEST_CASE("fit recovers a known latency and bandwidth from noisy data with outliers") {
    // α = 8 µs, β = 1 / (20 GB/s) = 5e-11 s/B: 17 sizes, 2 % noise, and three sizes 3× slower (a rank
    // descheduled during their repeats).
    const double alpha = 8e-6, beta = 5e-11;
    std::vector<FitPoint> p = synthetic(alpha, beta, 0.02);
    p[3].seconds *= 3;
    p[9].seconds *= 3;
    p[14].seconds *= 3;
    const LineFit f = fit_line(p);
    CHECK(f.alpha_s == doctest::Approx(alpha).epsilon(0.08));
    CHECK(f.beta_s_per_byte == doctest::Approx(beta).epsilon(0.03));
    // Without the robust weights the outliers at 3× would pull β up by far more than 3 %: check they matter.
    const FitResult r = fit_collective(p);
    CHECK(std::abs(r.error_pct[9]) > 60);  // the outlier stays an outlier (fit ≈ t/3 → −67 %)
    CHECK(std::abs(r.error_pct[8]) < 8);
  }

  TEST_CASE("fit keeps the latency non-negative") {
    // Pure bandwidth, t = β·S, noise: an unconstrained line could take α < 0.
    const LineFit f = fit_line(synthetic(0, 1e-9, 0.02, 11));
    CHECK(f.alpha_s >= 0);
    CHECK(f.alpha_s < 2e-7);  // vs the smallest time, 1 µs
    CHECK(f.beta_s_per_byte == doctest::Approx(1e-9).epsilon(0.03));
  }

  TEST_CASE("fit splits at a protocol change") {
    // Eager below 64 KiB (2 µs + 1 GB/s), rendezvous above (40 µs + 10 GB/s): one line misses by far more than
    // 10 %; two lines reproduce every point within 1 % (no noise).
    std::vector<FitPoint> p;
    for (double s = 1024; s <= 16.0 * (1 << 20); s *= 2)
      p.push_back({s, s <= 65536 ? 2e-6 + s * 1e-9 : 40e-6 + s * 1e-10});
    const FitResult r = fit_collective(p);
    REQUIRE(r.segments.size() == 2);
    CHECK(r.segments[0].to_bytes == 65536);
    CHECK(r.segments[1].alpha_s == doctest::Approx(40e-6).epsilon(0.01));
    CHECK(r.max_error_pct < 1);
  }

  TEST_CASE("fit rejects too few points") {
    CHECK_THROWS_AS(fit_line({{1024, 1e-6}}), std::invalid_argument);
    CHECK_THROWS_AS(fit_line({{1024, 1e-6}, {2048, 0}}), std::invalid_argument);
  }

  TEST_CASE("quantiles and nccl-tests bandwidths") {
    CHECK(quantile({4, 1, 3, 2}, 0.5) == 2.5);
    CHECK(quantile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.1) == 2);
    CHECK(quantile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9) == 10);
    // 1 GB in 1 s: algbw 1 GB/s; all-reduce over 2 ranks busbw × 2·1/2 = 1; all-gather over 4 × 3/4.
    CHECK(algbw_gbps(1e9, 1) == doctest::Approx(1));
    CHECK(busbw_gbps("all_reduce", 2, 1e9, 1) == doctest::Approx(1));
    CHECK(busbw_gbps("all_gather", 4, 1e9, 1) == doctest::Approx(0.75));
    CHECK(busbw_gbps("all_reduce", 8, 1e9, 1) == doctest::Approx(1.75));
    // All-to-all (issue 17): nccl-tests PERFORMANCE.md gives it the all-gather's factor, (n−1)/n: 7/8 over 8 ranks.
    CHECK(busbw_gbps("all_to_all", 8, 1e9, 1) == doctest::Approx(0.875));
  }

  TEST_CASE("sizes and model GEMM shapes") {
    CHECK(parse_size("1024") == 1024);
    CHECK(parse_size("64K") == 65536);
    CHECK(parse_size("4MiB") == 4 << 20);
    CHECK(parse_size("1g") == int64_t{1} << 30);
    CHECK(parse_size("lots") == -1);
    CHECK(parse_size("12X") == -1);
    // Llama-3-8B-like block at tp 2, 8192 tokens: QKV n = (4096 + 2·1024)/2 = 3072, up+gate n = 2·14336/2 =
    // 14336, LM head n = 128256/2 = 64128.
    ModelSpec m;
    m.hidden = 4096;
    m.heads = 32;
    m.kv_heads = 8;
    m.ffn_hidden = 14336;
    m.vocab = 128256;
    m.mlp = MlpKind::swiglu;
    const std::vector<GemmShapeSpec> s = model_gemm_shapes(m, 2, 8192);
    REQUIRE(s.size() == 15);
    CHECK((s[0].m == 8192 && s[0].n == 3072 && s[0].k == 4096));
    CHECK((s[2].m == 4096 && s[2].n == 3072 && s[2].k == 8192));  // dW = Xᵀ·dY
    CHECK((s[6].n == 14336 && s[6].k == 4096));
    CHECK((s[9].n == 4096 && s[9].k == 7168));
    CHECK((s[12].n == 64128 && s[12].k == 4096));
  }

  TEST_CASE("raw CSV round trip; a line cut by an interruption is dropped") {
    RawRecord r;
    r.kind = "collective";
    r.op = "all_reduce";
    r.scope = "world";
    r.ranks = 4;
    r.ranks_per_node = 4;
    r.bytes = 65536;
    r.iters = 100;
    r.repeats = 5;
    r.median_s = 1.234567891e-5;
    r.p10_s = 1.2e-5;
    r.p90_s = 1.3e-5;
    const std::string text = csv_header("backend=mpi ranks=4") + csv_line(r) + "collective,all_re";
    std::string setup;
    const std::vector<RawRecord> back = parse_csv(text, "raw.csv", setup);
    CHECK(setup == "backend=mpi ranks=4");
    REQUIRE(back.size() == 1);
    CHECK(back[0].key() == r.key());
    CHECK(back[0].median_s == r.median_s);
    CHECK_THROWS_AS(parse_csv("kind,op\n", "x.csv", setup), std::runtime_error);
  }

  TEST_CASE("profile written atomically and read back as --cluster FILE.yaml") {
    namespace fs = std::filesystem;
    // A 2-rank all-reduce measured at 5 sizes on t = 3 µs + S / (2 GB/s), and a 2-shape GEMM table.
    std::vector<RawRecord> records;
    for (int64_t s = 1024; s <= 1 << 20; s *= 8) {
      RawRecord r;
      r.kind = "collective";
      r.op = "all_reduce";
      r.scope = "world";
      r.ranks = r.ranks_per_node = 2;
      r.bytes = s;
      r.iters = 10;
      r.repeats = 3;
      r.median_s = r.p10_s = r.p90_s = 3e-6 + static_cast<double>(s) * 5e-10;
      records.push_back(r);
    }
    for (int64_t n : {256, 512}) {
      RawRecord g;
      g.kind = "gemm";
      g.op = "fp32";
      g.scope = "-";
      g.m = g.n = g.k = n;
      g.median_s = g.p10_s = g.p90_s = 2.0 * n * n * n / (n == 256 ? 2e10 : 4e10);  // 20 and 40 GFLOP/s
      records.push_back(g);
    }
    // An AdamW pass of 28 MB (read + written) in 4 ms: 7 GB/s.
    RawRecord adamw;
    adamw.kind = "elementwise", adamw.op = "adamw", adamw.scope = "-", adamw.ranks = 2, adamw.ranks_per_node = 2;
    adamw.bytes = 28'000'000, adamw.iters = 10, adamw.repeats = 3;
    adamw.median_s = adamw.p10_s = adamw.p90_s = 4e-3;
    records.push_back(adamw);
    ProfileMeta meta;
    meta.name = "test";
    meta.backend = "mpi";
    meta.base_cluster = "a800x8";
    meta.dtype = "fp32";
    meta.cpu = true;
    meta.ranks = meta.ranks_per_node = 2;
    const Profile p = build_profile(meta, records);
    CHECK(p.peak_flops == doctest::Approx(4e10));
    const fs::path dir = fs::temp_directory_path() / ("shardplan_profile_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string path = (dir / "p.yaml").string();
    write_file_atomically(path, profile_yaml(p));
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left
    CHECK_THROWS_AS(write_file_atomically((dir / "missing" / "p.yaml").string(), "x"), std::runtime_error);

    const PresetStore store = PresetStore::builtin();
    const ClusterSpec c = store.cluster(path);
    fs::remove_all(dir);
    CHECK(c.gpus_per_node == 2);
    CHECK(c.gpu.name == "cpu-rank");  // measured on CPU ranks, named so (issue 16)
    CHECK(c.gpu.memory_gib == store.cluster("a800x8").gpu.memory_gib);  // the base preset supplies the rest
    REQUIRE(c.comm_calibration);
    REQUIRE(c.comm_calibration->collectives.size() == 1);
    const CollectiveCalibration& e = c.comm_calibration->collectives[0];
    CHECK(e.bytes.size() == 4);
    REQUIRE(e.fit.size() == 1);
    CHECK(e.fit[0].alpha_s == doctest::Approx(3e-6).epsilon(1e-3));
    CHECK(e.fit[0].beta_s_per_byte == doctest::Approx(5e-10).epsilon(1e-3));

    // The planner now times a 2-rank all-reduce from the measurement: exact at a measured size (8 KiB:
    // 3 µs + 8192·0.5 ns = 7.096 µs), the fitted line beyond (4 MiB: 3 µs + 2.097 ms).
    const GroupLayout two{2, 2, 1};
    CHECK(collective_time_s(c, Collective::all_reduce, 8192, two) == doctest::Approx(7.096e-6).epsilon(1e-4));
    CHECK(collective_time_s(c, Collective::all_reduce, 4 << 20, two) ==
          doctest::Approx(3e-6 + (4 << 20) * 5e-10).epsilon(1e-4));
    // Four ranks: α × 3 steps / 1, the bandwidth part × (2·3/4)/(2·1/2) = 1.5: at 8 KiB 9 µs + 6.144 µs.
    const GroupLayout four{4, 4, 1};
    CHECK(collective_time_s(c, Collective::all_reduce, 8192, four) == doctest::Approx(9e-6 + 6.144e-6).epsilon(1e-3));
    // Not measured (all-gather): the preset's link model, unchanged.
    ClusterSpec preset = store.cluster("a800x8");
    preset.gpus_per_node = 2;
    CHECK(collective_time_s(c, Collective::all_gather, 8192, two) ==
          doctest::Approx(collective_time_s(preset, Collective::all_gather, 8192, two)));
    // GEMMs: a CPU table is the device: 256³ takes 2·256³ / 20 GFLOP/s whatever the dtype.
    REQUIRE(c.gpu.gemm_calibration);
    CHECK(gemm_time_s(c.gpu, DType::bf16, {256, 256, 256}) == doctest::Approx(2.0 * 256 * 256 * 256 / 2e10));
    // Between the shapes: between the two throughputs.
    const double mid = 2.0 * 362 * 362 * 362 / gemm_time_s(c.gpu, DType::bf16, {362, 362, 362});
    CHECK(mid > 2e10);
    CHECK(mid < 4e10);
    // The elementwise rate travels through the YAML into the planner's calibration.
    CHECK(c.gpu.gemm_calibration->elementwise_bytes_per_s == doctest::Approx(7e9));
  }

  TEST_CASE("a measured send_recv prices a pipeline hop as measured, whatever the ring it was measured in") {
    // 8 ranks on one node measured 5 µs + 0.1 ns/B per hop (10 GB/s); a pipeline hop between 2 ranks of one node is
    // that line (a hop is one step in a ring of any size), and one across nodes keeps the preset's network model.
    ClusterSpec c = PresetStore::builtin().cluster("a800x8");
    const ClusterSpec preset = c;
    auto cal = std::make_shared<CommCalibration>();
    CollectiveCalibration e;
    e.op = Collective::send_recv;
    e.ranks = 8, e.ranks_per_node = 8;
    const double S = 64e6;
    e.fit = {{1, 1e12, 5e-6, 1e-10}};
    e.bytes = {1e3, S, 1e9};  // the raw medians, on the line
    for (double b : e.bytes) e.seconds.push_back(5e-6 + b * 1e-10);
    cal->collectives.push_back(e);
    c.comm_calibration = cal;
    const GroupLayout same_node{2, 2, 1}, across{2, 1, 1};
    CHECK(collective_time_s(c, Collective::send_recv, S, same_node) == doctest::Approx(5e-6 + S * 1e-10).epsilon(1e-6));
    CHECK(collective_time_s(c, Collective::send_recv, S, across) ==
          doctest::Approx(collective_time_s(preset, Collective::send_recv, S, across)));
    CHECK(busbw_gbps("send_recv", 8, 1e9, 0.1) == doctest::Approx(10.0));  // busbw = algbw
  }

  TEST_CASE("a bad profile names the file and the field") {
    const PresetStore store = PresetStore::builtin();
    const std::string base = "kind: calibration-profile\nversion: 1\nname: x\ngpus_per_node: 2\n"
                             "hardware: {device: cpu, dtype: fp32}\n";
    CHECK_THROWS_WITH_AS(parse_profile_yaml(base + "base_cluster: nope\n", "p.yaml", store),
                         doctest::Contains("p.yaml:6"), InputError);
    CHECK_THROWS_WITH_AS(parse_profile_yaml(base + "base_cluster: a800x8\ncollectives:\n  - {op: all_to_one}\n",
                                            "p.yaml", store),
                         doctest::Contains("all_to_one"), InputError);
    CHECK_THROWS_WITH_AS(parse_profile_yaml(base + "base_cluster: a800x8\ngemm: {dtype: fp32, table: [[1, 2, 3]]}\n",
                                            "p.yaml", store),
                         doctest::Contains("gemm.table"), InputError);
  }
}

TEST_CASE("calibrate's nccl-tests table: size, count, time, algbw, busbw, #wrong as nccl-tests computes them") {
  using namespace shardplan::calibrate;
  RawRecord r;
  r.kind = "collective";
  r.op = "all_reduce";
  r.scope = "world";
  r.ranks = 4;
  r.ranks_per_node = 4;
  r.bytes = 1 << 20;
  r.median_s = 1e-3;
  RawRecord gemm;
  gemm.kind = "gemm";  // not a collective: not in the table
  const std::string t = nccl_tests_table({r, gemm}, "float", 4);
  // 2^20 B / 1 ms = 1.048576 GB/s algbw; all-reduce busbw = algbw · 2(n−1)/n = 1.572864 on 4 ranks
  // (nccl-tests PERFORMANCE.md); count = 2^20 / 4 B = 262144 floats; time 1000 us.
  CHECK(t.find("# all_reduce, world (4 ranks, 4 per node)") != std::string::npos);
  CHECK(t.find("1048576       262144  float    1000.00     1.05     1.57       0") != std::string::npos);
  CHECK(t.find("gemm") == std::string::npos);
}
