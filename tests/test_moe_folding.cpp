// MoE Parallel Folding (--etp): the expert ranks of a stage re-cut as etp × ep × expert-dp from tp·cp·dp
// (planner/strategy.hpp expert_tensor_parallel). Hand-computed shards, groups and bytes for Megatron-Bridge's
// Qwen3-235B-A22B H100 layout (TP 2, PP 8, EP 32 on 256 GPUs: only runnable with expert TP 1), the TP collectives an
// MoE MLP with expert TP 1 no longer has, the runtimes' defaults and the refusals.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "io/preset_store.hpp"
#include "planner/comm_cost.hpp"
#include "planner/framework.hpp"
#include "planner/groups.hpp"
#include "planner/step_time.hpp"
#include "planner/strategy.hpp"
#include "planner/error.hpp"
#include "planner/moe_costs.hpp"
#include "planner/partition.hpp"
#include "planner/search.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}

// Megatron-Bridge's Qwen3-235B-A22B on 256 H100 (perf_recipes/qwen/h100/qwen3_moe.py
// qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config): TP 2 (SP), PP 8, EP 32, distributed optimizer.
Strategy qwen3_235b_h100() {
  Strategy s;
  s.gpus = 256;
  s.tp = 2;
  s.sp = true;
  s.pp = 8;
  s.dp = 16;
  s.ep = 32;
  s.vpp = 4;  // 94 blocks + embedding + loss = 96 = 8 stages × 4 chunks × 3 (account_for_*_in_pipeline_split)
  s.schedule = Schedule::interleaved;
  s.split.embedding_layers = 1;
  s.split.loss_layers = 1;
  s.zero = 1;
  s.framework = Framework::megatron;
  s.precision = Precision::megatron_bf16;
  s.micro_batch = 1;
  s.global_batch = 256;
  s.seq = 4096;
  return s;
}
}  // namespace

