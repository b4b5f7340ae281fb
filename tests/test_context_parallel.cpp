// Context parallelism (--cp): the memory of a CP rank (activations of seq/cp tokens, the ring's K/V buffers, model
// states sharded over dp·cp), the ring's bytes per step and its exposure, the simulator against the analytic model,
// the refusals, the search at 128 K tokens and the launch files.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/comm_cost.hpp"
#include "planner/context_parallel.hpp"
#include "planner/framework.hpp"
#include "planner/groups.hpp"
#include "planner/memory.hpp"
#include "planner/step_time.hpp"
#include "sim/simulate.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;
using shardplan::test::check_refused;
using shardplan::test::read_all;
using shardplan::test::run_cli;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

// Llama 3 8B (32 heads, 8 K/V heads of 128) on one DGX H100, Megatron-Core: cp 4 × dp 2, seq 8192.
Strategy megatron_cp4() {
  Strategy s;
  s.gpus = 8;
  s.cp = 4;
  s.dp = 2;
  s.zero = 1;
  s.framework = Framework::megatron;
  s.micro_batch = 1;
  s.global_batch = 2;
  s.seq = 8192;
  return s;
}

double item_bytes(const StageMemory& st, const std::string& prefix) {
  double sum = 0;
  for (const MemoryItem& it : st.items)
    if (it.what.rfind(prefix, 0) == 0) sum += it.bytes;
  return sum;
}

// K and V of 8192 / 4 = 2048 tokens, 8 heads of 128, bf16: 2 · 2048 · 8 · 128 · 2 = 8,388,608 bytes.
constexpr double kLocalKv = 2.0 * 2048 * 8 * 128 * 2;

}  // namespace

