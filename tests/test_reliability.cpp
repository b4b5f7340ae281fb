// Regression tests for what fuzzing and fault injection found (reports/reliability.md), and determinism.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>

#include "io/hf_config.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"
#include "planner/search.hpp"
#include "planner/strategy.hpp"
#include "tests/cli_runner.hpp"

using namespace shardplan;

TEST_SUITE("reliability") {
  TEST_CASE("fuzz: invalid UTF-8 that made yaml-cpp 0.7 loop is refused at once, naming the line") {
    // Found by fuzz/fuzz_cluster_yaml: 278 bytes with 0xFB runs; yaml-cpp's LoadAll did not return in 20 s.
    const std::string text = test::read_all(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/fuzz-yaml-cpp-hang-invalid-utf8.yaml");
    REQUIRE(text.size() == 278);
    const auto start = std::chrono::steady_clock::now();
    for (auto parse : {+[](const std::string& t) { (void)parse_model_yaml(t, "hang.yaml"); },
                       +[](const std::string& t) { (void)parse_gpu_yaml(t, "hang.yaml"); },
                       +[](const std::string& t) { (void)parse_cluster_yaml(t, "hang.yaml", PresetStore::builtin()); }}) {
      try {
        parse(text);
        FAIL("accepted invalid UTF-8");
      } catch (const InputError& e) {
        CHECK(std::string(e.what()).find("hang.yaml:1: byte 0xFB is not UTF-8") == 0);
      }
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  }

  TEST_CASE("fuzz: a stray top-level ',' that made yaml-cpp 0.7's LoadAll loop forever is an error at once") {
    // Found by fuzz/fuzz_cluster_yaml: the 3-byte input ",ne".
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(parse_cluster_yaml(",ne", "comma.yaml", PresetStore::builtin()), InputError);
    CHECK_THROWS_AS(parse_model_yaml(",", "comma.yaml"), InputError);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  }

  TEST_CASE("fuzz: parallel degrees whose product overflows int64 are refused, not multiplied") {
    // Found by fuzz/fuzz_strategy: tp·pp = 1099505336329, × dp 16777213 overflowed.
    const PresetStore store = PresetStore::builtin();
    Strategy s;
    s.tp = 1048575;
    s.pp = 1048575;
    s.dp = 16777213;
    s.gpus = 8;
    s.global_batch = 8;
    s.seq = 2048;
    CHECK_THROWS_AS(validate_strategy(s, store.model("8b"), store.cluster("a800x8")), InputError);
    const auto r = test::run_cli("predict --preset 8b --gpus 16777216 --tp 16777216 --pp 16777216 --dp 16777216");
    CHECK(test::is_one_error_line(r));
  }

  TEST_CASE("fuzz: a configuration needing more bytes than int64 holds is refused, not summed") {
    // Found by fuzz/fuzz_strategy: attention without flash at seq 2^25 overflowed the sum of the components.
    const PresetStore store = PresetStore::builtin();
    Strategy s;
    s.gpus = 8;
    s.dp = 8;
    s.global_batch = 8;
    s.seq = int64_t{1} << 25;
    s.flash_attn = false;
    CHECK_THROWS_AS(predict(store.model("8b"), s, store.cluster("a800x8")), InputError);
    s.seq = 2048;
    CHECK(predict(store.model("8b"), s, store.cluster("a800x8")).peak_bytes() > 0);
  }

  TEST_CASE("control characters and a NUL byte are refused; UTF-8 text (comments in Chinese) is accepted") {
    CHECK_THROWS_AS(parse_model_yaml(std::string("name: x\0\nlayers: 2\n", 19), "nul.yaml"), InputError);
    CHECK_THROWS_AS(parse_model_yaml("name: x\x1b[31m\n", "esc.yaml"), InputError);
    const std::string ok = "# 模型 (UTF-8 comment)\nname: tiny\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 4\n"
                           "ffn_hidden: 256\nvocab: 100\nseq: 32\nmlp: gelu\nnorm: layernorm\ntied_embeddings: true\n";
    CHECK(parse_model_yaml(ok, "ok.yaml").hidden == 64);
  }

  TEST_CASE("fuzz: text quoted from a file never splits the one error line (newlines, escapes)") {
    auto message_of = [](auto&& parse) {
      try {
        parse();
      } catch (const InputError& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    // Found by fuzz/fuzz_hf_config: model_type "gpt\neox" (a JSON escape) was quoted raw into the message.
    const std::string hf = test::read_all(std::string(SHARDPLAN_SOURCE_DIR) +
                                          "/fuzz/corpus/hf_config/regression-newline-in-model-type.json");
    std::string m = message_of([&] { (void)parse_hf_config(hf, "config.json"); });
    CHECK(m.find('\n') == std::string::npos);
    CHECK(m.find("model_type 'gpt\\neox'") != std::string::npos);
    // Found by fuzz/fuzz_profile_yaml: a plain scalar folded over blank lines keeps newlines; quoted in "got '...'".
    const std::string yaml = test::read_all(std::string(SHARDPLAN_SOURCE_DIR) +
                                            "/fuzz/corpus/profile_yaml/regression-folded-scalar-newlines.yaml");
    for (auto parse : {+[](const std::string& t) { (void)parse_profile_yaml(t, "p.yaml", PresetStore::builtin()); },
                       +[](const std::string& t) { (void)parse_cluster_yaml(t, "p.yaml", PresetStore::builtin()); },
                       +[](const std::string& t) { (void)parse_model_yaml(t, "p.yaml"); }}) {
      m = message_of([&] { parse(yaml); });
      CHECK(m.rfind("p.yaml:1: expected a mapping", 0) == 0);
      CHECK(m.find('\n') == std::string::npos);
    }
    // The same for keys, choices and preset names; an escape byte is written out, not sent to the terminal.
    m = message_of([] { (void)parse_model_yaml("name: x\n\"a\\nb\": 1\n", "k.yaml"); });
    CHECK(m.find("unknown key 'a\\nb'") != std::string::npos);
    m = message_of([] { (void)PresetStore::builtin().model("8b\x1b[2J"); });
    CHECK(m.find("'8b\\x1B[2J'") != std::string::npos);
    CHECK(m.find('\x1b') == std::string::npos);
  }

  TEST_CASE("fuzz: plan's default global batch neither overflows on a saturated --gpus nor loops on --seq 0") {
    // Found by fuzz/fuzz_cli (UBSan: 9223372036854775807 * 1024) and by tests/test_bad_input.cpp (seq 0 hung).
    // planner/batch.hpp: T = min(max(2^22, 2^10·gpus), 2^15·gpus) tokens, gpus kept within [1, 2^40], seq below 1 as 1.
    // 8 GPUs at seq 2048: min(2^22, 2^18) = 2^18 tokens / 2^11 = 128 sequences; 2^24 GPUs: 2^34 / 2^11 = 2^23.
    CHECK(default_batch_target(2048, 8).sequences == 128);
    CHECK(default_batch_target(2048, int64_t{1} << 24).sequences == int64_t{1} << 23);
    CHECK(default_batch_target(2048, INT64_MAX).sequences == int64_t{1} << 39);  // capped at 2^40 GPUs: 2^50 / 2^11
    CHECK(default_batch_target(0, 8).sequences == int64_t{1} << 18);             // as seq 1; the caller refuses seq 0
    CHECK(default_batch_target(-7, 8).sequences == int64_t{1} << 18);
    // The batch itself is a whole number of micro-batches per replica however large the target.
    CHECK(default_global_batch(default_batch_target(2048, INT64_MAX), int64_t{1} << 24, 3) % (int64_t{3} << 24) == 0);
  }

  TEST_CASE("overflow: a 10-trillion-parameter model on 100,000 GPUs is counted exactly and predicted in range") {
    // 200 blocks of hidden 65536, ffn 262144 (GELU, LayerNorm with bias), vocab 256000, untied.
    const ModelSpec m = parse_model_yaml(
        "name: t10\nlayers: 200\nhidden: 65536\nheads: 512\nkv_heads: 512\nffn_hidden: 262144\nvocab: 256000\n"
        "seq: 4096\nmlp: gelu\nnorm: layernorm\ntied_embeddings: false\n",
        "t10.yaml");
    const ClusterSpec c = PresetStore::builtin().cluster("dgx-h100");
    // Per block: attention 4·65536² = 17,179,869,184 + MLP 2·65536·262144 = 34,359,738,368 + two LayerNorms
    // 2·2·65536 = 262,144 → 51,539,869,696; × 200 = 10,307,973,939,200. Embedding and LM head 256000·65536 =
    // 16,777,216,000 each, final norm 131,072: total 10,341,528,502,272 (> 2^43).
    Strategy s;
    s.gpus = 100000;
    s.tp = 8;
    s.pp = 50;
    s.dp = 250;
    s.zero = 1;
    s.framework = Framework::megatron;  // pipeline + ZeRO-1: Megatron-Core's distributed optimizer
    s.seq = 4096;
    s.global_batch = 2000;
    const Prediction p3d = predict(m, s, c);
    CHECK(p3d.params.total == 10'341'528'502'272);
    CHECK(p3d.params.blocks == 200 * 51'539'869'696);
    auto in_range = [](const Prediction& p) {
      const MemoryComponents& k = p.memory.peak_stage().peak;
      for (double v : {k.params, k.grads, k.master, k.optimizer, k.activations, k.logits, k.buffers, k.runtime,
                       k.fragmentation})
        CHECK((std::isfinite(v) && v >= 0));
      CHECK(p.peak_bytes() > 0);
      CHECK(static_cast<double>(p.peak_bytes()) == doctest::Approx(k.total()).epsilon(1e-9));
      CHECK((std::isfinite(p.time.step_s) && p.time.step_s > 0));
      CHECK((std::isfinite(p.throughput.tokens_per_s) && p.throughput.tokens_per_s > 0));
    };
    in_range(p3d);
    // DDP on 100,000 GPUs: every rank holds all 1.03e13 parameters. amp-bf16: bf16 copy 2 B, fp32 master 4 B, Adam
    // 8 B per parameter → 20,683,057,004,544 / 41,366,114,009,088 / 82,732,228,018,176 bytes, ≈ 1.6e14 in all.
    s.tp = 1;
    s.pp = 1;
    s.dp = 100000;
    s.zero = 0;
    s.framework = Framework::fsdp;  // DDP, then FULL_SHARD
    s.global_batch = 100000;
    const Prediction ddp = predict(m, s, c);
    in_range(ddp);
    CHECK(ddp.memory.peak_stage().peak.params == doctest::Approx(20'683'057'004'544.0));
    CHECK(ddp.memory.peak_stage().peak.master == doctest::Approx(41'366'114'009'088.0));
    CHECK(ddp.memory.peak_stage().peak.optimizer == doctest::Approx(82'732'228'018'176.0));
    CHECK_FALSE(ddp.fits());
    // ZeRO-3 over 100,000 ranks: 10,341,528,502,272 / 100,000 = 103,415,285.0 parameters stored per rank.
    s.zero = 3;
    const Prediction z3 = predict(m, s, c);
    in_range(z3);
    // The sharded states (FSDP's fp32 shards are the master copy; params holds only the units gathered at the peak).
    CHECK(z3.memory.peak_stage().peak.master < ddp.memory.peak_stage().peak.master / 1000);
  }

  TEST_CASE("overflow: the largest model validation allows is refused or predicted, never wrapped") {
    // layers 2^16, hidden 2^20, ffn 2^22, vocab and seq 2^26: ≈ 7.9e17 parameters, whose 16 B each (1.3e19 bytes)
    // exceed int64. DDP must be refused by the 2^59-byte ceiling; ZeRO-3 over 100,000 GPUs at seq 2048 is in range.
    // The sanitized build (scripts/test.sh) turns any signed overflow on the way into a failure.
    const ModelSpec m = parse_model_yaml(
        "name: tmax\nlayers: 65536\nhidden: 1048576\nheads: 1024\nkv_heads: 1024\nffn_hidden: 4194304\n"
        "vocab: 67108864\nseq: 67108864\nmlp: swiglu\nnorm: layernorm\ntied_embeddings: false\n",
        "tmax.yaml");
    const ClusterSpec c = PresetStore::builtin().cluster("dgx-h100");
    Strategy s;
    s.gpus = 100000;
    s.dp = 100000;
    s.zero = 0;
    s.seq = m.seq;
    s.global_batch = 100000;
    CHECK_THROWS_AS(predict(m, s, c), InputError);
    s.zero = 3;
    s.seq = 2048;
    const Prediction p = predict(m, s, c);
    CHECK(p.params.total > (int64_t{1} << 59));
    CHECK(p.peak_bytes() > 0);
    CHECK(std::isfinite(p.time.step_s));
  }

  // Wall-clock timings are the only part allowed to differ: "search_ms": 6.4 (JSON/YAML/CSV) and "in 18.4 ms" (text).
  std::string strip_timing(const std::string& s) {
    static const std::regex timing(R"((search_ms"?:? *,?)[0-9.eE+-]+|( in )[0-9.]+( ms))");
    return std::regex_replace(s, timing, "$1$2<t>$3");
  }

  TEST_CASE("determinism: the same inputs give byte-identical predict and plan output, in every format") {
    for (const char* command : {"predict --preset llama3-70b --gpus 64 --cluster dgx-h100 --tp 8 --pp 2 --framework torchtitan",
                                "predict --preset 8b --gpus 8 --tokens 2T --gpu-hour-price 2",
                                "plan --preset 8b --gpus 8", "plan --preset llama3-70b --gpus 64 --cluster dgx-h100 --all"})
      for (const char* format : {"table", "json", "yaml", "csv", "markdown"}) {
        const std::string args = std::string(command) + " --format " + format;
        CAPTURE(args);
        const auto a = test::run_cli(args), b = test::run_cli(args);
        REQUIRE(a.exit_code == 0);
        CHECK(!a.out.empty());
        CHECK(strip_timing(a.out) == strip_timing(b.out));
      }
  }

  TEST_CASE("determinism: --report (HTML, Markdown) and --emit files are byte-identical from run to run") {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / ("shardplan_determinism_" + std::to_string(::getpid()));
    fs::remove_all(root);
    // The same relative names in two folders: the report's footer quotes the command line.
    for (const char* run : {"a", "b"}) {
      fs::create_directories(root / run);
      REQUIRE(test::run_cli("plan --preset 8b --gpus 8 --report plan.html --emit launch", (root / run).string()).exit_code == 0);
      REQUIRE(test::run_cli("plan --preset 8b --gpus 8 --report plan.md", (root / run).string()).exit_code == 0);
      REQUIRE(test::run_cli("predict --preset 8b --gpus 8 --report predict.html", (root / run).string()).exit_code == 0);
    }
    size_t compared = 0;
    for (const auto& e : fs::recursive_directory_iterator(root / "a")) {
      if (!e.is_regular_file()) continue;
      const fs::path rel = fs::relative(e.path(), root / "a");
      CAPTURE(rel.string());
      // The launch files name their folder by its absolute path (slurm.sbatch, README): the runs' own folders aside.
      const auto local = [&](std::string text, const char* run) {
        const std::string folder = (root / run).string();
        for (size_t at; (at = text.find(folder)) != std::string::npos;) text.replace(at, folder.size(), "RUN");
        return strip_timing(text);
      };
      CHECK(local(test::read_all(e.path()), "a") == local(test::read_all(root / "b" / rel), "b"));
      ++compared;
    }
    CHECK(compared == 3 + 10);  // three reports, ten launch files (no config.json: the seed's GELU model has no class)
    fs::remove_all(root);
  }
}
