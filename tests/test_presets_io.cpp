// The I/O layer: embedded presets, strict YAML fields, --presets-dir, files, and `shardplan presets`.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "io/preset_store.hpp"
#include "io/yaml_fields.hpp"
#include "planner/error.hpp"
#include "tests/cli_runner.hpp"

namespace fs = std::filesystem;
using shardplan::InputError;
using shardplan::PresetKind;
using shardplan::PresetStore;

namespace {

const std::string kModel =
    "name: tiny\n"            // 1
    "layers: 2\n"             // 2
    "hidden: 64\n"            // 3
    "heads: 4\n"              // 4
    "kv_heads: 2\n"           // 5
    "ffn_hidden: 256\n"       // 6
    "vocab: 1000\n"           // 7
    "seq: 128\n"              // 8
    "mlp: swiglu\n"           // 9
    "norm: rmsnorm\n"         // 10
    "tied_embeddings: false\n";  // 11

const std::string kGpu =
    "name: gpu-x\n"
    "memory_gib: 80\n"
    "bf16_tflops: 989.4\n"
    "fp16_tflops: 989.4\n"
    "fp32_tflops: 67\n"
    "hbm_gbps: 3350\n"
    "sm_count: 132\n"
    "pcie_gbps: 64\n"
    "nvlink_gbps: 450\n";

std::string cluster_text(const std::string& gpu) {
  return "name: my-cluster\n"       // 1
         "gpu: " + gpu + "\n"        // 2
         "gpus_per_node: 8\n"       // 3
         "intra_node:\n"            // 4
         "  link: nvswitch\n"       // 5
         "  gbps: 450\n"            // 6
         "  latency_us: 3\n"        // 7
         "inter_node:\n"            // 8
         "  nics_per_node: 8\n"     // 9
         "  nic_gbps: 400\n"        // 10
         "  latency_us: 5\n";       // 11
}

// `text` with the line of `key` replaced by `line` ("" removes it; a key not present is appended).
std::string edit(const std::string& text, const std::string& key, const std::string& line) {
  std::string out;
  bool found = false;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    std::string current = text.substr(start, end - start);
    start = end + 1;
    if (current.rfind(key + ":", 0) == 0) {
      found = true;
      if (!line.empty()) out += line + "\n";
    } else {
      out += current + "\n";
    }
  }
  if (!found) out += line + "\n";
  return out;
}

// The message of the InputError that `f` throws ("" if it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string model_error(const std::string& text) {
  return error_of([&] { shardplan::parse_model_yaml(text, "x.yaml"); });
}

std::string gpu_error(const std::string& text) {
  return error_of([&] { shardplan::parse_gpu_yaml(text, "g.yaml"); });
}

// A fresh temporary folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("shardplan_io_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& relative, const std::string& text) const {
    fs::path p = path / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

const char* folder_of(PresetKind k) {
  return k == PresetKind::model ? "models" : k == PresetKind::gpu ? "gpus" : "clusters";
}

}  // namespace

