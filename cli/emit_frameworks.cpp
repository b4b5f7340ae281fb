// accelerate_config.yaml, ds_config.json, megatron_args.sh and torchtitan.toml for the recommended plan.
// Keys as the runtimes spell them: Accelerate's `accelerate config` YAML (FSDP2 keys fsdp_version/
// fsdp_reshard_after_forward, parallelism_config_* since 1.10); DeepSpeed's config JSON docs (zero_optimization,
// offload_optimizer, mics_shard_size for hybrid sharding, tensor_parallel.autotp_size); Megatron-LM's
// arguments.py; torchtitan's JobConfig ([training], [parallelism], [activation_checkpoint]).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/emit_launch.hpp"
#include "planner/framework.hpp"

namespace shardplan::cli {

namespace {

const char* yaml_bool(bool b) { return b ? "true" : "false"; }

}  // namespace

EmittedFile emit_accelerate(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"accelerate_config.yaml", "", false, {}};
  std::string& out = file.text;
  out += fmt::format("# shardplan: {} on {} GPUs; `accelerate launch --config_file accelerate_config.yaml train.py`\n",
                     f.model_name, f.gpus);
  out += "compute_environment: LOCAL_MACHINE\n";
  out += "debug: false\n";
  const char* mixed = f.bf16 ? "bf16" : f.fp16 ? "fp16" : "no";
  if (f.framework == Framework::deepspeed) {
    out += "distributed_type: DEEPSPEED\n";
    out += "deepspeed_config:\n  deepspeed_config_file: ds_config.json\n";
    out += fmt::format("  zero3_init_flag: {}\n", yaml_bool(f.zero == 3));
  } else if (f.framework == Framework::megatron) {
    out += "distributed_type: MEGATRON_LM\n";
    out += "megatron_lm_config:\n";
    out += fmt::format("  megatron_lm_tp_degree: {}\n  megatron_lm_pp_degree: {}\n", f.tp, f.pp);
    out += fmt::format("  megatron_lm_num_micro_batches: {}\n", f.grad_accum);
    out += fmt::format("  megatron_lm_sequence_parallelism: {}\n", yaml_bool(f.sp));
    out += fmt::format("  megatron_lm_recompute_activations: {}\n", yaml_bool(f.recompute != Recompute::none));
    out += fmt::format("  megatron_lm_use_distributed_optimizer: {}\n", yaml_bool(f.zero >= 1));
    out += "  megatron_lm_gradient_clipping: 1.0\n";
    out += fmt::format("mixed_precision: {}\n", mixed);
  } else if (f.zero == 0 && f.tp == 1) {
    out += "distributed_type: MULTI_GPU  # DDP: ZeRO-0\n";
    out += fmt::format("mixed_precision: {}\n", f.fp32_master ? mixed : "no");
    if (f.pp > 1) file.notes.push_back(fmt::format("Accelerate's DDP has no pipeline parallelism (pp {})", f.pp));
    if (f.recompute != Recompute::none)
      file.notes.push_back("activation checkpointing: call model.gradient_checkpointing_enable() in your script");
  } else {
    out += "distributed_type: FSDP\n";
    out += "fsdp_config:\n";
    out += "  fsdp_version: 2\n";
    out += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
    if (!f.block_class.empty()) out += fmt::format("  fsdp_transformer_layer_cls_to_wrap: {}\n", f.block_class);
    out += fmt::format("  fsdp_reshard_after_forward: {}\n", yaml_bool(f.zero >= 3));
    out += fmt::format("  fsdp_activation_checkpointing: {}\n", yaml_bool(f.recompute != Recompute::none));
    out += fmt::format("  fsdp_offload_params: {}\n", yaml_bool(f.offload));
    out += "  fsdp_cpu_ram_efficient_loading: true\n";
    out += "  fsdp_state_dict_type: SHARDED_STATE_DICT\n";
    out += fmt::format("mixed_precision: {}\n", f.fp32_master ? mixed : "no");
    if (f.replicate > 1 || f.tp > 1) {
      // HSDP / TP / pure replication through Accelerate's ND-parallel config.
      out += "parallelism_config:\n";
      out += fmt::format("  parallelism_config_dp_replicate_size: {}\n", f.replicate);
      out += fmt::format("  parallelism_config_dp_shard_size: {}\n", f.shard);
      out += fmt::format("  parallelism_config_tp_size: {}\n", f.tp);
      out += "  parallelism_config_cp_size: 1\n";
    }
    if (f.zero == 1) file.notes.push_back("Accelerate's FSDP has no ZeRO-1: reshard_after_forward false is ZeRO-2");
    if (f.pp > 1) file.notes.push_back(fmt::format("Accelerate's FSDP plugin has no pipeline parallelism (pp {})", f.pp));
    if (f.recompute == Recompute::selective)
      file.notes.push_back("fsdp_activation_checkpointing recomputes whole blocks (full), not selectively");
    if (f.offload) file.notes.push_back("fsdp_offload_params offloads parameters and gradients, not only the optimizer");
    if (!f.fp32_master) file.notes.push_back("pure low precision: load the model in that dtype (mixed_precision: no)");
  }
  if (f.framework == Framework::deepspeed) out += fmt::format("mixed_precision: {}\n", mixed);
  out += fmt::format("num_machines: {}\n", f.nodes);
  out += fmt::format("num_processes: {}\n", f.gpus);
  out += "machine_rank: 0  # this node's index on each node\n";
  if (f.nodes > 1) {
    out += "main_process_ip: null  # set to node 0's address\n";
    out += "main_process_port: 29500\n";
    out += "rdzv_backend: static\n";
  }
  out += "same_network: true\n";
  out += "use_cpu: false\n";
  if (f.cp > 1) file.notes.push_back(fmt::format("this config has no context parallelism (cp {}): torchtitan.toml and "
                                                 "megatron_args.sh carry it", f.cp));
  (void)plan;
  return file;
}

