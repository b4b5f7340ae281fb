// Step time: per-layer times against Korthikanti et al. 2022 (Table 4), the pipeline bubble of Narayanan et al.
// 2021, how the parts of a step add up, data-parallel exposure on a slow network, and the search's fast memory
// path against the full memory model.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/comm_cost.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/partition.hpp"
#include "planner/predict.hpp"
#include "planner/precision.hpp"
#include "planner/step_time.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

// Korthikanti et al. 2022 §6 / Table 4: GPT 22B, TP 8 on one DGX A100, micro-batch 4, sequence 2048,
// Megatron-LM without flash attention.
Strategy korthikanti_22b(Recompute rc, bool sp) {
  Strategy s;
  s.gpus = 8;
  s.tp = 8;
  s.pp = 1;
  s.dp = 1;
  s.zero = 0;
  s.micro_batch = 4;
  s.global_batch = 4;
  s.seq = 2048;
  s.flash_attn = false;
  s.precision = Precision::megatron_bf16;
  s.framework = Framework::megatron;
  s.tp_comm_overlap = false;  // Megatron-LM of 2022: TP collectives on the critical path (K22 §6)
  s.recompute = rc;
  s.sp = sp;
  return s;
}

// Forward and backward of one transformer layer as the paper measures them: the backward includes the recomputed
// forward work and all TP collectives are on the critical path.
struct LayerMs {
  double fwd, bwd;
};
LayerMs layer_ms(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  validate_strategy(s, m, c);
  const MicrobatchCosts mb = microbatch_costs(m, s, c);
  return {1e3 * (mb.block_fwd_s + mb.block_tp_fwd_s),
          1e3 * (mb.block_bwd_s + mb.block_recompute_s + mb.block_tp_bwd_s)};
}

Strategy fsdp(int64_t gpus, int64_t global_batch, int zero, Precision p) {
  Strategy s;
  s.gpus = gpus;
  s.dp = gpus;
  s.zero = zero;
  s.precision = p;
  s.micro_batch = 1;
  s.global_batch = global_batch;
  s.seq = 2048;
  return s;
}

// A pipeline-only layout: tp 1, dp 1, `pp` stages, `microbatches` micro-batches of one sequence, as Megatron-Core
// runs it.
Strategy pipeline(int64_t pp, int64_t vpp, int64_t microbatches) {
  Strategy s;
  s.framework = Framework::megatron;
  s.gpus = pp;
  s.pp = pp;
  s.dp = 1;
  s.vpp = vpp;
  s.schedule = vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  s.zero = 0;
  s.precision = Precision::amp_bf16;
  s.micro_batch = 1;
  s.global_batch = microbatches;
  s.seq = 2048;
  return s;
}

void check_parts_add_up(const StepTime& t) {
  CHECK(t.modelled);
  CHECK(t.exposed_comm_s == doctest::Approx(t.exposed_tp_s + t.exposed_pp_s + t.exposed_dp_s).epsilon(1e-12));
  CHECK(t.step_s == doctest::Approx(t.compute_s + t.exposed_comm_s + t.bubble_s + t.optimizer_s).epsilon(1e-12));
  for (double part : {t.compute_s, t.exposed_tp_s, t.exposed_pp_s, t.exposed_dp_s, t.bubble_s, t.optimizer_s,
                      t.overlap_slowdown_s})
    CHECK(part >= 0);
  CHECK(t.exposed_dp_s <= t.dp_comm_total_s * (1 + 1e-12));
  CHECK(t.step_s > 0);
}

std::string describe(const Strategy& s) {
  std::string out = "tp " + std::to_string(s.tp) + " pp " + std::to_string(s.pp) + " vpp " + std::to_string(s.vpp) +
                    " " + to_string(s.schedule) + " dp " + std::to_string(s.dp) + " zero " + std::to_string(s.zero) +
                    " hsdp " + std::to_string(s.hsdp) + " " + to_string(s.framework) + " recompute " +
                    to_string(s.recompute) + " global batch " + std::to_string(s.global_batch);
  if (s.sp) out += " sp";
  if (s.offload_optimizer) out += " offload";
  if (!s.flash_attn) out += " no-flash";
  if (s.loss == LossKind::chunked) out += " chunked-loss";
  if (s.grad_sync) out += std::string(" grad-sync ") + to_string(*s.grad_sync);
  return out;
}

