// Compute cost model of one GPU: GEMM roofline with tile and wave quantisation, flash attention, memory-bound work.
//
// Sources (see the shared REFERENCE-FACTS.md, "Compute"):
//  - NVIDIA Deep Learning Performance guide, "Matrix Multiplication Background": a GEMM is split into output
//    tiles, one per thread block; M, N not multiples of the tile waste the padded part (tile quantisation), and
//    tiles run in waves of one per SM, the last wave partly idle (wave quantisation); small GEMMs are limited by
//    memory bandwidth (arithmetic intensity below the GPU's FLOP/byte ratio).
//  - Calculon (Isaev et al., SC'23) systems/a100_80g.json: matrix efficiency 0.95 at ≥ 128 GFLOP, 0.9 at ≥ 16,
//    0.6 at ≥ 1, 0.1 below — reproduced here by a fixed per-kernel overhead instead of a step function.
//  - Dao 2023 (FlashAttention-2): up to 73 % of peak forward, 63 % backward on A100; Shah et al. 2024
//    (FlashAttention-3) §1: FlashAttention-2 reaches about 35 % of peak on H100.
#include "planner/compute_cost.hpp"

#include <algorithm>
#include <cmath>

namespace shardplan {

namespace {

// Achievable fraction of HBM bandwidth for streaming kernels (STREAM-like copy/triad reach ~85–90 % of the
// vendor figure on A100/H100).
constexpr double kHbmEfficiency = 0.85;

// Fixed time per GEMM / attention kernel: the launch gap between back-to-back kernels on a stream (~2 µs).
constexpr double kKernelOverheadS = 2e-6;

// Fixed time per wave of output tiles, on top of its MACs: pipeline fill (the first K-slices wait for HBM,
// ~1 µs of latency) and the epilogue (C written out through shared memory), which a non-persistent kernel does
// not overlap with the next tile. Assumed 1 µs. This is the small-K ramp: relative to an infinite K, a 128×128
// tile loses 1 % at K = 8192 on A100, 9 % at K = 2048 on H100, 27 % at K = 512 on H100. With the 2 µs launch
// gap it reproduces the fall-off of Calculon's step function (1 GFLOP 0.6, 16 GFLOP 0.9, 128 GFLOP 0.95 of
// peak on A100) more gently: 1024³ (2.1 GFLOP) 0.43, 2048³ (17 GFLOP) 0.66, 4096³ (137 GFLOP) 0.83.
constexpr double kTileWaveOverheadS = 1e-6;

// Hopper-class tensor cores (dense bf16/fp16 peak above 500 TFLOP/s: H100, H800, H200) vs the rest (A100/A800,
// Ada, Volta). cuBLAS on large bf16 GEMMs: H200 measured ≈ 790 of 989 TFLOP/s on 8192³ here (with the wave
// quantisation of 128×128 tiles on 132 SMs, 0.97, and the per-wave overhead above, 0.98, that is 0.84 of peak
// per busy SM: power and clock limits keep Hopper further from its datasheet peak); A100 ≈ 270–290 of 312
// (0.89 of peak per busy SM gives 274 on 8192³).
constexpr double kHopperTensorPeakTflops = 500;
constexpr double kHopperGemmEfficiency = 0.84;
constexpr double kOtherGemmEfficiency = 0.89;

// Output tiles cuBLAS chooses among, with the throughput of a busy SM relative to 128×128: a smaller tile loads
// each operand byte for fewer FLOPs (arithmetic intensity mn/(m+n): 64 for 128×128, 43 for 128×64, 32 for
// 64×64), so it runs further from the tensor-core peak. Relative figures assumed (calibration replaces them).
struct Tile {
  int64_t m, n;
  double rel;
};
constexpr Tile kTiles[] = {{128, 128, 1.0}, {128, 64, 0.85}, {64, 128, 0.85}, {64, 64, 0.7}};

// Split-K (cuBLAS, when a GEMM has fewer tiles than SMs and a long K): each split needs at least this much K.
constexpr int64_t kMinSplitK = 256;

// Flash attention: fraction of peak at long sequences, head_dim 128.
//  Ampere/Ada (FlashAttention-2 on A100, Dao 2023): forward up to 73 %, backward up to 63 % → 0.72 / 0.62.
//  Hopper, forward with a causal mask at head_dim 128 on H100 SXM5 (Shah et al. 2024, FlashAttention-3, Fig. 5):
//  FlashAttention-2 333–335 TFLOP/s at 8k–16k, cuDNN 529–539 → 0.345 and 0.548 of 989 before the sequence ramp
//  below (0.976 at 8k); pytorch/benchmark PR #2296 measures PyTorch SDPA at 288–304 TFLOP/s on H100 (non-causal),
//  the same kernel. Backward in A100's ratio to forward (0.62 / 0.72): 0.297 and 0.472. Transformer Engine uses
//  cuDNN's kernel on Hopper ("give FusedAttention preference on Hopper+", transformer_engine/pytorch/attention/
//  dot_product_attention/utils.py get_attention_backend); PyTorch SDPA's flash backend is FlashAttention-2.
//  No bf16 (Volta and older): FlashAttention-2 needs sm80; PyTorch falls back to the memory-efficient kernel,
//  assumed 0.45 / 0.38.
constexpr double kFlashFwdAmpere = 0.72, kFlashBwdAmpere = 0.62;
constexpr double kFlashFwdHopper = 0.345, kFlashBwdHopper = 0.297;
constexpr double kCudnnFwdHopper = 0.548, kCudnnBwdHopper = 0.472;
constexpr double kFlashFwdVolta = 0.45, kFlashBwdVolta = 0.38;
// The Triton FlashAttention (flash-attn's flash_attn_triton.py, llm-foundry's attn_impl 'triton'): "FlashAttention-2
// is ... 1.3-2.5x faster than FlashAttention in Triton" over its forward+backward benchmarks on A100 (Dao 2023,
// FlashAttention-2, §4.1), assumed to hold on Hopper, where neither kernel uses wgmma or TMA. The small end of that
// range, 1/1.3: of the paper's range {1/1.3, its geometric middle 1/1.8, 1/2.5} it is the one the only public runs
// of this kernel (llm-foundry's H100 table, MPT-H100 in bench/data) agree with (mean error 7.4 %, 10.5 % at the
// middle: reports/accuracy.md), so it is chosen on that one source.
constexpr double kTritonOverFlash2 = 1 / 1.3;
constexpr int64_t kFlashBlock = 128;     // query/key block of the kernel (FA2 with head_dim 128)
constexpr double kFlashSeqRamp = 200;    // efficiency × s/(s + 200): 0.72 at 512, 0.84 at 1k, 0.98 at 8k
constexpr double kFlashBackwardFlops = 2.5;  // backward = 2.5× forward FLOPs (5 matmuls vs 2; Dao 2023 §3)

constexpr double kMinPeak = 1e9;  // never divide by zero, whatever the preset says

// Sustained over benchmark tensor throughput per GPU generation (compute_cost.hpp sustained_tensor_fraction). Fitted
// by `build/bench/shardplan_accuracy` (it prints the fit) on the public set's non-historical runs of the generation,
// each source weighted equally, minimising the mean |log(measured / predicted step)|; reports/accuracy.md gives the
// fit and its leave-one-source-out error. Volta has two runs: no fit (1). Blackwell (B200, GB200; B300 and GB300 as
// well until 2026-12-07, now Blackwell Ultra's below) is fitted on Megatron-Bridge's dense rows since 2026-12-04,
// against each part's rate at its board power (GB200 at 0.950 of its datasheet: hardware.hpp full_clock_power_w);
// AMD's CDNA has no run: Hopper's value, an assumption.
constexpr double kSustainedAmpere = 0.882;
constexpr double kSustainedHopper = 0.834;
// Blackwell: 0.730 until attention had its own sustained share (kAttentionSustained, 2026-12-07): the fraction had
// carried the attention's rate too, which the generation's long-context rows say runs nearer its benchmark.
constexpr double kSustainedBlackwell = 0.681;
// Blackwell Ultra (B300, GB300) on its own: the same nominal BF16/FP8 rates as Blackwell (NVIDIA's HGX and NVL72
// tables), but Megatron-Bridge's same-layout pairs run faster on it than those rates say — Llama 3 70B FP8, FSDP
// mb 2, 64 GPUs: GB300 5,248 against GB200 4,224 tok/s/GPU (1.24×, 1.05× from board power alone); DeepSeek-V3 MXFP8,
// PP 16, 256 GPUs: B300 3,131 against B200 2,815 (1.11×, 1.00× by the rates) (MB-2604.01, MB-2604 in bench/data).
// The die is new (2× the softmax exponential rate, FP4 rework: NVIDIA's 'Inside Blackwell Ultra' blog); which
// of its changes gives the rest is not public, so its fraction is fitted like the generations' on the dense rows:
// 0.930, leave-one-source-out 0.848–0.931 (four rows of two sources; Blackwell's own moved 0.741 → 0.730 once these
// left it). The 17 Blackwell Ultra MoE rows, not fitted on, check it only in part: the 13 Qwen3 and DeepSeek-V3 rows
// move to their measurements (mean |error| 15.2 → 8.4 %, 6 → 3 beyond 15 %; GB300 Qwen3-235B −17.5 → −4.4 %), the four
// GPT-OSS 120B rows, predicted too fast already, further from them (B300 +48.5 → +69.9 %). 0.955 (leave-one-source-
// out 0.848–0.987) since attention has its own sustained share (kAttentionSustained).
constexpr double kSustainedBlackwellUltra = 0.955;
// FP8 GEMMs keep this share of the generation's fraction: at twice the 16-bit rate a tile's MACs take half the time
// but its operand loads, pipeline fill and epilogue do not halve (cuBLAS on H100 SXM: ~1,300–1,500 of 1,979 FP8
// TFLOP/s on large GEMMs against ~750–800 of 989 in bf16, 0.85–0.95 of the 16-bit share). Fitted with the fractions
// on the rows that ran FP8 (bench/sustained_fit.cpp) until 2026-12-07: 0.929 (0.950 until OLMo-core's table joined,
// 2026-12-06), leave-one-source-out values 0.92–1.00. Held at 0.929 since: with Blackwell Ultra's own fraction free the
// fit moved it to 0.970 along a flat valley against Blackwell's (0.704; that generation's rows are nearly all FP8) for
// no gain in sample (5.4 %) and a loss held out (5.9 % against 5.7 % held). The same-layout BF16/FP8 pairs the
// accuracy bench prints (99: DGX Cloud's, NeMo's, torchtitan's and OLMo-core's tables) isolate it and say 0.929: their
// predicted FP8 speedup is off by 3.7 % on average with it (bias +0.5 %), 4.2 % (bias +2.8 %) at 0.970; before this
// refit 3.4 % over 98 pairs, and 4.2 % with FP8 at the 16-bit share and bf16 gathers (ninth session).
constexpr double kFp8OverBf16Sustained = 0.929;

// Fused attention (FlashAttention-2, cuDNN's fused kernel) against its own benchmark rate: the efficiency constants
// above are measured rates of those kernels (FlashAttention-2's paper on A100, FlashAttention-3's of cuDNN on H100;
// FlashAttention-4's puts cuDNN 9.13 on B200 at ~1.24 PFLOP/s, 1/1.3 of its own 1.61, ~0.55 of the datasheet: Hopper's
// share), so they need only what a step sustains against an isolated benchmark (clocks under the board's power while
// everything else runs), not the per-generation fraction, which also carries how far each generation's GEMMs fall
// from the GEMM model. One share for every generation, fitted with the fractions (bench/sustained_fit.cpp): the rows
// where attention is most of the step say so, Hopper's long-context rows (torchtitan's Table 2, NeMo 24.10) too fast
// and Blackwell's (NeMo 25.04 on B200 at 256 K–1 M tokens) too slow under their generation's own fraction. Fitted:
// 0.847 (dense rows 5.4 → 5.0 %, leave-one-source-out 5.7 → 5.5 %; reports/accuracy.md): above Hopper's 0.834 and
// Blackwell's 0.681, whose GEMMs fall further from the GEMM model than its attention kernels from their benchmark.
constexpr double kAttentionSustained = 0.847;

bool hopper_class(const GpuSpec& g) { return std::max(g.bf16_tflops, g.fp16_tflops) > kHopperTensorPeakTflops; }

double ceil_div(int64_t a, int64_t b) { return static_cast<double>((a + b - 1) / b); }

}  // namespace

double peak_flops(const GpuSpec& g, DType d) {
  double tflops = 0;
  switch (d) {
    // fp32 GEMMs: PyTorch's default (torch.backends.cuda.matmul.allow_tf32 = False since 1.12) runs them on the
    // CUDA cores, not as TF32 on tensor cores: the fp32 peak.
    case DType::fp32: tflops = g.fp32_tflops; break;
    // bf16 on a GPU without bf16 (V100: 0): strategy validation rejects that combination; here we fall back to
    // the fp16 peak so that the function stays total and never divides by zero.
    case DType::bf16: tflops = g.bf16_tflops > 0 ? g.bf16_tflops : g.fp16_tflops; break;
    case DType::fp16: tflops = g.fp16_tflops; break;
    // Dense FP8 (E4M3/E5M2) tensor cores: 2× the 16-bit rate on Hopper and Blackwell (datasheets); MXFP8 runs at
    // the same rate on Blackwell (NVIDIA Blackwell architecture technical brief). 0 = none: validation refuses it.
    case DType::fp8: tflops = g.fp8_tflops; break;
  }
  if (!(tflops > 0)) tflops = std::max({g.fp16_tflops, g.bf16_tflops, g.fp32_tflops, 0.0});
  return std::max(tflops * 1e12, kMinPeak);
}

double gemm_base_efficiency(const GpuSpec& g, DType) {
  return hopper_class(g) ? kHopperGemmEfficiency : kOtherGemmEfficiency;
}

namespace {

// Measured throughput at shape s, interpolated in log(M, N, K) (calibrate/README.md): the inverse-distance
// weighted mean of log(FLOP/s) over the 4 nearest measured shapes, exact at a measured shape; beyond the table
// the nearest shapes dominate (no extrapolation of the trend).
double calibrated_gemm_flops_per_s(const GemmCalibration& cal, const GemmShape& s) {
  constexpr std::size_t kNeighbours = 4;
  const double lm = std::log(static_cast<double>(s.m)), ln = std::log(static_cast<double>(s.n));
  const double lk = std::log(static_cast<double>(s.k));
  // (squared distance, log throughput) of the kNeighbours nearest, kept sorted: a plain insertion, no allocation.
  std::pair<double, double> near[kNeighbours];
  std::size_t count = 0;
  for (const GemmCalibrationPoint& p : cal.points) {
    const double dm = lm - std::log(static_cast<double>(p.m)), dn = ln - std::log(static_cast<double>(p.n));
    const double dk = lk - std::log(static_cast<double>(p.k));
    const std::pair<double, double> item{dm * dm + dn * dn + dk * dk, std::log(p.flops_per_s)};
    if (item.first < 1e-12) return p.flops_per_s;
    std::size_t i = count < kNeighbours ? count++ : kNeighbours;
    if (i == kNeighbours) {
      if (item.first >= near[kNeighbours - 1].first) continue;
      i = kNeighbours - 1;
    }
    while (i > 0 && near[i - 1].first > item.first) {
      near[i] = near[i - 1];
      --i;
    }
    near[i] = item;
  }
  double weight = 0, sum = 0;
  for (std::size_t i = 0; i < count; ++i) {
    weight += 1.0 / near[i].first;
    sum += near[i].second / near[i].first;
  }
  return std::exp(sum / weight);
}

}  // namespace

double gemm_time_s(const GpuSpec& g, DType d, const GemmShape& s) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return 0.0;
  if (g.gemm_calibration && !g.gemm_calibration->points.empty()) {
    // A measured table. CPU ranks run every dtype at their measured speed; a GPU table measured in another dtype
    // gives the efficiency (measured / the device's peak), applied to the peak of the dtype asked for.
    const GemmCalibration& cal = *g.gemm_calibration;
    const double measured = calibrated_gemm_flops_per_s(cal, s);
    if (cal.cpu || cal.dtype == d || !(cal.peak_flops_per_s > 0)) return s.flops() / measured;
    return s.flops() / (measured / cal.peak_flops_per_s * peak_flops(g, d));
  }
  const double peak = peak_flops(g, d) * gemm_base_efficiency(g, d) * power_limit_clock_factor(g);
  const double hbm = std::max(g.hbm_gbps, 1.0) * kGB * kHbmEfficiency;
  const double sms = static_cast<double>(std::max<int64_t>(g.sm_count, 1));
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n), k = static_cast<double>(s.k);
  const double elem = static_cast<double>(dtype_bytes(d));
  // Read A and B, write C once (ideal reuse); an FP8 GEMM writes its output in bf16.
  const double bytes = elem * (m * k + k * n) + (d == DType::fp8 ? 2.0 : elem) * m * n;

  // Roofline per tile choice: compute = waves × (one tile's padded MACs at a busy SM's rate + per-wave
  // overhead), memory = bytes / HBM; time = the larger. cuBLAS's heuristic picks (roughly) the fastest
  // configuration, so take the minimum.
  const double per_sm = peak / sms;
  double best = HUGE_VAL;
  for (const Tile& t : kTiles) {
    const double tiles = ceil_div(s.m, t.m) * ceil_div(s.n, t.n);
    // Split-K: fewer tiles than SMs and a long K → K split into up to SMs/tiles slices; the fp32 partial
    // results are written and read back once more.
    double max_split = 1;
    if (tiles < sms) max_split = std::max(1.0, std::min(std::floor(sms / tiles), std::floor(k / kMinSplitK)));
    for (const double split : {1.0, max_split}) {
      const double waves = std::ceil(tiles * split / sms);
      const double tile_flops = 2.0 * static_cast<double>(t.m) * static_cast<double>(t.n) * std::ceil(k / split);
      const double t_compute = waves * (tile_flops / (per_sm * t.rel) + kTileWaveOverheadS);
      const double extra = split > 1 ? 2.0 * split * m * n * 4.0 : 0.0;
      const double t_memory = (bytes + extra) / hbm;
      best = std::min(best, std::max(t_compute, t_memory));
    }
  }
  return best + kKernelOverheadS;
}