EmittedFile emit_deepspeed(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"ds_config.json", "", false, {}};
  using nlohmann::json;
  json zero = {{"stage", f.zero}};
  if (f.zero >= 2) {
    zero["overlap_comm"] = true;
    zero["contiguous_gradients"] = true;
    zero["reduce_scatter"] = true;
  }
  if (f.offload) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (f.zero == 3 && f.replicate > 1) {
    // MiCS: shard within groups of mics_shard_size ranks, replicate across groups (= HSDP).
    zero["mics_shard_size"] = f.shard;
    zero["mics_hierarchical_params_gather"] = false;
  }
  json ds = {{"train_batch_size", f.global_batch},
             {"train_micro_batch_size_per_gpu", f.micro_batch},
             {"gradient_accumulation_steps", f.grad_accum},
             {"gradient_clipping", 1.0},
             {"bf16", {{"enabled", f.bf16}}},
             {"fp16", {{"enabled", f.fp16}}},
             {"zero_optimization", zero},
             {"steps_per_print", 10},
             {"wall_clock_breakdown", false}};
  if (f.fp16) ds["fp16"].update({{"loss_scale", 0}, {"initial_scale_power", 16}});
  if (f.tp > 1) ds["tensor_parallel"] = {{"autotp_size", f.tp}};
  if (f.recompute != Recompute::none)
    ds["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false},
                                      {"cpu_checkpointing", false}};
  file.text = ds.dump(2) + "\n";
  if (f.pp > 1)
    file.notes.push_back(fmt::format("pipeline parallelism (pp {}) needs a deepspeed.pipe.PipelineModule in your code",
                                     f.pp));
  if (f.recompute != Recompute::none)
    file.notes.push_back("activation checkpointing: call model.gradient_checkpointing_enable() (HF) or "
                         "deepspeed.checkpointing in your model");
  if (f.zero == 2 && f.replicate > 1)
    file.notes.push_back("DeepSpeed hybrid sharding (MiCS) is for ZeRO-3; ZeRO-2 here shards over all of dp");
  if (!f.fp32_master) file.notes.push_back("DeepSpeed bf16 keeps fp32 master weights (the plan assumed none)");
  if (f.cp > 1)
    file.notes.push_back(fmt::format("DeepSpeed has no ring context parallelism (its sequence parallelism is Ulysses): "
                                     "cp {} is in torchtitan.toml and megatron_args.sh only", f.cp));
  (void)plan;
  return file;
}