TEST_SUITE("presets_io") {

TEST_CASE("every embedded preset parses, validates and is named like its file") {
  PresetStore store = PresetStore::builtin();
  for (PresetKind kind : {PresetKind::model, PresetKind::gpu, PresetKind::cluster}) {
    CAPTURE(shardplan::to_string(kind));
    CHECK_FALSE(store.names(kind).empty());
    for (const std::string& name : store.names(kind)) {
      CAPTURE(name);
      const shardplan::PresetEntry* entry = store.find(kind, name);
      REQUIRE(entry != nullptr);
      CHECK(entry->embedded);
      CHECK(entry->origin == std::string("presets/") + folder_of(kind) + "/" + name + ".yaml");
      // Embedded byte for byte: the binary shows the same text as the source file.
      CHECK(entry->text == shardplan::test::read_all(fs::path(SHARDPLAN_SOURCE_DIR) / entry->origin));
      std::string parsed_name;
      CHECK_NOTHROW(parsed_name = kind == PresetKind::model ? store.model(name).name
                                  : kind == PresetKind::gpu ? store.gpu(name).name
                                                            : store.cluster(name).name);
      CHECK(parsed_name == name);
    }
  }
  CHECK(store.find(PresetKind::model, "llama3-8b") != nullptr);
  CHECK(store.model("8b").hidden == 4096);
}

TEST_CASE("a valid model reads every field, with defaults for the optional ones") {
  shardplan::ModelSpec m = shardplan::parse_model_yaml(kModel, "x.yaml");
  CHECK(m.name == "tiny");
  CHECK(m.layers == 2);
  CHECK(m.kv_heads == 2);
  CHECK(m.mlp == shardplan::MlpKind::swiglu);
  CHECK(m.norm == shardplan::NormKind::rmsnorm);
  CHECK(m.position == shardplan::PositionKind::rotary);
  CHECK(m.vocab_pad_to == 1);
  CHECK(m.norm_bias);
  CHECK_FALSE(m.tied_embeddings);
  m = shardplan::parse_model_yaml(kModel + "position: learned\nqkv_bias: true\nvocab_pad_to: 128\nhead_dim: 32\n",
                                  "x.yaml");
  CHECK(m.position == shardplan::PositionKind::learned);
  CHECK(m.qkv_bias);
  CHECK(m.vocab_pad_to == 128);
  CHECK(m.head_dim == 32);
}

TEST_CASE("an unknown key is named with file, line and the known keys") {
  std::string e = model_error(edit(kModel, "hidden", "hiden: 64"));
  CHECK(contains(e, "x.yaml:"));
  CHECK(contains(e, "unknown key 'hiden' in model"));
  CHECK(contains(e, "known keys: name,"));
  CHECK(e.find('\n') == std::string::npos);
  CHECK(e.rfind("x.yaml:3:", 0) == 0);  // the line of the misspelt key
}

TEST_CASE("a missing required key is named") {
  std::string e = model_error(edit(kModel, "vocab", ""));
  CHECK(e.rfind("x.yaml:", 0) == 0);
  CHECK(contains(e, "missing required key 'vocab'"));
  CHECK(contains(gpu_error(edit(kGpu, "hbm_gbps", "")), "missing required key 'hbm_gbps'"));
}

TEST_CASE("a value of the wrong type names the key and its line") {
  CHECK(model_error(edit(kModel, "layers", "layers: abc")).rfind("x.yaml:2: 'layers' must be a positive integer, got 'abc'", 0) == 0);
  CHECK(contains(model_error(edit(kModel, "hidden", "hidden: 4096.5")), "'hidden' must be a positive integer, got '4096.5'"));
  CHECK(contains(model_error(edit(kModel, "heads", "heads: true")), "'heads' must be a positive integer"));
  CHECK(contains(model_error(edit(kModel, "heads", "heads: \"4\"")), "quoted"));
  CHECK(contains(model_error(edit(kModel, "layers", "layers: [1, 2]")), "got a list"));
  CHECK(contains(model_error(edit(kModel, "layers", "layers:")), "got nothing"));
  CHECK(contains(model_error(edit(kModel, "tied_embeddings", "tied_embeddings: yes")),
                 "'tied_embeddings' must be true or false, got 'yes'"));
  CHECK(contains(model_error(edit(kModel, "mlp", "mlp: relu")),
                 "'mlp' must be one of gelu, swiglu, squared-relu; got 'relu'"));
  CHECK(contains(gpu_error(edit(kGpu, "memory_gib", "memory_gib: lots")), "'memory_gib' must be a positive number"));
}

TEST_CASE("zero, negative and non-finite sizes are rejected") {
  CHECK(contains(model_error(edit(kModel, "layers", "layers: -2")), "'layers' must be a positive integer, got '-2'"));
  CHECK(contains(model_error(edit(kModel, "hidden", "hidden: 0")), "'hidden' must be a positive integer, got '0'"));
  CHECK(contains(model_error(edit(kModel, "layers", "layers: 99999999999999999999")), "'layers'"));
  CHECK(contains(gpu_error(edit(kGpu, "memory_gib", "memory_gib: 0")), "'memory_gib' must be a positive number"));
  CHECK(contains(gpu_error(edit(kGpu, "hbm_gbps", "hbm_gbps: -1")), "'hbm_gbps' must be a positive number"));
  CHECK(contains(gpu_error(edit(kGpu, "hbm_gbps", "hbm_gbps: .nan")), "'hbm_gbps'"));
  CHECK(contains(gpu_error(edit(kGpu, "hbm_gbps", "hbm_gbps: inf")), "'hbm_gbps'"));
  CHECK(contains(gpu_error(edit(kGpu, "nvlink_gbps", "nvlink_gbps: -5")), "'nvlink_gbps' must be a number >= 0"));
  // Zero is meaningful where the schema says >= 0.
  CHECK(gpu_error(edit(kGpu, "nvlink_gbps", "nvlink_gbps: 0")).empty());
}

TEST_CASE("semantic problems from the planner get the file and the line of the field") {
  std::string e = model_error(edit(kModel, "kv_heads", "kv_heads: 3"));
  CHECK(e.rfind("x.yaml:5:", 0) == 0);
  CHECK(contains(e, "kv_heads"));
}

TEST_CASE("malformed YAML gives file:line") {
  std::string e = model_error(edit(kModel, "layers", "layers: [1, 2"));
  CHECK(e.rfind("x.yaml:", 0) == 0);
  CHECK(std::isdigit(static_cast<unsigned char>(e[std::string("x.yaml:").size()])));
  CHECK(contains(e, "malformed YAML"));
  CHECK(contains(model_error("- just\n- a list\n"), "expected a mapping"));
  CHECK(contains(model_error(""), "empty"));
  CHECK(contains(model_error(kModel + "---\nname: other\n"), "more than one YAML document"));
  CHECK(contains(model_error(kModel + "layers: 3\n"), "'layers' appears twice"));
}

TEST_CASE("strict scalar parsers") {
  using namespace shardplan::yaml;
  CHECK(parse_strict_int("4096") == 4096);
  CHECK(parse_strict_int("-2") == -2);
  CHECK_FALSE(parse_strict_int("4096.5"));
  CHECK_FALSE(parse_strict_int("0x10"));
  CHECK_FALSE(parse_strict_int("1e3"));
  CHECK_FALSE(parse_strict_int(""));
  CHECK_FALSE(parse_strict_int("true"));
  CHECK(parse_strict_double("989.4") == doctest::Approx(989.4));
  CHECK(parse_strict_double("1e3") == doctest::Approx(1000));
  CHECK_FALSE(parse_strict_double("nan"));
  CHECK_FALSE(parse_strict_double("inf"));
  CHECK_FALSE(parse_strict_double("12GB"));
  CHECK(parse_strict_bool("true") == true);
  CHECK(parse_strict_bool("False") == false);
  CHECK_FALSE(parse_strict_bool("yes"));
}

TEST_CASE("an unknown preset name lists the known ones and a near name") {
  PresetStore store = PresetStore::builtin();
  std::string e = error_of([&] { store.model("lama3-8b"); });
  CHECK(contains(e, "unknown model preset 'lama3-8b'"));
  CHECK(contains(e, "did you mean 'llama3-8b'"));
  CHECK(contains(e, "known: "));
  CHECK(contains(e, "8b"));
  CHECK(contains(e, "--model FILE.yaml"));
  CHECK(contains(error_of([&] { store.gpu("nope"); }), "unknown gpu preset 'nope'"));
  CHECK(contains(error_of([&] { store.cluster("nope"); }), "unknown cluster preset 'nope'"));
}

TEST_CASE("--presets-dir adds and overrides presets") {
  TempDir dir;
  dir.write("models/tiny.yaml", kModel);
  dir.write("models/8b.yaml", edit(edit(kModel, "name", "name: 8b"), "layers", "layers: 3"));
  dir.write("models/notes.txt", "not a preset");
  PresetStore store = PresetStore::builtin();
  store.add_directory(dir.path.string());
  CHECK(store.model("tiny").layers == 2);
  CHECK(store.model("8b").layers == 3);
  const shardplan::PresetEntry* entry = store.find(PresetKind::model, "8b");
  REQUIRE(entry != nullptr);
  CHECK_FALSE(entry->embedded);
  CHECK(entry->replaces == "presets/models/8b.yaml");
  CHECK(entry->origin == (dir.path / "models" / "8b.yaml").string());
  CHECK(store.find(PresetKind::model, "notes") == nullptr);
}

TEST_CASE("a preset in a folder must be named like its file") {
  TempDir dir;
  std::string path = dir.write("models/small.yaml", kModel);
  PresetStore store = PresetStore::builtin();
  store.add_directory(dir.path.string());
  std::string e = error_of([&] { store.model("small"); });
  CHECK(e.rfind(path + ":1:", 0) == 0);
  CHECK(contains(e, "name 'tiny' must equal the file name 'small'"));
  // A file given directly may be named anything.
  CHECK(store.model_file(path).name == "tiny");
}

TEST_CASE("--presets-dir that is not a presets folder is an error") {
  TempDir dir;
  PresetStore store = PresetStore::builtin();
  CHECK(contains(error_of([&] { store.add_directory((dir.path / "missing").string()); }), "no such folder"));
  CHECK(contains(error_of([&] { store.add_directory(dir.path.string()); }), "none of the folders models/"));
}

TEST_CASE("a cluster given as a file path") {
  PresetStore store = PresetStore::builtin();
  const std::string gpu = store.names(PresetKind::gpu).front();
  TempDir dir;
  std::string path = dir.write("site.yaml", cluster_text(gpu));
  shardplan::ClusterSpec c = store.cluster(path);
  CHECK(c.name == "my-cluster");
  CHECK(c.gpu_name == gpu);
  CHECK(c.gpu.name == gpu);
  CHECK(c.gpus_per_node == 8);
  CHECK(c.intra.kind == shardplan::LinkKind::nvswitch);
  CHECK(c.inter.node_gbps() == doctest::Approx(3200));

  std::string bad_gpu = dir.write("bad-gpu.yaml", edit(cluster_text(gpu), "gpu", "gpu: " + gpu + "-typo"));
  std::string e = error_of([&] { store.cluster(bad_gpu); });
  CHECK(e.rfind(bad_gpu + ":", 0) == 0);
  CHECK(contains(e, "unknown gpu preset '" + gpu + "-typo'"));

  std::string nested = dir.write("nested.yaml", cluster_text(gpu) + "  bogus: 1\n");
  CHECK(contains(error_of([&] { store.cluster(nested); }), "unknown key 'inter_node.bogus' in inter_node"));
  std::string link = dir.write("link.yaml", "name: c\ngpu: " + gpu + "\ngpus_per_node: 8\nintra_node: fast\n");
  CHECK(contains(error_of([&] { store.cluster(link); }), "'intra_node' must be a mapping"));
  CHECK(contains(error_of([&] { store.cluster((dir.path / "absent.yaml").string()); }), "cannot read"));
}

TEST_CASE("--model FILE that cannot be read") {
  PresetStore store = PresetStore::builtin();
  CHECK(contains(error_of([&] { store.model_file("/nonexistent/m.yaml"); }), "cannot read /nonexistent/m.yaml"));
}

TEST_CASE("near names") {
  std::vector<std::string> known{"llama3-8b", "llama3-70b", "gpt3-175b", "8b"};
  CHECK(shardplan::near_names("lama3-8b", known).front() == "llama3-8b");
  CHECK(shardplan::near_names("zzzzzzzz", known).empty());
}

TEST_CASE("cli: presets lists") {
  using shardplan::test::run_cli;
  auto all = run_cli("presets");
  CHECK(all.exit_code == 0);
  CHECK(contains(all.out, "llama3-8b"));
  CHECK(contains(all.out, "gpus"));
  CHECK(contains(all.out, "clusters"));

  auto models = run_cli("presets models");
  CHECK(models.exit_code == 0);
  CHECK(contains(models.out, "llama3-8b"));
  CHECK(contains(models.out, "8.03"));  // Llama 3 8B: 8.03 billion parameters
  CHECK(run_cli("presets gpus").exit_code == 0);
  CHECK(run_cli("presets clusters").exit_code == 0);
}

TEST_CASE("cli: presets show") {
  using shardplan::test::run_cli;
  auto shown = run_cli("presets show 8b");
  CHECK(shown.exit_code == 0);
  CHECK(contains(shown.out, "hidden: 4096"));
  CHECK(contains(shown.out, "presets/models/8b.yaml"));
  CHECK(run_cli("presets show model:8b").exit_code == 0);

  auto unknown = run_cli("presets show nope");
  CHECK(shardplan::test::is_one_error_line(unknown));
  CHECK(contains(unknown.err, "nope"));
  auto bogus = run_cli("presets bogus");
  CHECK(shardplan::test::is_one_error_line(bogus));
  CHECK(contains(bogus.err, "bogus"));
}

TEST_CASE("cli: --presets-dir") {
  using shardplan::test::run_cli;
  TempDir dir;
  dir.write("models/tiny.yaml", kModel);
  auto shown = run_cli("--presets-dir '" + dir.path.string() + "' presets show tiny");
  CHECK(shown.exit_code == 0);
  CHECK(contains(shown.out, "ffn_hidden: 256"));

  dir.write("models/broken.yaml", edit(kModel, "name", "name: broken") + "hiden: 1\n");
  auto broken = run_cli("--presets-dir '" + dir.path.string() + "' presets models");
  CHECK(shardplan::test::is_one_error_line(broken));
  CHECK(contains(broken.err, "broken.yaml:12: unknown key 'hiden'"));
}

}  // TEST_SUITE
