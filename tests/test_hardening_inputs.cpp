// Hardening, round 2 (issue 19): what a hostile or unlucky user gives shardplan to read. Every case runs the real
// binary under a time bound (and, outside the sanitizer build, a memory bound) and checks the contract: the exit
// code, one printable `error:` line naming the file, key or flag. Items refer to the list.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/hardening_runner.hpp"

namespace fs = std::filesystem;
using shardplan::test::CliResult;
using shardplan::test::one_clean_error_line;
using shardplan::test::run_script;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// The tiny preset's keys, renamed `name`; `extra` appended (a model YAML to break one key at a time).
std::string model_yaml(const std::string& name, const std::string& extra = "") {
  return "name: " + name +
         "\nlayers: 4\nhidden: 128\nheads: 4\nkv_heads: 2\nffn_hidden: 352\nvocab: 256\nseq: 128\nmlp: swiglu\n"
         "norm: rmsnorm\ntied_embeddings: false\n" + extra;
}

const char* kLlama =
    "\"model_type\": \"llama\", \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_attention_heads\": 32, "
    "\"num_hidden_layers\": 32, \"vocab_size\": 128256";

fs::path fixtures() {
  static const fs::path d = [] {
    const fs::path dir = fs::temp_directory_path() / ("shardplan_hard_in_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    // Item 1: ten lines of nested aliases, 9^9 = 387 M strings once expanded ("billion laughs").
    std::string bomb = "kind: calibration-profile\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
    for (char c = 'b'; c <= 'i'; ++c) {
      const char prev = static_cast<char>(c - 1);
      bomb += std::string(1, c) + ": &" + c + " [";
      for (int k = 0; k < 9; ++k) bomb += std::string(k ? "," : "") + "*" + prev;
      bomb += "]\n";
    }
    write(dir / "bomb.yaml", bomb);
    // Item 10: a 5.8 MB list (1.45 M items: 1.36 GB once yaml-cpp has built it), as a profile and in a model.
    std::string list;
    list.reserve(6'000'000);
    for (int i = 0; i < 1'450'000; ++i) list += "- 1\n";
    write(dir / "list.yaml", "kind: calibration-profile\nx:\n" + list);
    write(dir / "list-model.yaml", model_yaml("list-model", "description:\n" + list));
    // Items 12, 13, JSON depth.
    write(dir / "dup.json", std::string("{") + kLlama + ", \"hidden_size\": 8192}");
    write(dir / "dup-nested.json", std::string("{") + kLlama + ", \"rope_scaling\": {\"factor\": 8, \"factor\": 2}}");
    write(dir / "moe-text.json", std::string("{") + kLlama + ", \"text_config\": {\"num_local_experts\": 8}}");
    write(dir / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
    write(dir / "gpt2.json",
          "{\"model_type\": \"gpt2\", \"n_embd\": 768, \"n_layer\": 12, \"n_head\": 12, \"vocab_size\": 50257, "
          "\"n_positions\": 1024}");
    // Item 19: sizes no model has, in the optional keys.
    write(dir / "head-dim.yaml", model_yaml("head-dim", "head_dim: 1152921504606846976\n"));
    write(dir / "vocab-pad.yaml", model_yaml("vocab-pad", "vocab_pad_to: 4611686018427387904\n"));
    // Item 14: measurement logs that measure nothing; one with a repeated key.
    write(dir / "unknown.jsonl", "{\"step\": 0, \"loss\": 2.3}\n{\"step\": 1, \"lr\": 0.001}\n");
    write(dir / "ok.jsonl", "{\"step\": 0, \"step_s\": 1.5, \"peak_bytes\": 1000000}\n{\"step\": 1, \"step_s\": 1.4}\n");
    write(dir / "dup.jsonl", "{\"step\": 0, \"step_s\": 1.5, \"step_s\": 9.0}\n");
    // Item 20: a document with a byte that is not UTF-8 and an escape sequence.
    write(dir / "not-utf8.json", "{\"config\": {\"model\": \"\xff\x1b[2J\"}}");
    // Beyond the list: a user preset with an escape sequence that `presets show` printed without parsing it.
    write(dir / "pd-esc" / "models" / "esc.yaml", model_yaml("esc", "description: \"\x1b[2J\"\n"));
    ::mkfifo((dir / "fifo.yaml").c_str(), 0600);
    fs::create_directories(dir / "pd-fifo" / "models");
    ::mkfifo((dir / "pd-fifo" / "models" / "looped.yaml").c_str(), 0600);
    return dir;
  }();
  static const struct Cleanup {  // 12 MB of fixtures: removed when the test binary exits
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{d};
  return d;
}

// Runs `script` in the fixture folder, at most `seconds`, with at most `mib` of address space (not under ASan).
CliResult bounded(const std::string& script, int seconds = 20, int mib = 1500) {
  std::string limit = shardplan::test::kAddressSanitizer ? "" : "ulimit -v " + std::to_string(mib * 1024) + "; ";
  // AddressSanitizer runs the binary 2-4x slower (a 1,000,001-line log took over 20 s on CI's two cores under it).
  const int bound = shardplan::test::kAddressSanitizer ? 4 * seconds : seconds;
  return run_script(limit + "timeout " + std::to_string(bound) + " " + script, fixtures());
}

}  // namespace

TEST_SUITE("hardening: inputs") {
  TEST_CASE("item 1, 10: a YAML alias bomb and a 1.45 M-item list are refused before any tree is built") {
    // Before: report expanded every alias (6.6 GB and rising, or std::bad_alloc and exit 134), and the list took
    // 1.36 GB (std::bad_alloc under this 1.5 GB bound).
    for (const std::string args : {"$B report bomb.yaml", "$B report list.yaml", "$B predict --model list-model.yaml",
                             "$B predict --preset 8b --cluster list.yaml"}) {
      CAPTURE(args);
      const CliResult r = bounded(args);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, {"yaml", "more than 100000 values"}));
    }
    CHECK(bounded("$B report bomb.yaml").err.find("aliases") != std::string::npos);
  }

  TEST_CASE("item 12, 13: repeated JSON keys, MoE under text_config and absurd depth are named") {
    struct Case {
      const char* args;
      std::initializer_list<const char*> mentions;
    };
    for (const Case& c : {Case{"$B predict --hf-config dup.json", {"dup.json", "'hidden_size' appears twice"}},
                          Case{"$B predict --hf-config dup-nested.json", {"'rope_scaling.factor' appears twice"}},
                          Case{"$B predict --hf-config moe-text.json", {"text_config.num_local_experts", "mixture-of-experts"}},
                          Case{"$B predict --hf-config deep.json", {"deep.json", "deeper than 64"}},
                          Case{"$B report deep.json", {"deep.json", "deeper than 64"}},
                          Case{"$B validate --preset tiny --measurements dup.jsonl", {"dup.jsonl:1", "'step_s' appears twice"}}}) {
      const std::string args = c.args;
      CAPTURE(args);
      const CliResult r = bounded(args);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, c.mentions));
    }
  }

  TEST_CASE("item 7: FIFOs as inputs neither hang nor are read as presets") {
    // Before: a FIFO in --presets-dir blocked every command in open(2) (timeout's exit 124).
    CliResult r = bounded("$B --presets-dir pd-fifo presets", 10);
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"pd-fifo/models/looped.yaml", "FIFO"}));
    r = bounded("$B predict --model fifo.yaml", 10);  // no writer: read as ended
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"fifo.yaml"}));
    r = bounded("$B validate --preset tiny --measurements fifo.yaml", 10);
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"fifo.yaml"}));
    // A pipe with a writer is still read (process substitution).
    r = bounded("$B predict --hf-config <(cat gpt2.json) --format json", 10);
    CHECK(r.exit_code == 0);
  }

  TEST_CASE("item 11: --seq beyond a learned position table is refused by every command, as validate does") {
    for (const std::string args : {"$B predict --preset gpt2-1.2b --seq 100000", "$B plan --preset gpt2-1.2b --seq 100000",
                             "$B simulate --preset gpt2-1.2b --seq 100000", "$B predict --hf-config gpt2.json --seq 8192"}) {
      CAPTURE(args);
      const CliResult r = bounded(args);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, {"--seq", "learned position table", "positions"}));
    }
    CHECK(bounded("$B predict --hf-config gpt2.json --seq 1024").exit_code == 0);  // the table's own length
  }

  TEST_CASE("item 14, 15, 19: numbers and logs that were accepted or echoed wrong") {
    struct Case {
      const char* args;
      std::initializer_list<const char*> mentions;
    };
    for (const Case& c : {
             Case{"$B validate --preset tiny --measurements unknown.jsonl", {"unknown.jsonl", "step_s", "peak_bytes"}},
             Case{"$B validate --preset tiny --measurements ok.jsonl --warmup -1", {"--warmup"}},
             Case{"$B validate --preset tiny --seed -1", {"--seed", "-1"}},
             Case{"$B validate --preset tiny --seed 18446744073709551616", {"--seed", "18446744073709551616"}},
             Case{"$B validate --preset tiny --seed 1e23", {"--seed", "1e23"}},
             Case{"$B validate --preset tiny --timeout 1e-9", {"--timeout"}},
             // CLI11 reads a leading zero as octal: --gpus 010 planned 8 GPUs.
             Case{"$B predict --preset 8b --gpus 010", {"--gpus", "010"}},
             Case{"$B predict --preset 8b --gpus 18446744073709551616", {"--gpus", "18446744073709551616"}},
             Case{"$B predict --model head-dim.yaml", {"head-dim.yaml:12", "head_dim"}},
             Case{"$B predict --model vocab-pad.yaml", {"vocab-pad.yaml:12", "vocab_pad_to"}},
             // Item 18 on one rank: the reference loop's memory is judged before training, as bad input.
             Case{"$B validate --preset tiny --micro-batch 100000 --quiet", {"--micro-batch", "GB"}},
         }) {
      const std::string args = c.args;
      CAPTURE(args);
      const CliResult r = bounded(args, 60);
      CAPTURE(r.err);
      CHECK(r.exit_code == 2);
      CHECK(one_clean_error_line(r, c.mentions));
      CHECK(r.err.find("9223372036854775807") == std::string::npos);  // the typed text, not a saturated value
    }
  }

  TEST_CASE("item 17, 20: a report checks a document's numbers; bytes from a document are escaped") {
    CliResult r = bounded("$B predict --preset 8b --format json > doc.json && "
                          "sed 's/\"peak_bytes\": [0-9]*/\"peak_bytes\": 1e308/' doc.json > big.json && $B report big.json");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"big.json", "memory.peak_bytes", "2^60"}));
    r = bounded("$B report - < not-utf8.json");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"standard input", "\\xFF"}));
    r = bounded("$B presets show $'tiny\\x1b[2J\\r'");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"\\x1B[2J\\r"}));
  }

  TEST_CASE("beyond the list: parsed-size bounds on logs and raw CSVs, endless runs, unparsed presets shown") {
    // 1,000,001 steps of a measurement log (17 MB, ~100 MB parsed before): the step bound.
    std::string log = "{\"step\": 0, \"step_s\": 1}\n";
    for (int i = 1; i <= 1'000'000; ++i) log += "{\"step\":" + std::to_string(i) + "}\n";
    write(fixtures() / "many.jsonl", log);
    CliResult r = bounded("$B validate --preset tiny --measurements many.jsonl");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"many.jsonl:1000001", "more than 1000000 steps"}));
    fs::remove(fixtures() / "many.jsonl");
    // 200,001 raw records: no calibration measures that many.
    std::string csv = "# shardplan calibrate raw v1 backend=mpi ranks=1 nodes=1 ranks_per_node=1 dtype=fp32 quick=1\n"
                      "kind,op,scope,ranks,ranks_per_node,bytes,m,n,k,iters,repeats,median_s,p10_s,p90_s,wrong\n";
    for (int i = 0; i <= 200'000; ++i) csv += "gemm,fp32,-,1,1,0,64,64," + std::to_string(i + 1) + ",10,3,1e-05,1e-05,1e-05,0\n";
    write(fixtures() / "many.raw.csv", csv);
    r = bounded("$B calibrate --gemm-only --quick --quiet --out many.yaml --resume", 60);
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"--resume", "many.raw.csv:200003", "more than 200000"}));
    fs::remove(fixtures() / "many.raw.csv");
    // --resume reading a device: refused (before: /dev/zero was read until std::bad_alloc).
    r = bounded("$B calibrate --gemm-only --quick --quiet --out z.yaml --raw /dev/zero --resume", 60);
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"--raw /dev/zero", "character device"}));
    // A validation that would train for ever.
    r = bounded("$B validate --preset tiny --steps 9223372036854775807");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"--steps", "100000"}));
    // `presets show` parses what it shows: the escape sequence never reaches the terminal.
    r = bounded("$B --presets-dir pd-esc presets show esc");
    CHECK(r.exit_code == 2);
    CHECK(one_clean_error_line(r, {"esc.yaml", "0x1B"}));
    CHECK(r.out.find('\x1b') == std::string::npos);
  }

  TEST_CASE("item 10, 21: out of memory is one line naming the file (exit 1), not std::bad_alloc") {
    if (shardplan::test::kAddressSanitizer) return;  // ulimit -v cannot run under ASan
    // The smallest address space the binary starts in (it maps MPI and more), then 60 MiB over it: too little for
    // a 60 MB string to be parsed (the text and the string both), plenty for everything else.
    int base = 0;
    for (int mib : {64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024}) {
      if (run_script("ulimit -v " + std::to_string(mib * 1024) + "; $B presets", fixtures()).exit_code == 0) {
        base = mib;
        break;
      }
    }
    REQUIRE(base > 0);
    write(fixtures() / "big-string.json", "{\"config\": {}, \"memory\": {}, \"x\": \"" + std::string(60'000'000, 'a') + "\"}");
    const CliResult r = run_script("ulimit -v " + std::to_string((base + 60) * 1024) + "; $B report big-string.json", fixtures());
    CAPTURE(base);
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(one_clean_error_line(r, {"big-string.json", "out of memory"}));
    fs::remove(fixtures() / "big-string.json");
  }
}
