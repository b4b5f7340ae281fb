// Regression tests for what fuzzing and fault injection found (reports/reliability.md), and determinism.
#include <doctest/doctest.h>

#include <chrono>

#include "io/preset_store.hpp"
#include "planner/error.hpp"
#include "planner/predict.hpp"
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

  TEST_CASE("determinism: the same inputs give byte-identical predict and plan output") {
    for (const char* args : {"predict --preset llama3-70b --gpus 64 --cluster dgx-h100 --format json",
                             "predict --preset 8b --gpus 8 --format csv", "plan --preset 8b --gpus 8 --format yaml"}) {
      CAPTURE(args);
      const auto a = test::run_cli(args), b = test::run_cli(args);
      REQUIRE(a.exit_code == 0);
      auto strip_timing = [](std::string s) {
        const auto at = s.find("search_ms");
        if (at != std::string::npos) s.erase(at, s.find('\n', at) - at);
        return s;
      };
      CHECK(strip_timing(a.out) == strip_timing(b.out));
    }
  }
}
