// Expert parallelism (issue 17, --ep): expert shards over the EP ranks, their states over the expert-data-parallel
// group, the all-to-all's bytes and price, the search choosing EP, the simulator agreeing, and the refusals.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "io/preset_store.hpp"
#include "planner/batch.hpp"
#include "planner/comm_cost.hpp"
#include "planner/error.hpp"
#include "planner/framework_support.hpp"
#include "planner/groups.hpp"
#include "planner/memory.hpp"
#include "planner/moe.hpp"
#include "planner/moe_costs.hpp"
#include "planner/partition.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "planner/step_time.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}
// Megatron-Core, ZeRO-1 (distributed optimizer), megatron-bf16, one sequence of 4096 tokens per replica.
Strategy megatron_on(int64_t gpus, int64_t tp, int64_t ep) {
  Strategy s;
  s.gpus = gpus;
  s.tp = tp;
  s.sp = tp > 1;  // Megatron-Core trains MoE under TP only with SP (framework_support.hpp tp_needs_sp)
  s.dp = gpus / tp;
  s.ep = ep;
  s.zero = 1;
  s.framework = Framework::megatron;
  s.precision = Precision::megatron_bf16;
  s.micro_batch = 1;
  s.global_batch = s.dp;
  s.seq = 4096;
  return s;
}
}  // namespace

