// The FSDP family's memory as PyTorch allocates it (planner/memory_moments.hpp): hand-computed moments, the
// committed cross-check against PyTorch's own allocations (reports/fsdp2-memory.json), the simulator naming the same
// moment, the caching allocator's reserve and the fit rule.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/allocator_reserve.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"
#include "tests/memory_check.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;
using test::h100;
using test::presets;
using shardplan::test::CliResult;
using shardplan::test::run_cli;

namespace {

// simulate's JSON: the moment its op names at the peak, predict's, and how far apart the two peaks are (percent).
struct NamedMoments {
  std::string simulated, predicted;
  double peak_difference_pct = 0;
};

NamedMoments named_moments(const std::string& layout) {
  const CliResult r = run_cli("simulate --format json " + layout);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json out = nlohmann::json::parse(r.out);
  const nlohmann::json& m = out.at("memory");
  return {m.at("peak_moment").get<std::string>(), m.at("analytic_peak_moment").get<std::string>(),
          out.at("difference_pct").at("peak_bytes").get<double>()};
}

// Both models' names for the peak of a layout where their peaks agree exactly (within 0.01 %).
std::pair<std::string, std::string> exact_moments(const std::string& layout) {
  const NamedMoments n = named_moments(layout);
  CHECK(std::fabs(n.peak_difference_pct) < 0.01);
  return {n.simulated, n.predicted};
}

Strategy fsdp2(Framework f, int64_t ranks, int zero, Recompute rc, int64_t seq, int64_t micro = 1) {
  Strategy s;
  s.framework = f;
  s.precision = Precision::amp_bf16;
  s.gpus = ranks;
  s.dp = ranks;
  s.zero = zero;
  s.recompute = rc;
  s.seq = seq;
  s.micro_batch = micro;
  s.global_batch = micro * ranks;
  return s;
}

double allocated(const Prediction& p) { return test::tracked_allocation(p); }

}  // namespace

