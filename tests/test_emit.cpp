// `plan --emit DIR`: every launch file parses in its own language (JSON with nlohmann-json, YAML with yaml-cpp,
// TOML with Python's tomllib, Python with py_compile, shell with bash -n), carries the recommended plan's numbers,
// and a folder that cannot be written gives one error line and leaves nothing behind.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "planner/megatron_layout.hpp"
#include "tests/cli_runner.hpp"

using shardplan::test::is_one_error_line;
using shardplan::test::read_all;
using shardplan::test::run_cli;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("shardplan_emit_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir;
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

bool has_python() { return std::system("python3 -c 'import tomllib' >/dev/null 2>&1") == 0; }

int shell(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// config.json comes beside them when transformers has a class for the architecture (cli/emit_model_config.cpp).
const std::set<std::string> kFiles = {"README.md",   "accelerate_config.yaml", "ds_config.json", "megatron_args.sh",
                                      "torchrun.sh", "torchtitan.toml",        "train_fsdp2.py", "hostfile",
                                      "slurm.sbatch", "torchtitan.sh"};

std::set<std::string> without_config(std::set<std::string> names) {
  names.erase("config.json");
  return names;
}

std::string fmt_count(size_t n) { return "wrote " + std::to_string(n) + " launch files"; }

// Runs plan with --emit into a fresh folder; returns the folder and the recommended candidate's JSON.
nlohmann::json plan_and_emit(const std::string& args, const fs::path& dir) {
  const auto r = run_cli("plan " + args + " --format json --emit '" + dir.string() + "'");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);  // stdout stays pure JSON; the note goes to stderr
  std::set<std::string> written = names_in(dir);
  written.erase("keep.txt");  // the "existing folder" case's own file
  CHECK(r.err.find(fmt_count(written.size())) != std::string::npos);
  return j["candidates"][j["recommended"].get<size_t>()];
}

void check_syntax(const fs::path& dir) {
  CHECK(without_config(names_in(dir)) == kFiles);
  CHECK(shell("bash -n '" + (dir / "torchrun.sh").string() + "'") == 0);
  CHECK(shell("bash -n '" + (dir / "slurm.sbatch").string() + "'") == 0);
  if (fs::exists(dir / "config.json")) CHECK_NOTHROW((void)nlohmann::json::parse(read_all(dir / "config.json")));
  CHECK(shell("bash -n '" + (dir / "megatron_args.sh").string() + "'") == 0);
  CHECK(shell("bash -n '" + (dir / "torchtitan.sh").string() + "'") == 0);
  CHECK((fs::status(dir / "torchrun.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
  if (!has_python()) {
    MESSAGE("python3 with tomllib not found: TOML and Python syntax not checked");
    return;
  }
  CHECK(shell("python3 -m py_compile '" + (dir / "train_fsdp2.py").string() + "'") == 0);
  CHECK(shell("python3 -c \"import sys, tomllib; tomllib.load(open(sys.argv[1], 'rb'))\" '" +
              (dir / "torchtitan.toml").string() + "'") == 0);
}

}  // namespace

TEST_SUITE("emit") {
  TEST_CASE("the seed-sized plan: files parse and carry the recommendation") {
    const fs::path dir = fresh_dir("llama3-8b");
    const auto c = plan_and_emit("--preset llama3-8b --gpus 8 --tokens 300B", dir);
    check_syntax(dir);
    const auto& cfg = c["config"];

    const auto ds = nlohmann::json::parse(read_all(dir / "ds_config.json"));
    CHECK(ds["zero_optimization"]["stage"] == cfg["zero"]);
    CHECK(ds["train_batch_size"] == cfg["global_batch"]);
    CHECK(ds["train_micro_batch_size_per_gpu"] == cfg["micro_batch"]);
    CHECK(ds["gradient_accumulation_steps"] == cfg["grad_accum"]);
    // micro-batch · accumulation · data-parallel ranks = the global batch (DeepSpeed's own check)
    CHECK(ds["train_micro_batch_size_per_gpu"].get<int64_t>() * ds["gradient_accumulation_steps"].get<int64_t>() *
              cfg["dp"].get<int64_t>() == ds["train_batch_size"].get<int64_t>());
    CHECK(ds["bf16"]["enabled"] == true);

    const YAML::Node acc = YAML::LoadFile((dir / "accelerate_config.yaml").string());
    CHECK(acc["num_processes"].as<int>() == 8);
    if (cfg["zero"] == 0 && cfg["tp"] == 1) {
      CHECK(acc["distributed_type"].as<std::string>() == "MULTI_GPU");
    } else {
      CHECK(acc["distributed_type"].as<std::string>() == "FSDP");
      CHECK(acc["fsdp_config"]["fsdp_version"].as<int>() == 2);
      CHECK(acc["fsdp_config"]["fsdp_reshard_after_forward"].as<bool>() == (cfg["zero"] == 3));
    }

    const std::string megatron = read_all(dir / "megatron_args.sh");
    CHECK(megatron.find("--tensor-model-parallel-size " + cfg["tp"].dump()) != std::string::npos);
    CHECK(megatron.find("--global-batch-size " + cfg["global_batch"].dump()) != std::string::npos);
    // 300e9 / (global batch · seq) rounded up
    const int64_t per_step = cfg["global_batch"].get<int64_t>() * cfg["seq"].get<int64_t>();
    const int64_t steps = (300'000'000'000 + per_step - 1) / per_step;
    CHECK(megatron.find("--train-iters " + std::to_string(steps)) != std::string::npos);

    const std::string py = read_all(dir / "train_fsdp2.py");
    CHECK(py.find("fully_shard(block") != std::string::npos);
    CHECK(py.find("MixedPrecisionPolicy(param_dtype=PARAM_DTYPE") != std::string::npos);
    CHECK(py.find("checkpoint_wrapper(") != std::string::npos);
    CHECK(py.find("MICRO_BATCH, GRAD_ACCUM, SEQ = " + cfg["micro_batch"].dump() + ", " + cfg["grad_accum"].dump()) !=
          std::string::npos);
  }

  TEST_CASE("torchtitan's compile section carries async TP when the plan priced it") {
    const fs::path dir = fresh_dir("async-tp");
    const auto c = plan_and_emit("--preset llama3-70b --gpus 64 --cluster dgx-h100 --tp 8 --recompute full "
                                 "--framework torchtitan --compile --tp-comm-overlap", dir);
    check_syntax(dir);
    CHECK(c["config"]["tp"] == 8);
    // torchtitan <= 0.2: a [parallelism] key (job_config.py Parallelism); 0.3: a compile option (configs.py).
    const std::string toml = read_all(dir / "torchtitan.toml");
    CHECK(toml.find("[compile]\nenable = true") != std::string::npos);
    CHECK(toml.find("context_parallel_degree = 1\nenable_async_tensor_parallel = true") != std::string::npos);
    CHECK(read_all(dir / "torchtitan.sh").find("  --compile.enable-async-tensor-parallel\n") != std::string::npos);
    const fs::path plain = fresh_dir("no-async-tp");
    plan_and_emit("--preset llama3-70b --gpus 64 --cluster dgx-h100 --tp 8 --recompute full --framework torchtitan "
                  "--compile", plain);
    CHECK(read_all(plain / "torchtitan.toml").find("enable_async_tensor_parallel = false") != std::string::npos);
    // 0.3's llama3_405b turns async TP on by itself: the script says off when the plan did not price it.
    CHECK(read_all(plain / "torchtitan.sh").find("  --compile.no-enable-async-tensor-parallel\n") != std::string::npos);
  }

  TEST_CASE("partial recomputation reaches each launch file as its runtime spells it, or the script says it cannot") {
    const fs::path megatron = fresh_dir("partial-megatron");
    const auto c = plan_and_emit("--preset llama3-8b --gpus 8 --cluster dgx-h100 --framework megatron --tp 2 --pp 2 "
                                 "--recompute-layers 3", megatron);
    check_syntax(megatron);
    CHECK(c["config"]["recompute_layers"] == 3);
    const std::string args = read_all(megatron / "megatron_args.sh");
    CHECK(args.find("--recompute-method block") != std::string::npos);
    CHECK(args.find("--recompute-num-layers 3") != std::string::npos);
    const fs::path fsdp = fresh_dir("partial-fsdp");
    plan_and_emit("--preset llama3-8b --gpus 8 --cluster dgx-h100 --framework fsdp --recompute-layers 5", fsdp);
    check_syntax(fsdp);
    CHECK(read_all(fsdp / "train_fsdp2.py").find("\nRECOMPUTE_LAYERS, RECOMPUTE_EVERY = 5, 0") != std::string::npos);
    CHECK(read_all(fsdp / "README.md").find("Accelerate's activation checkpointing recomputes every block; the plan "
                                            "recomputes the first 5 blocks") != std::string::npos);
    const fs::path titan = fresh_dir("partial-titan");
    plan_and_emit("--preset llama3-8b --gpus 8 --cluster dgx-h100 --framework torchtitan --recompute-every 2", titan);
    check_syntax(titan);
    const std::string toml = read_all(titan / "torchtitan.toml");
    CHECK(toml.find("mode = \"selective\"\nselective_ac_option = \"2\"") != std::string::npos);
    const std::string script = read_all(titan / "torchtitan.sh");
    CHECK(script.find("no layer-level selective AC") != std::string::npos);
    CHECK(script.find("exit 2") != std::string::npos);
  }

  TEST_CASE("--fsdp-end-units: the FSDP2 loop wraps the ends as priced; a torchtitan plan priced with the root says so") {
    const fs::path own = fresh_dir("end-units-own");
    const auto c = plan_and_emit("--preset llama3-8b --gpus 8 --cluster dgx-h100 --framework fsdp --fsdp-end-units own",
                                 own);
    CHECK(c["config"]["fsdp_end_units"] == "own");
    CHECK(read_all(own / "train_fsdp2.py").find("\nEND_UNITS_OWN = True") != std::string::npos);
    CHECK(read_all(own / "README.md").find("--fsdp-end-units root") == std::string::npos);
    const fs::path root = fresh_dir("end-units-root");
    plan_and_emit("--preset llama3-8b --gpus 8 --cluster dgx-h100 --framework torchtitan --fsdp-end-units root", root);
    CHECK(read_all(root / "train_fsdp2.py").find("\nEND_UNITS_OWN = False") != std::string::npos);
    CHECK(read_all(root / "README.md").find("--fsdp-end-units root: torchtitan before 83e694105") != std::string::npos);
  }

  TEST_CASE("ZeRO-2/3 plans of other runtimes reach Megatron as Megatron-FSDP, which runs them where torch FSDP2 would not") {
    // Megatron-LM's validate_args refuses --use-torch-fsdp2 with tied embeddings (MPT), with PP and with EP, and every
    // FSDP when CUDA_DEVICE_MAX_CONNECTIONS is 1 (megatron/training/arguments.py).
    const fs::path tied = fresh_dir("mfsdp-tied");
    const auto c = plan_and_emit("--preset mpt-7b --gpus 16 --cluster dgx-h100 --zero 3 --hsdp 8", tied);
    check_syntax(tied);
    CHECK(c["config"]["zero"] == 3);
    const std::string args = read_all(tied / "megatron_args.sh");
    CHECK(args.find("--use-torch-fsdp2") == std::string::npos);
    CHECK(args.find("--use-megatron-fsdp\n") != std::string::npos);
    CHECK(args.find("--data-parallel-sharding-strategy optim_grads_params\n") != std::string::npos);
    CHECK(args.find("--ckpt-format fsdp_dtensor\n") != std::string::npos);
    CHECK(args.find("--num-distributed-optimizer-instances 2\n") != std::string::npos);  // 16 ranks, shard groups of 8
    CHECK(args.find("--untie-embeddings-and-output-weights") == std::string::npos);     // MPT stays tied
    CHECK(args.find("unset CUDA_DEVICE_MAX_CONNECTIONS\n") != std::string::npos);
    CHECK(args.find("export CUDA_DEVICE_MAX_CONNECTIONS=1") == std::string::npos);
    const fs::path zero2 = fresh_dir("mfsdp-zero2");
    plan_and_emit("--preset llama3-8b --gpus 8 --zero 2", zero2);
    CHECK(read_all(zero2 / "megatron_args.sh").find("--data-parallel-sharding-strategy optim_grads\n") != std::string::npos);
    const fs::path zero1 = fresh_dir("mfsdp-zero1");
    plan_and_emit("--preset llama3-8b --gpus 8 --framework megatron --tp 2 --zero 1", zero1);
    const std::string own = read_all(zero1 / "megatron_args.sh");
    CHECK(own.find("--use-megatron-fsdp") == std::string::npos);
    CHECK(own.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\n") != std::string::npos);
  }

  TEST_CASE("another runtime's pipeline split reaches Megatron stage by stage: BLOOM's 70 blocks on 8 DeepSpeed stages") {
    // 70 % 8 != 0: Megatron refuses an even split ("Number of layers should be divisible by the
    // pipeline-model-parallel size"); the layout string carries the split DeepSpeed was priced with.
    const fs::path dir = fresh_dir("ds-layout");
    const auto c = plan_and_emit("--preset bloom-176b --gpus 384 --cluster jean-zay-a100 --framework deepspeed --tp 4 --pp 12 "
                                 "--zero 1 --recompute full",
                                 dir);
    check_syntax(dir);
    CHECK(c["config"]["pp"] == 12);
    const std::string args = read_all(dir / "megatron_args.sh");
    const size_t at = args.find("--pipeline-model-parallel-layout '");
    REQUIRE(at != std::string::npos);
    const size_t begin = args.find('\'', at) + 1;
    const std::string layout = args.substr(begin, args.find('\'', begin) - begin);
    CHECK(layout.front() == 'E');
    CHECK(layout.substr(layout.size() - 1) == "L");
    // Read back as Megatron reads it (planner/megatron_layout.cpp follows parse_str_to_list).
    const shardplan::LayoutParse parsed = shardplan::parse_megatron_layout(layout);
    REQUIRE(parsed.error.empty());
    int64_t blocks = 0;
    for (int64_t k = 0; k < parsed.layout.stages; ++k) blocks += parsed.layout.blocks[static_cast<size_t>(k)];
    CHECK(blocks == 70);
    CHECK(parsed.layout.stages == 12);
    CHECK(args.find("--num-layers-per-virtual-pipeline-stage") == std::string::npos);
  }

  TEST_CASE("a pipelined multi-node plan and an HF model: schedule, virtual stages, layer class") {
    const fs::path config_dir = fresh_dir("hf-model");
    fs::create_directories(config_dir);
    std::ofstream(config_dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 8192, "intermediate_size": 28672, "max_position_embeddings": 8192, "num_attention_heads": 64,
      "num_hidden_layers": 80, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": false})";
    const fs::path dir = fresh_dir("pp");
    const auto c = plan_and_emit("--hf-config '" + (config_dir / "config.json").string() +
                                     "' --gpus 64 --cluster dgx-h100 --pp 4 --vpp 2 --tp 8 --recompute full --framework torchtitan",
                                 dir);
    check_syntax(dir);
    CHECK(c["config"]["pp"] == 4);
    const std::string megatron = read_all(dir / "megatron_args.sh");
    // torchtitan's split, 80 / (4 · 2) blocks per virtual stage, stage by stage
    CHECK(megatron.find("--pipeline-model-parallel-layout 'Et*10|(t*10|)*6,t*10L'") != std::string::npos);
    CHECK(megatron.find("--recompute-granularity full") != std::string::npos);
    const std::string toml = read_all(dir / "torchtitan.toml");
    CHECK(toml.find("pipeline_parallel_schedule = \"Interleaved1F1B\"") != std::string::npos);
    CHECK(toml.find("mode = \"full\"") != std::string::npos);
    const YAML::Node acc = YAML::LoadFile((dir / "accelerate_config.yaml").string());
    CHECK(acc["num_machines"].as<int>() == 8);
    CHECK(acc["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"].as<std::string>() == "LlamaDecoderLayer");
    const std::string torchrun = read_all(dir / "torchrun.sh");
    CHECK(torchrun.find("--nnodes 8 --nproc-per-node 8") != std::string::npos);
    // Multi-node: each node's rank and a c10d rendezvous on node 0 (torchrun's multi-node usage).
    CHECK(torchrun.find("--node-rank \"${NODE_RANK:-${SLURM_NODEID:?") != std::string::npos);
    CHECK(torchrun.find("--rdzv-backend c10d") != std::string::npos);
    CHECK(torchrun.find("--rdzv-endpoint \"${MASTER_ADDR:?") != std::string::npos);
    // The model is this folder: its config.json is the --hf-config file, byte for byte.
    CHECK(read_all(dir / "config.json") == read_all(config_dir / "config.json"));
    CHECK(torchrun.find("export MODEL=\"${MODEL:-${HERE}}\"") != std::string::npos);
    CHECK(read_all(dir / "train_fsdp2.py").find("MODEL = os.environ.get(\"MODEL\", HERE)") != std::string::npos);
    // Slurm: 8 nodes, one task each, torchrun.sh found by the folder's absolute path; DeepSpeed's hostfile: 8 × 8.
    const std::string slurm = read_all(dir / "slurm.sbatch");
    CHECK(slurm.find("#SBATCH --nodes=8\n") != std::string::npos);
    CHECK(slurm.find("#SBATCH --gpus-per-node=8\n") != std::string::npos);
    CHECK(slurm.find("EMIT_DIR=${EMIT_DIR:-'" + fs::absolute(dir).string() + "'}") != std::string::npos);
    const std::string hosts = read_all(dir / "hostfile");
    CHECK(hosts.find("node-7 slots=8\n") != std::string::npos);
    CHECK(hosts.find("node-8") == std::string::npos);
    // The README's validate command uses absolute paths: it works from any folder.
    const std::string readme = read_all(dir / "README.md");
    CHECK(readme.find("--hf-config '" + fs::absolute(config_dir / "config.json").string() + "'") != std::string::npos);
    CHECK(readme.find("--measurements '" + (fs::absolute(dir) / "shardplan_steps.jsonl").string() + "'") !=
          std::string::npos);
    CHECK(readme.find("sbatch " + fs::absolute(dir).string() + "/slurm.sbatch") != std::string::npos);
    CHECK(readme.find("--num_nodes N") == std::string::npos);
  }

  TEST_CASE("a --hf-config file not named config.json still gives AutoConfig a config.json") {
    const fs::path config_dir = fresh_dir("hf-named");
    fs::create_directories(config_dir);
    std::ofstream(config_dir / "x.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 2048, "num_attention_heads": 32,
      "num_hidden_layers": 22, "num_key_value_heads": 4, "vocab_size": 32000, "rope_theta": 10000.0})";
    const fs::path dir = fresh_dir("hf-named-out");
    plan_and_emit("--hf-config '" + (config_dir / "x.json").string() + "' --gpus 8 --cluster dgx-h100", dir);
    CHECK(read_all(dir / "config.json") == read_all(config_dir / "x.json"));
  }

  TEST_CASE("a Llama 3 preset: config.json written, --rotary-base 500000 and the norm epsilon in megatron_args.sh") {
    const fs::path dir = fresh_dir("llama3-preset");
    plan_and_emit("--preset llama3-8b --gpus 16 --cluster dgx-h100", dir);
    const auto cfg = nlohmann::json::parse(read_all(dir / "config.json"));
    // meta-llama/Meta-Llama-3-8B config.json: these values.
    CHECK(cfg["model_type"] == "llama");
    CHECK(cfg["hidden_size"] == 4096);
    CHECK(cfg["intermediate_size"] == 14336);
    CHECK(cfg["num_hidden_layers"] == 32);
    CHECK(cfg["num_key_value_heads"] == 8);
    CHECK(cfg["vocab_size"] == 128256);
    CHECK(cfg["rope_theta"].get<double>() == 500000.0);
    CHECK(cfg["rms_norm_eps"].get<double>() == doctest::Approx(1e-5));
    const std::string megatron = read_all(dir / "megatron_args.sh");
    CHECK(megatron.find("--rotary-base 500000\n") != std::string::npos);
    CHECK(megatron.find("--norm-epsilon 1e-05\n") != std::string::npos);
    // The seed's 8b (GELU MLP, LayerNorm) has no transformers class to write: no config.json, and the README says so.
    const fs::path seed = fresh_dir("seed-preset");
    plan_and_emit("--preset 8b --gpus 8", seed);
    CHECK_FALSE(fs::exists(seed / "config.json"));
    CHECK(read_all(seed / "README.md").find("no config.json is written") != std::string::npos);
  }

  TEST_CASE("DDP (ZeRO-0): Accelerate's MULTI_GPU, DeepSpeed stage 0, every data-parallel rank a replica") {
    const fs::path dir = fresh_dir("ddp");
    const auto c = plan_and_emit("--preset gpt2-1.2b --gpus 8 --zero 0 --tp 1 --pp 1", dir);
    check_syntax(dir);
    REQUIRE(c["config"]["zero"] == 0);
    CHECK(YAML::LoadFile((dir / "accelerate_config.yaml").string())["distributed_type"].as<std::string>() ==
          "MULTI_GPU");
    CHECK(nlohmann::json::parse(read_all(dir / "ds_config.json"))["zero_optimization"]["stage"] == 0);
    CHECK(read_all(dir / "train_fsdp2.py").find("SHARD, REPLICATE = 1, 8") != std::string::npos);
    CHECK(read_all(dir / "torchtitan.toml").find("data_parallel_replicate_degree = 8") != std::string::npos);
  }

  TEST_CASE("an existing folder: files replaced, no temporaries left") {
    const fs::path dir = fresh_dir("existing");
    fs::create_directories(dir);
    std::ofstream(dir / "keep.txt") << "mine";
    std::ofstream(dir / "ds_config.json") << "old";
    plan_and_emit("--preset llama3-8b --gpus 8", dir);
    std::set<std::string> expected = kFiles;
    expected.insert("keep.txt");
    CHECK(without_config(names_in(dir)) == expected);
    CHECK(read_all(dir / "ds_config.json") != "old");
  }

  TEST_CASE("cannot write: exit 2, one error line, nothing left behind") {
    const fs::path base = fresh_dir("unwritable");
    fs::create_directories(base);
    std::ofstream(base / "a-file") << "x";
    // Under a regular file (fails even for root), and a DIR that is itself a file.
    for (const fs::path& target : {base / "a-file" / "out", base / "a-file"}) {
      const auto r = run_cli("plan --preset llama3-8b --gpus 8 --emit '" + target.string() + "'");
      CAPTURE(r.err);
      CHECK(is_one_error_line(r));
      CHECK(r.err.find("--emit " + target.string()) != std::string::npos);
      CHECK(r.out.empty());
      CHECK(names_in(base) == std::set<std::string>{"a-file"});
    }
    // A folder in the way of one file, inside an existing DIR: none of the seven appears.
    const fs::path dir = base / "blocked";
    fs::create_directories(dir / "torchtitan.toml");
    const auto r = run_cli("plan --preset llama3-8b --gpus 8 --emit '" + dir.string() + "'");
    CHECK(is_one_error_line(r));
    CHECK(names_in(dir) == std::set<std::string>{"torchtitan.toml"});
    CHECK(fs::is_directory(dir / "torchtitan.toml"));
  }

  TEST_CASE("MoE, MLA and MTP models: Megatron's arguments, and a config.json that reads back to the same counts") {
    const fs::path dir = fresh_dir("deepseek");
    const auto c = plan_and_emit("--preset deepseek-v3 --gpus 2048 --cluster h800x8 --framework megatron", dir);
    check_syntax(dir);
    const int64_t ep = c["config"]["ep"].get<int64_t>();
    REQUIRE(ep > 1);
    const std::string megatron = read_all(dir / "megatron_args.sh");
    for (const std::string& arg : std::vector<std::string>{"--num-experts 256", "--moe-router-topk 8", "--moe-ffn-hidden-size 2048",
                                  "--moe-shared-expert-intermediate-size 2048", "--moe-layer-freq '([0]*3+[1]*58)'",
                                  "--expert-model-parallel-size " + std::to_string(ep),
                                  "--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm",
                                  "--moe-router-score-function sigmoid", "--multi-latent-attention",
                                  "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128",
                                  "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--mtp-num-layers 1"})
      CHECK_MESSAGE(megatron.find("  " + arg + "\n") != std::string::npos, arg);
    const std::string titan = read_all(dir / "torchtitan.sh");
    CHECK(titan.find("--module deepseek_v3 --config deepseek_v3_671b") != std::string::npos);
    CHECK(read_all(dir / "torchtitan.toml").find("expert_parallel_degree = " + std::to_string(ep)) != std::string::npos);
    CHECK(read_all(dir / "train_fsdp2.py").find("if EP > 1:") != std::string::npos);
    CHECK(read_all(dir / "README.md").find("ep " + std::to_string(ep)) != std::string::npos);
  }

  TEST_CASE("config.json written from each MoE preset imports to the preset's exact counts") {
    for (const char* preset : {"mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3",
                               "gpt-oss-20b", "gpt-oss-120b", "llama3-8b"}) {
      CAPTURE(preset);
      const fs::path dir = fresh_dir(std::string("roundtrip-") + preset);
      const auto r = run_cli(std::string("plan --preset ") + preset + " --gpus 256 --cluster dgx-h100 --framework "
                             "megatron --simulate-top 0 --emit '" + dir.string() + "'");
      CAPTURE(r.err);
      REQUIRE(r.exit_code == 0);
      REQUIRE(fs::exists(dir / "config.json"));
      const std::string shape = " --gpus 8 --zero 3 --recompute full --format json";
      const auto from_preset = run_cli(std::string("predict --preset ") + preset + shape);
      const auto from_config = run_cli("predict --hf-config '" + (dir / "config.json").string() + "'" + shape);
      CAPTURE(from_config.err);
      REQUIRE(from_preset.exit_code == 0);
      REQUIRE(from_config.exit_code == 0);
      const auto a = nlohmann::json::parse(from_preset.out)["model"];
      const auto b = nlohmann::json::parse(from_config.out)["model"];
      CHECK(a["params"] == b["params"]);
      CHECK(a["active_params"] == b["active_params"]);
      CHECK(a["mtp_params"] == b["mtp_params"]);
    }
  }

  TEST_CASE("windows, sinks and interleaved MoE layers; a family torchtitan lacks stops its script") {
    const fs::path oss = fresh_dir("gpt-oss");
    plan_and_emit("--preset gpt-oss-120b --gpus 64 --cluster dgx-h100 --framework megatron", oss);
    check_syntax(oss);
    const std::string megatron = read_all(oss / "megatron_args.sh");
    CHECK(megatron.find("  --window-size 127,0\n") != std::string::npos);  // window of 128 (examples/gptoss)
    CHECK(megatron.find("  --window-attn-skip-freq 2\n") != std::string::npos);
    CHECK(megatron.find("  --softmax-type learnable\n") != std::string::npos);
    CHECK(megatron.find("--moe-layer-freq") == std::string::npos);  // every layer MoE: the default
    const auto config = nlohmann::json::parse(read_all(oss / "config.json"));
    CHECK(config["model_type"] == "gpt_oss");
    CHECK(config["layer_types"][0] == "sliding_attention");
    CHECK(config["layer_types"][1] == "full_attention");

    const fs::path maverick = fresh_dir("maverick");
    plan_and_emit("--preset llama4-maverick --gpus 512 --cluster dgx-h100 --framework megatron", maverick);
    check_syntax(maverick);
    CHECK(read_all(maverick / "megatron_args.sh").find("--moe-layer-freq '(([0,1])*24)'") != std::string::npos);
    CHECK_FALSE(fs::exists(maverick / "config.json"));  // Llama 4's transformers class is multimodal
    // torchtitan 0.3 has no Llama 4: its script says so on one error line and exits 2 before starting anything.
    const auto titan = shardplan::test::run_shell("bash '" + (maverick / "torchtitan.sh").string() + "'");
    CAPTURE(titan.err);
    CHECK(is_one_error_line(titan));
    CHECK(titan.err.find("llama4") != std::string::npos);
  }
}