EmittedFile emit_megatron(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"megatron_args.sh", "", false, {}};
  const ModelSpec& m = plan.prediction.model;
  std::vector<std::string> args;
  auto arg = [&](const std::string& a) { args.push_back(a); };
  auto arg2 = [&](const std::string& a, const std::string& v) { args.push_back(a + " " + v); };
  // Parallelism and batch.
  arg2("--tensor-model-parallel-size", std::to_string(f.tp));
  arg2("--pipeline-model-parallel-size", std::to_string(f.pp));
  // Context parallelism: Transformer Engine's ring attention (the default --cp-comm-type p2p, megatron/training/
  // arguments.py), what shardplan priced (planner/context_parallel.hpp).
  if (f.cp > 1) arg2("--context-parallel-size", std::to_string(f.cp));
  // Uneven ends need --num-virtual-stages-per-pipeline-rank (megatron/training/arguments.py "Uneven virtual
  // pipeline parallelism"); the embedding and loss counted as layers are switches.
  // The split is the plan's only when it was planned for Megatron (another runtime's split rule may not be one
  // Megatron accepts: planner/pipeline_layout.cpp).
  const bool own = f.framework == Framework::megatron && f.pp > 1;
  const bool uneven = own && (f.pp_first_layers > 0 || f.pp_last_layers > 0);
  if (f.vpp > 1 && uneven) arg2("--num-virtual-stages-per-pipeline-rank", std::to_string(f.vpp));
  else if (f.vpp > 1) arg2("--num-layers-per-virtual-pipeline-stage", std::to_string(f.layers_per_virtual_stage));
  if (uneven && f.pp_first_layers > 0) arg2("--decoder-first-pipeline-num-layers", std::to_string(f.pp_first_layers));
  if (uneven && f.pp_last_layers > 0) arg2("--decoder-last-pipeline-num-layers", std::to_string(f.pp_last_layers));
  if (own && f.pp_embedding_layers > 0) arg("--account-for-embedding-in-pipeline-split");
  if (own && f.pp_loss_layers > 0) arg("--account-for-loss-in-pipeline-split");
  if (f.sp) arg("--sequence-parallel");
  arg2("--micro-batch-size", std::to_string(f.micro_batch));
  arg2("--global-batch-size", std::to_string(f.global_batch));
  // ZeRO-1/2: the distributed optimizer (sharded within dp / instances ranks with hybrid sharding); ZeRO-3:
  // PyTorch FSDP2 inside Megatron (megatron/core/distributed/README.md).
  if (f.zero == 1 || f.zero == 2) arg("--use-distributed-optimizer");
  if ((f.zero == 1 || f.zero == 2) && f.replicate > 1)
    arg2("--num-distributed-optimizer-instances", std::to_string(f.replicate));
  if (f.zero == 3) {
    arg("--use-torch-fsdp2");
    arg("--no-gradient-accumulation-fusion");
    arg2("--ckpt-format", "torch_dist");
  }
  if (f.offload) {
    arg("--optimizer-cpu-offload");
    arg2("--optimizer-offload-fraction", "1.0");
  }
  if (f.recompute == Recompute::selective) arg("--recompute-activations");
  if (f.recompute == Recompute::full) {
    arg2("--recompute-granularity", "full");
    arg2("--recompute-method", "uniform");
    arg2("--recompute-num-layers", "1");
  }
  // The overlaps the prediction assumed, as Megatron-Core would run this layout (framework.cpp megatron_traits).
  Strategy s = plan.prediction.strategy;
  s.framework = Framework::megatron;
  const FrameworkTraits megatron = framework_traits(Framework::megatron);
  if (effective_overlap_grad_reduce(s, megatron)) arg("--overlap-grad-reduce");
  if (f.zero == 1 && effective_overlap_param_gather(s, megatron)) arg("--overlap-param-gather");
  if (effective_tp_comm_overlap(s, megatron)) arg("--tp-comm-overlap");
  // The model.
  arg2("--num-layers", std::to_string(m.layers));
  arg2("--hidden-size", std::to_string(m.hidden));
  arg2("--ffn-hidden-size", std::to_string(m.ffn_hidden));
  arg2("--num-attention-heads", std::to_string(m.heads));
  if (m.kv_heads != m.heads) {
    arg("--group-query-attention");
    arg2("--num-query-groups", std::to_string(m.kv_heads));
  }
  if (m.head_dim > 0) arg2("--kv-channels", std::to_string(m.head_dim));
  arg2("--seq-length", std::to_string(f.seq));
  arg2("--max-position-embeddings", std::to_string(std::max(f.seq, m.seq)));
  if (m.mlp == MlpKind::swiglu) arg("--swiglu");
  arg2("--normalization", m.norm == NormKind::rmsnorm ? "RMSNorm" : "LayerNorm");
  arg2("--position-embedding-type", m.position == PositionKind::learned ? "learned_absolute"
                                    : m.position == PositionKind::rotary  ? "rope"
                                                                          : "none");
  // Megatron's defaults are 10000 and 1e-5 (megatron/training/arguments.py); Llama 3 needs 500000.
  if (m.position == PositionKind::rotary) arg2("--rotary-base", fmt::format("{:g}", m.rotary_base));
  arg2("--norm-epsilon", fmt::format("{:g}", m.norm_eps));
  if (!m.tied_embeddings) arg("--untie-embeddings-and-output-weights");
  if (!m.qkv_bias && !m.out_bias) arg("--disable-bias-linear");
  if (m.qkv_bias && !m.out_bias) {
    arg("--disable-bias-linear");
    arg("--add-qkv-bias");
  }
  if (!m.dropout) {
    arg2("--attention-dropout", "0.0");
    arg2("--hidden-dropout", "0.0");
  }
  arg2("--tokenizer-type", "NullTokenizer");
  arg2("--vocab-size", std::to_string(m.vocab));
  if (f.bf16) arg("--bf16");
  if (f.fp16) arg("--fp16");
  if (f.flash) arg2("--attention-backend", "flash");
  if (f.steps) arg2("--train-iters", std::to_string(*f.steps));

  std::string& out = file.text;
  out += "#!/usr/bin/env bash\n";
  out += fmt::format("# shardplan: Megatron-LM arguments for {} on {} GPUs (tp {} pp {}{} dp {}).\n", f.model_name,
                     f.gpus, f.tp, f.pp, f.cp > 1 ? fmt::format(" cp {}", f.cp) : "", f.dp);
  out += "# source megatron_args.sh; torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" --data-path ... --lr ...\n";
  out += "MEGATRON_ARGS=(\n";
  for (const std::string& a : args) out += "  " + a + "\n";
  out += ")\n";
  out += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  if (f.zero == 3) file.notes.push_back("ZeRO-3 maps to Megatron's --use-torch-fsdp2");
  if (f.zero == 2) file.notes.push_back("Megatron has no ZeRO-2: the distributed optimizer shards optimizer states");
  if (m.position == PositionKind::alibi) file.notes.push_back("Megatron-LM has no ALiBi: position embedding 'none'");
  if (m.out_bias && !m.qkv_bias) file.notes.push_back("biases on the projections but not on Q/K/V are not expressible");
  if (!f.fp32_master) file.notes.push_back("Megatron keeps fp32 main parameters (the plan assumed pure low precision)");
  if (f.replicate > 1 && f.zero == 3)
    file.notes.push_back("Megatron's FSDP2 shards over all data-parallel ranks: hybrid sharding is not expressed");
  if (!f.steps) file.notes.push_back("no --train-iters: give --tokens to set it from the training budget");
  return file;
}