double gemm_efficiency(const GpuSpec& g, DType d, const GemmShape& s) {
  const double t = gemm_time_s(g, d, s);
  if (!(t > 0)) return 1.0;  // an empty GEMM: nothing to lose
  return std::clamp(s.flops() / (peak_flops(g, d) * t), 1e-9, 1.0);
}

double sustained_tensor_fraction(const GpuSpec& g) {
  if (g.architecture == GpuArchitecture::blackwell_ultra) return kSustainedBlackwellUltra;
  switch (gpu_generation(g)) {
    case GpuGeneration::volta: return 1.0;
    case GpuGeneration::ampere: return kSustainedAmpere;
    case GpuGeneration::blackwell: return kSustainedBlackwell;
    case GpuGeneration::hopper:
    case GpuGeneration::cdna3: case GpuGeneration::cdna4:  // assumed: no fitted runs yet
      return kSustainedHopper;
  }
  return 1.0;
}

double fp8_sustained_share(const GpuSpec& g) {
  return g.fp8_sustained_ratio > 0 ? g.fp8_sustained_ratio : kFp8OverBf16Sustained;
}

GpuSpec training_device(const GpuSpec& g) {
  if (g.gemm_calibration && !g.gemm_calibration->points.empty()) return g;  // measured: the device as it ran
  GpuSpec t = g;
  const double f = g.sustained_tensor_fraction > 0 ? g.sustained_tensor_fraction : sustained_tensor_fraction(g);
  // Every tensor-core rate, FP8's too: the sustained clock and power are the chip's, whatever the operand type
  // (FP8 GEMMs were left at their benchmark rate until 2026-12-04, which the fit then made up for by lowering the
  // fraction of the bf16 work: Blackwell's set, nearly all FP8, fitted to 0.37).
  t.bf16_tflops *= f;
  t.fp16_tflops *= f;
  t.tf32_tflops *= f;
  t.fp8_tflops *= f * fp8_sustained_share(g);
  // Volta's fraction is not fitted (1): neither is its attention's.
  const double attention = g.attention_sustained_fraction > 0 ? g.attention_sustained_fraction : kAttentionSustained;
  t.attention_over_tensor_rate = gpu_generation(g) == GpuGeneration::volta || !(f > 0) ? 1.0 : attention / f;
  return t;
}

