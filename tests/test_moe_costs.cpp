// Memory and time of MoE models without expert parallelism (issue 17, item 3): every expert's states in memory, only
// the active experts' compute, grouped per-expert GEMMs, the router, k experts' saved activations, sliding windows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/compute_cost.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/moe.hpp"
#include "planner/moe_costs.hpp"
#include "planner/partition.hpp"
#include "planner/precision.hpp"
#include "planner/predict.hpp"
#include "planner/step_time.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"
#include "tests/memory_check.hpp"

using namespace shardplan;

namespace {
const PresetStore& store() {
  static const PresetStore s = PresetStore::builtin();
  return s;
}
Strategy fsdp_on(int64_t gpus, int64_t seq) {
  Strategy s;
  s.gpus = gpus;
  s.dp = gpus;
  s.zero = 3;
  s.micro_batch = 1;
  s.global_batch = gpus;
  s.seq = seq;
  return s;
}
// The same model with its MoE MLP replaced by a dense one of the active width k · expert_ffn_hidden: equal FLOPs.
ModelSpec dense_twin(ModelSpec m) {
  m.ffn_hidden = (m.experts_per_token + m.shared_experts) * m.expert_ffn_hidden;
  m.experts = m.experts_per_token = m.shared_experts = m.expert_ffn_hidden = 0;
  m.dense_layers = 0;
  m.router_bias = false;
  return m;
}
}  // namespace