EmittedFile emit_torchtitan(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"torchtitan.toml", "", false, {}};
  const ModelSpec& m = plan.prediction.model;
  std::string& out = file.text;
  // torchtitan builds models by (name, flavor); Llama 3 flavors by size, otherwise a flavor to register.
  const double params = static_cast<double>(plan.prediction.params.total);
  std::string flavor = params < 2e9 ? "1B" : params < 5e9 ? "3B" : params < 20e9 ? "8B" : params < 200e9 ? "70B" : "405B";
  out += fmt::format("# shardplan: torchtitan job for {} on {} GPUs. CONFIG_FILE=torchtitan.toml ./run_train.sh\n",
                     f.model_name, f.gpus);
  out += "[job]\n";
  out += "dump_folder = \"./outputs\"\n";
  out += fmt::format("description = {}\n\n", double_quoted(fmt::format("shardplan plan for {}", f.model_name)));
  out += "[model]\n";
  out += "name = \"llama3\"\n";
  out += fmt::format("flavor = {}  # register a flavor with this model's shape if it is not Llama 3 {}\n",
                     double_quoted(flavor), flavor);
  out += fmt::format("hf_assets_path = {}\n\n", double_quoted(f.model_ref));
  out += "[training]\n";
  // local_batch_size is a data-parallel rank's whole share of the step; torchtitan accumulates gradients when
  // global_batch_size exceeds local_batch_size × dp, and pipelines local_batch_size in micro-batches of
  // pipeline_parallel_microbatch_size.
  const int64_t local = f.pp > 1 ? f.micro_batch * f.grad_accum : f.micro_batch;
  out += fmt::format("local_batch_size = {}\n", local);
  out += fmt::format("global_batch_size = {}\n", f.global_batch);
  out += fmt::format("seq_len = {}\n", f.seq);
  out += "max_norm = 1.0\n";
  out += fmt::format("steps = {}\n", f.steps.value_or(1000));
  out += fmt::format("dtype = {}\n", double_quoted(f.fp32_master || !f.bf16 ? "float32" : "bfloat16"));
  out += fmt::format("mixed_precision_param = {}\n", double_quoted(f.bf16 ? "bfloat16" : "float32"));
  out += "mixed_precision_reduce = \"float32\"\n";
  if (f.offload) out += "enable_cpu_offload = true\n";
  out += "\n[parallelism]\n";
  out += fmt::format("data_parallel_replicate_degree = {}\n", f.replicate);
  out += fmt::format("data_parallel_shard_degree = {}\n", f.shard);
  out += fmt::format("fsdp_reshard_after_forward = {}\n", double_quoted(f.zero >= 3 ? "always" : "never"));
  out += fmt::format("tensor_parallel_degree = {}\n", f.tp);
  out += fmt::format("pipeline_parallel_degree = {}\n", f.pp);
  if (f.pp > 1) {
    // torch.distributed.pipelining get_schedule_class names.
    const char* schedule = f.schedule == Schedule::interleaved ? "Interleaved1F1B"
                           : f.schedule == Schedule::gpipe     ? "GPipe"
                           : f.schedule == Schedule::zb_h1     ? "InterleavedZeroBubble"
                           : f.schedule == Schedule::zbv       ? "ZBVZeroBubble"
                           : f.schedule == Schedule::dualpipev ? "DualPipeV"
                                                               : "1F1B";
    out += fmt::format("pipeline_parallel_schedule = {}\n", double_quoted(schedule));
    out += fmt::format("pipeline_parallel_microbatch_size = {}\n", f.micro_batch);
    out += fmt::format("pipeline_parallel_layers_per_stage = {}\n", f.torchtitan_layers_per_stage);
    out += fmt::format("pipeline_parallel_first_stage_less_layers = {}\n", f.pp_embedding_layers);
    out += fmt::format("pipeline_parallel_last_stage_less_layers = {}\n", f.pp_loss_layers);
    if (f.pp_first_layers > 0 || f.pp_last_layers > 0)
      file.notes.push_back("torchtitan has no first/last stage layer counts: give the split as module_fqns_per_model_part");
  }
  out += fmt::format("context_parallel_degree = {}\n", f.cp);
  out += "\n[activation_checkpoint]\n";
  out += fmt::format("mode = {}\n", double_quoted(to_string(f.recompute)));
  if (f.recompute == Recompute::selective) out += "selective_ac_option = \"op\"\n";
  if (f.compile) {
    // torchtitan/config/configs.py CompileConfig: async TP needs the model compiled.
    out += "\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
    if (f.async_tp) out += "enable_async_tensor_parallel = true\n";
  }
  out += "\n[checkpoint]\nenable = false\n";
  file.notes.push_back(fmt::format("torchtitan model flavor 'llama3/{}' is the nearest by size; {} needs its own "
                                   "flavor unless it is that model",
                                   flavor, m.name));
  if (f.tp > 1 && !f.sp) file.notes.push_back("torchtitan's tensor parallelism always shards the sequence too (SP)");
  if (f.zero == 1 || f.zero == 2)
    file.notes.push_back("torchtitan has no ZeRO-1/2: FSDP with reshard_after_forward 'never' (ZeRO-2-like)");
  if (f.offload) file.notes.push_back("enable_cpu_offload moves parameters and gradients to the host as well");
  if (f.fp16) file.notes.push_back("torchtitan trains in bf16 or fp32; fp16 is not supported");
  if (!f.steps) file.notes.push_back("steps = 1000 (give --tokens to set it from the training budget)");
  return file;
}

}  // namespace shardplan::cli