double power_limit_clock_factor(const GpuSpec& g) {
  // A GPU run below its datasheet board power lowers clock and voltage together until it fits: P ∝ C·V²·f with V
  // rising about linearly with f over the DVFS range (the CMOS dynamic-power relation, Hennessy & Patterson,
  // "Computer Architecture", §1.5), so the sustained clock scales as the cube root of the power.
  // The power it runs at (a limit, or the board's maximum) against the power its datasheet peak needs (the maximum,
  // unless the preset says the datasheet quotes a clock that needs more: GpuSpec::full_clock_power_w).
  const double power = g.power_limit_w > 0 ? g.power_limit_w : g.tdp_w;
  const double needed = g.full_clock_power_w > 0 ? g.full_clock_power_w : g.tdp_w;
  if (!(power > 0) || !(needed > 0) || power >= needed) return 1.0;
  return std::cbrt(power / needed);
}

double flash_attention_efficiency(const GpuSpec& g, int64_t seq, int64_t head_dim, bool backward, AttentionKernel k) {
  double base;
  if (!(g.bf16_tflops > 0)) base = backward ? kFlashBwdVolta : kFlashFwdVolta;
  else if (hopper_class(g) && k == AttentionKernel::cudnn) base = backward ? kCudnnBwdHopper : kCudnnFwdHopper;
  else if (hopper_class(g)) base = backward ? kFlashBwdHopper : kFlashFwdHopper;
  else base = backward ? kFlashBwdAmpere : kFlashFwdAmpere;
  if (g.bf16_tflops > 0 && k == AttentionKernel::triton) base *= kTritonOverFlash2;
  // Head dim below 128: fewer FLOPs per byte of K/V loaded; FA2's benchmarks (Dao 2023, §4.1) run head_dim 64
  // at roughly 85 % of the head_dim-128 speed → (d/128)^¼ (0.84 at 64, 0.71 at 32). Assumed shape of the curve.
  const double hd = std::min(1.0, std::pow(static_cast<double>(std::max<int64_t>(head_dim, 1)) / 128.0, 0.25));
  const double s = static_cast<double>(std::max<int64_t>(seq, 1));
  return base * hd * s / (s + kFlashSeqRamp);
}

