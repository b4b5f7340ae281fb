// torchtitan, in both of its configuration systems, from one list of settings:
//   torchtitan.sh    torchtitan >= 0.3 (PyPI 0.3.0): a config_registry function chosen by --module/--config, then
//                    --section.key overrides parsed by tyro (torchtitan/config/manager.py ConfigManager; the
//                    "TOML to Python Dataclass Registry" refactor, pytorch/torchtitan#2386, 2026-02-23), started as
//                    `torchrun -m torchtitan.train`; activation checkpointing is a tyro subcommand
//                    (torchtitan/distributed/activation_checkpoint.py ActivationCheckpointingConfig).
//   torchtitan.toml  torchtitan <= 0.2 (PyPI 0.2.2): CONFIG_FILE=... ./run_train.sh (torchtitan/config/job_config.py
//                    JobConfig: [model] name/flavor, [training], [parallelism], [activation_checkpoint] mode).
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "cli/emit_launch.hpp"
#include "planner/moe.hpp"

namespace shardplan::cli {

namespace {

// A model torchtitan ships: its folder (0.2 [model] name, 0.3 --module), a 0.2 flavor and a 0.3 config function,
// each with the size it stands for.
struct TitanEntry {
  const char* flavor;      // 0.2 flavor ("" = none in 0.2)
  const char* config;      // 0.3 config_registry function ("" = none in 0.3)
  double params;           // nominal total parameters
};
struct TitanChoice {
  std::string module;      // "" = torchtitan has no model of this family
  std::string flavor, config;
  bool exact_family = false;  // the family is the model's own (not Llama 3 standing in for another dense model)
};

// The models of torchtitan 0.2.2 (torchtitan/models/*/__init__.py *_args) and 0.3.0 (models/*/config_registry.py).
const std::vector<TitanEntry>& titan_entries(ModelFamily family) {
  static const std::vector<TitanEntry> llama3 = {{"8B", "llama3_8b", 8e9}, {"70B", "llama3_70b", 70e9},
                                                 {"405B", "llama3_405b", 405e9}};
  static const std::vector<TitanEntry> qwen3 = {{"0.6B", "qwen3_0_6b", 0.6e9}, {"1.7B", "qwen3_1_7b", 1.7e9},
                                                {"4B", "", 4e9},               {"8B", "", 8e9},
                                                {"14B", "qwen3_14b", 14e9},    {"32B", "qwen3_32b", 32e9}};
  static const std::vector<TitanEntry> qwen3_moe = {{"30B-A3B", "qwen3_30b_a3b", 30.5e9}, {"235B-A22B", "", 235e9}};
  static const std::vector<TitanEntry> deepseek = {{"16B", "deepseek_v3_16b", 16e9}, {"236B", "", 236e9},
                                                   {"671B", "deepseek_v3_671b", 671e9}};
  static const std::vector<TitanEntry> gpt_oss = {{"20b", "gpt_oss_20b", 21e9}, {"120b", "gpt_oss_120b", 117e9}};
  static const std::vector<TitanEntry> llama4 = {{"17bx16e", "", 109e9}, {"17bx128e", "", 400e9}};
  static const std::vector<TitanEntry> none;
  switch (family) {
    case ModelFamily::llama:
    case ModelFamily::qwen2:
    case ModelFamily::unknown: return llama3;
    case ModelFamily::qwen3: return qwen3;
    case ModelFamily::qwen3_moe: return qwen3_moe;
    case ModelFamily::deepseek_v3: return deepseek;
    case ModelFamily::gpt_oss: return gpt_oss;
    case ModelFamily::llama4: return llama4;
    case ModelFamily::mixtral: break;
  }
  return none;
}

// The entry nearest in size (log scale) among those a version has (flavor or config non-empty).
std::string nearest(const std::vector<TitanEntry>& entries, double params, bool config) {
  std::string best;
  double best_gap = 1e300;
  for (const TitanEntry& e : entries) {
    const char* name = config ? e.config : e.flavor;
    if (*name == '\0') continue;
    const double gap = std::abs(std::log(params / e.params));
    if (gap < best_gap) best_gap = gap, best = name;
  }
  return best;
}

TitanChoice titan_model(const ModelSpec& m, double params) {
  const ModelFamily family = model_family(m);
  TitanChoice c;
  // A dense model of another layout trains as the nearest Llama 3 (said in the notes); a model with experts,
  // latent attention, windows or other norms needs its own family, which torchtitan may not have.
  const bool plain_dense = family == ModelFamily::llama || family == ModelFamily::qwen2 ||
                           (family == ModelFamily::unknown && first_extended_feature(m)[0] == '\0');
  if (family == ModelFamily::unknown && !plain_dense) return c;
  if (family == ModelFamily::mixtral) return c;
  c.module = plain_dense ? "llama3" : to_string(family);
  if (family == ModelFamily::qwen3_moe) c.module = "qwen3";  // Qwen3 dense and MoE share torchtitan/models/qwen3
  c.exact_family = !plain_dense || family == ModelFamily::llama;
  c.flavor = nearest(titan_entries(family), params, false);
  c.config = nearest(titan_entries(family), params, true);
  return c;
}

const char* schedule_name(Schedule s) {
  // torch.distributed.pipelining get_schedule_class names.
  return s == Schedule::interleaved ? "Interleaved1F1B"
         : s == Schedule::gpipe     ? "GPipe"
         : s == Schedule::zb_h1     ? "InterleavedZeroBubble"
         : s == Schedule::zbv       ? "ZBVZeroBubble"
         : s == Schedule::dualpipev ? "DualPipeV"
                                    : "1F1B";
}

// One setting, as both versions spell it: section and key (underscores; 0.3's CLI spells them with hyphens), and the
// value as TOML writes it (strings quoted, booleans true/false).
struct TitanSetting {
  std::string section, key, value;
  bool toml_only = false;  // 0.3's CLI keeps the config's default
  bool cli_only = false;   // a 0.3 key 0.2's JobConfig lacks
};

std::vector<TitanSetting> titan_settings(const LaunchFacts& f) {
  std::vector<TitanSetting> s;
  auto set = [&](const char* section, const char* key, const std::string& value) { s.push_back({section, key, value}); };
  auto num = [](int64_t v) { return std::to_string(v); };
  // local_batch_size is a data-parallel rank's whole share of one accumulation step; torchtitan accumulates
  // gradients when global_batch_size exceeds local_batch_size × dp, and pipelines local_batch_size in micro-batches
  // of pipeline_parallel_microbatch_size.
  const int64_t local = f.pp > 1 ? f.micro_batch * f.grad_accum : f.micro_batch;
  set("training", "local_batch_size", num(local));
  set("training", "global_batch_size", num(f.global_batch));
  set("training", "seq_len", num(f.seq));
  set("training", "max_norm", "1.0");
  set("training", "steps", num(f.steps.value_or(1000)));
  set("training", "dtype", double_quoted(f.fp32_master || !f.bf16 ? "float32" : "bfloat16"));
  set("training", "mixed_precision_param", double_quoted(f.bf16 ? "bfloat16" : "float32"));
  set("training", "mixed_precision_reduce", "\"float32\"");
  if (f.offload) set("training", "enable_cpu_offload", "true");
  // 0.3 captures forward and backward in CUDA graphs unless told not to, and refuses that with pipelines or with EP's
  // default dispatcher (trainer.py Trainer.Config._validate_cuda_graphs); 0.2 has no such key.
  if (f.pp > 1 || f.ep > 1) s.push_back({"training", "disable_cuda_graphs", "true", false, true});
  set("parallelism", "data_parallel_replicate_degree", num(f.replicate));
  set("parallelism", "data_parallel_shard_degree", num(f.shard));
  set("parallelism", "fsdp_reshard_after_forward", double_quoted(f.zero >= 3 ? "always" : "never"));
  set("parallelism", "tensor_parallel_degree", num(f.tp));
  set("parallelism", "pipeline_parallel_degree", num(f.pp));
  if (f.pp > 1) {
    set("parallelism", "pipeline_parallel_schedule", double_quoted(schedule_name(f.schedule)));
    set("parallelism", "pipeline_parallel_microbatch_size", num(f.micro_batch));
    set("parallelism", "pipeline_parallel_layers_per_stage", num(f.torchtitan_layers_per_stage));
    set("parallelism", "pipeline_parallel_first_stage_less_layers", num(f.pp_embedding_layers));
    set("parallelism", "pipeline_parallel_last_stage_less_layers", num(f.pp_loss_layers));
  }
  set("parallelism", "context_parallel_degree", num(f.cp));
  // CompileConfig (torchtitan/config/configs.py): async TP needs the model compiled. Both are said either way: 0.3's
  // config functions turn them on (llama3_405b: enable, enable_async_tensor_parallel; deepseek_v3_671b: the loss).
  set("compile", "enable", f.compile ? "true" : "false");
  set("compile", "enable_async_tensor_parallel", f.async_tp ? "true" : "false");
  if (f.compile) s.push_back({"compile", "components", "[\"model\", \"loss\"]", true});
  set("checkpoint", "enable", "false");
  return s;
}

void add_common_notes(const ModelSpec& m, const LaunchFacts& f, const TitanChoice& c, const std::string& version,
                      const std::string& chosen, std::vector<std::string>& notes) {
  if (c.module.empty()) return;
  if (!c.exact_family)
    notes.push_back(fmt::format("{} has no model of {}'s layout: '{}' (Llama 3) is the nearest by size; register "
                                "one with this model's shape", version, m.name, chosen));
  else
    notes.push_back(fmt::format("'{}' is {}'s nearest {} model by size; unless it is {}, register one with "
                                "this model's shape", chosen, version, to_string(model_family(m)), m.name));
  if (f.tp > 1 && !f.sp) notes.push_back("torchtitan's tensor parallelism always shards the sequence too (SP)");
  if (f.zero == 1 || f.zero == 2)
    notes.push_back("torchtitan has no ZeRO-1/2: FSDP with reshard_after_forward 'never' (ZeRO-2-like)");
  if (f.offload) notes.push_back("enable_cpu_offload moves parameters and gradients to the host as well");
  if (f.fp16) notes.push_back("torchtitan trains in bf16 or fp32; fp16 is not supported");
  if (f.pp > 1 && (f.pp_first_layers > 0 || f.pp_last_layers > 0))
    notes.push_back("torchtitan has no first/last stage layer counts: give the split as module_fqns_per_model_part");
  if (!f.steps) notes.push_back("steps = 1000 (give --tokens to set it from the training budget)");
  // torchtitan's MTP arrived after 0.2 (f59c215e8, 2026-08-11), and its DeepSeek-V3 config functions build it only
  // when asked (num_mtp_layers = 0: torchtitan/models/deepseek_v3/__init__.py, config_registry.py).
  if (m.mtp_layers > 0)
    notes.push_back(fmt::format("the plan prices {0} multi-token-prediction module{1}, which '{2}' does not build "
                                "(num_mtp_layers 0; MTP needs a config with num_mtp_layers {0} and MTPLoss, after "
                                "torchtitan 0.2): `--mtp-layers 0` predicts what this file trains",
                                m.mtp_layers, m.mtp_layers == 1 ? "" : "s", chosen));
}

std::string no_model_reason(const ModelSpec& m, const std::string& version) {
  return fmt::format("{} has no model of {}'s architecture ({})", version, m.name,
                     model_family(m) == ModelFamily::unknown ? first_extended_feature(m)
                                                             : to_string(model_family(m)));
}

}  // namespace

EmittedFile emit_torchtitan(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"torchtitan.toml", "", false, {}};
  const ModelSpec& m = plan.prediction.model;
  const TitanChoice c = titan_model(m, static_cast<double>(plan.prediction.params.total));
  const std::string version = "torchtitan 0.2";
  std::string& out = file.text;
  out += fmt::format("# shardplan: torchtitan <= 0.2 job for {} on {} GPUs. CONFIG_FILE=torchtitan.toml ./run_train.sh\n"
                     "# (torchtitan >= 0.3 reads no TOML: run torchtitan.sh)\n",
                     f.model_name, f.gpus);
  out += "[job]\n";
  out += "dump_folder = \"./outputs\"\n";
  out += fmt::format("description = {}\n\n", double_quoted(fmt::format("shardplan plan for {}", f.model_name)));
  out += "[model]\n";
  // A family torchtitan lacks is named as it is, so that torchtitan stops on the unknown name rather than train
  // another model.
  out += fmt::format("name = {}\n", double_quoted(c.module.empty() ? to_string(model_family(m)) : c.module));
  if (c.module.empty()) {
    out += fmt::format("flavor = {}  # no such torchtitan model: see README.md\n", double_quoted(m.name));
    file.notes.push_back(no_model_reason(m, version) + ": [model] names it, and torchtitan will refuse it");
  } else {
    out += fmt::format("flavor = {}\n", double_quoted(c.flavor));
  }
  out += fmt::format("hf_assets_path = {}\n", double_quoted(f.model_ref));
  // 0.2's sections (job_config.py): async TP is a [parallelism] key there, EP's degrees too; the experts' TP split as
  // shardplan priced it (expert_tensor_parallel_degree: 1 "partial dp + all tp -> ep", or tp "partial dp -> ep").
  std::vector<std::pair<std::string, std::string>> lines;  // (section, "key = value")
  for (const TitanSetting& s : titan_settings(f)) {
    if (s.cli_only) continue;
    const bool async_tp = s.key == "enable_async_tensor_parallel";
    lines.push_back({async_tp ? "parallelism" : s.section, s.key + " = " + s.value});
  }
  if (f.ep > 1) {
    lines.push_back({"parallelism", fmt::format("expert_parallel_degree = {}", f.ep)});
    lines.push_back({"parallelism", fmt::format("expert_tensor_parallel_degree = {}", f.etp)});
  }
  // Every K-th block (planner/partial_recompute.hpp) is 0.2's layer-level selective AC: mode "selective" with a number
  // (torchtitan/distributed/activation_checkpoint.py _apply_layer_sac).
  const bool every = f.recompute == Recompute::full && f.recompute_every > 0;
  lines.push_back({"activation_checkpoint", "mode = " + double_quoted(every ? "selective" : to_string(f.recompute))});
  if (f.recompute == Recompute::selective) lines.push_back({"activation_checkpoint", "selective_ac_option = \"op\""});
  if (every)
    lines.push_back({"activation_checkpoint", fmt::format("selective_ac_option = \"{}\"", f.recompute_every)});
  std::vector<std::string> sections;
  for (const auto& [section, line] : lines)
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) sections.push_back(section);
  for (const std::string& section : sections) {
    out += fmt::format("\n[{}]\n", section);
    for (const auto& [in, line] : lines)
      if (in == section) out += line + "\n";
  }
  add_common_notes(m, f, c, version, c.module + "/" + c.flavor, file.notes);
  return file;
}

