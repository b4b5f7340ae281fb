// accelerate_config.yaml and ds_config.json for the recommended plan (megatron_args.sh: emit_megatron.cpp;
// torchtitan: emit_torchtitan.cpp). Keys as the runtimes spell them: Accelerate's `accelerate config` YAML (FSDP2 keys
// fsdp_version/fsdp_reshard_after_forward, parallelism_config_* since 1.10); DeepSpeed's config JSON docs
// (zero_optimization, offload_optimizer, mics_shard_size for hybrid sharding, tensor_parallel.autotp_size).
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
  if (f.recompute_layers > 0 || f.recompute_every > 0)
    file.notes.push_back(fmt::format("Accelerate's activation checkpointing recomputes every block; the plan recomputes {} "
                                     "of each chunk (train_fsdp2.py and megatron_args.sh do)",
                                     f.recompute_layers > 0 ? fmt::format("the first {} blocks", f.recompute_layers)
                                                            : fmt::format("every {}th block", f.recompute_every)));
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
  if (f.cp > 1) file.notes.push_back(fmt::format("this config has no context parallelism (cp {}): torchtitan and "
                                                 "megatron_args.sh carry it", f.cp));
  if (f.ep > 1) file.notes.push_back(fmt::format("this config has no expert parallelism (ep {}): torchtitan and "
                                                 "megatron_args.sh carry it", f.ep));
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
                                     "cp {} is in torchtitan and megatron_args.sh only", f.cp));
  // DeepSpeed-MoE takes its expert-parallel size in the model code, not in this file (deepspeed/moe/layer.py MoE:
  // ep_size; its expert-data-parallel groups, deepspeed/utils/groups.py _create_expert_and_data_parallel).
  if (plan.prediction.model.experts > 0)
    file.notes.push_back(fmt::format(
        "DeepSpeed-MoE is built in the model code: deepspeed.moe.layer.MoE(..., num_experts={}, ep_size={}, k={}, {}) for "
        "each MoE layer ({}); this file has no MoE keys",
        plan.prediction.model.experts, f.ep, plan.prediction.model.experts_per_token,
        f.moe_capacity_factor > 0 ? fmt::format("capacity_factor={}, drop_tokens=True", f.moe_capacity_factor)
                                  : std::string("drop_tokens=False"),
        f.moe_capacity_factor > 0 ? "token dropping, as priced"
                                  : "dropless, as priced; its default drops tokens over capacity_factor 1.0"));
  (void)plan;
  return file;
}

}  // namespace shardplan::cli