TEST_SUITE("memory moments") {
  TEST_CASE("Llama-3 8B on 8 ranks, ZeRO-3, transformers: the cross-entropy backward, term by term") {
    const ModelSpec m = presets().model("llama3-8b");
    const Prediction p = predict(m, fsdp2(Framework::fsdp, 8, 3, Recompute::none, 2048), h100());
    const StageMemory& st = p.memory.peak_stage();
    CHECK(st.peak_phase == MemoryPhase::loss_backward);
    CHECK(st.allocated_phase == MemoryPhase::loss_backward);
    const double psi = 8030261248, root = 2.0 * 128256 * 4096 + 4096, block = 218112000;
    REQUIRE(static_cast<double>(count_params(m).total) == psi);
    // 12Ψ/N states (fp32 shard 4, Adam 8); the gathered root and the last block prefetched by the root's pre-backward
    // (the loss runs inside LlamaForCausalLM's forward); no gradient yet; 32 blocks × 200,840 B/token; the final
    // norm's 6h + 4 and the LM head's 2h per token; 12 B per logit.
    const double tokens = 2048, h = 4096;
    const double expected = 12 * psi / 8 + 2 * root + 2 * block + 32 * 200840 * tokens + (6 * h + 4 + 2 * h) * tokens +
                            12 * tokens * 128256;
    CHECK(allocated(p) == doctest::Approx(expected).epsilon(1e-12));
    CHECK(st.peak.grads == 0);
    // PyTorch's allocations (reports/fsdp2-memory.json): 30,965,589,504 B; the formula is 0.01 % from it.
    CHECK(std::fabs(expected / 30965589504.0 - 1) < 1e-4);
  }

  TEST_CASE("Llama-3 8B ZeRO-3 full recompute: the root's post-backward, 12Ψ/N + 4(Ψ − R)/N + 6R") {
    const ModelSpec m = presets().model("llama3-8b");
    // torchtitan before 2025-07-28: the embedding and the LM head in the root (tests/test_memory_wrap.cpp: today's).
    Strategy s = fsdp2(Framework::torchtitan, 8, 3, Recompute::full, 2048);
    s.end_units_own = false;
    const Prediction p = predict(m, s, h100());
    // The most allocated; what is reserved peaks earlier, at the cross-entropy backward, with every gradient shard still
    // to come on the reduce-scatter stream (framework.hpp sharded_grads_on_reduce_stream).
    CHECK(p.memory.peak_stage().allocated_phase == MemoryPhase::root_post_backward);
    CHECK(p.memory.peak_stage().peak_phase == MemoryPhase::loss_backward);
    const double psi = 8030261248, root = 2.0 * 128256 * 4096 + 4096;
    // torchtitan's model adds its RoPE caches: 32 layers × 2048 × 64 × 8 B.
    const double rope = 32.0 * 2048 * 64 * 8;
    CHECK(allocated(p) == doctest::Approx(12 * psi / 8 + 4 * (psi - root) / 8 + 6 * root + rope).epsilon(1e-12));
  }

  TEST_CASE("the optimizer step under amp is 20Ψ/N: shard, gradient, Adam m and v, foreach's sqrt temporary") {
    const ModelSpec m = presets().model("llama3-8b");
    // 2 ranks and 16 tokens: nothing else is as large (on 8 ranks the root's post-backward, 6R, is larger).
    Strategy s = fsdp2(Framework::fsdp, 2, 3, Recompute::full, 16);
    const Prediction p = predict(m, s, h100());
    CHECK(p.memory.peak_stage().allocated_phase == MemoryPhase::optimizer_step);
    CHECK(allocated(p) == doctest::Approx(20.0 * 8030261248 / 2).epsilon(1e-12));
  }

  TEST_CASE("torchtitan under PP keeps every unit gathered; under FP8 all-gather the blocks' weights in one byte") {
    const ModelSpec m = presets().model("llama3-8b");
    Strategy s = fsdp2(Framework::torchtitan, 8, 3, Recompute::full, 4096);
    s.pp = 2;
    s.dp = 4;
    s.global_batch = 16;
    s.compile = true;
    s.fp8 = Fp8Recipe::tensorwise;
    const double embedding = 128256.0 * 4096;  // stage 0's root unit: the embedding (no LM head there)
    const Prediction bf16 = predict(m, s, h100());
    const double psi0 = static_cast<double>(bf16.memory.stages[0].params_per_rank);
    CHECK(bf16.memory.stages[0].peak.params == doctest::Approx(2 * psi0));
    // torchao's fsdp_post_all_gather wraps the 1-byte all-gather output as the unsharded Float8Tensor parameter.
    s.fp8_all_gather = true;
    const Prediction fp8 = predict(m, s, h100());
    CHECK(fp8.memory.stages[0].peak.params == doctest::Approx(2 * embedding + (psi0 - embedding)));
    // The simulator allocates the same.
    const sim::SimResult r = sim::simulate(m, s, h100());
    CHECK(std::fabs(r.peak_stage().peak_bytes / static_cast<double>(fp8.peak_bytes()) - 1) < 0.03);
  }


  TEST_CASE("torchtitan under PP and TP: the first stage accumulates the embedding's gradient at full vocabulary") {
    // DTensor has no row-wise strategy for the embedding's backward (_embedding_ops.py embedding_dense_backward_strategy):
    // the gradient of the RowwiseParallel table is Partial at [V, D] on every TP rank, and under the pipeline's no_sync
    // FSDP2 keeps it upcast to fp32 until the step's reduction. PyTorch 2.15's own pipelining allocates it (bench/torch/
    // pp_mem.py, Llama 3.1 405B TP 8 PP 8: 6.85 GiB above the TP shard on stage 0, none on the other stages).
    const ModelSpec m = presets().model("llama3-8b");
    Strategy s = fsdp2(Framework::torchtitan, 16, 3, Recompute::full, 4096);
    s.tp = 4;
    s.sp = true;
    s.pp = 2;
    s.dp = 2;
    s.global_batch = 8;
    const Prediction p = predict(m, s, h100());
    auto grads = [](const StageMemory& st) { return st.peak.grads; };
    const double shard = 128256.0 * 4096 / 4;  // stage 0's embedding rows on one TP rank
    const double psi0 = static_cast<double>(p.memory.stages[0].params_per_rank);
    const double psi1 = static_cast<double>(p.memory.stages[1].params_per_rank);
    CHECK(grads(p.memory.stages[0]) == doctest::Approx(4 * (psi0 + 3 * shard)));
    CHECK(grads(p.memory.stages[1]) == doctest::Approx(4 * psi1));  // the LM head is column-parallel: sharded
    // Without TP the table is whole anyway: nothing extra.
    s.tp = 1;
    s.sp = false;
    s.dp = 8;
    s.global_batch = 32;  // the same 4 micro-batches per replica
    const Prediction solo = predict(m, s, h100());
    CHECK(grads(solo.memory.stages[0]) ==
          doctest::Approx(4 * static_cast<double>(solo.memory.stages[0].params_per_rank)));
  }
  TEST_CASE("PyTorch's own FSDP2 allocations (reports/fsdp2-memory.json): every case within 5 %, the same moment") {
    // The committed table of bench/torch/compare.py (FSDPMemTracker over fake tensors, torch 2.15): transformers'
    // LlamaForCausalLM (`hf`, --framework fsdp) and a torchtitan-style model (`titan`, --framework torchtitan),
    // Llama-3 8B/70B and a GPT-style 1.3B, ZeRO-2/3, with and without checkpointing, seq 2048/8192.
    const nlohmann::json rows = test::report_json("fsdp2-memory.json");
    REQUIRE(rows.size() >= 40);
    double sum = 0, worst = 0;
    int same_moment = 0, reserved_ties = 0;
    for (const nlohmann::json& r : rows) {
      const nlohmann::json& c = r["case"];
      CAPTURE(c.dump());
      const Prediction p = predict(test::case_model(presets(), c["model"]), test::case_strategy(c), h100());
      const double measured = r["measured"]["total"];
      const double err = allocated(p) / measured - 1;
      CHECK(std::fabs(err) < 0.05);
      sum += err;
      worst = std::max(worst, std::fabs(err));
      // The moment: the cross-entropy backward (logits alive in backward), a block's (its index), or the root's.
      const nlohmann::json& mo = r["peak_moment"];
      const std::string unit = mo["unit"].get<std::string>().substr(mo["unit"].get<std::string>().find_last_of('.') + 1);
      // The tracker ranks moments by what is allocated, as StageMemory::allocated_phase does.
      const StageMemory& st = p.memory.peak_stage();
      bool same = false;
      if (mo["logits"].get<double>() > 0 && mo["phase"] == "backward") same = st.allocated_phase == MemoryPhase::loss_backward;
      else if (!unit.empty() && std::isdigit(static_cast<unsigned char>(unit[0])))
        // A block's post-backward (its reduce-scatter input issued) is the next block's backward beginning.
        same = st.allocated_phase == MemoryPhase::block_backward &&
               std::abs(st.allocated_block - std::stoll(unit)) <= (mo["fsdp_state"] == "POST_BW" ? 1 : 0);
      else same = st.allocated_phase == MemoryPhase::root_post_backward;
      // Where two moments allocate within 2 % of each other the model may name the other one (70B titan full s8192:
      // 38.65 vs 38.54 GiB measured).
      if (!same && st.allocated_phase == MemoryPhase::loss_backward && std::fabs(err) < 0.02) same = true, ++reserved_ties;
      CHECK(same);
      same_moment += same ? 1 : 0;
    }
    MESSAGE("mean error ", 100 * sum / static_cast<double>(rows.size()), " %, worst |error| ", 100 * worst, " %");
    CHECK(std::fabs(sum / static_cast<double>(rows.size())) < 0.01);
    CHECK(same_moment == static_cast<int>(rows.size()));
    CHECK(reserved_ties <= 2);
  }

  TEST_CASE("simulate's memory over time peaks in predict's moment, within 3 %") {
    const ClusterSpec c = h100();
    int cases = 0;
    for (const auto& [name, ranks, seq] : {std::tuple{"llama3-8b", 8, 2048}, {"llama3-8b", 8, 8192}, {"llama3-70b", 64, 2048}})
      for (Framework f : {Framework::fsdp, Framework::fsdp1, Framework::torchtitan})
        for (int zero : {2, 3})
          for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
            const ModelSpec m = presets().model(name);
            Strategy s = fsdp2(f, ranks, zero, rc, seq);
            CAPTURE(name);
            CAPTURE(to_string(f));
            CAPTURE(zero);
            CAPTURE(to_string(rc));
            const sim::SimResult r = sim::simulate(m, s, c);
            const StageMemory& st = r.analytic.memory.peak_stage();
            const double analytic = static_cast<double>(peak_bytes(st.peak));
            CHECK(std::fabs(r.peak_stage().peak_bytes / analytic - 1) < 0.03);
            CHECK(r.peak_stage().moment == st.peak_phase);
            CHECK(r.peak_stage().block == st.peak_block);
            ++cases;
          }
    // Gradient accumulation: the later micro-batches hold the earlier ones' sharded gradients.
    Strategy s = fsdp2(Framework::fsdp, 8, 3, Recompute::full, 4096);
    s.global_batch = 32;
    const sim::SimResult r = sim::simulate(presets().model("llama3-8b"), s, c);
    CHECK(std::fabs(r.peak_stage().peak_bytes / static_cast<double>(peak_bytes(r.analytic.memory.peak_stage().peak)) - 1) < 0.03);
    CHECK(r.peak_stage().moment == r.analytic.memory.peak_stage().peak_phase);
    CHECK(cases == 54);
  }

  TEST_CASE("torchtitan's pipelines: simulate and predict name the same backward block at the peak") {
    // (simulate's JSON names its op's moment and predict's; bench/sim_agreement.py --show-moments found them apart.)
    auto moments = [](const std::string& layout) {
      const NamedMoments n = named_moments("--framework torchtitan --loss fused " + layout);
      return std::pair{n.simulated, n.predicted};
    };
    // 1F1B, no_sync: the first stage's first backward at its last block holds every block's unsharded gradients and
    // every other micro-batch's activations — DeepSeek-V3's gradients per block outweigh its activations per block.
    // (DeepSeek-V3 without its MTP module, as torchtitan pipelines it.)
    auto [sim_first, predict_first] = moments("--preset deepseek-v3 --mtp-layers 0 --cluster gb200-nvl72-superpod --gpus 256 --zero 3 "
                                              "--recompute selective --pp 8 --micro-batch 4 --seq 8192 --ep 4");
    CHECK(sim_first == "block 0 backward");
    CHECK(predict_first == sim_first);
    // Interleaved: the worst moment at the end of a chunk's backward pass is that chunk's first block, not its last.
    auto [sim_chunk, predict_chunk] = moments("--preset llama3-405b --cluster dgx-h100 --gpus 512 --zero 3 --recompute none "
                                              "--pp 8 --micro-batch 2 --seq 4096 --vpp 2 --schedule interleaved");
    CHECK(sim_chunk == "block 8 backward");
    CHECK(predict_chunk == sim_chunk);
  }

  TEST_CASE("simulate and predict name the same moment: one rank's FSDP, chunk 0's embedding mask, the step's buffers") {
    // torchtitan applies fully_shard at shard degree 1 too, and under its pipeline's no_sync FSDP2 accumulates the
    // unsharded gradients whatever the mesh's size: dp 1 (TP 4 × PP 4 on 16) keeps them as dp 2 does.
    auto [sim_one, predict_one] = exact_moments("--preset llama3-8b --cluster dgx-h100 --gpus 16 --framework torchtitan "
                                          "--zero 3 --recompute none --tp 4 --pp 4 --micro-batch 2 --seq 4096 --sp "
                                          "--vpp 2 --schedule interleaved");
    CHECK(sim_one == "block 3 backward");
    CHECK(predict_one == sim_one);
    // Interleaved: the first stage's embedding dropout mask is held by chunk 0's micro-batches only, which tips the
    // worst backward from chunk 0's pass to chunk 1's.
    auto [sim_mask, predict_mask] = exact_moments("--preset gpt-1.7b --cluster dgx-a100-80g --gpus 32 --framework torchtitan "
                                            "--zero 3 --recompute none --tp 4 --pp 4 --micro-batch 2 --seq 2048 --sp "
                                            "--vpp 2 --schedule interleaved");
    CHECK(sim_mask == "block 5 backward");
    CHECK(predict_mask == sim_mask);
    // DeepSpeed's pipe buffers and the sequence-parallel gather buffer stay through the optimizer step, whose fp32
    // gradient partition then outweighs the backward.
    auto [sim_step, predict_step] = exact_moments("--preset llama3-70b --cluster dgx-h100 --gpus 64 --framework deepspeed "
                                            "--zero 1 --recompute full --tp 4 --pp 4 --micro-batch 1 --seq 8192 --sp");
    CHECK(sim_step == "optimizer step");
    CHECK(predict_step == sim_step);
    // Interleaved, last stage: the loss's backward starts a last-chunk backward, not the stage's worst one (here chunk
    // 0's, with more held), so it is priced at the worst such start: predict had it 3.8 % above the simulator and the
    // peak.
    auto [sim_loss, predict_loss] = exact_moments("--preset gpt-1.7b --cluster dgx-a100-80g --gpus 32 --framework torchtitan "
                                            "--zero 2 --recompute full --tp 2 --pp 2 --micro-batch 4 --seq 2048 --sp "
                                            "--vpp 2 --schedule interleaved --recompute-every 4");
    CHECK(sim_loss == "block 11 backward");
    CHECK(predict_loss == sim_loss);
  }

  TEST_CASE("interleaved stages and partial recomputation: simulate and predict name the same moment") {
    // Megatron, interleaved, last stage: the loss starts a last-chunk backward, which holds fewer micro-batches than
    // the stage's worst forward (activations.hpp stage_activation_hold): predict had the loss 0.03 % above the peak.
    auto [sim_loss, predict_loss] = exact_moments("--preset deepseek-v3 --cluster gb200-nvl72-superpod --gpus 256 "
                                            "--framework megatron --zero 0 --recompute selective --tp 4 --pp 2 "
                                            "--micro-batch 1 --seq 2048 --sp --vpp 2 --schedule interleaved --ep 4 "
                                            "--loss fused");
    CHECK(sim_loss == "forward/backward");
    CHECK(predict_loss == sim_loss);
    // Two chunks' backwards start with exactly the same bytes held: the first in time (chunk 0's, whose last block is
    // the stage's 15th) is the moment, not the stage's last block. (A chunked loss: the MTP module's saved
    // cross-entropy beside a fused loss's logits makes the loss's backward the peak.)
    auto [sim_tie, predict_tie] = exact_moments("--preset deepseek-v3 --cluster gb200-nvl72-superpod --gpus 256 "
                                          "--framework megatron --zero 0 --recompute full --tp 4 --pp 2 --micro-batch 4 "
                                          "--seq 4096 --sp --vpp 2 --schedule interleaved --ep 4 --loss chunked");
    CHECK(sim_tie == "block 15 backward");
    CHECK(predict_tie == sim_tie);
    // Partial recomputation without FSDP: the chunks hold their own blocks' bytes, and of two equal starts the one
    // whose block recomputes (its working set) is the worst.
    auto [sim_partial, predict_partial] = exact_moments("--preset llama3-70b --cluster gb200-nvl72 --gpus 64 --framework "
                                                  "torchtitan --zero 0 --recompute full --tp 2 --pp 8 --cp 2 "
                                                  "--micro-batch 2 --seq 2048 --sp --vpp 2 --schedule interleaved "
                                                  "--loss fused --recompute-every 2");
    CHECK(sim_partial == "block 5 backward");
    CHECK(predict_partial == sim_partial);
    // torchtitan's interleaved hold walks each block of the worst pass: here block 10, the pass's recomputed one.
    auto [sim_hold, predict_hold] = exact_moments("--preset llama3-70b --cluster gb200-nvl72 --gpus 64 --framework torchtitan "
                                            "--zero 3 --recompute full --tp 8 --pp 8 --micro-batch 2 --seq 8192 --sp "
                                            "--vpp 2 --schedule interleaved --recompute-every 4");
    CHECK(sim_hold == "block 10 backward");
    CHECK(predict_hold == sim_hold);
    // 1F1B under no_sync: inside the first backward, the last recomputed block (its working set, the gradients of
    // the blocks after it) outweighs the pass's first block.
    auto [sim_first, predict_first] = exact_moments("--preset llama3-70b --cluster dgx-h100 --gpus 64 --framework torchtitan "
                                              "--zero 3 --recompute full --tp 1 --pp 2 --micro-batch 4 --seq 8192 "
                                              "--recompute-every 3");
    CHECK(sim_first == "block 38 backward");
    CHECK(predict_first == sim_first);
  }

  TEST_CASE("the caching allocator's reserve follows what is allocated") {
    const ModelSpec m = presets().model("llama3-8b");
    const FrameworkTraits fw = framework_traits(Framework::fsdp);
    Strategy s = fsdp2(Framework::fsdp, 8, 3, Recompute::none, 8192);
    const StageParams st = stage_params(m, s, 0);
    const AllocatorReserve none = caching_allocator_reserve(m, s, fw, st);
    // Segments of their own (≥ 10 MiB): per block the fp32 shards of gate, up and down (4096 × 14336 / 8 × 4 B =
    // 28 MiB; q and o are 8 MiB and share 20 MiB segments) → 3 × 4 states; embedding and LM head shards (250 MiB) →
    // 2 × 4; 14 saved tensors per block at seq 8192 (two per transformers RMSNorm, q and k, v, the Q/K/V and MLP
    // inputs, the attention output, four SwiGLU tensors; the lse, 8192 × 32 × 4 B = 1 MiB, shares a segment);
    // the 5 per-unit buffers (gathered root and 2 blocks, a block's gradients, a reduce-scatter input).
    CHECK(none.own_segments == 32 * 12 + 8 + 32 * 14 + 5);
    CHECK(none.rounding == doctest::Approx(static_cast<double>(none.own_segments) * 1024 * 1024));
    // Holes: one block's working set, 200,840 B/token.
    CHECK(none.holes == doctest::Approx(200840.0 * 8192));
    // Full recompute keeps one tensor per block, so fewer segments; the holes are the same working set.
    s.recompute = Recompute::full;
    const AllocatorReserve full = caching_allocator_reserve(m, s, fw, st);
    CHECK(full.own_segments == 32 * 12 + 8 + 32 + 5);
    CHECK(full.holes == none.holes);
    // FSDP1 keeps one FlatParameter per unit: 4 states × 33 units.
    CHECK(caching_allocator_reserve(m, s, framework_traits(Framework::fsdp1), st).own_segments == 4 * 33 + 32 + 5);
  }

  TEST_CASE("FSDP's gradient shards come on its reduce-scatter stream: reserved beside the compute stream's peak") {
    // One micro-batch: at the cross-entropy backward no shard exists yet, and each unit's will be allocated on the
    // reduce-scatter stream, whose pool the compute stream's cached blocks are not in: Ψ/N × 4 B (fp32 shards) more
    // reserved than the moment allocates (reports/allocator-replay.md: PyTorch's allocations replayed show it).
    const ModelSpec m = presets().model("llama3-8b");
    const double psi = 8030261248;
    auto to_come = [](const Prediction& p) {
      double bytes = 0;
      for (const MemoryItem& it : p.memory.peak_stage().items)
        if (it.what.rfind("caching allocator: the gradient shards still to come", 0) == 0) bytes += it.bytes;
      return bytes;
    };
    for (Framework f : {Framework::fsdp, Framework::torchtitan, Framework::fsdp1}) {
      CAPTURE(to_string(f));
      Strategy s = fsdp2(f, 8, 3, Recompute::full, 2048);
      const Prediction one = predict(m, s, h100());
      CHECK(one.memory.peak_stage().peak_phase == MemoryPhase::loss_backward);
      CHECK(to_come(one) == doctest::Approx(psi / 8 * 4).epsilon(1e-3));
      // Two micro-batches: the first one's reduce-scatters allocated every shard before the second's backward.
      s.global_batch = 16;
      CHECK(to_come(predict(m, s, h100())) == 0);
    }
  }

  TEST_CASE("MPT-30B at seq 8192 on 8 × H100 (llm-foundry, FULL_SHARD, full recompute) fits, as it ran") {
    // bench/data/published_runs_modern.csv MPT-H100: 1384 tok/s/GPU at micro-batch 1, global batch 168 (21
    // micro-batches per step). The flat 10 % reserve predicted 87.2 GB against 85.9 GB of HBM.
    ModelSpec m = presets().model("mpt-30b-foundry");
    m.seq = 8192;  // the learned position table of the run's length: 30,019,254,272 parameters, as the row says
    REQUIRE(count_params(m).total == 30019254272);
    Strategy s = fsdp2(Framework::fsdp1, 8, 3, Recompute::full, 8192);
    s.global_batch = 168;
    const Prediction p = predict(m, s, presets().cluster("dgx-h100"));
    CHECK(p.fits());
    const MemoryComponents& c = p.memory.peak_stage().peak;
    // The reserve is the allocator's rules on what is allocated: well under the flat 10 %.
    CHECK(c.fragmentation < 0.05 * (c.total() - c.runtime - c.fragmentation));
    // It runs above the 80 % planning line: plan would not rank it, predict says so.
    CHECK(static_cast<double>(p.peak_bytes()) > kSafeFractionOfCapacity * static_cast<double>(p.memory.capacity_bytes));
  }

  TEST_CASE("--max-hbm-fraction: (0, 1], and the fit rule says what it does") {
    CHECK(checked_max_hbm_fraction(0.9) == 0.9);
    CHECK(checked_max_hbm_fraction(1) == 1);
    CHECK_THROWS_AS(checked_max_hbm_fraction(0), InputError);
    CHECK_THROWS_AS(checked_max_hbm_fraction(1.2), InputError);
    CHECK_THROWS_AS(checked_max_hbm_fraction(std::nan("")), InputError);
    const std::string rule = memory_fit_rule(0.9);
    CHECK(rule.find("90 %") != std::string::npos);
    CHECK(rule.find("allocator reserve") != std::string::npos);
    // The CLI: the rule in predict's table and JSON, the line plan ranks under, one error line for a bad value.
    const CliResult table = run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --max-hbm-fraction 0.9");
    CHECK(table.exit_code == 0);
    CHECK(table.out.find("fit rule:") != std::string::npos);
    const CliResult js = run_cli("predict --preset llama3-8b --gpus 8 --cluster dgx-h100 --max-hbm-fraction 0.9 --format json");
    REQUIRE(js.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(js.out);
    CHECK(j["memory"]["max_hbm_fraction"] == 0.9);
    CHECK(j["memory"]["fit_rule"].get<std::string>().find("90 %") != std::string::npos);
    const CliResult plan = run_cli("plan --preset llama3-8b --gpus 8 --cluster dgx-h100 --max-hbm-fraction 0.9 --simulate-top 0");
    CHECK(plan.exit_code == 0);
    CHECK(plan.out.find("fit under 90 % of HBM") != std::string::npos);
    const CliResult bad = run_cli("predict --preset llama3-8b --max-hbm-fraction 1.5");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.rfind("error: --max-hbm-fraction", 0) == 0);
    CHECK(bad.err.find('\n') == bad.err.size() - 1);
  }
}
