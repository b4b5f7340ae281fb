// `--emit DIR`: the plan's numbers (launch_facts), the file set with its README, written all or nothing.
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/emit_launch.hpp"
#include "io/atomic_write.hpp"
#include "cli/render_prediction.hpp"
#include "planner/moe.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/precision.hpp"

namespace shardplan::cli {

namespace fs = std::filesystem;

std::string double_quoted(const std::string& s) { return nlohmann::json(s).dump(); }

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

LaunchFacts launch_facts(const LaunchPlan& plan) {
  const Prediction& p = plan.prediction;
  const Strategy& s = p.strategy;
  LaunchFacts f;
  f.model_name = p.model.name;
  // With a config.json beside the launch files the model is the emit folder itself (AutoConfig reads
  // folder/config.json); without one, the model's name, which the README says to replace.
  f.config_json = emits_model_config(plan);
  f.model_ref = f.config_json ? plan.emit_dir : p.model.name;
  if (plan.hf) f.block_class = plan.hf->block_class;
  f.gpus = s.gpus;
  f.procs_per_node = std::min(s.gpus, p.cluster.gpus_per_node);
  f.nodes = (s.gpus + f.procs_per_node - 1) / f.procs_per_node;
  f.tp = s.tp;
  f.pp = s.pp;
  f.cp = s.cp;
  f.ep = s.ep;
  f.etp = expert_tensor_parallel(s);
  f.ep_comm_overlap = effective_ep_comm_overlap(s, framework_traits(s.framework));
  f.cuda_graphs = s.cuda_graphs;
  f.moe_capacity_factor = s.moe_capacity_factor;
  f.moe_dispatcher = s.moe_dispatcher;
  f.precision_aware_optimizer = s.precision_aware_optimizer;
  f.bf16_adam_moments = s.bf16_adam_moments;
  f.dp = s.dp;
  f.vpp = s.vpp;
  // ZeRO-0 shards nothing: every data-parallel rank is a replica.
  // Context-parallel ranks shard too (shard_degree), but the runtimes take the data-parallel part and cp apart
  // (torchtitan data_parallel_shard_degree × context_parallel_degree).
  f.shard = s.zero == 0 ? 1 : shard_degree(s) / std::max<int64_t>(s.cp, 1);
  f.replicate = f.shard > 0 ? s.dp / f.shard : 1;
  f.micro_batch = s.micro_batch;
  f.grad_accum = grad_accum_steps(s);
  f.global_batch = s.global_batch;
  f.seq = s.seq;
  f.layers = p.model.layers;
  f.pp_first_layers = s.split.first_layers;
  f.pp_last_layers = s.split.last_layers;
  f.pp_embedding_layers = effective_embedding_layers(s);
  f.pp_loss_layers = effective_loss_layers(s);
  f.pp_stage_layout = has_stage_layout(s);
  f.expandable_segments = p.memory.expandable_segments;
  f.end_units_own = p.strategy.end_units_own.value_or(framework_traits(p.strategy.framework).end_units_own);
  // torchtitan derives its virtual stages as ⌈(L + first_less + last_less) / layers_per_stage⌉
  // (torchtitan/distributed/pipeline_parallel.py _get_pipeline_metadata): ⌈E / S⌉ gives back S = pp · chunks.
  const int64_t effective = p.model.layers + f.pp_embedding_layers + f.pp_loss_layers;
  const int64_t pieces = std::max<int64_t>(1, virtual_stage_count(s));
  f.torchtitan_layers_per_stage = (effective + pieces - 1) / pieces;
  f.zero = s.zero;
  f.sp = s.sp;
  f.offload = s.offload_optimizer;
  f.flash = s.flash_attn;
  f.compile = s.compile;
  const FrameworkTraits traits = framework_traits(s.framework);
  f.async_tp = traits.tp_overlap_kind == TpOverlapKind::micro_pipeline && effective_tp_comm_overlap(s, traits);
  const DType compute = precision_compute_dtype(s.precision);
  f.bf16 = compute == DType::bf16;
  f.fp16 = compute == DType::fp16;
  f.fp32_master = s.precision != Precision::pure_bf16 && s.precision != Precision::pure_fp16;
  f.recompute = s.recompute;
  f.recompute_layers = s.recompute_layers;
  f.recompute_every = s.recompute_every;
  f.loss = s.loss;
  f.offload_activation_layers = s.offload_activation_layers;
  f.recompute_modules = s.recompute_modules;
  f.schedule = s.schedule;
  f.framework = s.framework;
  if (plan.training && plan.training->steps > 0) f.steps = plan.training->steps;
  return f;
}

namespace {

// The `shardplan validate` line that holds train_fsdp2.py's step log against this plan's prediction.
std::string validate_command(const LaunchPlan& plan, const LaunchFacts& f) {
  const Prediction& p = plan.prediction;
  const Strategy& s = p.strategy;
  std::string cmd = "shardplan validate ";
  // Absolute paths (or the emit folder's): the command works from any folder, not only where plan ran.
  cmd += plan.hf ? "--hf-config " + shell_quoted(fs::absolute(plan.hf->source_path).lexically_normal().string())
                 : "--preset " + shell_quoted(f.model_name);
  // A calibration profile is named by its file (ClusterSpec::source), a preset by its name.
  const bool profile = p.cluster.comm_calibration || p.cluster.gpu.gemm_calibration;
  const std::string hardware =
      !plan.cluster_args.empty()
          ? plan.cluster_args
          : "--cluster " +
                shell_quoted(profile ? fs::absolute(p.cluster.source).lexically_normal().string() : p.cluster.name);
  cmd += fmt::format(" {} --gpus {} --tp {} --pp {} --zero {}", hardware, s.gpus, s.tp, s.pp, s.zero);
  if (s.hsdp > 0) cmd += fmt::format(" --hsdp {}", s.hsdp);
  cmd += fmt::format(" --micro-batch {} --global-batch {} --seq {} --recompute {} --precision {} --framework fsdp",
                     s.micro_batch, s.global_batch, s.seq, to_string(s.recompute), to_string(s.precision));
  if (s.recompute_layers > 0) cmd += fmt::format(" --recompute-layers {}", s.recompute_layers);
  if (s.recompute_every > 0) cmd += fmt::format(" --recompute-every {}", s.recompute_every);
  if (!s.flash_attn) cmd += " --no-flash-attn";
  if (s.offload_optimizer) cmd += " --offload-optimizer";
  cmd += " --measurements " + shell_quoted((fs::path(plan.emit_dir) / "shardplan_steps.jsonl").string());
  return cmd;
}

std::string readme(const LaunchPlan& plan, const LaunchFacts& f, const std::vector<EmittedFile>& files) {
  const Prediction& p = plan.prediction;
  const Strategy& s = p.strategy;
  std::string out = fmt::format("# Launch files for {} on {} × {}\n\n", f.model_name, f.gpus, p.cluster.gpu.name);
  out += fmt::format("Written by `shardplan plan --emit` for the recommended configuration ({} modelled):\n\n",
                     to_string(s.framework));
  out += fmt::format("- {} parameters; {} node(s) × {} GPUs (cluster {})\n", format_param_count(static_cast<double>(p.params.total)), f.nodes,
                     f.procs_per_node, p.cluster.name);
  out += fmt::format("- tp {} · pp {}{}{}{} · dp {} (ZeRO-{}, model states sharded over {}, {} replica(s)){}{}\n",
                     f.tp, f.pp, f.vpp > 1 ? fmt::format(" (vpp {})", f.vpp) : "",
                     f.cp > 1 ? fmt::format(" · cp {}", f.cp) : "", f.ep > 1 ? fmt::format(" · ep {}", f.ep) : "",
                     f.dp, f.zero, f.shard, f.replicate,
                     f.sp ? " · sequence parallel" : "", f.offload ? " · optimizer offloaded to the host" : "");
  out += fmt::format("- micro-batch {} × {} accumulation steps = global batch {} sequences of {} tokens\n",
                     f.micro_batch, f.grad_accum, f.global_batch, f.seq);
  out += fmt::format("- recompute {}, {}, precision {}\n", to_string(f.recompute),
                     f.flash ? "flash attention" : "no flash attention", to_string(s.precision));
  if (s.optimizer == OptimizerKind::muon)
    out += "- optimizer Muon as Megatron-Core runs it (`--optimizer muon` in megatron_args.sh; Megatron-Core imports it "
           "from the emerging-optimizers package: `pip install emerging-optimizers`); the other files train with AdamW, "
           "which this prediction does not price\n";
  if (s.kv_repeated)
    out += "- priced with K and V copied to every query head before attention (--attention-kv repeated: torchtitan "
           "before 2026-01-27, transformers' repeat_kv); Megatron-Core, SDPA with enable_gqa and torchtitan since "
           "ff0829c share each K/V head within its query group, and hold and send less than priced\n";
  if (s.framework == Framework::torchtitan && !f.end_units_own)
    out += "- priced with the embedding and the LM head in FSDP's root unit (--fsdp-end-units root: torchtitan before "
           "83e694105, 2025-07-28); torchtitan since wraps them as units of their own (its configuration has no "
           "switch for it), so today's torchtitan holds what --fsdp-end-units own predicts\n";
  if (p.time.modelled)
    out += fmt::format("- predicted: step {:.3f} s, {:.0f} tokens/s per GPU, MFU {:.1f} %, peak {:.1f} GB per GPU\n",
                       p.time.step_s, p.throughput.tokens_per_s_per_gpu, 100 * p.throughput.mfu,
                       static_cast<double>(p.peak_bytes()) / kGB);
  if (plan.training)
    out += fmt::format("- training {} ({} optimizer steps)\n", training_line(*plan.training), plan.training->steps);
  if (f.config_json)
    out += fmt::format("\nModel: `config.json` in this folder ({}); MODEL (torchrun.sh, train_fsdp2.py) is this folder "
                       "unless set.\n",
                       plan.hf ? "a copy of the --hf-config file" : "written from the preset");
  else
    out += fmt::format("\nModel: `{}` — no Hugging Face class matches this architecture without guessing, so no "
                       "config.json is written: set MODEL to a Hugging Face model id or folder with this architecture.\n",
                       f.model_ref);
  out += "\n## Files\n\n";
  for (const EmittedFile& file : files) {
    out += fmt::format("- `{}`\n", file.name);
    for (const std::string& note : file.notes) out += fmt::format("  - note: {}\n", note);
  }
  out += "\n## Run\n\n";
  if (f.nodes == 1) {
    out += fmt::format("- PyTorch FSDP2: `{}/torchrun.sh`\n", plan.emit_dir);
  } else {
    out += fmt::format("- PyTorch FSDP2 under Slurm: `sbatch {}/slurm.sbatch` ({} nodes, one torchrun each).\n",
                       plan.emit_dir, f.nodes);
    out += fmt::format("- PyTorch FSDP2 by hand: on each of the {} nodes `NODE_RANK=<0..{}> MASTER_ADDR=<node 0> "
                       "{}/torchrun.sh`\n", f.nodes, f.nodes - 1, plan.emit_dir);
  }
  out += fmt::format("- Accelerate: `accelerate launch --config_file {}/accelerate_config.yaml{} your_train.py`\n",
                     plan.emit_dir,
                     f.nodes == 1 ? "" : " --machine_rank <0..nodes-1> --main_process_ip <node 0>");
  out += fmt::format("- DeepSpeed: `deepspeed --hostfile {0}/hostfile --num_nodes {1} --num_gpus {2} your_train.py "
                     "--deepspeed --deepspeed_config {0}/ds_config.json`\n",
                     plan.emit_dir, f.nodes, f.procs_per_node);
  out += fmt::format("- Megatron-LM: `source {}/megatron_args.sh; torchrun ... pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\"` "
                     "(add data, tokenizer and {} arguments)\n",
                     plan.emit_dir, s.optimizer == OptimizerKind::muon ? "learning-rate" : "optimizer");
  out += fmt::format("- torchtitan >= 0.3: `{}/torchtitan.sh` with torchtitan installed or on PYTHONPATH{}\n",
                     plan.emit_dir, f.nodes == 1 ? "" : " (on every node, with NODE_RANK and MASTER_ADDR as for torchrun.sh)");
  out += fmt::format("- torchtitan <= 0.2: `CONFIG_FILE={}/torchtitan.toml ./run_train.sh` from a torchtitan checkout{}\n",
                     plan.emit_dir,
                     f.nodes == 1 ? "" : fmt::format(" (run_train.sh starts one node: on {} nodes launch it with "
                                                     "torchrun's --nnodes/--node-rank/--rdzv-* as torchrun.sh does)",
                                                     f.nodes));
  out += "\n## Check the prediction\n\n";
  out += "`train_fsdp2.py` writes one JSON line per step to `shardplan_steps.jsonl` in this folder (or `$SHARDPLAN_STEPS`): the "
         "slowest rank's step time and the most device memory in use. Compare them with this plan's prediction:\n\n";
  out += "```sh\n" + validate_command(plan, f) + "\n```\n";
  return out;
}

}  // namespace

std::vector<EmittedFile> launch_files(const LaunchPlan& plan) {
  // Experts, latent attention, MTP, windows: each writer carries what its runtime can express and says what it cannot
  // (megatron_args.sh carries them all; config.json by model_family; torchtitan by the models it ships).
  const LaunchFacts f = launch_facts(plan);
  std::vector<EmittedFile> files = {emit_torchrun(plan, f),          emit_fsdp2_script(plan, f), emit_accelerate(plan, f),
                                    emit_deepspeed(plan, f),         emit_hostfile(f),           emit_megatron(plan, f),
                                    emit_torchtitan_script(plan, f), emit_torchtitan(plan, f),   emit_slurm(plan, f)};
  if (auto config = emit_model_config(plan)) files.push_back(std::move(*config));
  EmittedFile doc{"README.md", readme(plan, f, files), false, {}};
  files.push_back(std::move(doc));
  return files;
}

void write_files_atomically(const std::string& dir, const std::vector<EmittedFile>& files) {
  std::vector<io::FolderFile> out;  // all or nothing: io/atomic_write.hpp
  for (const EmittedFile& f : files) out.push_back({f.name, f.text, f.executable});
  io::write_folder_atomically(dir, out, "--emit");
}

}  // namespace shardplan::cli