TEST_SUITE("cp") {
  TEST_CASE("memory of a CP rank: seq/cp tokens of activations, the ring's K/V buffers, states over dp·cp") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    const Strategy s = megatron_cp4();
    CHECK(cp_local_kv_bytes(m, s) == doctest::Approx(kLocalKv));
    // Megatron's p2p ring: send and receive buffers of K,V forward, of (K,V) and (dK,dV) backward: 4 × local.
    const MemoryEstimate mem = estimate_memory(m, s, c);
    CHECK(item_bytes(mem.peak_stage(), "context-parallel K/V buffers") == doctest::Approx(4 * kLocalKv));
    // torchtitan's all-gather, its backward: the whole sequence's K,V (4 × local), the local K,V as the gather's input
    // and made contiguous (2 × local), two fp32 dK,dV (2 × local × 4/2 bytes) and the fp32 dQ (2048 tokens × 4096).
    Strategy tt = s;
    tt.framework = Framework::torchtitan;
    tt.zero = 3;
    CHECK(cp_kv_buffer_bytes(m, tt) == doctest::Approx(6 * kLocalKv + 2 * kLocalKv * 2 + 4.0 * 2048 * 4096));
    // A block's saved activations on a CP rank are those of a sequence of seq/cp tokens.
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    Strategy quarter = s;
    quarter.cp = 1;
    quarter.dp = 8;
    quarter.seq = 2048;
    quarter.global_batch = 8;
    CHECK(block_activation_bytes(m, s, fw) == doctest::Approx(block_activation_bytes(m, quarter, fw)));
    Strategy whole = quarter;
    whole.seq = 8192;
    CHECK(block_activation_bytes(m, s, fw) == doctest::Approx(block_activation_bytes(m, whole, fw) / 4));
    // The distributed optimizer shards over dp·cp = 8 ranks: the same states as dp 8 without CP.
    const MemoryEstimate dp8 = estimate_memory(m, whole, c);
    CHECK(shard_degree(s) == 8);
    CHECK(mem.peak_stage().peak.optimizer == doctest::Approx(dp8.peak_stage().peak.optimizer));
    CHECK(mem.peak_stage().peak.master == doctest::Approx(dp8.peak_stage().peak.master));
  }

  TEST_CASE("the ring: bytes per step, cp − 1 hops forward, dK/dV backward, exposure beyond the slices") {
    const ModelSpec m = presets().model("llama3-8b");
    const ClusterSpec c = presets().cluster("dgx-h100");
    const Strategy s = megatron_cp4();
    const MicrobatchCosts mb = microbatch_costs(m, s, c);
    const GroupLayout hop = cp_ring_link(s, c);
    CHECK(hop.ranks_per_node == 2);  // 4 CP ranks at stride 1 stay inside the NVLink domain
    CHECK(mb.cp.fwd.steps == 4);
    CHECK(mb.cp.fwd.first_s == doctest::Approx(collective_time_s(c, Collective::send_recv, kLocalKv, hop)));
    CHECK(mb.cp.fwd.step_s == doctest::Approx(mb.cp.fwd.first_s));
    CHECK(mb.cp.bwd.step_s == doctest::Approx(collective_time_s(c, Collective::send_recv, 2 * kLocalKv, hop)));
    CHECK(mb.cp.bwd.tail_s == doctest::Approx(mb.cp.fwd.first_s));  // the last dK,dV hop home
    // 3 hops forward, each hidden behind its slice but for what it outlasts; the hidden part costs 10 % of itself.
    const CpRing& f = mb.cp.fwd;
    const double hidden = 3 * std::min(f.step_s, f.slice_s);
    CHECK(mb.block_cp_fwd_s == doctest::Approx(3 * std::max(0.0, f.step_s - f.slice_s) + kOverlapComputeSlowdown * hidden));
    // The step: every block's rings on the critical path (32 blocks, one micro-batch).
    const StepTime t = estimate_step_time(m, s, c);
    CHECK(t.exposed_cp_s == doctest::Approx(32 * (mb.block_cp_fwd_s + mb.block_cp_bwd_s)));
    CHECK(t.exposed_comm_s == doctest::Approx(t.exposed_tp_s + t.exposed_cp_s + t.exposed_pp_s + t.exposed_dp_s));
    // Each rank does 1/cp of the causal attention, in cp slices: twice the CP degree, a quarter of the slice.
    Strategy s8 = s;
    s8.cp = 8;
    s8.dp = 1;
    s8.global_batch = 1;
    CHECK(microbatch_costs(m, s8, c).cp.fwd.slice_s == doctest::Approx(f.slice_s / 4));
  }

  TEST_CASE("torch's merge traffic around its ring kernels (all-gather variant only)") {
    const ModelSpec m = presets().model("llama3-8b");
    Strategy tt = megatron_cp4();
    tt.framework = Framework::torchtitan;
    tt.zero = 3;
    // q = 2048 tokens · 4096 = 8,388,608 output elements, kv = 2 · 2048 · 1024 = 4,194,304; bf16 (a = 2), 4 steps.
    // Forward: q · ((2 + 4) + 3 · (0.75 · 38 + 4) + (4 + 2)) + 3 · 2 · 2 · kv = q · 109.5 + 12 · kv.
    const CpMergeBytes b = cp_merge_bytes(m, tt);
    CHECK(b.fwd == doctest::Approx(8388608.0 * 109.5 + 12 * 4194304.0));
    // Backward: (q + kv) · (4 + 4 · (0.75 · 10 + 4) + 6) + 4 · 8 · kv + 3 · 4 · kv.
    CHECK(b.bwd == doctest::Approx(12582912.0 * 56 + 44 * 4194304.0));
    CHECK(cp_merge_bytes(m, megatron_cp4()).fwd == 0);  // Transformer Engine's correction is not priced
  }

  TEST_CASE("a ring that leaves the node runs at the network's pace, and short slices expose it") {
    const ModelSpec m = presets().model("llama3-8b");
    ClusterSpec c = presets().cluster("h100-800gbps");  // 800 Gb/s per node of 8
    Strategy s = megatron_cp4();
    s.gpus = 16;
    s.cp = 16;
    s.dp = 1;
    s.global_batch = 1;
    s.seq = 4096;  // 256 tokens per rank: 2 · 256 · 8 · 128 · 2 = 1,048,576 bytes per hop
    const GroupLayout hop = cp_ring_link(s, c);
    CHECK(hop.ranks_per_node == 1);
    const MicrobatchCosts mb = microbatch_costs(m, s, c);
    CHECK(mb.cp.fwd.step_s == doctest::Approx(collective_time_s(c, Collective::send_recv, 1048576.0, hop)));
    CHECK(mb.cp.fwd.step_s > mb.cp.fwd.slice_s);  // exposed: 15 hops, each beyond its slice
    const CpRing& f = mb.cp.fwd;
    CHECK(mb.block_cp_fwd_s ==
          doctest::Approx(15 * (f.step_s - f.slice_s) + kOverlapComputeSlowdown * 15 * f.slice_s));
  }

  TEST_CASE("the simulator plays the ring on its own stream and agrees with the analytic model") {
    const ModelSpec m = presets().model("llama3-8b");
    for (const char* cluster : {"dgx-h100", "h100-800gbps"}) {
      CAPTURE(cluster);
      const ClusterSpec c = presets().cluster(cluster);
      Strategy s = megatron_cp4();
      s.gpus = 16;
      s.cp = 16;
      s.dp = 1;
      s.global_batch = 16;  // 16 micro-batches: the once-per-step gradient reduction is a small part
      s.seq = 4096;
      const sim::SimResult r = sim::simulate(m, s, c);
      CHECK(r.analytic.time.exposed_cp_s > 0);
      CHECK(r.critical_stage().exposed_cp_s == doctest::Approx(r.analytic.time.exposed_cp_s).epsilon(0.02));
      CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.03);
      CHECK(r.peak_stage().peak_bytes == doctest::Approx(r.analytic.memory.peak_stage().peak.total()).epsilon(0.03));
    }
    // torchtitan's all-gather variant with FSDP and a pipeline.
    const ClusterSpec c = presets().cluster("dgx-h100");
    Strategy tt = megatron_cp4();
    tt.framework = Framework::torchtitan;
    tt.gpus = 16;
    tt.pp = 2;
    tt.cp = 4;
    tt.dp = 2;
    tt.zero = 3;
    tt.global_batch = 8;
    tt.seq = 16384;
    const sim::SimResult r = sim::simulate(m, tt, c);
    CHECK(std::fabs(r.step_s / r.analytic.time.step_s - 1) < 0.03);
  }

  TEST_CASE("bad input: CP not splitting the sequence or the GPUs, runtimes without CP, one error line each") {
    const std::string base = "predict --preset llama3-8b --gpus 8 --seq 8192 ";
    check_refused(base + "--framework torchtitan --cp 3", "tp·pp·cp");                  // 3 does not divide 8
    check_refused(base + "--framework torchtitan --cp 2 --dp 8", "tp·pp·cp·dp");          // 1·1·2·8 ≠ 8
    check_refused("predict --preset llama3-8b --gpus 8 --seq 8196 --framework torchtitan --cp 4", "--seq 8196");
    check_refused(base + "--framework torchtitan --cp 16", "--cp 16");                   // 16 > 8 GPUs
    check_refused(base + "--framework fsdp --cp 2", "--cp > 1");
    check_refused(base + "--framework fsdp1 --cp 2", "FSDP1");
    check_refused(base + "--framework deepspeed --cp 2", "Ulysses");
    check_refused(base + "--framework reference --cp 2", "--cp");
    check_refused(base + "--framework megatron --cp 2 --no-flash-attn", "--cp needs a fused attention kernel");
    check_refused("plan --preset llama3-8b --gpus 8 --seq 8192 --framework torchtitan --cp 3", "--cp 3");
    check_refused("plan --preset llama3-8b --gpus 8 --seq 8196 --framework torchtitan --cp 4", "--seq 8196");
    check_refused("plan --preset llama3-8b --gpus 8 --seq 8192 --framework deepspeed --cp 2", "Ulysses");
    check_refused("simulate --preset llama3-8b --gpus 8 --seq 8192 --framework fsdp --cp 2", "--cp > 1");
  }

  TEST_CASE("plan at 128 K tokens: Llama 3 405B on 16,384 H100 picks context parallelism") {
    for (const char* fw : {"torchtitan", "megatron"}) {
      CAPTURE(fw);
      const auto r = run_cli(std::string("plan --preset llama3-405b --gpus 16384 --seq 131072 --cluster llama3-h100-24k "
                                         "--format json --framework ") + fw);
      CAPTURE(r.err);
      REQUIRE(r.exit_code == 0);
      const auto j = nlohmann::json::parse(r.out);
      const auto& cfg = j["candidates"][j["recommended"].get<size_t>()]["config"];
      CHECK(cfg["cp"].get<int64_t>() > 1);
      CHECK(cfg["tp"].get<int64_t>() * cfg["pp"].get<int64_t>() * cfg["cp"].get<int64_t>() * cfg["dp"].get<int64_t>() ==
            16384);
    }
    // The plain FSDP2 loop has no CP: nothing fits, and the advice names the runtime that splits the sequence.
    const auto fsdp = run_cli("plan --preset llama3-405b --gpus 16384 --seq 131072 --cluster llama3-h100-24k");
    CHECK(fsdp.exit_code == 3);
    CHECK(fsdp.err.find("--framework torchtitan (context parallelism) (ZeRO-3 + TP + CP") != std::string::npos);
    // At 8 K tokens the search does not try CP (cp_options in planner/search.cpp).
    const auto r = run_cli("plan --preset llama3-8b --gpus 16 --cluster dgx-h100 --framework torchtitan --format json");
    REQUIRE(r.exit_code == 0);
    const nlohmann::json short_plan = nlohmann::json::parse(r.out);  // named: a range-for over parse()[...] dangles
    for (const auto& cand : short_plan["candidates"]) CHECK(cand["config"]["cp"] == 1);
  }

  TEST_CASE("--emit writes the CP degree into the torchtitan files and the Megatron arguments") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("shardplan_cp_emit_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const auto r = run_cli("plan --preset llama3-8b --gpus 16 --cluster dgx-h100 --seq 65536 --framework torchtitan "
                           "--cp 4 --format json --emit '" + dir.string() + "'");
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    const auto& cfg = j["candidates"][j["recommended"].get<size_t>()]["config"];
    CHECK(cfg["cp"] == 4);
    const std::string toml = read_all(dir / "torchtitan.toml");
    CHECK(toml.find("context_parallel_degree = 4\n") != std::string::npos);
    CHECK(read_all(dir / "torchtitan.sh").find("  --parallelism.context-parallel-degree 4\n") != std::string::npos);
    // torchtitan's mesh: replicate × shard × cp × tp × pp = the GPUs (the data-parallel shard degree excludes cp).
    auto value = [&](const std::string& key) {
      const size_t at = toml.find(key + " = ");
      REQUIRE(at != std::string::npos);
      return std::stoll(toml.substr(at + key.size() + 3));
    };
    CHECK(value("data_parallel_replicate_degree") * value("data_parallel_shard_degree") * 4 *
              value("tensor_parallel_degree") * value("pipeline_parallel_degree") ==
          16);
    CHECK(read_all(dir / "megatron_args.sh").find("--context-parallel-size 4") != std::string::npos);
    CHECK(read_all(dir / "train_fsdp2.py").find("GPUS, TP, PP, CP, EP = 16, ") != std::string::npos);
    fs::remove_all(dir);
  }
}