EmittedFile emit_torchtitan_script(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"torchtitan.sh", "", true, {}};
  const ModelSpec& m = plan.prediction.model;
  const TitanChoice c = titan_model(m, static_cast<double>(plan.prediction.params.total));
  const std::string version = "torchtitan 0.3";
  std::string& out = file.text;
  out += "#!/usr/bin/env bash\n";
  out += fmt::format("# shardplan: torchtitan >= 0.3 job for {} on {} GPUs ({} node(s) x {}).\n", f.model_name, f.gpus,
                     f.nodes, f.procs_per_node);
  out += "# Needs torchtitan importable (pip install torchtitan, or PYTHONPATH=<checkout>). Run on every node; more\n"
         "# --section.key overrides go after the script's name (torchtitan <= 0.2: torchtitan.toml).\n";
  out += "set -euo pipefail\n";
  // torchtitan removed layer-level selective AC with the per-op policy's centralisation (114151ad4, 2026-03-23,
  // pytorch/torchtitan#2357): its tyro subcommands are selective (per-op), full, memory-budget and none.
  const bool every = f.recompute == Recompute::full && f.recompute_every > 0;
  if (c.module.empty() || c.config.empty() || every) {
    const std::string why =
        every ? fmt::format("torchtitan >= 0.3 has no layer-level selective AC (every {}th block; removed by 114151ad4, "
                            "2026-03-23): run torchtitan.toml with torchtitan <= 0.2, or plan with --recompute full",
                            f.recompute_every)
        : c.module.empty() ? no_model_reason(m, version)
                           : fmt::format("{} has no config for the {} family near {}'s size", version,
                                         to_string(model_family(m)), m.name);
    out += fmt::format("echo {} >&2\nexit 2\n",
                       shell_quoted("error: " + why + "; launch megatron_args.sh, or add the model to torchtitan"));
    file.notes.push_back(why + ": the script says so and stops");
    return file;
  }
  out += "TITAN_ARGS=(\n";
  out += fmt::format("  --module {} --config {}\n", c.module, c.config);
  out += "  --dump-folder ./outputs\n";
  for (const TitanSetting& s : titan_settings(f)) {
    if (s.toml_only) continue;
    std::string flag = s.section + "." + s.key;
    for (char& ch : flag) ch = ch == '_' ? '-' : ch;
    if (s.value == "true") out += fmt::format("  --{}\n", flag);
    else if (s.value == "false") out += fmt::format("  --{}\n", flag.insert(s.section.size() + 1, "no-"));  // tyro
    else if (s.value.front() == '"') out += fmt::format("  --{} {}\n", flag, s.value.substr(1, s.value.size() - 2));
    else out += fmt::format("  --{} {}\n", flag, s.value);
    if (s.key == "context_parallel_degree" && f.ep == 1)
      out += "  --parallelism.expert-parallel-degree 1\n";  // 0.3's MoE configs set their own (deepseek_v3_671b: 2)
    if (s.key == "context_parallel_degree" && f.ep > 1) {
      // 0.3 splits no expert by TP (pytorch/torchtitan#3167 removed expert_tensor_parallel_degree): EP spans
      // dp_shard·cp·tp (parallel_dims.py _validate; efsdp = dp_shard·cp·tp/ep). With expert TP 1 that is the plan;
      // a plan with expert TP etp > 1 becomes ep·etp ranks of experts/(ep·etp) whole experts, the same bytes.
      const int64_t degree = f.ep * f.etp;
      out += fmt::format("  --parallelism.expert-parallel-degree {}\n", degree);
      if (f.etp > 1)
        file.notes.push_back(fmt::format("torchtitan 0.3 does not split experts by TP: expert_parallel_degree {} "
                                         "(ep {} × expert TP {}) holds the same expert bytes per rank, but its "
                                         "all-to-all spans {} ranks (priced over ep {}); plan with --etp 1 to match",
                                         degree, f.ep, f.etp, degree, f.ep));
      if (m.experts % degree != 0 || (f.shard * f.cp * f.tp) % degree != 0)
        file.notes.push_back(fmt::format("expert_parallel_degree {} must divide the {} experts and dp_shard·cp·tp "
                                         "({}): torchtitan will refuse it; plan with --framework torchtitan",
                                         degree, m.experts, f.shard * f.cp * f.tp));
    }
  }
  out += ")\n";
  // tyro subcommands come after every option of the parent config.
  const char* ac = f.recompute == Recompute::full ? "full" : f.recompute == Recompute::selective ? "selective" : "none";
  // torchtitan's run_train.sh sets expandable segments; this script calls torchrun itself (planner/memory.hpp fit_bytes).
  if (f.expandable_segments)
    out += "export PYTORCH_CUDA_ALLOC_CONF=\"${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}\"\n";
  out += torchrun_command(f);
  out += fmt::format("  -m torchtitan.train \"${{TITAN_ARGS[@]}}\" \"$@\" activation-checkpoint:{}\n", ac);
  // hf_assets_path is where torchtitan finds the tokenizer (and weights): the config function's own default.
  file.notes.push_back(fmt::format("the tokenizer comes from {}'s hf_assets_path (./assets/hf/...): download it there "
                                   "(torchtitan scripts/download_hf_assets.py) or add --hf-assets-path DIR",
                                   c.config));
  if (f.compile) file.notes.push_back("compile.components keeps the config's default (model, loss)");
  // The plan was priced with the loss it names; under compile torchtitan compiles the loss (framework.cpp
  // compile_compiles_loss), which --loss fused prices.
  if (f.compile && f.loss != LossKind::fused)
    file.notes.push_back(fmt::format("the plan prices a {} cross-entropy, but torchtitan compiles the loss with the model "
                                     "(compile.components); set components to [\"model\"] to run it as priced",
                                     to_string(f.loss)));
  // Converters are part of the model spec, which the command line cannot change (trainer.py: model_spec is
  // tyro.conf.Suppress): llama3_405b swaps its linears for torchao's Float8Linear (config_registry.py llama3_405b).
  if (c.config == "llama3_405b" && plan.prediction.strategy.fp8 == Fp8Recipe::off)
    file.notes.push_back("llama3_405b converts the linear layers to Float8 (tensorwise, torchao), which no override "
                         "undoes: it trains in FP8 although this plan priced bf16 GEMMs; plan with --fp8 tensorwise, "
                         "or register a config without the converter");
  else if (plan.prediction.strategy.fp8 != Fp8Recipe::off && c.config != "llama3_405b")
    file.notes.push_back(fmt::format("{} has no FP8 converter: the FP8 GEMMs this plan priced need a config with "
                                     "torchao's Float8LinearConverter (as llama3_405b has)", c.config));
  add_common_notes(m, f, c, version, c.config, file.notes);
  return file;
}

}  // namespace shardplan::cli