TEST_SUITE("moe folding") {
  TEST_CASE("expert TP 1 lets EP span the tensor-parallel ranks: shards, expert-DP, groups, all-to-all bytes") {
    const ModelSpec m = store().model("qwen3-235b-a22b");
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy s = qwen3_235b_h100();
    CHECK(expert_tensor_parallel(s) == 1);  // Megatron's MoE recipes: expert_tensor_parallel_size = 1
    CHECK_NOTHROW(validate_strategy(s, m, c));
    // tp·cp·dp = 32 ranks per stage = etp 1 × ep 32 × expert-DP 1.
    CHECK(expert_data_parallel(s) == 1);
    // 128 / 32 = 4 whole experts per rank, each 3 · 4096 · 1536 = 18,874,368 parameters (SwiGLU, no biases).
    CHECK(stage_params(m, s, 0).block_routed == 4 * 18'874'368);
    // With the experts split over the TP pair instead (--etp 2), EP 32 no longer fits: 2 · 32 > 32.
    Strategy split = s;
    split.etp = 2;
    CHECK_THROWS_AS(validate_strategy(split, m, c), InputError);
    split.ep = 16;  // 2 · 16 = 32: 8 experts per rank, each half
    CHECK_NOTHROW(validate_strategy(split, m, c));
    CHECK(stage_params(m, split, 0).block_routed == 8 * 18'874'368 / 2);
    CHECK(expert_data_parallel(split) == 1);
    // EP groups at stride etp: 32 consecutive ranks, 8 per DGX; at stride 2, 16 ranks, 4 per DGX.
    CHECK(ep_group(s, c).size == 32);
    CHECK(ep_group(s, c).ranks_per_node == 8);
    CHECK(ep_group(split, c).ranks_per_node == 4);
    // Each rank dispatches its sequence-parallel slice: 4096 / 2 tokens × top-8 × 4096 × 2 B.
    CHECK(moe_all_to_all_bytes(m, s) == doctest::Approx(2048.0 * 8 * 4096 * 2));
  }

  TEST_CASE("an MoE MLP with expert TP 1 and no shared experts meets no TP collective; with shared experts it does") {
    const ModelSpec m = store().model("qwen3-235b-a22b");
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy folded = qwen3_235b_h100();
    folded.tp_comm_overlap = false;  // the plain collectives: the attention half's are the same in both
    Strategy split = folded;
    split.etp = 2;
    split.ep = 16;
    CHECK_FALSE(mlp_meets_tp_collectives(m, folded));
    CHECK(mlp_meets_tp_collectives(m, split));
    const MicrobatchCosts a = microbatch_costs(m, folded, c), b = microbatch_costs(m, split, c);
    CHECK(a.block_tp_fwd_s == doctest::Approx(b.block_tp_fwd_s / 2));
    CHECK(a.block_tp_bwd_s == doctest::Approx(b.block_tp_bwd_s / 2));
    // DeepSeek-V3's shared expert is a TP-split dense MLP: its all-gather and reduce-scatter stay.
    const ModelSpec ds = store().model("deepseek-v3");
    Strategy d = folded;
    d.ep = 32;
    CHECK(mlp_meets_tp_collectives(ds, d));
    // Dense models always do.
    CHECK(mlp_meets_tp_collectives(store().model("llama3-70b"), folded));
  }

  TEST_CASE("the runtimes' defaults: expert TP 1 under megatron and torchtitan with EP, TP otherwise") {
    Strategy s = qwen3_235b_h100();
    CHECK(expert_tensor_parallel(s) == 1);
    s.framework = Framework::torchtitan;  // expert_tensor_parallel_degree defaulted to 1 (pytorch/torchtitan#3167)
    CHECK(expert_tensor_parallel(s) == 1);
    s.framework = Framework::deepspeed;  // expert slicing over the TP group
    CHECK(expert_tensor_parallel(s) == 2);
    s.framework = Framework::megatron;
    s.ep = 1;  // no EP: every rank holds every expert, split like a dense MLP
    CHECK(expert_tensor_parallel(s) == 2);
    s.etp = 1;  // unless --etp says otherwise
    CHECK(expert_tensor_parallel(s) == 1);
  }

  TEST_CASE("CLI: --etp in predict's JSON; Megatron's MoE under TP gets sequence parallelism; refusals") {
    using shardplan::test::check_refused;
    using shardplan::test::run_cli;
    const auto ok = run_cli("predict --preset qwen3-235b-a22b --gpus 256 --cluster dgx-h100 --framework megatron --tp 2 "
                            "--pp 8 --vpp 4 --pp-embedding-layers 1 --pp-loss-layers 1 --ep 32 --global-batch 512 "
                            "--format json");
    CAPTURE(ok.err);
    REQUIRE(ok.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(ok.out);
    CHECK(j["config"]["etp"] == 1);
    CHECK(j["config"]["sp"] == true);  // Megatron-Core refuses MoE under TP without SP (moe_layer.py)
    const auto titan = run_cli("predict --preset qwen3-30b-a3b --gpus 8 --cluster dgx-h100 --framework torchtitan "
                               "--tp 2 --ep 8 --format json");
    CAPTURE(titan.err);
    REQUIRE(titan.exit_code == 0);
    CHECK(nlohmann::json::parse(titan.out)["config"]["etp"] == 1);
    Strategy no_sp = qwen3_235b_h100();  // a layout given without SP is refused with Megatron's reason
    no_sp.sp = false;
    CHECK_THROWS_WITH_AS(validate_strategy(no_sp, store().model("qwen3-235b-a22b"), store().cluster("dgx-h100")),
                         doctest::Contains("moe_layer.py"), InputError);
    check_refused("predict --preset qwen3-235b-a22b --gpus 256 --cluster dgx-h100 --framework megatron --tp 2 --pp 8 "
                  "--ep 32 --etp 2",
                  "dp·cp = 16");
    check_refused("plan --preset qwen3-30b-a3b --gpus 8 --framework megatron --etp 0", "--etp");
  }

  TEST_CASE("plan offers EP beyond dp·cp under megatron, and every layout it offers passes predict") {
    const ModelSpec m = store().model("qwen3-30b-a3b");
    const ClusterSpec c = store().cluster("dgx-h100");
    SearchSpace sp;
    sp.base.gpus = 16;
    sp.base.framework = Framework::megatron;
    sp.base.precision = Precision::megatron_bf16;
    sp.base.seq = 4096;
    sp.base.global_batch = 128;
    sp.tp = 2;
    sp.ep = 16;  // dp = 8: EP 16 spans the TP pairs (expert TP 1)
    const SearchResult r = search_strategies(m, c, sp, 20);
    REQUIRE_FALSE(r.ranked.empty());
    for (const Candidate& cand : r.ranked) {
      CHECK(cand.strategy.ep == 16);
      CHECK(cand.strategy.sp);
      CHECK(expert_tensor_parallel(cand.strategy) == 1);
      CHECK_NOTHROW(validate_strategy(cand.strategy, m, c));
    }
  }

  TEST_CASE("--ep-comm-overlap: Megatron's batch-level EP overlap hides the all-to-alls behind the block's compute") {
    const ModelSpec m = store().model("qwen3-235b-a22b");
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy plain = qwen3_235b_h100();
    Strategy overlapped = plain;
    overlapped.ep_comm_overlap = true;
    const MicrobatchCosts a = microbatch_costs(m, plain, c), b = microbatch_costs(m, overlapped, c);
    // The same collectives; exposed: what outlasts the block's forward + backward compute, plus 10 % of the rest.
    CHECK(b.block_ep_total_s == doctest::Approx(a.block_ep_total_s));
    const double total = a.block_ep_fwd_s + a.block_ep_bwd_s;
    CHECK(total == doctest::Approx(a.block_ep_total_s));
    const double compute = a.block_fwd_s + a.block_bwd_s + a.block_recompute_s;
    const double exposed = std::max(0.0, total - compute);
    CHECK(b.block_ep_fwd_s + b.block_ep_bwd_s == doctest::Approx(exposed + kOverlapComputeSlowdown * (total - exposed)));
    CHECK(b.block_ep_fwd_s + b.block_ep_bwd_s < total);
    using shardplan::test::check_refused;
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework torchtitan --ep 8 --ep-comm-overlap",
                  "--ep-comm-overlap");
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework megatron --ep-comm-overlap", "--ep");
    // Megatron-Core's own checks (transformer_config.py): no full recomputation, and an interleaved schedule under PP.
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework megatron --ep 8 --ep-comm-overlap --recompute full",
                  "--recompute full");
    check_refused("predict --preset qwen3-30b-a3b --gpus 16 --framework megatron --ep 8 --pp 2 --ep-comm-overlap",
                  "--vpp");
    CHECK(shardplan::test::run_cli("predict --preset qwen3-30b-a3b --gpus 16 --cluster dgx-h100 --framework megatron "
                                   "--ep 8 --pp 2 --vpp 2 --ep-comm-overlap")
              .exit_code == 0);
    // plan offers only what Megatron runs: interleaved, no full recomputation.
    const auto plan = shardplan::test::run_cli("plan --preset qwen3-30b-a3b --gpus 16 --cluster dgx-h100 --framework "
                                               "megatron --ep 8 --pp 2 --ep-comm-overlap --max-hbm-fraction 1.0 "
                                               "--simulate-top 0 --format json");
    CAPTURE(plan.err);
    REQUIRE(plan.exit_code == 0);
    const nlohmann::json planned = nlohmann::json::parse(plan.out);  // kept alive: the loop reads into it
    REQUIRE(!planned["candidates"].empty());
    for (const auto& cand : planned["candidates"]) {
      CHECK(cand["config"]["vpp"].get<int64_t>() >= 2);
      CHECK(cand["config"]["recompute"] != "full");
    }
  }

  TEST_CASE("MoE host launch gaps: a fixed part and one per local expert, removed by CUDA graphs") {
    const ModelSpec m = store().model("qwen3-235b-a22b");
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy s = qwen3_235b_h100();  // ep 32: 4 local experts
    const double layer = moe_host_layer_default_s(), expert = moe_host_local_expert_default_s();
    CHECK(layer > 0);
    CHECK(expert > 0);
    CHECK(moe_host_gap_s(m, s, c) == doctest::Approx(layer + 4 * expert));
    s.cuda_graphs = CudaGraphs::partial;  // the router and preprocessing captured; the experts stay eager
    CHECK(moe_host_gap_s(m, s, c) == doctest::Approx(4 * expert));
    s.cuda_graphs = CudaGraphs::full;
    CHECK(moe_host_gap_s(m, s, c) == 0);
    s.cuda_graphs = CudaGraphs::none;
    s.ep = 1;  // every expert local: 128 of them
    s.sp = true;
    CHECK(moe_host_gap_s(m, s, c) == doctest::Approx(layer + 128 * expert));
    // A profile's own host times replace the fitted ones; a dense model has none.
    ClusterSpec measured = c;
    measured.moe_host_layer_s = 1e-3;
    measured.moe_host_local_expert_s = 1e-5;
    CHECK(moe_host_gap_s(m, s, measured) == doctest::Approx(1e-3 + 128 * 1e-5));
    CHECK(moe_host_gap_s(store().model("llama3-70b"), s, c) == 0);
    // torchtitan runs the experts as one torch._grouped_mm: the fixed part only (framework.hpp moe_launches_per_expert).
    Strategy titan = qwen3_235b_h100();
    titan.framework = Framework::torchtitan;
    titan.zero = 3;
    CHECK(moe_host_gap_s(m, titan, c) == doctest::Approx(layer));
    // In the block's forward (every Qwen3 layer is an MoE layer), and so in full recomputation's repeat.
    Strategy full = qwen3_235b_h100();
    full.recompute = Recompute::full;
    const MicrobatchCosts eager = microbatch_costs(m, full, c);
    full.cuda_graphs = CudaGraphs::full;
    const MicrobatchCosts graphed = microbatch_costs(m, full, c);
    CHECK(eager.block_host_gap_s == doctest::Approx(layer + 4 * expert));
    CHECK(eager.block_fwd_s - graphed.block_fwd_s == doctest::Approx(eager.block_host_gap_s));
    CHECK(eager.block_recompute_s - graphed.block_recompute_s == doctest::Approx(eager.block_host_gap_s));
    using shardplan::test::check_refused;
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework torchtitan --ep 8 --cuda-graphs full",
                  "--cuda-graphs");
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework megatron --ep 8 --cuda-graphs some",
                  "--cuda-graphs");
  }

  TEST_CASE("--moe-capacity-factor: token dropping pads every expert to its capacity") {
    const ModelSpec m = store().model("qwen3-30b-a3b");  // 128 experts, top-8
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy s;
    s.gpus = s.dp = 8;
    s.ep = 8;
    s.zero = 1;
    s.framework = Framework::megatron;
    s.precision = Precision::amp_bf16;
    s.micro_batch = 1;
    s.global_batch = 8;
    s.seq = 4096;
    CHECK_NOTHROW(validate_strategy(s, m, c));
    const double dropless = moe_all_to_all_bytes(m, s);
    s.moe_capacity_factor = 1.0;  // capacity ⌈4096 · 8 / 128⌉ = 256 per expert per rank: the balanced load, padded
    CHECK_NOTHROW(validate_strategy(s, m, c));
    CHECK(moe_all_to_all_bytes(m, s) == doctest::Approx(dropless));
    const MicrobatchCosts one = microbatch_costs(m, s, c);
    s.moe_capacity_factor = 1.5;  // 384 rows per expert per rank, 1.5 × the copies sent
    CHECK(moe_all_to_all_bytes(m, s) == doctest::Approx(1.5 * dropless));
    const MicrobatchCosts more = microbatch_costs(m, s, c);
    CHECK(more.block_fwd_s > one.block_fwd_s);
    // Padded dispatch knows its sizes on the host (token_dispatcher.py preprocess, drop_and_pad): no stall, only the
    // per-expert launches of the 16 local experts.
    CHECK(moe_host_gap_s(m, s, c) == doctest::Approx(16 * moe_host_local_expert_default_s()));
    s.moe_capacity_factor = -1;
    CHECK_THROWS_AS(validate_strategy(s, m, c), InputError);
    using shardplan::test::check_refused;
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework torchtitan --ep 8 --moe-capacity-factor 1",
                  "--moe-capacity-factor");
    check_refused("predict --preset llama3-8b --gpus 8 --framework megatron --moe-capacity-factor 1",
                  "--moe-capacity-factor");
    const auto ok = shardplan::test::run_cli("predict --preset qwen3-30b-a3b --gpus 8 --cluster dgx-h100 --framework "
                                             "megatron --ep 8 --moe-capacity-factor 1.25 --format json");
    CAPTURE(ok.err);
    REQUIRE(ok.exit_code == 0);
    CHECK(nlohmann::json::parse(ok.out)["config"]["moe_capacity_factor"] == 1.25);
  }

  TEST_CASE("--moe-dispatcher deepep|hybridep: Megatron's flex dispatcher, its share of the host stall, its launch flags") {
    const ModelSpec m = store().model("qwen3-235b-a22b");
    const ClusterSpec c = store().cluster("dgx-h100");
    Strategy s = qwen3_235b_h100();  // ep 32: 4 local experts
    const double layer = moe_host_layer_default_s(), expert = moe_host_local_expert_default_s();
    const double share = moe_host_fused_dispatch_share_default();
    CHECK(share >= 0);
    CHECK(share < 1);  // fitted: the flex rows stall less than the all-to-all ones (reports/accuracy.md)
    const double alltoall = moe_host_gap_s(m, s, c);
    CHECK(alltoall == doctest::Approx(layer + 4 * expert));
    for (const MoeDispatcher d : {MoeDispatcher::deepep, MoeDispatcher::hybridep}) {
      s.moe_dispatcher = d;
      CAPTURE(to_string(d));
      CHECK_NOTHROW(validate_strategy(s, m, c));
      CHECK(moe_host_gap_s(m, s, c) == doctest::Approx(share * layer + 4 * expert));
      ClusterSpec measured = c;  // a profile's own share replaces the fitted one
      measured.moe_host_fused_dispatch_share = 0.5;
      CHECK(moe_host_gap_s(m, s, measured) == doctest::Approx(0.5 * layer + 4 * expert));
      s.cuda_graphs = CudaGraphs::partial;  // no stall left to share
      CHECK(moe_host_gap_s(m, s, c) == doctest::Approx(4 * expert));
      s.cuda_graphs = CudaGraphs::none;
    }
    // DeepEP cannot pad experts to a capacity (Megatron-Core transformer_config.py); HybridEP can.
    s.moe_dispatcher = MoeDispatcher::deepep;
    s.moe_capacity_factor = 1.0;
    CHECK_THROWS_AS(validate_strategy(s, m, c), InputError);
    s.moe_dispatcher = MoeDispatcher::hybridep;
    CHECK_NOTHROW(validate_strategy(s, m, c));
    using shardplan::test::check_refused;
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework torchtitan --ep 8 --moe-dispatcher deepep",
                  "--moe-dispatcher");
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework megatron --moe-dispatcher hybridep", "--ep");
    check_refused("predict --preset qwen3-30b-a3b --gpus 8 --framework megatron --ep 8 --moe-dispatcher nccl",
                  "--moe-dispatcher");
    const auto ok = shardplan::test::run_cli("predict --preset qwen3-30b-a3b --gpus 8 --cluster dgx-h100 --framework "
                                             "megatron --ep 8 --moe-dispatcher hybridep --format json");
    CAPTURE(ok.err);
    REQUIRE(ok.exit_code == 0);
    CHECK(nlohmann::json::parse(ok.out)["config"]["moe_dispatcher"] == "hybridep");
    // plan keeps the dispatcher and offers only EP layouts (it needs EP), each one predict accepts.
    const auto plan = shardplan::test::run_cli("plan --preset qwen3-30b-a3b --gpus 8 --cluster dgx-h100 --framework "
                                               "megatron --moe-dispatcher deepep --format json");
    CAPTURE(plan.err);
    REQUIRE(plan.exit_code == 0);
    const auto j = nlohmann::json::parse(plan.out);
    REQUIRE(!j["candidates"].empty());
    for (const auto& cand : j["candidates"]) {
      CHECK(cand["config"]["moe_dispatcher"] == "deepep");
      CHECK(cand["config"]["ep"].get<int64_t>() >= 2);
    }
  }
}