TEST_SUITE("moe costs") {
  TEST_CASE("memory holds every expert's states: Mixtral on 16 GPUs under ZeRO-3, amp-bf16") {
    const ModelSpec m = store().model("mixtral-8x7b");
    const Prediction p = predict(m, fsdp_on(16, 4096), store().cluster("dgx-h100"));
    // fp32 master 4 B and Adam 8 B of each of the 46,702,792,704 parameters, sharded over 16:
    // 4 × 46,702,792,704 / 16 = 11,675,698,176 and 8 × … / 16 = 23,351,396,352.
    CHECK(p.memory.peak_stage().peak.master == doctest::Approx(11'675'698'176.0).epsilon(1e-6));
    CHECK(p.memory.peak_stage().peak.optimizer == doctest::Approx(23'351'396'352.0).epsilon(1e-6));
    CHECK(p.memory.peak_stage().params_per_rank == 46'702'792'704);
  }

  TEST_CASE("expert shards sum to the whole under TP; the router stays whole") {
    const ModelSpec m = store().model("mixtral-8x7b");
    // TP 4: attention 41,943,040 / 4; 8 experts × 176,160,768 / 4; router 32,768 and norms 8192 whole.
    CHECK(block_params_per_tp_rank(m, 4) == 41'943'040 / 4 + 8 * 176'160'768 / 4 + 32'768 + 8192);
    CHECK(4 * (block_params_per_tp_rank(m, 4) - 32'768 - 8192) + 32'768 + 8192 == count_params(m).block.total());
  }

  TEST_CASE("saved activations: k experts' intermediates, the dispatched copies and the router") {
    const ModelSpec moe = store().model("mixtral-8x7b");
    const ModelSpec dense = dense_twin(moe);  // ffn 2 × 14336: the same SwiGLU intermediates per token
    Strategy s = fsdp_on(8, 4096);
    const FrameworkTraits fw = framework_traits(s.framework);
    const double extra = block_activation_bytes(moe, s, fw) - block_activation_bytes(dense, s, fw);
    // Per token: router fp32 4·(8 + 2) = 40 B; dispatched copies 2·2·4096 = 16,384 B; expert outputs 16,384 B.
    CHECK(extra == doctest::Approx(4096.0 * (40 + 16'384 + 16'384)));
  }

  TEST_CASE("where the probabilities scale the experts: the combine saves the k outputs, or nothing (--moe-probs)") {
    const ModelSpec m = store().model("mixtral-8x7b");
    Strategy s = fsdp_on(8, 4096);
    // Per token, k·h expert outputs: 2 × 4096 elements.
    const double outputs = 4096.0 * 2 * 4096;
    s.framework = Framework::megatron;
    const FrameworkTraits mcore = framework_traits(s.framework);
    CHECK(effective_moe_probs(s, mcore) == MoeProbs::activation);  // Megatron-Core 0.13 on: in the activation
    const double in_activation = block_activation_bytes(m, s, mcore);
    s.moe_probs = MoeProbs::combine;  // Megatron-Core 0.12 and before: unpermute(probs=...) saves them in bf16
    CHECK(block_activation_bytes(m, s, mcore) - in_activation == doctest::Approx(outputs * 2));
    // torchtitan multiplies an fp32 upcast of them (LocalTokenDispatcher.combine): 4 B an element.
    Strategy t = fsdp_on(8, 4096);
    t.framework = Framework::torchtitan;
    const FrameworkTraits titan = framework_traits(t.framework);
    CHECK(effective_moe_probs(t, titan) == MoeProbs::combine);
    const double titan_combine = block_activation_bytes(m, t, titan);
    t.moe_probs = MoeProbs::activation;
    CHECK(titan_combine - block_activation_bytes(m, t, titan) == doctest::Approx(outputs * 4));
    // The CLI: the flag, the JSON, and a bad value refused in one line.
    const test::CliResult ok = test::run_cli("predict --format json --preset mixtral-8x7b --gpus 16 --framework megatron --ep 8 --moe-probs combine");
    REQUIRE(ok.exit_code == 0);
    CHECK(ok.out.find("\"moe_probs\": \"combine\"") != std::string::npos);
    const test::CliResult bad = test::run_cli("predict --preset mixtral-8x7b --gpus 16 --framework megatron --ep 8 --moe-probs router");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("error: --moe-probs 'router' is not one of: activation, combine") != std::string::npos);
  }

  TEST_CASE("torchtitan's MoE layer saves what PyTorch saves for it (reports/moe-saved.json)") {
    // PyTorch's own saved tensors of torchtitan 0.3.0's MoE layer (router, EP=1 dispatcher, grouped experts, fp32
    // combine) in bf16, 4096 tokens of Qwen3-30B-A3B's shapes, on fake CPU tensors (bench/torch/moe_saved.py, torch
    // 2.15). The CPU has no float32 autocast, so there the router's gate saves the bf16 input and its softmax a bf16
    // output; on a GPU both are fp32 (+2 B per element of h and of E). shardplan's MLP-half terms (all but the norm's
    // input, which the harness starts after) against that; the int64 routing indices (192 B) are not priced.
    const nlohmann::json j = test::report_json("moe-saved.json");
    const ModelSpec m = store().model("qwen3-30b-a3b");
    REQUIRE(m.hidden == j.at("hidden").get<int64_t>());
    REQUIRE(m.expert_ffn_hidden == j.at("expert_ffn").get<int64_t>());
    REQUIRE(m.experts == j.at("experts").get<int64_t>());
    REQUIRE(m.experts_per_token == j.at("top_k").get<int64_t>());
    REQUIRE(m.shared_experts == j.at("shared").get<int64_t>());
    Strategy s = fsdp_on(8, j.at("tokens").get<int64_t>());
    s.framework = Framework::torchtitan;
    const FrameworkTraits fw = framework_traits(s.framework);
    double predicted = 0;
    for (const ActTerm& t : block_activation_terms(m, s, fw)) {
      const std::string name = t.name;
      if (name == "mlp input" || name.rfind("router", 0) == 0 || name.rfind("expert", 0) == 0 ||
          name.rfind("tokens dispatched", 0) == 0 || name.rfind("k expert outputs", 0) == 0)
        predicted += t.bytes_per_token;
    }
    const double on_gpu = j.at("bytes_per_token").get<double>() + 2.0 * m.hidden + 2.0 * m.experts;
    CHECK(std::fabs(predicted / on_gpu - 1) < 0.005);
    // The combine's fp32 product: 4 B for each of the k·h routed output elements (LocalTokenDispatcher.combine).
    const std::string fp32_outputs = "float32[" + std::to_string(m.experts_per_token * s.seq) + ", " +
                                     std::to_string(m.hidden) + "]";
    REQUIRE(j.at("tensors").contains(fp32_outputs));
    CHECK(j.at("tensors").at(fp32_outputs).get<double>() / s.seq == doctest::Approx(4.0 * m.experts_per_token * m.hidden));
  }

  TEST_CASE("Gemma's two extra norms per block save their inputs") {
    ModelSpec m = store().model("llama3-8b");
    Strategy s = fsdp_on(8, 4096);
    const FrameworkTraits fw = framework_traits(s.framework);
    const double two = block_activation_bytes(m, s, fw);
    m.block_norms = 4;
    // Two more norm inputs per token: what the framework's RMSNorm keeps of a 4096-wide bf16 input.
    CHECK(block_activation_bytes(m, s, fw) - two == doctest::Approx(4096.0 * 2 * norm_saved_bytes(m, fw, 2)));
  }

  TEST_CASE("grouped GEMM: one launch for the group; per-expert shapes lose efficiency as experts shrink") {
    const GpuSpec g = store().gpu("h100-sxm");
    const GemmShape each{1024, 28672, 4096};
    CHECK(grouped_gemm_time_s(g, DType::bf16, 8, each) ==
          doctest::Approx(8 * (gemm_time_s(g, DType::bf16, each) - 2e-6) + 2e-6));
    // Mixtral, T = 4096: 1024 rows per expert — close to the dense twin's 4096-row GEMMs of the same FLOPs.
    Strategy s = fsdp_on(8, 4096);
    // At the dense GEMMs' rate (the fitted grouped share set to 1: GpuSpec::grouped_gemm_ratio).
    ClusterSpec c = store().cluster("dgx-h100");
    c.gpu.grouped_gemm_ratio = 1.0;
    const ModelSpec mix = store().model("mixtral-8x7b");
    // The GPU's work alone: the eager MoE layer's host launch gaps (moe_costs.hpp moe_host_gap_s) are apart.
    const MicrobatchCosts mixc = microbatch_costs(mix, s, c);
    const double moe_t = mixc.block_fwd_s - mixc.block_host_gap_s, dense_t = microbatch_costs(dense_twin(mix), s, c).block_fwd_s;
    CHECK(moe_t > dense_t);
    CHECK(moe_t < 1.25 * dense_t);
    // The grouped share scales the routed experts' GEMMs alone (Mixtral has no shared expert; the router is in `up`).
    GpuSpec half = c.gpu;
    half.grouped_gemm_ratio = 0.5;
    CHECK(moe_mlp_time(mix, s, half, DType::bf16).down.fwd ==
          doctest::Approx(2 * moe_mlp_time(mix, s, c.gpu, DType::bf16).down.fwd));
    // DeepSeek-V3's 256 experts of 2048 at T = 4096, top-8: 128 rows each, far from the dense GEMM's efficiency.
    const ModelSpec ds = store().model("deepseek-v3");
    const MoeMlpTime e = moe_mlp_time(ds, s, g, DType::bf16);
    const double flops = 4096.0 * 2 * 8 * 3 * 7168 * 2048;  // routed experts' forward only
    const double routed_s = e.up.fwd + e.down.fwd;          // + shared expert and router: less efficient still
    CHECK(flops / routed_s < 0.8 * gemm_base_efficiency(g, DType::bf16) * peak_flops(g, DType::bf16));
  }

  TEST_CASE("the all-to-all dispatcher's second permutation: read and write k·h twice a token, where >1 local expert") {
    // Megatron-Core token_dispatcher.py MoEAlltoAllTokenDispatcher: dispatch_postprocess sorts the received copies by
    // local expert, combine_preprocess restores their order (sort_chunks_by_idxs); the flex dispatchers do not.
    const ModelSpec mix = store().model("mixtral-8x7b");  // h 4096, top-2 of 8
    Strategy s = fsdp_on(8, 4096);
    s.ep = 2;  // 4 local experts
    s.moe_dispatcher = MoeDispatcher::hybridep;
    const double flex = moe_dispatch_bytes_per_token(mix, s, 2);
    s.moe_dispatcher = MoeDispatcher::alltoall;
    CHECK(moe_dispatch_bytes_per_token(mix, s, 2) - flex == doctest::Approx(2.0 * 4 * 2 * 4096));
    s.ep = 8;  // one local expert: nothing to sort
    CHECK(moe_dispatch_bytes_per_token(mix, s, 2) == doctest::Approx(flex));
    // Under sequence parallelism a TP rank routes and sorts its T/tp slice (expert TP 1: nothing gathered back).
    s.ep = 2;
    const double whole = moe_dispatch_bytes_per_token(mix, s, 2);
    s.tp = 2;
    s.sp = true;
    s.etp = 1;
    CHECK(moe_dispatch_bytes_per_token(mix, s, 2) == doctest::Approx(whole / 2));
    // Expert TP 2: the slices are gathered back over the expert-TP group after the all-to-all and sorted whole.
    s.etp = 2;
    CHECK(moe_dispatch_bytes_per_token(mix, s, 2) - flex / 2 == doctest::Approx(2.0 * 4 * 2 * 4096));
  }

  TEST_CASE("GPT-OSS's expert output bias, added per expert in fp32 by Megatron: 28·h bytes a routed copy, 36·h back") {
    // moe/experts.py TEGroupedMLP._apply_bias: t + b·p per local expert (p fp32), cat, cast back to bf16.
    const ModelSpec oss = store().model("gpt-oss-120b");  // h 2880, top-4 of 128, expert biases
    Strategy s = fsdp_on(64, 4096);
    s.framework = Framework::megatron;
    s.zero = 1;
    s.ep = 8;
    s.micro_batch = 4;  // 16,384 tokens a rank, 65,536 routed copies
    const FrameworkTraits megatron = framework_traits(Framework::megatron);
    const MoeBiasBytes b = moe_expert_bias_bytes(oss, s, megatron, 2);
    CHECK(b.fwd == doctest::Approx(65536.0 * 28 * 2880));
    CHECK(b.bwd == doctest::Approx(65536.0 * 36 * 2880));
    // Full-iteration CUDA graphs run the graph-safe packed bias (fused): nothing of its own.
    s.cuda_graphs = CudaGraphs::full;
    CHECK(moe_expert_bias_bytes(oss, s, megatron, 2).fwd == 0);
    s.cuda_graphs = CudaGraphs::none;
    // No expert biases (Qwen3), or a runtime that does not add them per expert: nothing.
    CHECK(moe_expert_bias_bytes(store().model("qwen3-30b-a3b"), s, megatron, 2).fwd == 0);
    CHECK(moe_expert_bias_bytes(oss, s, framework_traits(Framework::torchtitan), 2).fwd == 0);
    // The block's backward carries it (every GPT-OSS layer is MoE; the graphs change nothing else there).
    const ClusterSpec c = store().cluster("dgx-b200");
    const MicrobatchCosts with = microbatch_costs(oss, s, c);
    s.cuda_graphs = CudaGraphs::full;
    const MicrobatchCosts graphed = microbatch_costs(oss, s, c);
    CHECK(with.block_bwd_s - graphed.block_bwd_s == doctest::Approx(memory_bound_time_s(c.gpu, b.bwd)));
  }

  TEST_CASE("sliding windows cut flash-attention time: GPT-OSS at 4096 tokens") {
    // Work fraction: 12 windowed layers at (4096·128 − 128²/2)/(4096²/2) = 0.0615, 12 global → 0.5308.
    const ModelSpec m = store().model("gpt-oss-20b");
    CHECK(attention_work_fraction(m, 4096) == doctest::Approx((12 * (4096.0 * 128 - 8192) / (4096.0 * 2048) + 12) / 24));
    ModelSpec full = m;
    full.sliding_window = 0;
    full.sliding_window_pattern = 1;
    const Strategy s = fsdp_on(8, 4096);
    const ClusterSpec c = store().cluster("dgx-h100");
    CHECK(microbatch_costs(m, s, c).block_fwd_s < microbatch_costs(full, s, c).block_fwd_s);
    // What the window saves is less than the work fraction says: a windowed layer's rows visit 128 keys, so they run
    // at the kernel's efficiency for 128 (cuDNN: 171 µs at window 511 against 558 µs causal, not 0.23 × 558).
    const GpuSpec g = training_device(c.gpu);
    const AttentionKernel k = framework_traits(s.framework).attention_kernel;
    const double causal = flash_attention_forward_s(g, DType::bf16, 1, 4096, 64, 64, true, k);  // every layer's
    const double slower =
        flash_attention_efficiency(g, 4096, 64, false, k) / flash_attention_efficiency(g, 128, 64, false, k);
    CHECK(slower > 2);  // 0.95 of the kernel's long-sequence efficiency at 4096 against 0.39 at 128
    const double work = (4096.0 * 128 - 8192) / (4096.0 * 2048);
    const double saved = microbatch_costs(full, s, c).block_fwd_s - microbatch_costs(m, s, c).block_fwd_s;
    CHECK(saved == doctest::Approx(causal * 12 * (1 - work * slower) / 24));
  }

  TEST_CASE("multi-token prediction: one more block, its projection and the head on the last stage") {
    ModelSpec with = store().model("deepseek-v3");
    ModelSpec without = with;
    without.mtp_layers = 0;
    Strategy s = fsdp_on(8, 4096);
    const ClusterSpec c = store().cluster("h800x8");
    const MicrobatchCosts a = microbatch_costs(with, s, c), b = microbatch_costs(without, s, c);
    // head_fwd(with) = 2 × head_fwd(without) + block_fwd + eh_proj (a [4096 × 14336] · [14336 × 7168] GEMM).
    const double proj = gemm_time_s(training_device(c.gpu), DType::bf16, {4096, 7168, 2 * 7168});
    CHECK(a.head_fwd_s == doctest::Approx(2 * b.head_fwd_s + b.block_fwd_s + proj));
    CHECK(a.block_fwd_s == b.block_fwd_s);
    const FrameworkTraits fw = framework_traits(s.framework);
    // Saved for the module: its block, plus 6 tensors of h per token (2 bytes each).
    CHECK(last_stage_extra_bytes(with, s, fw) - last_stage_extra_bytes(without, s, fw) ==
          doctest::Approx(block_activation_bytes(with, s, fw) + 4096.0 * 6 * 2 * 7168));
  }

  TEST_CASE("the simulator plays an MoE step as the analytic model prices it (EP = 1)") {
    const ModelSpec m = store().model("mixtral-8x7b");
    const ClusterSpec c = store().cluster("dgx-h100");
    // Megatron TP 8, no data parallelism: compute and TP collectives in series, as for dense models (test_sim.cpp).
    Strategy tp = fsdp_on(8, 4096);
    tp.tp = 8;
    tp.sp = true;  // Megatron-Core trains MoE under TP only with SP (framework_support.hpp tp_needs_sp)
    tp.dp = 1;
    tp.zero = 0;
    tp.global_batch = 1;
    tp.framework = Framework::megatron;
    tp.precision = Precision::megatron_bf16;
    const sim::SimResult r = sim::simulate(m, tp, c);
    CHECK(r.step_s == doctest::Approx(r.analytic.time.step_s).epsilon(1e-4));
    // FSDP over one node. Dense cases agree within 3 % (test_sim.cpp; Llama 3 70B here: −0.2 %). Mixtral's blocks are
    // 1.45 B parameters: each block's gradient reduce-scatter (5.8 GB fp32) is about as long as its backward, and the
    // analytic exposure of that near-bound traffic (94 ms) is above what the simulator's overlap leaves (33 ms):
    // −4.5 % measured on the issue-17 branch, −5.1 % once merged with the NVLink-domain pricing (issue 18); same
    // compute to 0.3 %. A known gap of the analytic exposure for units this large, not a tolerance to widen further.
    Strategy fsdp = fsdp_on(8, 4096);
    fsdp.recompute = Recompute::full;
    const sim::SimResult f = sim::simulate(m, fsdp, c);
    CHECK(f.step_s < f.analytic.time.step_s);
    CHECK(f.step_s / f.analytic.time.step_s > 0.94);
    CHECK(std::fabs(f.critical_stage().busy_compute_s / f.analytic.time.compute_s - 1) < 0.01);
  }

  TEST_CASE("CLI: predict and plan Mixtral 8x7B on two DGX H100 nodes") {
    using shardplan::test::run_cli;
    // Without recomputation 31 blocks of saved activations (1.43 GB each at seq 4096: two experts' SwiGLU
    // intermediates of 3 × 14336 each, the dispatched copies) overflow HBM; full recomputation keeps the block inputs.
    const auto pred = run_cli("predict --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --format json");
    REQUIRE(pred.exit_code == 0);
    CHECK(pred.out.find("\"fits\": false") != std::string::npos);
    const auto full = run_cli("predict --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --recompute full --format json");
    REQUIRE(full.exit_code == 0);
    CHECK(full.out.find("\"fits\": true") != std::string::npos);
    const auto plan = run_cli("plan --preset mixtral-8x7b --gpus 16 --cluster dgx-h100 --format json");
    CHECK(plan.exit_code == 0);
    CHECK(plan.out.find("\"recommended\"") != std::string::npos);
    // The reference loop builds dense models: it refuses an MoE model by its key (the launch files carry MoE
    // models: tests/test_emit.cpp).
    // validate starts MPI, whose own allocations read as leaks under LeakSanitizer (test_bad_input.cpp does the
    // same for its MPI rows): leak reports would add lines to the one error line.
    const char* asan = std::getenv("ASAN_OPTIONS");
    const std::string saved = asan ? asan : "";
    ::setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 1);
    const auto val = run_cli("validate --preset mixtral-8x7b --gpus 1 --quiet");
    if (asan) ::setenv("ASAN_OPTIONS", saved.c_str(), 1);
    else ::unsetenv("ASAN_OPTIONS");
    CHECK(shardplan::test::is_one_error_line(val));
    CHECK(val.err.find("'experts'") != std::string::npos);
    // An expert width TP does not divide is refused naming it.
    ModelSpec odd = store().model("mixtral-8x7b");
    odd.expert_ffn_hidden = 14340;  // 4 · 3585: tp 8 does not divide it
    Strategy s = fsdp_on(16, 4096);
    s.tp = 8;
    s.dp = 2;
    CHECK_THROWS_WITH_AS(predict(odd, s, store().cluster("dgx-h100")), doctest::Contains("expert_ffn_hidden"), InputError);
  }
}