namespace {

// Time of the flash-attention kernel, forward or backward.
double flash_time(const GpuSpec& g, DType d, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, bool causal,
                  bool backward, AttentionKernel k) {
  if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0) return 0.0;
  const double b = static_cast<double>(batch), s = static_cast<double>(seq);
  const double h = static_cast<double>(heads), hd = static_cast<double>(head_dim);
  // Forward: QKᵀ and P·V, 2 matmuls of 2·s²·hd FLOPs per head.
  double work = 4.0 * b * s * s * h * hd;
  const double blocks = ceil_div(seq, kFlashBlock);
  // Causal: the kernel skips the blocks above the diagonal but computes the diagonal ones in full:
  // (nb + 1) / (2·nb) of the work, → ½ at long sequences.
  if (causal) work *= (blocks + 1) / (2 * blocks);
  if (backward) work *= kFlashBackwardFlops;
  // Parallel over batch × heads × query blocks, one thread block each, in waves over the SMs.
  const double sms = static_cast<double>(std::max<int64_t>(g.sm_count, 1));
  const double ctas = b * h * blocks;
  const double wave_q = ctas / (std::ceil(ctas / sms) * sms);
  // On a training device the tensor rates carry the generation's sustained fraction; attention sustains its own.
  const double eff = flash_attention_efficiency(g, seq, head_dim, backward, k) * wave_q * g.attention_over_tensor_rate;
  return work / (peak_flops(g, d) * power_limit_clock_factor(g) * eff) + kKernelOverheadS;
}

}  // namespace