TEST_SUITE("expert parallel") {
  TEST_CASE("expert shards over the EP ranks sum to the routed experts; active parameters do not change") {
    const ModelSpec m = store().model("mixtral-8x7b");
    const ParamCounts whole = count_params(m);
    // One expert: SwiGLU gate, up, down of 4096 × 14336 = 3 · 58,720,256 = 176,160,768 parameters.
    REQUIRE(expert_params(m) == 176'160'768);
    for (int64_t ep : {1, 2, 4, 8}) {
      CAPTURE(ep);
      const StageParams st = stage_params(m, megatron_on(8, 1, ep), 0);
      // 8/ep experts per MoE layer, 32 MoE layers.
      CHECK(st.block_routed == 8 / ep * 176'160'768);
      CHECK(st.routed_experts == 32 * (8 / ep) * int64_t{176'160'768});
      // The ep shards together hold every routed expert once: 32 · 8 · 176,160,768 = 45,097,156,608.
      CHECK(ep * st.routed_experts == 45'097'156'608);
      // The rest (attention, norms, router, embedding, head) is whole on each rank at tp 1.
      CHECK(st.total() - st.routed_experts == whole.total - 45'097'156'608);
    }
    // What one token uses is a property of the model, not of the layout.
    CHECK(active_params(m, whole) == whole.active);
  }

  TEST_CASE("routed experts' optimizer states are sharded over the expert-data-parallel group only") {
    const ModelSpec m = store().model("mixtral-8x7b");
    // 16 GPUs, tp 1: dp 16, ep 4 → expert-DP 4 (expert_data_parallel = dp / ep).
    const Strategy s = megatron_on(16, 1, 4);
    CHECK(expert_data_parallel(s) == 4);
    const StageParams st = stage_params(m, s, 0);
    const double routed = static_cast<double>(st.routed_experts);        // 2 experts × 32 layers
    const double dense = static_cast<double>(st.total()) - routed;
    const MemoryComponents ms = stage_model_states(st, s);
    // megatron-bf16 (CONTRACT.md): bf16 params 2 B and fp32 main grads 4 B replicated under ZeRO-1; fp32 master 4 B and
    // Adam 8 B sharded: the dense part over dp 16, the routed experts over expert-DP 4.
    CHECK(ms.params == doctest::Approx(2 * (dense + routed)));
    CHECK(ms.grads == doctest::Approx(4 * (dense + routed)));
    CHECK(ms.master == doctest::Approx(4 * dense / 16 + 4 * routed / 4));
    CHECK(ms.optimizer == doctest::Approx(8 * dense / 16 + 8 * routed / 4));
    // The prediction's peak carries them: master = 4 · (dense/16 + routed/4).
    const Prediction p = predict(m, s, store().cluster("dgx-h100"));
    CHECK(p.memory.peak_stage().peak.master == doctest::Approx(ms.master).epsilon(1e-9));
    // EP = dp: every expert-DP group is one rank; EP = 1: everything over dp (the textbook ZeRO-1 of model_states).
    const Strategy all = megatron_on(16, 1, 8);
    CHECK(expert_data_parallel(all) == 2);
    const StageParams one = stage_params(m, megatron_on(16, 1, 1), 0);
    const MemoryComponents ref = model_states(static_cast<double>(one.total()), Precision::megatron_bf16, 1, 16);
    CHECK(stage_model_states(one, megatron_on(16, 1, 1)).master == doctest::Approx(ref.master));
  }

  TEST_CASE("all-to-all: bytes by hand, nccl-tests bus factor (n−1)/n, one latency, NVLink vs network") {
    const ModelSpec m = store().model("mixtral-8x7b");
    const ClusterSpec c = store().cluster("dgx-h100");
    CHECK(bus_factor(Collective::all_to_all, 8) == doctest::Approx(0.875));  // 7/8
    // One micro-batch of 4096 tokens, top-2, h 4096, bf16: 4096 · 2 · 4096 · 2 = 67,108,864 bytes per rank.
    const Strategy s = megatron_on(16, 1, 8);
    const double S = moe_all_to_all_bytes(m, s);
    CHECK(S == 67'108'864.0);
    // Sequence parallelism with tp 2: each TP rank dispatches its half of the tokens.
    Strategy sp = megatron_on(16, 2, 4);
    sp.sp = true;
    CHECK(moe_all_to_all_bytes(m, sp) == 33'554'432.0);
    // EP 8 at stride 1 fills one DGX: 7/8 of S over NVLink, one base latency and one NVLink hop.
    const GroupLayout g = ep_group(s, c);
    CHECK(g.size == 8);
    CHECK(g.ranks_per_node == 8);
    const double nvlink = collective_time_s(c, Collective::all_to_all, S, g);
    CHECK(nvlink == doctest::Approx(6.6e-6 + c.intra.latency_us * 1e-6 + S * 7 / 8 / intra_node_bytes_per_s(c)));
    // For a large buffer the nccl-tests busbw of that time is the achievable NVLink rate (450 GB/s × 0.78 = 351 GB/s on
    // H100: the all-gather's, as PERFORMANCE.md says busbw compares across collectives).
    const double big = 4.0 * (1 << 30);
    CHECK(bus_bandwidth_gbps(Collective::all_to_all, 8, big, collective_time_s(c, Collective::all_to_all, big, g)) ==
          doctest::Approx(intra_node_bytes_per_s(c) / kGB).epsilon(0.001));
    // EP 16 over two DGX: half of S (the 8 peers on the other node) leaves on the NICs, the slower leg.
    const GroupLayout two = ep_group(megatron_on(16, 1, 16), c);
    CHECK(two.size == 16);
    CHECK(two.ranks_per_node == 8);
    const double across = collective_time_s(c, Collective::all_to_all, S, two);
    const double net = S * 8 / 16 / network_bytes_per_s_per_gpu(c, two);
    CHECK(across == doctest::Approx(6.6e-6 + c.inter.latency_us * 1e-6 + std::max(net, S * 7 / 16 / intra_node_bytes_per_s(c))));
    CHECK(across > 2 * nvlink);
    // EP 1 moves nothing.
    CHECK(moe_all_to_all_bytes(m, megatron_on(16, 1, 1)) == 0);
  }

  TEST_CASE("DeepEP and HybridEP send a token once per rank and once per remote NVLink domain, by hand") {
    const ModelSpec m = store().model("deepseek-v3");  // 256 experts, top-8, h 7168
    const ClusterSpec c = store().cluster("dgx-b200");
    Strategy s = megatron_on(256, 1, 32);  // EP 32: four DGX B200 of 8 ranks, 8 experts per rank, 64 per node
    s.precision = Precision::amp_bf16;
    const double S = moe_all_to_all_bytes(m, s);
    const double copy = S / 8;  // one token's hidden state, of the 4096 tokens
    CHECK(copy == 4096.0 * 7168 * 2);
    // P(a token reaches a given node's 64 experts) = 1 − C(192, 8)/C(256, 8); a given rank's 8: 1 − C(248, 8)/C(256, 8).
    double miss_node = 1, miss_rank = 1;
    for (int i = 0; i < 8; ++i) miss_node *= (192.0 - i) / (256 - i), miss_rank *= (248.0 - i) / (256 - i);
    const double net = copy * 3 * (1 - miss_node), nvlink = copy * 31 * (1 - miss_rank);
    const GroupLayout g = ep_group(s, c);
    REQUIRE(g.size == 32);
    REQUIRE(g.ranks_per_node == 8);
    const double one = exchange_time_s(c, nvlink, net, g);
    CHECK(one == doctest::Approx(6.6e-6 + c.inter.latency_us * 1e-6 +
                                 std::max(nvlink / intra_node_bytes_per_s(c), net / network_bytes_per_s_per_gpu(c, g))));
    // Four per MoE layer and micro-batch, as for NCCL's (the 58 MoE layers of 61 share them).
    s.moe_dispatcher = MoeDispatcher::hybridep;
    const MoeAllToAll flex = moe_all_to_all_time(m, s, c, 0, 0);
    CHECK(flex.total == doctest::Approx(4 * one * 58 / 61));
    // NCCL's all-to-all sends 8 · 24/32 = 6 copies per token over the network, the flex dispatchers 3 · 0.90 = 2.7.
    s.moe_dispatcher = MoeDispatcher::alltoall;
    const MoeAllToAll nccl = moe_all_to_all_time(m, s, c, 0, 0);
    CHECK(net / (S * 24 / 32) == doctest::Approx(3 * (1 - miss_node) / 6));
    CHECK(nccl.total > 2 * flex.total);
  }

  TEST_CASE("four all-to-alls per MoE layer and micro-batch; full recomputation repeats the forward two") {
    const ModelSpec m = store().model("mixtral-8x7b");  // every layer is MoE
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy s = megatron_on(16, 1, 8);
    const double one = collective_time_s(c, Collective::all_to_all, moe_all_to_all_bytes(m, s), ep_group(s, c));
    const MicrobatchCosts mb = microbatch_costs(m, s, c);
    CHECK(mb.block_ep_fwd_s == doctest::Approx(2 * one));  // dispatch + combine
    CHECK(mb.block_ep_bwd_s == doctest::Approx(2 * one));  // their gradients
    s.recompute = Recompute::full;
    CHECK(microbatch_costs(m, s, c).block_ep_bwd_s == doctest::Approx(4 * one));
    // DeepSeek-V3: 58 of its 61 layers are MoE; the per-block figure is the model's average.
    const ModelSpec ds = store().model("deepseek-v3");
    Strategy d = megatron_on(64, 1, 8);
    const double dsone = collective_time_s(c, Collective::all_to_all, moe_all_to_all_bytes(ds, d), ep_group(d, c));
    CHECK(microbatch_costs(ds, d, c).block_ep_fwd_s == doctest::Approx(2 * dsone * 58 / 61));
    // The step carries them as exposed EP communication: layers · (fwd + bwd) · micro-batches.
    const StepTime t = estimate_step_time(m, megatron_on(16, 1, 8), c);
    CHECK(t.exposed_ep_s == doctest::Approx(32 * 4 * one * static_cast<double>(grad_accum_steps(megatron_on(16, 1, 8)))));
    CHECK(t.exposed_comm_s == doctest::Approx(t.exposed_tp_s + t.exposed_pp_s + t.exposed_dp_s + t.exposed_ep_s));
  }

  TEST_CASE("DualPipe hides the all-to-alls behind the other micro-batch's compute; 1F1B does not") {
    const ModelSpec m = store().model("deepseek-v3");
    const ClusterSpec c = store().cluster("h800x8");
    Strategy s = megatron_on(2048, 1, 64);
    s.framework = Framework::torchtitan;  // torch.distributed.pipelining ScheduleDualPipeV (Megatron has no DualPipe)
    s.zero = 2;
    s.pp = 16;
    s.dp = 128;
    s.global_batch = 1920;
    s.recompute = Recompute::full;
    const MicrobatchCosts plain = microbatch_costs(m, s, c);
    s.schedule = Schedule::dualpipev;
    s.vpp = 2;
    const MicrobatchCosts dual = microbatch_costs(m, s, c);
    // The same collectives; under DualPipeV only what exceeds the block's forward + backward compute is exposed,
    // plus the overlap slowdown (step_time.hpp kOverlapComputeSlowdown) of the hidden part (moe_costs.hpp).
    CHECK(dual.block_ep_total_s == doctest::Approx(plain.block_ep_total_s));
    CHECK(plain.block_ep_fwd_s + plain.block_ep_bwd_s == doctest::Approx(plain.block_ep_total_s));
    const double total = plain.block_ep_total_s;
    const double compute = plain.block_fwd_s + plain.block_bwd_s + plain.block_recompute_s;
    const double exposed = std::max(0.0, total - compute);
    CHECK(dual.block_ep_fwd_s + dual.block_ep_bwd_s ==
          doctest::Approx(exposed + kOverlapComputeSlowdown * (total - exposed)));
    CHECK(dual.block_ep_fwd_s + dual.block_ep_bwd_s < 0.5 * total);
  }

  TEST_CASE("expert gradients are reduced over the expert-DP group, dense ones over dp") {
    const ClusterSpec c = store().cluster("dgx-h100");
    const Strategy s = megatron_on(64, 1, 8);  // dp 64, expert-DP 8 at stride 8: one rank per DGX
    const GroupLayout edp = expert_dp_group(s, c);
    CHECK(edp.size == 8);
    CHECK(edp.ranks_per_node == 1);
    const double P = 1e9;
    // All routed: one reduce-scatter over the 8-rank expert-DP group; none routed: one over the 64 ranks of dp.
    CHECK(split_dp_collective_s(s, c, Collective::reduce_scatter, P, P, 4) ==
          doctest::Approx(collective_time_s(c, Collective::reduce_scatter, 4 * P, edp)));
    CHECK(split_dp_collective_s(s, c, Collective::reduce_scatter, P, 0, 4) ==
          doctest::Approx(collective_time_s(c, Collective::reduce_scatter, 4 * P, shard_group(s, c))));
    // EP = dp: the expert-DP group is one rank, nothing to reduce for the experts.
    const Strategy full = megatron_on(8, 1, 8);
    CHECK(split_dp_collective_s(full, c, Collective::reduce_scatter, P, P, 4) == 0);
  }

  TEST_CASE("runtimes: Megatron-Core, torchtitan and DeepSpeed run EP; FSDP2, FSDP1 and the reference loop do not") {
    CHECK(ep_support(Framework::megatron).expert_parallel);
    CHECK(ep_support(Framework::torchtitan).expert_parallel);
    CHECK(ep_support(Framework::deepspeed).expert_parallel);
    CHECK_FALSE(has(ep_support(Framework::deepspeed).zero_stages, 3));  // "MoE not supported with Stage 3"
    CHECK_FALSE(ep_support(Framework::fsdp).expert_parallel);
    CHECK_FALSE(ep_support(Framework::fsdp1).expert_parallel);
    CHECK_FALSE(ep_support(Framework::reference).expert_parallel);
    Strategy s = megatron_on(16, 1, 2);
    CHECK(framework_runs(s));
    s.framework = Framework::fsdp;
    s.zero = 3;
    CHECK_FALSE(framework_runs(s));
  }

  TEST_CASE("the search picks EP for DeepSeek-V3 on 2048 H800 and prices EP-less layouts slower") {
    const ModelSpec m = store().model("deepseek-v3");
    const ClusterSpec c = store().cluster("h800x8");
    SearchSpace sp;
    sp.base.gpus = 2048;
    sp.base.seq = 4096;
    sp.base.framework = Framework::megatron;
    sp.base.precision = Precision::megatron_bf16;
    sp.batch_default = default_batch_target(4096, 2048);
    const SearchResult r = search_strategies(m, c, sp, 10);
    REQUIRE(r.recommended);
    CHECK(r.recommended->strategy.ep > 1);
    CHECK(m.experts % r.recommended->strategy.ep == 0);
    CHECK(r.recommended->strategy.dp % r.recommended->strategy.ep == 0);
    // The best layout without EP is slower than the recommendation.
    const Candidate* best_dense = nullptr;
    for (const Candidate& f : r.families)
      if (f.strategy.ep == 1 && f.within_safety() && (!best_dense || f.tokens_per_s > best_dense->tokens_per_s)) best_dense = &f;
    REQUIRE(best_dense);
    CHECK(best_dense->tokens_per_s < r.recommended->tokens_per_s);
  }

  TEST_CASE("plan under a runtime without EP says so for an MoE model, with the runtimes that have it") {
    SearchSpace sp;
    sp.base = megatron_on(64, 1, 1);
    sp.base.framework = Framework::fsdp;
    sp.base.precision = Precision::amp_bf16;
    sp.base.zero = 3;
    sp.base.global_batch = 64;
    const SearchResult r = search_strategies(store().model("mixtral-8x7b"), store().cluster("dgx-h100"), sp, 5);
    bool named = false;
    for (const NotRun& n : r.not_run)
      if (n.what == "expert parallelism") named = n.reason.find("megatron") != std::string::npos;
    CHECK(named);
    // Under Megatron-Core it is searched, not listed as not run.
    sp.base.framework = Framework::megatron;
    sp.base.zero = 1;
    sp.base.precision = Precision::megatron_bf16;
    const SearchResult mc = search_strategies(store().model("mixtral-8x7b"), store().cluster("dgx-h100"), sp, 5);
    for (const NotRun& n : mc.not_run) CHECK(n.what != "expert parallelism");
  }

  TEST_CASE("with context parallelism EP is carved from dp·cp: expert-DP = dp·cp/ep, dense states over dp·cp") {
    const ModelSpec m = store().model("mixtral-8x7b");
    // 16 GPUs, tp 1, cp 4, dp 4, seq 8192: ep 8 divides dp·cp = 16 though not dp (Megatron's rank order tp-cp-ep-dp-pp,
    // parallel_state.py: expert_data_parallel_size = world / (etp · ep · pp) = 16 / 8 = 2).
    Strategy s = megatron_on(16, 1, 8);
    s.cp = 4;
    s.dp = 4;
    s.seq = 8192;
    s.global_batch = 4;
    CHECK_NOTHROW(validate_strategy(s, m, store().cluster("dgx-h100")));
    CHECK(expert_data_parallel(s) == 2);
    const StageParams st = stage_params(m, s, 0);
    const double routed = static_cast<double>(st.routed_experts), dense = static_cast<double>(st.total()) - routed;
    // fp32 master: the dense part sharded over dp·cp = 16 ranks, each rank's 1 routed expert per layer over 2.
    CHECK(stage_model_states(st, s).master == doctest::Approx(4 * dense / 16 + 4 * routed / 2));
    // The all-to-all moves this rank's tokens: seq/cp of one sequence (8192 / 4 = 2048), top-2, h 4096, bf16.
    CHECK(moe_all_to_all_bytes(m, s) == doctest::Approx(2048.0 * 2 * 4096 * 2));
    // ep 3 divides neither: refused naming both degrees.
    Strategy bad = s;
    bad.ep = 3;
    CHECK_THROWS_AS(validate_strategy(bad, m, store().cluster("dgx-h100")), InputError);
    // The simulator agrees with the analytic step for an EP × CP layout (ep 4 within dp·cp = 16) as for the others.
    // Known gap: at one micro-batch per step, CP layouts' simulated steps are 4–9 % shorter than the analytic ones
    // (the simulator hides more data-parallel traffic behind the first forward and last backward: −4 % with ep 1,
    // −5 % with ep 4, −7 % with ep 8 for this model); with 4 micro-batches they agree within 3 %. Not resolved yet.
    Strategy within = s;
    within.ep = 4;
    within.global_batch = 16;
    const sim::SimResult r = sim::simulate(m, within, store().cluster("dgx-h100"));
    CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.03);
  }

  TEST_CASE("the simulator plays the all-to-alls on their own stream and agrees with the analytic step") {
    const ClusterSpec h100 = store().cluster("dgx-h100");
    // Mixtral, EP 8 over two DGX at stride tp 2 (each expert split over the TP pair, --etp 2: the group spans both
    // nodes), full recomputation.
    Strategy s = megatron_on(16, 2, 8);
    s.etp = 2;
    s.recompute = Recompute::full;
    s.global_batch = 64;
    const sim::SimResult r = sim::simulate(store().model("mixtral-8x7b"), s, h100);
    CHECK(r.critical_stage().exposed_ep_s > 0);
    CHECK(r.critical_stage().exposed_ep_s == doctest::Approx(r.analytic.time.exposed_ep_s).epsilon(0.02));
    CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.02);
    // DeepSeek-V3's published layout: PP 16, EP 64, ZeRO-1 on 2048 H800 (report §3.2), 1F1B under Megatron.
    Strategy d = megatron_on(2048, 1, 64);
    d.pp = 16;
    d.dp = 128;
    d.split.first_layers = 2;
    d.split.last_layers = 3;
    d.recompute = Recompute::full;
    d.global_batch = 1920;
    const sim::SimResult ds = sim::simulate(store().model("deepseek-v3"), d, store().cluster("h800x8"));
    CHECK(ds.critical_stage().exposed_ep_s > 0);
    CHECK(std::fabs(ds.step_s / ds.analytic.time.step_s - 1) < 0.03);
  }

  TEST_CASE("CLI: --ep in predict's JSON; bad --ep is one error line naming the flag") {
    using shardplan::test::check_refused;
    using shardplan::test::run_cli;
    const auto ok = run_cli("predict --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --framework megatron --zero 1 "
                            "--ep 8 --recompute full --format json");
    REQUIRE(ok.exit_code == 0);
    CHECK(ok.out.find("\"ep\": 8") != std::string::npos);
    check_refused("predict --preset llama3-8b --gpus 16 --framework megatron --ep 2", "--ep 2");       // dense model
    check_refused("predict --preset mixtral-8x7b --gpus 16 --framework megatron --ep 3", "--ep 3");    // 8 experts
    // Each expert split over the 8 TP ranks: EP is cut from dp·cp = 2.
    check_refused("predict --preset deepseek-v3 --gpus 16 --tp 8 --etp 8 --framework megatron --ep 4", "dp·cp = 2");
    check_refused("predict --preset deepseek-v3 --gpus 16 --tp 8 --etp 3 --framework megatron --ep 4", "--etp 3");
    check_refused("predict --preset deepseek-v3 --gpus 16 --tp 8 --etp 2 --framework megatron --ep 16", "tp·cp·dp = 16");
    check_refused("predict --preset mixtral-8x7b --gpus 16 --tp 2 --etp 1 --framework deepspeed --zero 1 --ep 2",
                  "--etp 1");
    check_refused("predict --preset mixtral-8x7b --gpus 16 --tp 2 --framework megatron --etp 0 --ep 2", "--etp");
    check_refused("predict --preset mixtral-8x7b --gpus 16 --ep 2", "--ep");                           // FSDP2
    check_refused("predict --preset mixtral-8x7b --gpus 16 --framework deepspeed --zero 3 --ep 2", "Stage 3");
    check_refused("predict --preset mixtral-8x7b --gpus 16 --framework megatron --ep 0", "--ep");
    check_refused("plan --preset llama3-8b --gpus 16 --framework megatron --ep 2", "--ep 2");
    check_refused("plan --preset mixtral-8x7b --gpus 16 --ep 2", "--ep");
    check_refused("predict --preset mixtral-8x7b --gpus 16 --framework torchtitan --zero 3 --ep 2 --hsdp 4", "--hsdp");
  }

  TEST_CASE("plan never offers hybrid sharding with EP, which predict refuses") {
    // The search once ranked HSDP × EP layouts of Qwen3-30B-A3B on 16 GPUs and then failed on its own recommendation.
    using shardplan::test::run_cli;
    const auto r = run_cli("plan --preset qwen3-30b-a3b --gpus 16 --framework torchtitan --format json --top 50");
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    bool any_ep = false;
    for (const auto& c : j["candidates"]) {
      const bool ep = c["config"]["ep"].get<int64_t>() > 1;
      any_ep = any_ep || ep;
      if (ep) CHECK(c["config"]["hsdp"].get<int64_t>() == 0);
    }
    CHECK(any_ep);
  }
}
