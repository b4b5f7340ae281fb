// Per-rank memory: published model-state figures, the seed's case, and invariants.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/predict.hpp"
#include "planner/step_time.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy data_parallel(int64_t gpus, int zero, Precision p) {
  Strategy s;
  s.gpus = gpus;
  s.dp = gpus;
  s.zero = zero;
  s.precision = p;
  s.micro_batch = 1;
  s.global_batch = gpus;
  s.seq = 2048;
  return s;
}

double states_gb(double psi, Precision p, int zero, int64_t n) { return model_states(psi, p, zero, n).model_states() / 1e9; }

}  // namespace

TEST_SUITE("memory") {
  TEST_CASE("ZeRO paper §5.1: 7.5 B parameters on 64 GPUs → 120 / 31.4 / 16.6 / 1.9 GB") {
    const double psi = 7.5e9;
    CHECK(states_gb(psi, Precision::amp_bf16, 0, 64) == doctest::Approx(120.0));
    CHECK(states_gb(psi, Precision::amp_bf16, 1, 64) == doctest::Approx(31.4).epsilon(0.002));
    CHECK(states_gb(psi, Precision::amp_bf16, 2, 64) == doctest::Approx(16.6).epsilon(0.003));
    CHECK(states_gb(psi, Precision::amp_bf16, 3, 64) == doctest::Approx(1.875));
  }

  TEST_CASE("Megatron: 18 bytes per parameter, 6 + 12/d with the distributed optimizer") {
    CHECK(states_gb(1e9, Precision::megatron_bf16, 0, 8) == doctest::Approx(18.0));
    for (int64_t d : {2, 8, 64}) CHECK(states_gb(1e9, Precision::megatron_bf16, 1, d) == doctest::Approx(6.0 + 12.0 / d));
  }

  TEST_CASE("the seed's case: 8b on 8 × A800, pure-bf16 — 99.9 / 41.6 / 27.1 / 12.5 GB of model states") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    const double expected[] = {99.9, 41.6, 27.05, 12.5};
    for (int z = 0; z <= 3; ++z) {
      CAPTURE(z);
      Strategy s = data_parallel(8, z, Precision::pure_bf16);
      // FSDP has no ZeRO-1; DeepSpeed does. The article's figures are the textbook states at the peak, which DeepSpeed's
      // accounting keeps for ZeRO-2/3 too; FSDP's peak holds only the gradients reduced by then (zero_grad frees them:
      // "FSDP2 moments" below).
      if (z >= 1) s.framework = Framework::deepspeed;
      const Prediction p = predict(m, s, c);
      const double states = p.memory.peak_stage().peak.model_states() / 1e9;
      CHECK(states == doctest::Approx(expected[z]).epsilon(0.002));
    }
    // DDP does not fit an 80 GiB A800 even before activations; ZeRO-3 fits with room to spare.
    CHECK_FALSE(predict(m, data_parallel(8, 0, Precision::pure_bf16), c).fits());
    CHECK(predict(m, data_parallel(8, 3, Precision::pure_bf16), c).fits());
  }

  TEST_CASE("components sum to the peak exactly") {
    const Prediction p = predict(presets().model("llama3-8b"), data_parallel(8, 3, Precision::amp_bf16),
                                 presets().cluster("dgx-h100"));
    int64_t sum = 0;
    for (const NamedBytes& nb : component_bytes(p.memory.peak_stage().peak)) sum += nb.bytes;
    CHECK(sum == p.peak_bytes());
    double items = 0;
    for (const MemoryItem& it : p.memory.peak_stage().items) items += it.bytes;
    CHECK(items == doctest::Approx(p.memory.peak_stage().peak.total()));
  }

  TEST_CASE("ZeRO-3 model states × N equal DDP model states") {
    for (Precision prec : {Precision::pure_bf16, Precision::amp_bf16, Precision::megatron_bf16, Precision::fp32})
      for (int64_t n : {2, 8, 1024}) {
        const double z3 = model_states(1e9, prec, 3, n).model_states() * static_cast<double>(n);
        CHECK(z3 == doctest::Approx(model_states(1e9, prec, 0, n).model_states()));
      }
  }

  TEST_CASE("under ZeRO-3 the per-rank peak never grows as data parallelism grows") {
    const ModelSpec m = presets().model("llama2-70b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    int64_t previous = INT64_MAX;
    for (int64_t gpus = 8; gpus <= 16384; gpus *= 2) {
      CAPTURE(gpus);
      const int64_t peak = predict(m, data_parallel(gpus, 3, Precision::amp_bf16), c).peak_bytes();
      CHECK(peak <= previous);
      previous = peak;
    }
  }

  TEST_CASE("no_sync under gradient accumulation keeps the unsharded gradients (FSDP), not DeepSpeed") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    Strategy s = data_parallel(8, 3, Precision::pure_bf16);
    s.global_batch = 32;  // 4 micro-batches per replica
    const double psi = static_cast<double>(count_params(m).total);
    // FSDP: the gradients held from micro-batch to micro-batch (the items that are not this backward's working set:
    // planner/memory_moments.cpp add_states); pure-bf16 keeps and reduces them in bf16.
    auto held = [&](const Strategy& st) {
      double b = 0;
      const Prediction p = predict(m, st, c);
      for (const MemoryItem& it : p.memory.peak_stage().items)
        if (it.what.rfind("unsharded gradients accumulated", 0) == 0 || it.what.rfind("sharded gradients (", 0) == 0) b += it.bytes;
      return b;
    };
    s.grad_sync = GradSync::per_step;
    CHECK(held(s) == doctest::Approx(2 * psi));
    s.grad_sync = GradSync::per_micro;
    CHECK(held(s) == doctest::Approx(2 * psi / 8));
    s.grad_sync.reset();  // PyTorch FSDP's own default: reduce every micro-batch
    CHECK(held(s) == doctest::Approx(2 * psi / 8));
    s.grad_sync.reset();
    s.framework = Framework::deepspeed;
    CHECK(predict(m, s, c).memory.peak_stage().peak.grads == doctest::Approx(2 * psi / 8));
  }

  TEST_CASE("HSDP shards within its group only") {
    const ModelSpec m = presets().model("8b");
    Strategy s = data_parallel(32, 3, Precision::amp_bf16);
    s.hsdp = 8;
    const Prediction p = predict(m, s, presets().cluster("dgx-a100-80g"));
    const double psi = static_cast<double>(count_params(m).total);
    // FSDP2 under amp: the fp32 shard (the master) and Adam's m and v, 12 B per parameter over the group of 8 (its
    // gradients exist only once reduced: planner/memory_moments.hpp).
    const MemoryComponents& peak = p.memory.peak_stage().peak;
    CHECK(peak.master + peak.optimizer == doctest::Approx(12 * psi / 8));
  }

  TEST_CASE("ZeRO-Offload moves master and Adam states to the host") {
    const ModelSpec m = presets().model("8b");
    Strategy s = data_parallel(8, 2, Precision::amp_bf16);
    s.offload_optimizer = true;
    s.framework = Framework::deepspeed;
    const Prediction p = predict(m, s, presets().cluster("dgx-a100-80g"));
    const double psi = static_cast<double>(count_params(m).total);
    CHECK(p.memory.peak_stage().peak.optimizer == 0);
    CHECK(p.memory.peak_stage().peak.master == 0);
    CHECK(p.memory.host_bytes_per_rank == doctest::Approx(psi * (4 + 8 + 4) / 8));
    CHECK(p.memory.host_bytes_per_node == doctest::Approx(8 * p.memory.host_bytes_per_rank));
  }

  TEST_CASE("Megatron's precision-aware optimizer: 16-bit master remainders in bf16, bf16 Adam moments") {
    // amp-bf16 (2 + 2 + 4 + 8 B): the remainders halve the master copy only without FP8 (Megatron keeps the fp32
    // master itself under current-scaling FP8: optimizer_config.py); bf16 moments halve m and v.
    Strategy s = data_parallel(8, 1, Precision::amp_bf16);
    s.framework = Framework::megatron;
    s.precision_aware_optimizer = true;
    StateBytes b = strategy_state_bytes(s);
    CHECK(b.params == 2);
    CHECK(b.grads == 2);
    CHECK(b.master == 2);
    CHECK(b.optimizer == 8);
    s.bf16_adam_moments = true;
    CHECK(strategy_state_bytes(s).total() == doctest::Approx(2 + 2 + 2 + 4));
    s.fp8 = Fp8Recipe::mxfp8;
    CHECK(strategy_state_bytes(s).master == 4);  // the DeepSeek recipes' case: 2 + 2 + 4 + 4
    s.fp8 = Fp8Recipe::off;
    s.precision = Precision::amp_fp16;  // the remainders exist for bf16 weights only
    CHECK(strategy_state_bytes(s).master == 4);
    CHECK(strategy_state_bytes(s).optimizer == 4);
    // In the per-rank memory: ZeRO-1 over 8, an 8B model: master 2/8 and Adam 4/8 B per parameter.
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("dgx-a100-80g");
    s.precision = Precision::amp_bf16;
    const double psi = static_cast<double>(count_params(m).total);
    const Prediction p = predict(m, s, c);
    CHECK(p.memory.peak_stage().peak.master == doctest::Approx(psi * 2 / 8));
    CHECK(p.memory.peak_stage().peak.optimizer == doctest::Approx(psi * 4 / 8));
    // What the runtime refuses: other runtimes, bf16 moments without the optimizer, a policy with no master copy.
    Strategy other = s;
    other.framework = Framework::fsdp;
    other.zero = 3;
    CHECK_THROWS_AS(predict(m, other, c), InputError);
    Strategy lone = s;
    lone.precision_aware_optimizer = false;
    CHECK_THROWS_AS(predict(m, lone, c), InputError);
    Strategy pure = s;
    pure.precision = Precision::pure_bf16;
    pure.bf16_adam_moments = false;
    CHECK_THROWS_AS(predict(m, pure, c), InputError);
  }

  TEST_CASE("--loss fused: flash-attn's keeps the logits and their gradient; Megatron's (Transformer Engine) one copy") {
    // TE's cross_entropy_backward writes the gradient into the logits' buffer (transformer_engine/pytorch/triton/
    // cross_entropy.py): T·V bf16 elements on the last stage, against 2 copies for flash-attn's CrossEntropyLoss and
    // 6 B per element for Megatron's unfused vocab-parallel loss (bf16 logits + fp32 softmax).
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy s = data_parallel(8, 1, Precision::amp_bf16);
    s.framework = Framework::megatron;
    s.seq = 4096;
    const double elements = 4096.0 * static_cast<double>(model_padded_vocab(m));
    CHECK(predict(m, s, c).memory.peak_stage().peak.logits == doctest::Approx(6 * elements));
    s.loss = LossKind::fused;
    CHECK(predict(m, s, c).memory.peak_stage().peak.logits == doctest::Approx(2 * elements));
    CHECK(logits_bytes(m, s, framework_traits(Framework::fsdp)) == doctest::Approx(4 * elements));
  }

  TEST_CASE("--offload-activations: N layers' saved tensors on the host, the copies exposed only beyond the compute") {
    const ModelSpec m = presets().model("llama3-70b");  // 80 layers
    const ClusterSpec c = presets().cluster("gb200-nvl72");
    Strategy s = data_parallel(64, 3, Precision::amp_bf16);
    s.framework = Framework::megatron;
    s.micro_batch = 2;
    s.global_batch = 128;
    s.seq = 8192;
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    const double per_block = block_activation_bytes(m, s, fw);
    const Prediction before = predict(m, s, c);
    s.offload_activation_layers = 40;  // Megatron-Bridge's Llama 3 70B GB200 recipe
    const Prediction after = predict(m, s, c);
    CHECK(before.memory.peak_stage().peak.activations - after.memory.peak_stage().peak.activations ==
          doctest::Approx(40 * per_block));
    CHECK(after.memory.host_activation_bytes_per_rank == doctest::Approx(40 * per_block));
    CHECK(after.memory.host_bytes_per_rank == doctest::Approx(40 * per_block));
    // NVLink-C2C (450 GB/s a way) moves a layer's 4 GB faster than the layer computes: nothing exposed. Over a slow
    // link the copy shows: forward, what outlasts the layer's forward, for 40 of 80 layers.
    const MicrobatchCosts fast = microbatch_costs(m, s, c);
    CHECK(fast.block_offload_fwd_s == 0);
    ClusterSpec slow = c;
    slow.gpu.host_link_gbps = 5;
    const MicrobatchCosts slowed = microbatch_costs(m, s, slow);
    CHECK(slowed.block_offload_fwd_s > 0);
    CHECK(slowed.block_offload_fwd_s == doctest::Approx(0.5 * (per_block / 5e9 - (fast.block_fwd_s - fast.block_host_gap_s))).epsilon(1e-6));
    // Megatron-Core's refusals: PP, recomputation, every layer, another runtime.
    auto refused = [&](Strategy bad) {
      try {
        predict(m, bad, c);
      } catch (const InputError&) {
        return true;
      }
      return false;
    };
    Strategy pp = s;
    pp.pp = 2, pp.dp = 32;
    CHECK(refused(pp));
    Strategy rc = s;
    rc.recompute = Recompute::full;
    CHECK(refused(rc));
    Strategy all = s;
    all.offload_activation_layers = 80;
    CHECK(refused(all));
    Strategy fsdp = s;
    fsdp.framework = Framework::fsdp;
    CHECK(refused(fsdp));
    // plan searches only what Megatron runs with it: no pipeline, no recomputation.
    const auto plan = shardplan::test::run_cli("plan --preset llama3-70b --gpus 64 --cluster gb200-nvl72 --framework "
                                               "megatron --offload-activations 40 --max-hbm-fraction 1.0 "
                                               "--simulate-top 0 --format json");
    CAPTURE(plan.err);
    REQUIRE(plan.exit_code == 0);
    const nlohmann::json planned = nlohmann::json::parse(plan.out);
    REQUIRE(!planned["candidates"].empty());
    for (const auto& cand : planned["candidates"]) {
      CHECK(cand["config"]["pp"] == 1);
      CHECK(cand["config"]["recompute"] == "none");
      CHECK(cand["config"]["offload_activation_layers"] == 40);
    }
  }

  TEST_CASE("pipeline: the first stage is busiest under 1F1B; TP divides the states") {
    const ModelSpec m = presets().model("gpt-22b");
    Strategy s;
    s.gpus = 32;
    s.tp = 8;
    s.pp = 4;
    s.dp = 1;
    s.zero = 0;
    s.precision = Precision::megatron_bf16;
    s.framework = Framework::megatron;
    s.micro_batch = 1;
    s.global_batch = 16;
    s.seq = 2048;
    s.recompute = Recompute::selective;
    s.sp = true;
    const Prediction p = predict(m, s, presets().cluster("dgx-a100-80g"));
    REQUIRE(p.memory.stages.size() == 4);
    CHECK(p.memory.busiest == 0);
    const MemoryComponents& first = p.memory.stages[0].peak;
    const MemoryComponents& last = p.memory.stages[3].peak;
    CHECK(first.activations > 3.5 * (last.activations - 0.0));  // 4 micro-batches in flight vs 1
    CHECK(last.logits > 0);
    CHECK(first.logits == 0);
  }

  TEST_CASE("the optimizer step can be the peak when activations are tiny") {
    const ModelSpec m = presets().model("2b");
    Strategy s = data_parallel(1, 0, Precision::fp32);
    s.seq = 16;
    const Prediction p = predict(m, s, presets().cluster("dgx-a100-80g"));
    CHECK(p.memory.peak_stage().peak_phase == MemoryPhase::optimizer_step);
  }

  TEST_CASE("Megatron-FSDP: the loss's logits or the first backward's buffers, not both; the non-unit parameters kept") {
    // Llama 3 8B on 16 H100 at ZeRO-3 under megatron, seq 4096, no recomputation: Megatron's unfused loss holds 6 B
    // per logit, 4096 × 128,256 × 6 = 3.15 GB, more than two gathered blocks and two blocks' unsharded gradients
    // (218 M parameters a block, 2 B each: 0.87 GB each pair, 1.74 GB in all): the peak is the loss's, without the
    // blocks' buffers. With Transformer Engine's fused loss (2 B per logit, 1.05 GB) the first backward's buffers win
    // and the logits are gone.
    const ModelSpec m = presets().model("llama3-8b");
    Strategy s = data_parallel(16, 3, Precision::amp_bf16);
    s.framework = Framework::megatron;
    s.recompute = Recompute::none;
    s.seq = 4096;
    auto has = [](const StageMemory& st, const std::string& what) {
      for (const MemoryItem& i : st.items)
        if (i.what.find(what) != std::string::npos) return true;
      return false;
    };
    const StageMemory loss = predict(m, s, presets().cluster("dgx-h100")).memory.peak_stage();
    CHECK(loss.peak_phase == MemoryPhase::loss_backward);
    CHECK(has(loss, "logits and cross-entropy"));
    CHECK_FALSE(has(loss, "gathered block parameters"));
    CHECK_FALSE(has(loss, "awaiting reduce-scatter"));
    CHECK(has(loss, "gathered root unit"));  // embedding, final norm, LM head: kept for the step
    CHECK(has(loss, "unsharded root-unit gradients"));
    s.loss = LossKind::fused;
    const StageMemory block = predict(m, s, presets().cluster("dgx-h100")).memory.peak_stage();
    CHECK(block.peak_phase == MemoryPhase::block_backward);
    // The first backward (block 31), with its own unit's unsharded gradients (0.44 GB): the second would hold both
    // units' (unsharded_grad_units 2), but by then block 31 has freed its saved activations, more than a unit's grads.
    CHECK(block.peak_block == 31);
    CHECK_FALSE(has(block, "logits and cross-entropy"));
    CHECK(has(block, "gathered block parameters"));
    CHECK(has(block, "awaiting reduce-scatter"));
    CHECK(block.peak.total() < loss.peak.total());
    // Under full recomputation a block saves only its input (4096 × 4096 × 2 B = 34 MB): the second backward, holding
    // both units' gradients less that, is the moment (block 30), and its ledger counts one block's set fewer.
    s.recompute = Recompute::full;
    const StageMemory second = predict(m, s, presets().cluster("dgx-h100")).memory.peak_stage();
    CHECK(second.peak_phase == MemoryPhase::block_backward);
    CHECK(second.peak_block == 30);
    CHECK(has(second, "less 1 block through its backward"));
    CHECK(has(second, "unsharded gradients of 2 units"));
  }

  TEST_CASE("DeepSpeed's step casts the gradient partition to fp32 (ZeRO-3: one sub-group at a time)") {
    // stage_1_and_2.py step: the bf16 partition's gradients flattened and cast for the fp32 optimizer, 4Ψ/N; on 2
    // ranks with seq 16 it exceeds the 1 GB reduce bucket of forward/backward, so the step is the peak.
    const ModelSpec m = presets().model("2b");
    Strategy s = data_parallel(2, 1, Precision::amp_bf16);
    s.framework = Framework::deepspeed;
    s.seq = 16;
    const Prediction p = predict(m, s, presets().cluster("dgx-h100"));
    const StageMemory& st = p.memory.peak_stage();
    CHECK(st.peak_phase == MemoryPhase::optimizer_step);
    const double psi = static_cast<double>(count_params(m).total);
    double copy = 0;
    for (const MemoryItem& it : st.items)
      if (it.what.find("cast to fp32") != std::string::npos) copy += it.bytes;
    CHECK(copy == doctest::Approx(4 * psi / 2));
    // ZeRO-3 casts sub_group_size = 1e9 elements at a time: 4 GB at most; fp32 gradients need no copy.
    const FrameworkTraits ds = framework_traits(Framework::deepspeed);
    s.zero = 3;
    CHECK(optimizer_grad_copy_bytes(s, ds, 8.8e9) == doctest::Approx(4e9));
    CHECK(optimizer_grad_copy_bytes(s, ds, 1e8) == doctest::Approx(4e8));
    s.precision = Precision::megatron_bf16;
    CHECK(optimizer_grad_copy_bytes(s, ds, 1e8) == 0);
    CHECK(optimizer_grad_copy_bytes(s, framework_traits(Framework::megatron), 1e8) == 0);
  }

  TEST_CASE("bad strategies are refused with the flag named") {
    const ModelSpec m = presets().model("8b");
    const ClusterSpec c = presets().cluster("a800x8");
    auto message = [&](Strategy s) -> std::string {
      try {
        predict(m, s, c);
      } catch (const InputError& e) {
        return e.what();
      }
      return "";
    };
    Strategy s = data_parallel(8, 3, Precision::amp_bf16);
    s.tp = 3;
    s.dp = 8;
    CHECK(message(s).find("--gpus") != std::string::npos);
    s.gpus = 24;
    CHECK(message(s).find("--tp 3 must divide") != std::string::npos);
    s = data_parallel(8, 3, Precision::amp_bf16);
    s.micro_batch = 3;
    s.global_batch = 16;
    CHECK(message(s).find("--micro-batch") != std::string::npos);
    s = data_parallel(64, 3, Precision::amp_bf16);
    s.pp = 64;
    s.dp = 1;
    CHECK(message(s).find("--pp 64 exceeds") != std::string::npos);
    s = data_parallel(8, 3, Precision::pure_bf16);
    CHECK(message(s).empty());
    CHECK_THROWS_AS(predict(m, s, presets().cluster("dgx-2-v100")), InputError);  // V100 has no bf16
  }
}