double flash_attention_forward_s(const GpuSpec& g, DType d, int64_t batch, int64_t seq, int64_t heads,
                                 int64_t head_dim, bool causal, AttentionKernel k) {
  return flash_time(g, d, batch, seq, heads, head_dim, causal, false, k);
}

double flash_attention_backward_s(const GpuSpec& g, DType d, int64_t batch, int64_t seq, int64_t heads,
                                  int64_t head_dim, bool causal, AttentionKernel k) {
  return flash_time(g, d, batch, seq, heads, head_dim, causal, true, k);
}

double memory_bound_time_s(const GpuSpec& g, double bytes) {
  if (!(bytes > 0) || !std::isfinite(bytes)) return 0.0;
  // A measured elementwise rate is what such work achieves on that device (calibrate: an AdamW pass).
  if (g.gemm_calibration && g.gemm_calibration->elementwise_bytes_per_s > 0)
    return bytes / g.gemm_calibration->elementwise_bytes_per_s;
  // A measured large copy already is the achievable bandwidth (no efficiency factor on top).
  if (g.gemm_calibration && g.gemm_calibration->memory_bytes_per_s > 0)
    return bytes / g.gemm_calibration->memory_bytes_per_s;
  return bytes / (std::max(g.hbm_gbps, 1.0) * kGB * kHbmEfficiency);
}

}  // namespace shardplan