// Strategies for comparing the two memory paths: uneven (42 layers on 4 or 5 stages) and interleaved pipelines,
// GPipe, TP with SP, every ZeRO stage, HSDP, three frameworks, recomputation, gradient accumulation, offload, the
// chunked loss and both gradient syncs. Invalid combinations for a model are skipped by the caller.
std::vector<Strategy> memory_grid() {
  struct Layout {
    int64_t tp, pp, vpp;
    Schedule schedule;
    bool sp;
  };
  const Layout layouts[] = {
      {1, 1, 1, Schedule::one_f_one_b, false}, {2, 1, 1, Schedule::one_f_one_b, true},
      {1, 2, 1, Schedule::one_f_one_b, false}, {1, 4, 1, Schedule::one_f_one_b, false},  // 42 → 10,10,11,11
      {2, 4, 1, Schedule::gpipe, false},       {1, 5, 1, Schedule::one_f_one_b, false},  // 42 → 8,8,8,9,9
      {1, 8, 1, Schedule::one_f_one_b, false}, {1, 2, 2, Schedule::interleaved, false},
      {2, 2, 4, Schedule::interleaved, true},  {1, 4, 2, Schedule::interleaved, false},
      {1, 3, 2, Schedule::interleaved, false},
  };
  std::vector<Strategy> out;
  for (const Layout& l : layouts)
    for (int64_t dp : {1, 2, 8})
      for (int zero = 0; zero <= 3; ++zero)
        for (Framework fw : {Framework::fsdp, Framework::deepspeed, Framework::megatron})
          for (Recompute rc : {Recompute::none, Recompute::full})
            for (int64_t accumulation : {1, 4})
              for (int variant : {0, 1, 2}) {
                Strategy s;
                s.tp = l.tp;
                s.pp = l.pp;
                s.vpp = l.vpp;
                s.schedule = l.schedule;
                s.sp = l.sp;
                s.dp = dp;
                s.gpus = l.tp * l.pp * dp;
                s.zero = zero;
                s.framework = fw;
                s.precision = fw == Framework::megatron ? Precision::megatron_bf16 : Precision::amp_bf16;
                s.recompute = rc;
                s.micro_batch = 1;
                s.global_batch = dp * accumulation * (l.pp > 1 ? 2 : 1);
                s.seq = 2048;
                if (zero >= 2 && dp == 8 && accumulation == 4) s.hsdp = 4;
                if (variant == 1) {  // ZeRO-Offload and the chunked loss
                  s.offload_optimizer = true;
                  s.loss = LossKind::chunked;
                } else if (variant == 2) {  // the other gradient sync; selective recomputation without flash
                  s.grad_sync = effective_grad_sync(s) == GradSync::per_step ? GradSync::per_micro : GradSync::per_step;
                  s.recompute = rc == Recompute::none ? Recompute::selective : rc;
                  s.flash_attn = false;
                }
                out.push_back(s);
              }
  return out;
}

}  // namespace

