// Muon as Megatron-Core runs it (planner/optimizer.hpp): which parameters it takes, its states, its Newton–Schulz
// work and workspace, and what the runtimes refuse.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/optimizer.hpp"
#include "planner/predict.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

Strategy megatron_dp(int64_t gpus, OptimizerKind o) {
  Strategy s;
  s.gpus = gpus;
  s.dp = gpus;
  s.zero = 1;
  s.framework = Framework::megatron;
  s.precision = Precision::amp_bf16;
  s.micro_batch = 1;
  s.global_batch = gpus * 8;
  s.seq = 4096;
  s.optimizer = o;
  return s;
}

// Σ count × rows × cols / split over the matrices Muon takes: what one rank of the stage holds of them.
double enumerated_params(const std::vector<MuonMatrix>& xs) {
  double n = 0;
  for (const MuonMatrix& x : xs)
    n += x.count * static_cast<double>(x.rows) * static_cast<double>(x.cols) / static_cast<double>(x.split);
  return n;
}

}  // namespace

TEST_SUITE("optimizer_muon") {
  TEST_CASE("Newton-Schulz FLOPs: 5 steps of X·Xᵀ, A·A and B·X on the shorter side") {
    // Llama 3 8B's down projection [4096, 14336]: m = 4096, n = 14336.
    const double m = 4096, n = 14336;
    CHECK(newton_schulz_flops(4096, 14336) == doctest::Approx(5 * (4 * m * m * n + 2 * m * m * m)));
    CHECK(newton_schulz_flops(14336, 4096) == newton_schulz_flops(4096, 14336));  // transposed first
    CHECK(newton_schulz_flops(4096, 4096, 1) == doctest::Approx(6 * m * m * m));
    // torch.optim.Muon's step on a [256, 1024] and a [96, 640] matrix, as FlopCounterMode counts it
    // (bench/torch/muon_check.py): the same products.
    CHECK(newton_schulz_flops(256, 1024) == 1509949440.0);
    CHECK(newton_schulz_flops(96, 640) == 126812160.0);
  }

  TEST_CASE("the matrices enumerated are every parameter but the embedding, the head and the 1-D ones") {
    // Dense (Llama 3 8B, split Q/K/V) at TP 1 and 4, and DeepSeek-V3 (MLA, router, shared and routed experts, the
    // MTP module on the last stage) at EP 8 and TP 2: the shapes' elements sum to muon_matrix_params exactly.
    const ModelSpec llama = presets().model("llama3-8b");
    for (int64_t tp : {1, 4}) {
      Strategy s = megatron_dp(8, OptimizerKind::muon);
      s.tp = tp;
      s.dp = 8 / tp;
      const StageParams st = stage_params(llama, s, 0);
      CHECK(enumerated_params(muon_stage_matrices(llama, s, st)) == doctest::Approx(muon_matrix_params(st)).epsilon(1e-12));
    }
    // Llama 3 8B whole: 8,030,261,248 parameters less 2 × 525,336,576 (embedding, head) and 32 × 2 × 4096 + 4096 norms.
    const StageParams whole = stage_params(llama, megatron_dp(8, OptimizerKind::muon), 0);
    CHECK(muon_matrix_params(whole) == doctest::Approx(8030261248.0 - 2 * 525336576.0 - (32 * 2 * 4096 + 4096)));
    const ModelSpec dsv3 = presets().model("deepseek-v3");
    Strategy s = megatron_dp(64, OptimizerKind::muon);
    s.tp = 2;
    s.pp = 4;
    s.ep = 8;
    s.dp = 8;
    for (int64_t stage : {0, 3}) {
      const StageParams st = stage_params(dsv3, s, stage);
      CHECK(enumerated_params(muon_stage_matrices(dsv3, s, st)) == doctest::Approx(muon_matrix_params(st)).epsilon(1e-12));
    }
    CHECK(stage_params(dsv3, s, 3).mtp > 0);  // the last stage's MTP module is among them
  }

  TEST_CASE("states: one fp32 momentum per matrix parameter, Adam's two moments for the rest, sharded by ZeRO-1") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    const double matrices = 8030261248.0 - 2 * 525336576.0 - (32 * 2 * 4096 + 4096);
    const double rest = 8030261248.0 - matrices;
    const Prediction adam = predict(m, megatron_dp(8, OptimizerKind::adamw), c);
    const Prediction muon = predict(m, megatron_dp(8, OptimizerKind::muon), c);
    CHECK(adam.memory.peak_stage().peak.optimizer == doctest::Approx(8030261248.0 * 8 / 8));
    CHECK(muon.memory.peak_stage().peak.optimizer == doctest::Approx((matrices * 4 + rest * 8) / 8));
    CHECK(muon.memory.peak_stage().peak.master == adam.memory.peak_stage().peak.master);  // fp32 main params alike
    Strategy replicated = megatron_dp(8, OptimizerKind::muon);
    replicated.zero = 0;  // plain Muon: every rank holds every state
    CHECK(predict(m, replicated, c).memory.peak_stage().peak.optimizer == doctest::Approx(matrices * 4 + rest * 8));
  }

  TEST_CASE("time: the layer-wise optimizer splits the Newton-Schulz work over data-parallel ranks; TP duplicates it") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy zero1 = megatron_dp(8, OptimizerKind::muon);
    Strategy zero0 = zero1;
    zero0.zero = 0;
    const StageParams st = stage_params(m, zero1, 0);
    // 224 matrices over 8 owners, none alone above the share: exactly an eighth.
    CHECK(muon_step_s(m, zero0, c, st) == doctest::Approx(8 * muon_step_s(m, zero1, c, st)));
    CHECK(muon_step_s(m, megatron_dp(8, OptimizerKind::adamw), c, st) == 0);
    // The Newton-Schulz GEMMs alone: 32 blocks' FLOPs over 8 ranks at no more than the bf16 peak.
    double flops = 0;
    for (const MuonMatrix& x : muon_stage_matrices(m, zero1, st)) flops += x.count * newton_schulz_flops(x.rows, x.cols);
    CHECK(flops == doctest::Approx(32 * (2 * newton_schulz_flops(4096, 4096) + 2 * newton_schulz_flops(1024, 4096) +
                                         newton_schulz_flops(28672, 4096) + newton_schulz_flops(4096, 14336))));
    CHECK(muon_step_s(m, zero1, c, st) > flops / 8 / peak_flops(c.gpu, DType::bf16));
    // TP 2 (duplicated mode): each TP rank orthogonalizes whole matrices, and half as many ranks share them.
    Strategy tp2 = zero1;
    tp2.tp = 2;
    tp2.dp = 4;
    CHECK(muon_step_s(m, tp2, c, stage_params(m, tp2, 0)) > 2 * muon_step_s(m, zero1, c, st));
    // In the step: the optimizer's share is the Newton-Schulz time and a momentum pass lighter than Adam's (one state
    // read and written, not two); nothing else moves.
    const Prediction adam = predict(m, megatron_dp(8, OptimizerKind::adamw), c);
    const Prediction muon = predict(m, zero1, c);
    CHECK(muon.time.compute_s == adam.time.compute_s);
    CHECK(muon.time.optimizer_s > muon_step_s(m, zero1, c, st));
    CHECK(muon.time.optimizer_s < adam.time.optimizer_s + muon_step_s(m, zero1, c, st));
    CHECK(muon.time.step_s - adam.time.step_s == doctest::Approx(muon.time.optimizer_s - adam.time.optimizer_s));
  }

  TEST_CASE("--muon-tp-mode: distributed keeps the shards and all-reduces A; blockwise orthogonalizes each shard") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy s = megatron_dp(8, OptimizerKind::muon);
    s.tp = 2;
    s.dp = 4;
    const StageParams st = stage_params(m, s, 0);
    const double duplicated = muon_step_s(m, s, c, st);
    s.muon_tp_mode = MuonTpMode::distributed;
    const double distributed = muon_step_s(m, s, c, st);
    s.muon_tp_mode = MuonTpMode::blockwise;
    const double blockwise = muon_step_s(m, s, c, st);
    // Half the GEMM work of the large MLP matrices on each TP rank, no fp32 gather; blockwise drops the all-reduces.
    CHECK(distributed < duplicated);
    CHECK(blockwise < distributed);
    // The workspace: the largest local X is fc1's shard, [4096, 28672 / 2] transposed (6 B an element), either way.
    CHECK(muon_workspace_bytes(m, s, st) == doctest::Approx(6 * 4096.0 * 14336));
    s.muon_tp_mode = MuonTpMode::distributed;
    CHECK(muon_workspace_bytes(m, s, st) == doctest::Approx(6 * 4096.0 * 14336));
    // Without TP every mode is the whole matrix.
    Strategy tp1 = megatron_dp(8, OptimizerKind::muon);
    const StageParams st1 = stage_params(m, tp1, 0);
    const double whole = muon_step_s(m, tp1, c, st1);
    tp1.muon_tp_mode = MuonTpMode::blockwise;
    CHECK(muon_step_s(m, tp1, c, st1) == doctest::Approx(whole));
    // The mode needs Muon.
    Strategy adam = megatron_dp(8, OptimizerKind::adamw);
    adam.muon_tp_mode = MuonTpMode::distributed;
    CHECK(muon_refusal(adam).find("--muon-tp-mode distributed without --optimizer muon") != std::string::npos);
  }

  TEST_CASE("the Newton-Schulz workspace of the largest matrix, held during the optimizer step") {
    const ModelSpec m = presets().model("llama3-8b");
    Strategy s = megatron_dp(8, OptimizerKind::muon);
    // TP 1: Llama 3 8B's fused gate/up [28672, 4096]: the fp32 normalised copy and its bf16 cast, 6 B an element.
    const double fc1 = 28672.0 * 4096;
    CHECK(muon_workspace_bytes(m, s, stage_params(m, s, 0)) == doctest::Approx(6 * fc1));
    // TP 2: the gathered fp32 shards and their concatenation besides (8 B an element).
    s.tp = 2;
    s.dp = 4;
    CHECK(muon_workspace_bytes(m, s, stage_params(m, s, 0)) == doctest::Approx(14 * fc1));
    s.tp = 1;
    s.dp = 8;
    CHECK(muon_workspace_bytes(m, megatron_dp(8, OptimizerKind::adamw), stage_params(m, s, 0)) == 0);
    // With short sequences the optimizer step holds the peak: predict names it with the workspace, and the simulator
    // plays the same moment with the same bytes.
    const ClusterSpec c = presets().cluster("dgx-h100");
    s.tp = 2;
    s.dp = 4;
    s.sp = true;
    s.seq = 256;
    const sim::SimResult r = sim::simulate(m, s, c);
    const StageMemory& st = r.analytic.memory.peak_stage();
    REQUIRE(st.peak_phase == MemoryPhase::optimizer_step);
    double workspace = 0;
    for (const MemoryItem& item : st.items)
      if (item.what.find("Newton-Schulz") != std::string::npos) workspace += item.bytes;
    CHECK(workspace == doctest::Approx(14 * fc1));
    CHECK(r.peak_stage().moment == MemoryPhase::optimizer_step);
    CHECK(r.peak_stage().peak_bytes == doctest::Approx(st.peak.total()).epsilon(1e-9));
  }

  TEST_CASE("what the runtimes refuse: other frameworks, Megatron-FSDP, fp16, offload, the precision-aware optimizer") {
    Strategy s = megatron_dp(8, OptimizerKind::muon);
    CHECK(muon_refusal(s).empty());
    Strategy fsdp = s;
    fsdp.framework = Framework::fsdp;
    fsdp.zero = 3;
    CHECK(muon_refusal(fsdp).find("--framework fsdp") != std::string::npos);
    Strategy mfsdp = s;
    mfsdp.zero = 3;
    CHECK(muon_refusal(mfsdp).find("Megatron-FSDP") != std::string::npos);
    Strategy fp16 = s;
    fp16.precision = Precision::amp_fp16;
    CHECK(muon_refusal(fp16).find("fp16") != std::string::npos);
    Strategy offload = s;
    offload.offload_optimizer = true;
    CHECK(!muon_refusal(offload).empty());
    Strategy aware = s;
    aware.precision_aware_optimizer = true;
    CHECK(!muon_refusal(aware).empty());
    const ModelSpec m = presets().model("llama3-8b");
    CHECK_THROWS_AS(predict(m, mfsdp, presets().cluster("dgx-h100")), InputError);
    CHECK(muon_refusal(megatron_dp(8, OptimizerKind::adamw)).empty());
  }

  TEST_CASE("CLI: --optimizer muon predicts, plans only what Megatron runs with it, emits it; bad input is one line") {
    using shardplan::test::refuses_naming;
    using shardplan::test::run_cli;
    const auto r = run_cli("predict --preset llama3-8b --gpus 8 --framework megatron --optimizer muon --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["config"]["optimizer"] == "muon");
    const auto text = run_cli("predict --preset llama3-8b --gpus 8 --framework megatron --optimizer muon --no-color");
    CHECK(text.out.find("ZeRO-1 · Muon (layer-wise distributed, TP mode duplicated)") != std::string::npos);
    CHECK(text.out.find("Muon momentum (fp32) of the matrices") != std::string::npos);
    CHECK(text.out.find("Muon: Megatron-Core runs it with ZeRO-0 and ZeRO-1 only") != std::string::npos);
    CHECK(refuses_naming(run_cli("predict --preset llama3-8b --gpus 8 --optimizer muon"), "--optimizer muon"));
    CHECK(refuses_naming(run_cli("predict --preset llama3-8b --gpus 8 --framework megatron --optimizer lion"),
                         "--optimizer"));
    CHECK(refuses_naming(run_cli("predict --preset llama3-8b --gpus 8 --framework megatron --muon-tp-mode blockwise"),
                         "--muon-tp-mode"));
    CHECK(refuses_naming(run_cli("predict --preset llama3-8b --gpus 8 --framework megatron --optimizer muon "
                                 "--muon-tp-mode rowwise"),
                         "--muon-tp-mode"));
    const auto plan = run_cli("plan --preset llama3-8b --gpus 16 --framework megatron --optimizer muon --format json");
    REQUIRE(plan.exit_code == 0);
    const auto pj = nlohmann::json::parse(plan.out);
    REQUIRE(!pj["candidates"].empty());
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "shardplan_muon_emit";
    std::filesystem::remove_all(dir);
    REQUIRE(run_cli("plan --preset llama3-8b --gpus 16 --framework megatron --optimizer muon --simulate-top 0 --emit " +
                    dir.string()).exit_code == 0);
    CHECK(shardplan::test::read_all(dir / "megatron_args.sh").find("--optimizer muon") != std::string::npos);
    CHECK(shardplan::test::read_all(dir / "README.md").find("pip install emerging-optimizers") != std::string::npos);
    std::filesystem::remove_all(dir);
    for (const auto& c : pj["candidates"]) {
      CHECK(c["config"]["optimizer"] == "muon");
      CHECK(c["config"]["zero"].get<int>() <= 1);  // no Megatron-FSDP under Muon
    }
  }
}
