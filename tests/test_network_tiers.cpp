// Issue 18, items 3 and 4: today's GPUs and clusters as presets with sources, NVLink domains larger than a host
// (GB200 NVL72), a leaf/spine fabric with an oversubscribed spine, and collectives priced per tier.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "io/preset_store.hpp"
#include "planner/comm_cost.hpp"
#include "planner/compute_cost.hpp"
#include "planner/groups.hpp"
#include "planner/step_time.hpp"

using namespace shardplan;
using shardplan::test::is_one_error_line;
using shardplan::test::run_cli;

namespace {

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

constexpr double kGiBytes = 1024.0 * 1024.0 * 1024.0;

Strategy layout(int64_t gpus, int64_t tp, int64_t pp) {
  Strategy s;
  s.gpus = gpus;
  s.tp = tp;
  s.pp = pp;
  s.dp = gpus / (tp * pp);
  return s;
}

// A DGX H100 SuperPOD-like fabric at 16k GPUs: scalable units of 32 nodes (256 GPUs) under one set of rail leaves,
// the spine at `oversubscription`:1.
ClusterSpec superpod_h100(double oversubscription) {
  ClusterSpec c = presets().cluster("dgx-h100");
  c.inter.gpus_per_leaf = 256;
  c.inter.spine_oversubscription = oversubscription;
  validate_cluster(c);
  return c;
}

std::string write_temp(const std::string& name, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("shardplan_net_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

// A cluster YAML around a fabric fragment: `top` goes at the top level, `inter` inside inter_node.
std::string cluster_yaml(const std::string& top, const std::string& inter, const std::string& link = "nvswitch",
                         int gpus_per_node = 4) {
  return "name: t\ngpu: gb200\ngpus_per_node: " + std::to_string(gpus_per_node) + "\n" + top +
         "intra_node:\n  link: " + link + "\n  gbps: 900\n  latency_us: 3\n"
         "inter_node:\n  nics_per_node: 4\n  nic_gbps: 400\n  latency_us: 6\n" + inter;
}

}  // namespace

TEST_SUITE("network tiers") {
  TEST_CASE("new GPU presets load, name their source and fall in the right generation") {
    struct Want {
      std::string name;
      GpuGeneration gen;
      double bf16;  // dense, from the file's cited datasheet
    };
    const Want wants[] = {{"b200", GpuGeneration::blackwell, 2250},  {"b300", GpuGeneration::blackwell, 2250},
                          {"gb200", GpuGeneration::blackwell, 2500}, {"h100-pcie", GpuGeneration::hopper, 756.5},
                          {"h20", GpuGeneration::hopper, 148},       {"l4", GpuGeneration::ampere, 121},
                          {"mi300x", GpuGeneration::cdna3, 1307.4},  {"mi325x", GpuGeneration::cdna3, 1307.4},
                          {"mi355x", GpuGeneration::cdna4, 2516.6}};
    for (const Want& w : wants) {
      CAPTURE(w.name);
      const GpuSpec g = presets().gpu(w.name);
      CHECK(gpu_generation(g) == w.gen);
      CHECK(g.bf16_tflops == doctest::Approx(w.bf16));
      // A datasheet or vendor page to check against; the H20 has no public NVIDIA page (its file says so).
      if (w.name != "h20") CHECK(g.source.find("http") != std::string::npos);
      CHECK(!g.source.empty());
      CHECK(g.fp8_tflops == doctest::Approx(2 * g.bf16_tflops).epsilon(0.01));  // every one: FP8 dense = 2 × bf16
    }
    // By peak alone the H20 (148 TFLOP/s) would be Ampere-class and the MI300X (1307) Hopper-class.
    GpuSpec h20 = presets().gpu("h20");
    h20.architecture = GpuArchitecture::unknown;
    CHECK(gpu_generation(h20) == GpuGeneration::ampere);
    // H200 against its datasheet: 1,979 / 3,958 TFLOP/s with sparsity, 4.8 TB/s, 700 W.
    const GpuSpec h200 = presets().gpu("h200");
    CHECK(h200.bf16_tflops == doctest::Approx(1979.0 / 2).epsilon(0.001));
    CHECK(h200.fp8_tflops == doctest::Approx(3958.0 / 2).epsilon(0.001));
    CHECK(h200.hbm_gbps == 4800);
    CHECK(h200.tdp_w == 700);
  }

  TEST_CASE("Blackwell Ultra parts are Blackwell-class with their own sustained fraction") {
    // B300 and GB300 are one generation with B200 and GB200 (error bands, FP8 recipes) but a new die: the compute
    // model gives them their own fitted share of the same datasheet rates (compute_cost.cpp kSustainedBlackwellUltra).
    for (const char* name : {"b300", "gb300"}) {
      CAPTURE(name);
      const GpuSpec g = presets().gpu(name);
      CHECK(g.architecture == GpuArchitecture::blackwell_ultra);
      CHECK(gpu_generation(g) == GpuGeneration::blackwell);
      CHECK(std::string(to_string(g.architecture)) == "blackwell-ultra");
    }
    const GpuSpec b200 = presets().gpu("b200"), b300 = presets().gpu("b300");
    CHECK(b200.architecture == GpuArchitecture::blackwell);
    CHECK(b300.bf16_tflops == b200.bf16_tflops);  // the datasheets' rates are the same ...
    CHECK(sustained_tensor_fraction(b300) > sustained_tensor_fraction(b200));  // ... what a step sustains is not
    GpuSpec relabelled = b300;
    relabelled.architecture = GpuArchitecture::blackwell;
    CHECK(sustained_tensor_fraction(relabelled) == sustained_tensor_fraction(b200));
    CHECK(parse_gpu_architecture("blackwell-ultra") == GpuArchitecture::blackwell_ultra);
  }

  TEST_CASE("new cluster presets: NVLink domains, AMD xGMI, the leaf/spine of Meta's Llama 3 cluster") {
    const ClusterSpec nvl72 = presets().cluster("gb200-nvl72");
    CHECK(nvl72.gpus_per_node == 4);
    CHECK(nvlink_domain_size(nvl72) == 72);
    CHECK(nvl72.max_gpus == 72);
    CHECK(nvlink_domain_size(presets().cluster("dgx-b200")) == 8);
    CHECK(nvlink_domain_size(presets().cluster("gb200-nvl72-superpod")) == 72);
    CHECK(presets().cluster("mi300x-8").intra.kind == LinkKind::xgmi);
    CHECK(presets().cluster("h100-pcie-x8").intra.kind == LinkKind::pcie);
    const ClusterSpec meta = presets().cluster("llama3-h100-24k");
    CHECK(meta.inter.gpus_per_leaf == 3072);  // Llama 3 §3.3.1: pods of 3,072 GPUs at full bisection
    CHECK(meta.inter.spine_oversubscription == 7);  // "oversubscription ratio of 1:7"
    for (const char* name : {"dgx-b200", "gb200-nvl72", "gb200-nvl72-superpod", "mi300x-8", "h100-pcie-x8",
                                    "llama3-h100-24k"}) {
      CAPTURE(name);
      CHECK(presets().cluster(name).source.find("http") != std::string::npos);
    }
    // --gpu mi300x alone: AMD's platform is a mesh of Infinity Fabric links, not a switch.
    CHECK(cluster_from_gpu(presets().gpu("mi300x")).intra.kind == LinkKind::xgmi);
  }

  TEST_CASE("presets lists show the new presets with class, domain and source") {
    const auto gpus = run_cli("presets gpus");
    REQUIRE(gpus.exit_code == 0);
    for (const char* name : {"b200", "b300", "gb200", "h100-pcie", "h20", "l4", "mi300x", "mi325x", "mi355x"})
      CHECK(gpus.out.find(std::string("\n") + name + " ") != std::string::npos);
    CHECK(gpus.out.find("CDNA4-class") != std::string::npos);
    CHECK(gpus.out.find("NVIDIA DGX B200 datasheet") != std::string::npos);
    const auto clusters = run_cli("presets clusters");
    REQUIRE(clusters.exit_code == 0);
    CHECK(clusters.out.find("NVLink domain") != std::string::npos);
    CHECK(clusters.out.find("Llama 3 Herd of Models") != std::string::npos);
  }

  TEST_CASE("a 64-rank all-reduce is NVLink-priced in one NVL72 rack, network-priced across DGX B200 nodes") {
    const ClusterSpec nvl72 = presets().cluster("gb200-nvl72");
    const ClusterSpec dgx = presets().cluster("dgx-b200");
    const Strategy s = layout(64, 64, 1);
    const GroupLayout in_rack = tp_group(s, nvl72);
    const GroupLayout across = tp_group(s, dgx);
    CHECK(in_rack.ranks_per_node == 64);  // all 64 in the 72-GPU domain, though a tray has 4
    CHECK(network_tier(nvl72, in_rack) == NetworkTier::nvlink);
    CHECK(across.ranks_per_node == 8);
    CHECK(network_tier(dgx, across) == NetworkTier::leaf);
    // NVL72, one ring over NVLink: 6.6 µs + 2·63 steps × 3 µs + (2·63/64 · 1 GiB) / (900 GB/s × 0.78)
    //   = 6.6e-6 + 378e-6 + 2113929216 / 702e9 = 3.3959e-3 s.
    CHECK(collective_time_s(nvl72, Collective::all_reduce, kGiBytes, in_rack) == doctest::Approx(3.39590e-3).epsilon(1e-4));
    // DGX B200, 8 nodes of 8: the NIC leg 2113929216 / 8 bytes at 400 Gb/s × 0.92 = 46 GB/s takes 5.7444e-3 s
    // (the NVLink leg, 7/8 of it at 702 GB/s, 2.6349e-3, runs alongside); + 6.6 µs + 112 × 3 µs + 14 × 6 µs
    //   = 6.1710e-3 s (the tree, 6.57e-3, loses).
    CHECK(collective_time_s(dgx, Collective::all_reduce, kGiBytes, across) == doctest::Approx(6.17097e-3).epsilon(1e-4));
  }

  TEST_CASE("plan on GB200 NVL72 places TP beyond a 4-GPU host inside the 72-GPU domain") {
    // TP 8 > 4 GPUs per tray: refused before the domain counted, allowed now, and priced on NVLink.
    const auto r = run_cli("plan --preset llama3-70b --cluster gb200-nvl72 --gpus 64 --tp 8 --format json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    REQUIRE(!j["candidates"].empty());
    for (const auto& cand : j["candidates"]) {
      CHECK(cand["config"]["tp"] == 8);
      CHECK(cand["network"]["nvlink_domain_gpus"] == 72);
      for (const auto& g : cand["network"]["groups"]) CHECK(g["tier"] == "nvlink");  // 64 GPUs: all in one domain
    }
    // The same plan on DGX B200 crosses nodes for its data-parallel groups.
    const auto d = run_cli("plan --preset llama3-70b --cluster dgx-b200 --gpus 64 --tp 8 --format json");
    REQUIRE(d.exit_code == 0);
    const auto dj = nlohmann::json::parse(d.out);
    bool any_leaf = false;
    for (const auto& g : dj["candidates"][0]["network"]["groups"]) any_leaf = any_leaf || g["tier"] == "leaf";
    CHECK(any_leaf);
  }

  TEST_CASE("spine share: one flow per domain of members under a leaf, min(1, m/o)") {
    const ClusterSpec c = superpod_h100(2);
    // Data-parallel groups of 128 at stride 8 (TP 8): 32 members under each 256-GPU leaf, one per node, 4 leaves:
    // 32 leaf GPUs per uplink flow, far above 2, so the spine does not slow the ring.
    const Strategy s = layout(16384, 8, 16);
    const GroupLayout dp = shard_group(s, c);
    CHECK(dp.leaf_groups == 4);
    CHECK(dp.gpus_per_spine_flow == 32);
    CHECK(network_tier(c, dp) == NetworkTier::spine);
    CHECK(spine_bandwidth_factor(c, dp) == 1.0);
    // Pipeline neighbours 1024 ranks apart: every GPU's send leaves its leaf, 1 leaf GPU per flow: 1/2.
    const GroupLayout pp = pp_link(s, c);
    CHECK(network_tier(c, pp) == NetworkTier::spine);
    CHECK(spine_bandwidth_factor(c, pp) == doctest::Approx(0.5));
    // Groups of 16 at stride 1024 (HSDP replicas of a 1024-rank shard group): one member per leaf, 1/2 again.
    Strategy h = layout(16384, 1, 1);
    h.hsdp = 1024;
    h.zero = 3;
    const GroupLayout repl = replicate_group(h, c);
    CHECK(repl.size == 16);
    CHECK(spine_bandwidth_factor(c, repl) == doctest::Approx(0.5));
    // At full bisection nothing changes.
    CHECK(spine_bandwidth_factor(superpod_h100(1), pp) == 1.0);
  }

  TEST_CASE("16k GPUs behind a 2:1 spine: the pipeline sends slow down and the output says so") {
    const ModelSpec m = presets().model("llama3-405b");
    Strategy s = layout(16384, 8, 16);
    s.framework = Framework::megatron;
    s.precision = Precision::megatron_bf16;
    s.zero = 1;
    s.sp = true;
    s.seq = 8192;
    s.micro_batch = 1;
    s.global_batch = 2048;
    s.split.embedding_layers = 1;  // 126 layers + embedding + loss = 128 = 16 × 8 (Megatron needs it even)
    s.split.loss_layers = 1;
    const ClusterSpec full = superpod_h100(1), half = superpod_h100(2);
    // One activation, sequence-parallel: 1 × 8192 × 16384 × 2 B / 8 = 33554432 B, one 400 Gb/s NIC per GPU at 0.92
    // (46 GB/s): 6.6 µs + 6 µs + 0.72944 ms = 0.74204 ms; at half the NIC rate behind the spine 1.47149 ms.
    CHECK(pipeline_send_s(m, s, full) == doctest::Approx(0.742044e-3).epsilon(1e-4));
    CHECK(pipeline_send_s(m, s, half) == doctest::Approx(1.471493e-3).epsilon(1e-4));
    const StepTime t_full = estimate_step_time(m, s, full), t_half = estimate_step_time(m, s, half);
    CHECK(t_half.exposed_pp_s > t_full.exposed_pp_s);
    CHECK(t_half.step_s > t_full.step_s);
    CHECK(t_half.exposed_dp_s == doctest::Approx(t_full.exposed_dp_s));  // the DP ring keeps its rate (above)

    // The same through the CLI, with the cluster as a file: the table names the collective that crosses the spine.
    const std::string dgx = "name: sp\ngpu: h100-sxm\ngpus_per_node: 8\nintra_node:\n  link: nvswitch\n  gbps: 450\n"
                            "  latency_us: 3\ninter_node:\n  nics_per_node: 8\n  nic_gbps: 400\n  latency_us: 6\n"
                            "  gpus_per_leaf: 256\n";
    const std::string flags = " --preset llama3-405b --gpus 16384 --tp 8 --pp 16 --framework megatron --sp --seq 8192 "
                              "--micro-batch 1 --global-batch 2048 --pp-embedding-layers 1 --pp-loss-layers 1";
    const auto a = run_cli("predict --cluster " + write_temp("sp1.yaml", dgx + "  spine_oversubscription: 1\n") + flags +
                           " --format json");
    const auto b = run_cli("predict --cluster " + write_temp("sp2.yaml", dgx + "  spine_oversubscription: 2\n") + flags +
                           " --format json");
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
    CHECK(jb["time"]["step_s"].get<double>() > ja["time"]["step_s"].get<double>());
    CHECK(jb["network"]["crosses_spine"] == nlohmann::json::array({"dp", "pp"}));
    for (const auto& g : jb["network"]["groups"])
      if (g["group"] == "pp") CHECK(g["spine_bandwidth_factor"].get<double>() == doctest::Approx(0.5));
    const auto table = run_cli("predict --cluster " + write_temp("sp2.yaml", dgx + "  spine_oversubscription: 2\n") +
                               flags);
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("send_recv crosses the spine at 50 % of the NIC rate") != std::string::npos);

    // The simulator prices the same collectives with the same functions (sim/costs.cpp): its pipeline sends slow too.
    auto sim = [&](const std::string& file) {
      const auto r = run_cli("simulate --cluster " + file + flags + " --format json");
      REQUIRE(r.exit_code == 0);
      return nlohmann::json::parse(r.out)["time"];
    };
    const auto sa = sim(write_temp("sp1.yaml", dgx + "  spine_oversubscription: 1\n"));
    const auto sb = sim(write_temp("sp2.yaml", dgx + "  spine_oversubscription: 2\n"));
    CHECK(sb["exposed_comm_by_group_s"]["pp"].get<double>() > sa["exposed_comm_by_group_s"]["pp"].get<double>());
    CHECK(sb["step_s"].get<double>() > sa["step_s"].get<double>());

    // And a plan: whatever it recommends at 2:1 is slower than its pick at full bisection, and names the crossing.
    auto plan = [&](const std::string& file) {
      // ZeRO-1, as the pipelined layouts this test is about (Megatron-FSDP's HSDP + TP would win without PP).
      const auto r = run_cli("plan --preset llama3-405b --gpus 16384 --seq 8192 --global-batch 2048 --framework "
                             "megatron --zero 1 --format json --cluster " + file);
      REQUIRE(r.exit_code == 0);
      const auto j = nlohmann::json::parse(r.out);
      return j["candidates"][j["recommended"].get<size_t>()];
    };
    const auto pa = plan(write_temp("sp1.yaml", dgx + "  spine_oversubscription: 1\n"));
    const auto pb = plan(write_temp("sp2.yaml", dgx + "  spine_oversubscription: 2\n"));
    CHECK(pb["time"]["step_s"].get<double>() > pa["time"]["step_s"].get<double>());
    bool slowed = false;
    for (const auto& g : pb["network"]["groups"])
      slowed = slowed || (g["tier"] == "spine" && g["spine_bandwidth_factor"].get<double>() < 1);
    CHECK(slowed);
    // The table says it under the recommendation.
    const auto plan_table = run_cli("plan --preset llama3-405b --gpus 16384 --seq 8192 --global-batch 2048 --framework "
                                    "megatron --zero 1 --cluster " + write_temp("sp2.yaml", dgx + "  spine_oversubscription: 2\n"));
    REQUIRE(plan_table.exit_code == 0);
    CHECK(plan_table.out.find("Crossing the spine:") != std::string::npos);
    CHECK(plan_table.out.find("send_recv at 50 % of the NIC rate (2:1 oversubscribed)") != std::string::npos);
  }

  TEST_CASE("Llama 3's cluster: pods of 3,072 at 1:7 slow the pipeline boundary between pods") {
    const ClusterSpec meta = presets().cluster("llama3-h100-24k");
    const Strategy s = layout(16384, 8, 16);
    // Stage blocks of 1024 GPUs, three to a pod: the boundary between pods sends 1024 flows into 3072/7 NICs of
    // uplink, 3/7 of a NIC each.
    CHECK(spine_bandwidth_factor(meta, pp_link(s, meta)) == doctest::Approx(3.0 / 7));
    CHECK(network_tier(meta, shard_group(s, meta)) == NetworkTier::leaf);  // DP of 1024 GPUs inside one pod
  }

  TEST_CASE("bad fabric values: one error line naming the key, exit 2") {
    struct Bad {
      std::string yaml, key;
    };
    const Bad bads[] = {
        {cluster_yaml("nvlink_domain_gpus: 70\n", ""), "nvlink_domain_gpus"},     // not a multiple of 4
        {cluster_yaml("nvlink_domain_gpus: 1152\n", ""), "nvlink_domain_gpus"},   // beyond NVLink's 576
        {cluster_yaml("nvlink_domain_gpus: 144\nmax_gpus: 72\n", ""), "nvlink_domain_gpus"},  // larger than the cluster
        {cluster_yaml("nvlink_domain_gpus: 16\n", "", "pcie"), "nvlink_domain_gpus"},  // PCIe spans no hosts
        {cluster_yaml("nvlink_domain_gpus: 72\n", "  gpus_per_leaf: 100\n"), "gpus_per_leaf"},
        {cluster_yaml("", "  gpus_per_leaf: 64\n  spine_oversubscription: 0.5\n"), "spine_oversubscription"},
        {cluster_yaml("", "  spine_oversubscription: 2\n"), "spine_oversubscription"},  // no leaf to oversubscribe
        {cluster_yaml("", "  spine_oversub: 2\n"), "spine_oversub"},                    // unknown key
        {cluster_yaml("nvlink_domain_gpus: -72\n", ""), "nvlink_domain_gpus"},
    };
    int i = 0;
    for (const Bad& b : bads) {
      CAPTURE(b.yaml);
      const auto r = run_cli("predict --preset tiny --cluster " + write_temp("bad" + std::to_string(i++) + ".yaml", b.yaml));
      CHECK(is_one_error_line(r));
      CHECK(r.err.find(b.key) != std::string::npos);
    }
    // Flags that break the preset's fabric name the flag.
    const auto per_node = run_cli("predict --preset tiny --cluster gb200-nvl72 --gpus-per-node 16");  // 72 = 4.5 × 16
    CHECK(is_one_error_line(per_node));
    CHECK(per_node.err.find("--gpus-per-node 16") != std::string::npos);
    CHECK(per_node.err.find("nvlink_domain_gpus") != std::string::npos);
    const auto too_many = run_cli("predict --preset tiny --cluster gb200-nvl72 --gpus 144");
    CHECK(is_one_error_line(too_many));
    CHECK(too_many.err.find("--gpus 144") != std::string::npos);
    CHECK(too_many.err.find("max_gpus") != std::string::npos);
  }
}