TEST_SUITE("step time") {
  // The model gave (fwd/bwd ms) 7.58/13.15, 6.45/11.69, 7.58/20.73, 7.58/14.19, 6.45/12.72 before the Ampere sustained
  // tensor fraction (0.883, fitted on every Ampere source: compute_cost.cpp); with it 8.05/14.10, 6.92/12.64,
  // 8.05/22.15, 8.05/15.15, 6.92/13.68: forwards within ±5 %, backwards +4 … +19 % (the paper's backward is the
  // lighter side of the fit: K22's iterations come out +2 … +11 %, reports/accuracy.md). The Ampere fit's minimum is
  // flat (0.863–0.867 move the dense mean by < 0.05 points); at 0.863 the no-recompute backward is 14.28 ms, +20.0 %.
  TEST_CASE("Korthikanti et al. 2022 Table 4: GPT-22B per-layer forward within ±12 %, backward within +21 %") {
    const ModelSpec m = presets().model("gpt-22b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    struct Row {
      const char* name;
      Recompute rc;
      bool sp;
      double fwd_ms, bwd_ms;  // published, Table 4
    };
    const Row rows[] = {
        {"no recompute", Recompute::none, false, 7.7, 11.9},
        {"sequence parallelism", Recompute::none, true, 7.2, 11.8},
        {"full recompute", Recompute::full, false, 7.7, 19.5},
        {"selective recompute", Recompute::selective, false, 7.7, 13.2},
        {"selective recompute + SP", Recompute::selective, true, 7.2, 13.1},
    };
    for (const Row& r : rows) {
      CAPTURE(std::string(r.name));
      const LayerMs t = layer_ms(m, korthikanti_22b(r.rc, r.sp), c);
      CAPTURE(t.fwd);
      CAPTURE(t.bwd);
      CHECK(t.fwd == doctest::Approx(r.fwd_ms).epsilon(0.12));
      CHECK(t.bwd >= r.bwd_ms);
      CHECK(t.bwd <= 1.21 * r.bwd_ms);
    }
  }

  TEST_CASE("Korthikanti Table 4: the orderings the paper reports") {
    const ModelSpec m = presets().model("gpt-22b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    const LayerMs none = layer_ms(m, korthikanti_22b(Recompute::none, false), c);
    const LayerMs full = layer_ms(m, korthikanti_22b(Recompute::full, false), c);
    const LayerMs sel = layer_ms(m, korthikanti_22b(Recompute::selective, false), c);
    const LayerMs sel_sp = layer_ms(m, korthikanti_22b(Recompute::selective, true), c);
    // Recomputation never changes the forward; it costs backward time: none < selective < full.
    CHECK(full.fwd == doctest::Approx(none.fwd));
    CHECK(sel.fwd == doctest::Approx(none.fwd));
    CHECK(none.bwd < sel.bwd);
    CHECK(sel.bwd < full.bwd);
    // Paper: full recomputation's overhead is 39 % of the no-recompute layer (27.2 vs 19.6 ms); selective + SP is
    // 4 % (20.3 vs 19.6). The model's fwd+bwd overheads must at least be ordered and of that size: full > 25 %,
    // selective + SP < 10 %.
    const double base = none.fwd + none.bwd;
    CHECK((full.fwd + full.bwd) / base > 1.25);
    CHECK((sel_sp.fwd + sel_sp.bwd) / base < 1.10);
  }

  TEST_CASE("recomputation: full repeats exactly one block forward, none repeats nothing") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    for (bool flash : {true, false})
      for (int64_t tp : {1, 2, 8}) {
        CAPTURE(flash);
        CAPTURE(tp);
        Strategy s = fsdp(8, 8, 3, Precision::amp_bf16);
        s.tp = tp;
        s.dp = 8 / tp;
        s.flash_attn = flash;
        s.recompute = Recompute::full;
        const MicrobatchCosts full = microbatch_costs(m, s, c);
        CHECK(full.block_fwd_s > 0);
        CHECK(full.block_recompute_s == full.block_fwd_s);
        s.recompute = Recompute::none;
        const MicrobatchCosts none = microbatch_costs(m, s, c);
        CHECK(none.block_recompute_s == 0);
        // Recomputation does not change the block's own forward or backward.
        CHECK(none.block_fwd_s == full.block_fwd_s);
        CHECK(none.block_bwd_s == full.block_bwd_s);
        // Full recomputation repeats the forward's TP collectives too (Korthikanti §5): the backward's TP time
        // grows by exactly the forward's.
        CHECK(full.block_tp_bwd_s == doctest::Approx(none.block_tp_bwd_s + none.block_tp_fwd_s));
        if (tp == 1) CHECK(full.block_tp_fwd_s == 0);
      }
  }

  // Recomputation exists only to save activation memory: a policy that spends backward time recomputing must keep
  // fewer saved bytes than one that spends less. Checked with the time model (microbatch_costs) against the memory
  // model (block_activation_bytes) for every framework, with and without flash attention.
  // This caught FSDP's op-level selective recomputation costing time while the memory model saved nothing for it.
  TEST_CASE("recomputation buys memory with time: more recompute time, fewer saved activations") {
    const ClusterSpec c = presets().cluster("dgx-h100");
    for (const char* preset : {"llama3-8b", "gpt-22b"})
      for (Framework fw : {Framework::fsdp, Framework::deepspeed, Framework::megatron, Framework::reference})
        for (bool flash : {true, false}) {
          const ModelSpec m = presets().model(preset);
          CAPTURE(std::string(preset));
          CAPTURE(std::string(to_string(fw)));
          CAPTURE(flash);
          Strategy s = fsdp(8, 8, fw == Framework::megatron ? 1 : 3, Precision::amp_bf16);
          s.framework = fw;
          s.flash_attn = flash;
          const FrameworkTraits traits = framework_traits(fw);
          auto at = [&](Recompute rc) {
            s.recompute = rc;
            return std::pair{microbatch_costs(m, s, c).block_recompute_s, block_activation_bytes(m, s, traits)};
          };
          const auto [t_none, a_none] = at(Recompute::none);
          const auto [t_sel, a_sel] = at(Recompute::selective);
          const auto [t_full, a_full] = at(Recompute::full);
          CAPTURE(t_sel);
          CAPTURE(a_sel);
          CAPTURE(a_none);
          CHECK(t_none == 0);
          CHECK(t_sel < t_full);
          CHECK(a_full < a_sel);
          CHECK(a_sel <= a_none);
          if (t_sel > 0) CHECK(a_sel < a_none);  // time spent recomputing must buy memory
          if (a_sel < a_none) CHECK(t_sel > 0);  // and memory saved must be paid for
        }
  }

  TEST_CASE("the parts of a step add up to the step") {
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    const ModelSpec m = presets().model("llama3-8b");
    std::vector<Strategy> grid;
    grid.push_back(fsdp(8, 8, 3, Precision::pure_bf16));
    grid.push_back(fsdp(16, 64, 0, Precision::amp_bf16));
    Strategy zero1 = fsdp(16, 64, 1, Precision::amp_bf16);
    zero1.framework = Framework::deepspeed;  // FSDP has no ZeRO-1
    grid.push_back(zero1);
    grid.push_back(fsdp(16, 64, 2, Precision::amp_bf16));
    Strategy hybrid = fsdp(32, 64, 3, Precision::amp_bf16);
    hybrid.hsdp = 8;
    grid.push_back(hybrid);
    Strategy three_d = pipeline(4, 2, 16);
    three_d.gpus = 32;
    three_d.tp = 2;
    three_d.sp = true;
    three_d.dp = 4;
    three_d.zero = 1;
    three_d.framework = Framework::megatron;
    three_d.precision = Precision::megatron_bf16;
    three_d.recompute = Recompute::selective;
    grid.push_back(three_d);
    Strategy offload = fsdp(8, 8, 2, Precision::amp_bf16);
    offload.offload_optimizer = true;
    offload.framework = Framework::deepspeed;
    grid.push_back(offload);
    for (size_t i = 0; i < grid.size(); ++i) {
      CAPTURE(i);
      validate_strategy(grid[i], m, c);
      check_parts_add_up(estimate_step_time(m, grid[i], c));
    }
  }

  TEST_CASE("1F1B bubble: (p − 1)/m of the steady part (Narayanan et al. 2021 §2.2)") {
    // p = 4 stages, m = 8 micro-batches, no data parallelism: the steady part (compute + exposed TP/PP
    // communication) is m micro-batch times, the bubble p − 1 of them, so bubble / steady = 3/8.
    const ModelSpec m = presets().model("llama3-8b");  // 32 layers: 8 per stage, 4 per virtual stage with v = 2
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    const Strategy s = pipeline(4, 1, 8);
    validate_strategy(s, m, c);
    const StepTime t = estimate_step_time(m, s, c);
    check_parts_add_up(t);
    CHECK(t.exposed_dp_s == 0);
    CHECK(t.bubble_s > 0);
    // The stages are not equal: stage 0 adds the embedding, stage 3 the LM head and loss (128k vocabulary), which
    // sets the pace. Warm-up and cool-down pass once through the other three stages (planner/pipeline_schedule.hpp),
    // so the bubble is their three micro-batch times plus the 3·2 transfers — below 3 of the slowest stage's, the
    // 3/8 that equal stages would give. Unequal stages are walked as the simulator plays them (pipeline_makespan):
    // within 0.5 % of that hand count here (a transfer overlapping the next stage's work comes off the path).
    const MicrobatchCosts mb = microbatch_costs(m, s, c);
    const double block = mb.block_fwd_s + mb.block_bwd_s + mb.block_recompute_s;
    const double send = pipeline_send_s(m, s, c);
    CHECK(t.bubble_s == doctest::Approx(3 * 8 * block + mb.embed_fwd_s + mb.embed_bwd_s + 3 * 2 * send).epsilon(0.005));
    CHECK(t.bubble_s <= 3 * 8 * block + mb.embed_fwd_s + mb.embed_bwd_s + 3 * 2 * send);
    const double fraction = t.bubble_s / (t.step_s - t.bubble_s - t.optimizer_s);
    CHECK(fraction < 3.0 / 8.0);
    CHECK(fraction > 0.9 * 3.0 / 8.0 * (8 * block) / (8 * block + mb.head_fwd_s + mb.head_bwd_s));
    // Twice the micro-batches: the same bubble, half the fraction.
    const StepTime t16 = estimate_step_time(m, pipeline(4, 1, 16), c);
    CHECK(t16.bubble_s == doctest::Approx(t.bubble_s).epsilon(0.01));
    CHECK(t16.bubble_s / (t16.step_s - t16.bubble_s - t16.optimizer_s) == doctest::Approx(fraction / 2).epsilon(0.01));
    // No pipeline, no bubble.
    CHECK(estimate_step_time(m, fsdp(8, 8, 3, Precision::amp_bf16), c).bubble_s == 0);
  }

  TEST_CASE("interleaved 1F1B with v = 2 halves the bubble (Narayanan et al. 2021 §2.2.2)") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    const Strategy plain = pipeline(4, 1, 8), interleaved = pipeline(4, 2, 8);
    validate_strategy(interleaved, m, c);
    const StepTime t1 = estimate_step_time(m, plain, c), t2 = estimate_step_time(m, interleaved, c);
    check_parts_add_up(t2);
    // The extra sends of the second chunk make the per-micro-batch time a little longer; within 2 %.
    CHECK(t2.bubble_s / t1.bubble_s == doctest::Approx(0.5).epsilon(0.02));
    // ... and interleaving pays for it with twice the pipeline sends.
    CHECK(t2.exposed_pp_s == doctest::Approx(2 * t1.exposed_pp_s));
  }

  TEST_CASE("ZeRO-3: more GPUs at the same global batch never increase a rank's compute") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    double previous = INFINITY;
    for (int64_t gpus = 8; gpus <= 64; gpus *= 2) {
      CAPTURE(gpus);
      const Strategy s = fsdp(gpus, 64, 3, Precision::amp_bf16);
      validate_strategy(s, m, c);
      const StepTime t = estimate_step_time(m, s, c);
      check_parts_add_up(t);
      CHECK(t.compute_s <= previous);
      previous = t.compute_s;
    }
  }

  TEST_CASE("twice the global batch (twice the micro-batches) is about twice the compute") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    for (int zero : {0, 1, 2, 3}) {
      CAPTURE(zero);
      const double t8 = estimate_step_time(m, fsdp(8, 8, zero, Precision::amp_bf16), c).compute_s;
      const double t16 = estimate_step_time(m, fsdp(8, 16, zero, Precision::amp_bf16), c).compute_s;
      const double t32 = estimate_step_time(m, fsdp(8, 32, zero, Precision::amp_bf16), c).compute_s;
      CHECK(t16 / t8 == doctest::Approx(2.0).epsilon(0.05));
      CHECK(t32 / t16 == doctest::Approx(2.0).epsilon(0.05));
    }
  }

  TEST_CASE("throughput: tokens/s × step = global batch × seq; the seed case's MFU is in (0, 1]") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    const Prediction p = predict(m, fsdp(8, 8, 3, Precision::pure_bf16), c);
    check_parts_add_up(p.time);
    // 8 sequences × 2048 tokens = 16384 tokens per step.
    CHECK(p.throughput.tokens_per_s * p.time.step_s == doctest::Approx(8.0 * 2048));
    CHECK(p.throughput.tokens_per_s_per_gpu * 8 == doctest::Approx(p.throughput.tokens_per_s));
    CHECK(p.throughput.mfu > 0);
    CHECK(p.throughput.mfu <= 1);
    CHECK(p.throughput.hfu >= p.throughput.mfu);
    // A800: 312 dense bf16 TFLOPS, the ceiling of every rank's model FLOPs rate.
    CHECK(p.throughput.model_tflops_per_gpu <= 312.0);
    CHECK(p.throughput.mfu == doctest::Approx(p.throughput.model_tflops_per_gpu / 312.0));
    // Model FLOPs ≥ 6 Ψ per token (Kaplan et al. 2020; attention adds to it): the step cannot be faster than
    // 6 · 8.32e9 · 16384 / (8 × 312e12) = 0.33 s.
    const double psi = static_cast<double>(count_params(m).total);
    CHECK(p.time.step_s >= 6 * psi * 16384 / (8 * 312e12));
  }

  TEST_CASE("DDP all-reduce across nodes: a slow network is exposed, a fast one mostly hidden") {
    // gpt-1.7b with DDP on 2 nodes of 8 GPUs: every rank all-reduces its bf16 gradients (2Ψ bytes) over 16 ranks
    // that span both nodes.
    const ModelSpec m = presets().model("gpt-1.7b");
    ClusterSpec slow = presets().cluster("dgx-a100-80g");
    ClusterSpec fast = slow;
    slow.inter.nic_gbps = 1;    // 8 × 1 Gb/s per node = 1 GB/s
    fast.inter.nic_gbps = 400;  // 8 × NDR 400
    const Strategy s = fsdp(16, 16, 0, Precision::pure_bf16);
    validate_strategy(s, m, slow);
    const StepTime ts = estimate_step_time(m, s, slow), tf = estimate_step_time(m, s, fast);
    check_parts_add_up(ts);
    check_parts_add_up(tf);
    CHECK(ts.exposed_dp_s > 0);
    CHECK(tf.exposed_dp_s < ts.exposed_dp_s);
    // Lower bound: each node must receive, for each of the S = 2Ψ gradient bytes, the other node's contribution
    // (or the final sum): at least S bytes through its 1 GB/s. A ring puts 2(n−1)/n · S = 1.875 S on each
    // node's NICs, at 92 % efficiency ≈ 2.04 S / 1 GB/s; allow up to 2.5 S / (1 GB/s).
    const double grad_bytes = 2.0 * static_cast<double>(count_params(m).total);
    const double node_bytes_per_s = 8 * 1e9 / 8;
    CHECK(ts.dp_comm_total_s >= grad_bytes / node_bytes_per_s);
    CHECK(ts.dp_comm_total_s <= 2.5 * grad_bytes / node_bytes_per_s);
    // Compute (a few tens of ms) hides almost none of several seconds of traffic.
    CHECK(ts.exposed_dp_s >= 0.9 * ts.dp_comm_total_s);
    CHECK(ts.exposed_dp_s > 10 * ts.compute_s);
    // On the fast network the buckets reduce while backward computes: most of the traffic is hidden.
    CHECK(tf.exposed_dp_s < 0.5 * tf.dp_comm_total_s);
    CHECK(tf.exposed_dp_s < 0.05 * ts.exposed_dp_s);
  }

  TEST_CASE("ZeRO §7: ZeRO-1/2 move DDP's data-parallel volume, ZeRO-3 about 1.5×") {
    // On a network-bound cluster (2 nodes, 8 × 10 Gb/s per node) the DP time is proportional to the volume.
    // pure-bf16, one micro-batch per step: DDP all-reduces 2Ψ bytes of gradients, 2(n−1)/n · 2Ψ per rank;
    // ZeRO-1/2 reduce-scatter them and all-gather the 2Ψ bytes of parameters: the same (n−1)/n · 4Ψ.
    // ZeRO-3 all-gathers the parameters in forward and again in backward, and reduce-scatters the gradients:
    // 1.5× DDP (Rajbhandari et al. 2020 §7.2.2) — less the root unit (embedding + LM head, 1.05 B of llama3-8b's
    // 8.03 B) that FSDP keeps gathered from forward to backward: (3 · 6.98 + 2 · 1.05) / (2 · 8.03) = 1.435.
    const ModelSpec m = presets().model("llama3-8b");
    ClusterSpec c = presets().cluster("dgx-a100-80g");
    c.inter.nic_gbps = 10;
    auto dp_total = [&](int zero, Framework fw) {
      Strategy s = fsdp(16, 16, zero, Precision::pure_bf16);
      s.framework = fw;
      validate_strategy(s, m, c);
      return estimate_step_time(m, s, c).dp_comm_total_s;
    };
    for (Framework fw : {Framework::fsdp, Framework::deepspeed}) {
      CAPTURE(std::string(to_string(fw)));
      const double ddp = dp_total(0, fw);
      CHECK(ddp > 0);
      if (fw == Framework::deepspeed) CHECK(dp_total(1, fw) / ddp == doctest::Approx(1.0).epsilon(0.05));  // FSDP: none
      CHECK(dp_total(2, fw) / ddp == doctest::Approx(1.0).epsilon(0.05));
      const double z3 = dp_total(3, fw) / ddp;
      CHECK(z3 >= 1.35);
      CHECK(z3 <= 1.55);
    }
  }

  TEST_CASE("gradient reduce dtype: amp under FSDP reduces in fp32, DeepSpeed in the half dtype, memory unchanged") {
    // The rule itself (precision.hpp precision_grad_reduce_dtype).
    CHECK(precision_grad_reduce_dtype(Precision::amp_bf16, true) == DType::fp32);
    CHECK(precision_grad_reduce_dtype(Precision::amp_bf16, false) == DType::bf16);
    CHECK(precision_grad_reduce_dtype(Precision::amp_fp16, false) == DType::fp16);
    CHECK(precision_grad_reduce_dtype(Precision::pure_bf16, true) == DType::bf16);      // PURE reduces in bf16
    CHECK(precision_grad_reduce_dtype(Precision::megatron_bf16, false) == DType::fp32);  // fp32 main grads
    CHECK(framework_traits(Framework::fsdp).amp_grads_reduced_in_fp32);
    CHECK_FALSE(framework_traits(Framework::deepspeed).amp_grads_reduced_in_fp32);
    // One node of 8 A100s, llama3-8b ZeRO-3, 2 micro-batches reduced each (FSDP's default): amp-bf16 and
    // pure-bf16 gather the same bf16 parameters, so their DP totals differ only by the reduce-scatters, which
    // move 4 B instead of 2 B per gradient: ga · (L · [RS(4B) − RS(2B)] + [RS(4R) − RS(2R)]), B = one block's
    // parameters, R = the root unit's (embedding, final norm, LM head).
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    // FSDP1 (flat parameters: no FSDP2 copy-in beside the reduce-scatter, so the difference is the wire alone).
    Strategy amp = fsdp(8, 16, 3, Precision::amp_bf16), pure = fsdp(8, 16, 3, Precision::pure_bf16);
    amp.framework = pure.framework = Framework::fsdp1;
    CHECK(framework_traits(Framework::fsdp1).amp_grads_reduced_in_fp32);
    validate_strategy(amp, m, c);
    const StageParams sp = stage_params(m, amp, 0);
    const GroupLayout g{8, 8, 1};
    auto rs = [&](double bytes) { return collective_time_s(c, Collective::reduce_scatter, bytes, g); };
    const double block = static_cast<double>(sp.block_params), root = static_cast<double>(sp.root_unit());
    const double expected = 2 * (static_cast<double>(sp.layers) * (rs(4 * block) - rs(2 * block)) + rs(4 * root) -
                                 rs(2 * root));
    const StepTime ta = estimate_step_time(m, amp, c), tp = estimate_step_time(m, pure, c);
    CHECK(expected > 0);
    CHECK(ta.dp_comm_total_s - tp.dp_comm_total_s == doctest::Approx(expected).epsilon(1e-9));
    // Under DeepSpeed the same amp-bf16 step moves what pure-bf16 moves.
    Strategy ds_amp = amp, ds_pure = pure;
    ds_amp.framework = ds_pure.framework = Framework::deepspeed;
    CHECK(estimate_step_time(m, ds_amp, c).dp_comm_total_s ==
          doctest::Approx(estimate_step_time(m, ds_pure, c).dp_comm_total_s).epsilon(1e-12));
    // The memory model keeps ZeRO's 2 B amp gradients (precision.cpp).
    CHECK(precision_state_bytes(Precision::amp_bf16).grads == 2);
  }

  TEST_CASE("Megatron-Core's gradient buckets: max(40 M, 1 M x DP x CP) parameters, one bucket without overlap") {
    // core/distributed/distributed_data_parallel.py: bucket_size = max(40000000, 1000000 * dp_group.size()).
    const ClusterSpec c = presets().cluster("dgx-h100");
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    Strategy s;
    s.framework = Framework::megatron;
    s.zero = 1;
    const double psi = 7.5e9, grad_b = 2;  // a 15 B model at TP 2, bf16 main grads
    s.dp = 8, s.gpus = 16, s.tp = 2;
    CHECK(gradient_buckets(s, c, fw, psi, 0, grad_b).count == std::ceil(psi / 40e6));   // 188 buckets of 40 M
    s.dp = 1024, s.gpus = 2048;
    CHECK(gradient_buckets(s, c, fw, psi, 0, grad_b).count == std::ceil(psi / 1024e6));  // 8 buckets of 1,024 M
    s.dp = 512, s.cp = 2, s.gpus = 2048;
    CHECK(gradient_buckets(s, c, fw, psi, 0, grad_b).count == std::ceil(psi / 1024e6));  // DP x CP sizes them
    s.overlap_grad_reduce = false;  // no overlap: bucket_size None, the whole buffer at once
    CHECK(gradient_buckets(s, c, fw, psi, 0, grad_b).count == 1);
    // Other runtimes keep their fixed buckets whatever the scale: PyTorch DDP's 25 MiB.
    Strategy t = s;
    t.framework = Framework::fsdp, t.zero = 0, t.cp = 1, t.dp = 1024, t.overlap_grad_reduce.reset();
    CHECK(gradient_buckets(t, c, framework_traits(Framework::fsdp), psi, 0, grad_b).count ==
          std::ceil(psi * grad_b / (25.0 * 1024 * 1024)));
  }

  TEST_CASE("uneven pipeline split: the remainder goes to the last stages") {
    CHECK(stage_layers(42, 4) == std::vector<int64_t>{10, 10, 11, 11});
    CHECK(stage_layers(42, 5) == std::vector<int64_t>{8, 8, 8, 9, 9});
    CHECK(stage_layers(32, 4) == std::vector<int64_t>{8, 8, 8, 8});
  }

  TEST_CASE("the search's peak (estimate_peak_memory) equals estimate_memory's busiest stage") {
    struct ModelCase {
      const char* preset;
      const char* cluster;
    };
    const ModelCase models[] = {{"gpt2-8.7b", "dgx-a100-80g"},  // 42 layers, tied embeddings, learned positions
                                {"llama3-8b", "dgx-h100"},      // 32 layers, GQA, SwiGLU, untied
                                {"8b", "a800x8"}};               // the seed model, 40 layers
    int compared = 0, uneven = 0, interleaved = 0, tied_pipeline = 0, offloaded = 0;
    for (const ModelCase& mc : models) {
      const ModelSpec m = presets().model(mc.preset);
      const ClusterSpec c = presets().cluster(mc.cluster);
      for (Strategy s : memory_grid()) {
        // A learned position table is as long as the model's seq (gpt2-8.7b: 1024); --seq beyond it is refused.
        if (m.position == PositionKind::learned) s.seq = std::min(s.seq, m.seq);
        try {
          validate_strategy(s, m, c);
        } catch (const InputError&) {
          continue;  // e.g. megatron with ZeRO-2/3, or layers not divisible by pp · vpp
        }
        CAPTURE(std::string(mc.preset));
        CAPTURE(describe(s));
        const MemoryPeak fast = estimate_peak_memory(m, s, framework_traits(s.framework));
        const MemoryComponents a = estimate_memory(m, s, c).peak_stage().peak;  // a copy: the estimate is a temporary
        CHECK(std::abs(a.total() - fast.peak.total()) <= 1.0);
        CHECK(peak_bytes(a) == peak_bytes(fast.peak));
        ++compared;
        if (m.layers % s.pp != 0) ++uneven;
        if (s.vpp > 1) ++interleaved;
        if (m.tied_embeddings && s.pp > 1) ++tied_pipeline;
        if (s.offload_optimizer) ++offloaded;
      }
    }
    // The grid really covered what it is meant to.
    CHECK(compared > 500);
    CHECK(uneven > 20);
    CHECK(interleaved > 20);
    CHECK(tied_pipeline > 20);
    CHECK(offloaded > 20);
  }
}
