#pragma once
// `plan ... --emit DIR`: what is needed to run the recommended plan, one file per runtime:
//   torchrun.sh              the torchrun command line (per node), launching train_fsdp2.py
//   train_fsdp2.py           PyTorch FSDP2 loop: fully_shard per block, MixedPrecisionPolicy, activation checkpointing
//   accelerate_config.yaml   Accelerate (FSDP2, DeepSpeed or Megatron-LM plugin, by the modelled framework)
//   ds_config.json           DeepSpeed: ZeRO stage, offload, micro-batch, gradient accumulation, bf16
//   megatron_args.sh         Megatron-LM arguments: TP, PP, virtual stages, SP, recompute, batches, distributed optimizer
//   torchtitan.sh            torchtitan >= 0.3 (Python config registry): torchrun -m torchtitan.train with overrides
//   torchtitan.toml          torchtitan <= 0.2 job config (TOML, before pytorch/torchtitan#2386)
//   config.json              the model for transformers' AutoConfig (the --hf-config file, or a preset of a family
//                            transformers has a class for: model_family)
//   hostfile                 DeepSpeed's host list; slurm.sbatch: one srun task per node running torchrun.sh
//   README.md                the plan, and what each file could not express (notes)
// All are written atomically (emit_files.cpp): every file to a temporary name first, then renamed; on failure
// nothing is left behind.
#include <optional>
#include <string>
#include <vector>

#include "io/hf_config.hpp"
#include "planner/cost.hpp"
#include "planner/predict.hpp"

namespace shardplan::cli {

struct LaunchPlan {
  Prediction prediction;                     // the recommended candidate
  std::optional<HfModel> hf;                 // when the model came from --hf-config
  std::optional<TrainingEstimate> training;  // when --tokens was given (sets the step count)
  std::string emit_dir = ".";                // --emit DIR, absolute: the Slurm script and the README name it
  // The hardware flags as plan was given them ("--gpu 'h100-sxm'", "--cluster '/abs/profile.yaml'"), for the README's
  // validate command; empty: the cluster's preset name (or a profile's file).
  std::string cluster_args;
};

// The plan's numbers as every writer needs them.
struct LaunchFacts {
  std::string model_name;
  std::string model_ref;    // the model's name when no config.json is written (else MODEL is the emit folder)
  bool config_json = false; // config.json is written beside the launch files (emit_model_config)
  std::string block_class;  // HF decoder layer class, "" when unknown (not from --hf-config)
  int64_t gpus = 1, nodes = 1, procs_per_node = 1;
  int64_t tp = 1, pp = 1, cp = 1, dp = 1, vpp = 1;
  int64_t ep = 1;   // expert parallelism, cut with etp from tp·cp·dp (planner/strategy.hpp)
  int64_t etp = 1;  // expert tensor parallelism in force (planner/strategy.hpp expert_tensor_parallel)
  bool ep_comm_overlap = false;  // Megatron's batch-level EP overlap (planner/framework.hpp)
  CudaGraphs cuda_graphs = CudaGraphs::none;  // what the plan priced CUDA graphs to capture (planner/strategy.hpp)
  double moe_capacity_factor = 0;  // token dropping with padding; 0 = dropless (planner/strategy.hpp)
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;  // the EP token dispatcher priced (planner/strategy.hpp)
  bool precision_aware_optimizer = false, bf16_adam_moments = false;  // Megatron's optimizer dtypes (planner/strategy.hpp)
  int64_t shard = 1, replicate = 1;  // data-parallel ranks that shard model states (cp ranks apart), and the replicas
  int64_t micro_batch = 1, grad_accum = 1, global_batch = 1, seq = 1;
  int64_t layers = 1;
  // The pipeline split (planner/pipeline_split.hpp): first/last stage blocks (0 = even), the embedding and loss
  // counted as layers (as the runtime defaults them), and torchtitan's pipeline_parallel_layers_per_stage.
  int64_t pp_first_layers = 0, pp_last_layers = 0, pp_embedding_layers = 0, pp_loss_layers = 0;
  int64_t torchtitan_layers_per_stage = 1;
  bool pp_stage_layout = false;  // Megatron's per-stage layout (--pp-layout) priced
  bool expandable_segments = false;  // the allocator mode priced (planner/memory.hpp fit_bytes): exported when on
  bool end_units_own = false;  // FSDP2's embedding and [final norm, LM head] units of their own (--fsdp-end-units)
  int zero = 3;
  bool sp = false, offload = false, flash = true;
  bool compile = false, async_tp = false;  // torch.compile; PyTorch's async TP (effective_tp_comm_overlap)
  bool bf16 = true, fp16 = false, fp32_master = true;
  Recompute recompute = Recompute::none;
  int64_t recompute_layers = 0, recompute_every = 0;  // full recomputation of some blocks (planner/partial_recompute.hpp)
  LossKind loss = LossKind::standard;  // the cross-entropy priced (planner/strategy.hpp)
  int64_t offload_activation_layers = 0;  // Megatron's CPU activation offloading (planner/strategy.hpp)
  uint32_t recompute_modules = 0;  // Megatron's selective modules priced; 0 = its default (planner/recompute_modules.hpp)
  Schedule schedule = Schedule::one_f_one_b;
  Framework framework = Framework::fsdp;
  std::optional<int64_t> steps;  // from --tokens
};
LaunchFacts launch_facts(const LaunchPlan& plan);

struct EmittedFile {
  std::string name;
  std::string text;
  bool executable = false;
  std::vector<std::string> notes;  // what the file could not express, for README.md
};

// Every file of the plan, in memory (nothing is written).
std::vector<EmittedFile> launch_files(const LaunchPlan& plan);

// The architecture family, as transformers and torchtitan name it (emit_model_config.cpp); unknown when no one class
// builds the model without guessing.
enum class ModelFamily { unknown, llama, qwen2, qwen3, mixtral, qwen3_moe, deepseek_v3, gpt_oss, llama4 };
ModelFamily model_family(const ModelSpec& m);
const char* to_string(ModelFamily family);

// config.json (emit_model_config.cpp), the DeepSpeed hostfile and the Slurm script (emit_cluster.cpp).
bool emits_model_config(const LaunchPlan& plan);
std::optional<EmittedFile> emit_model_config(const LaunchPlan& plan);
EmittedFile emit_hostfile(const LaunchFacts& f);
EmittedFile emit_slurm(const LaunchPlan& plan, const LaunchFacts& f);

// One writer per runtime (emit_torch.cpp, emit_frameworks.cpp, emit_megatron.cpp, emit_torchtitan.cpp).
// torchrun_command: the torchrun line(s) for one node of the plan, each ending in a line continuation.
std::string torchrun_command(const LaunchFacts& f);
EmittedFile emit_torchrun(const LaunchPlan& plan, const LaunchFacts& f);
EmittedFile emit_fsdp2_script(const LaunchPlan& plan, const LaunchFacts& f);
EmittedFile emit_accelerate(const LaunchPlan& plan, const LaunchFacts& f);
EmittedFile emit_deepspeed(const LaunchPlan& plan, const LaunchFacts& f);
EmittedFile emit_megatron(const LaunchPlan& plan, const LaunchFacts& f);
EmittedFile emit_torchtitan(const LaunchPlan& plan, const LaunchFacts& f);
EmittedFile emit_torchtitan_script(const LaunchPlan& plan, const LaunchFacts& f);

// Writes `files` into `dir` (created if missing) so that either all of them appear or none: each is written to a
// hidden temporary name and fsynced, then all are renamed into place. Throws InputError naming DIR (and the reason)
// when it cannot be written; whatever was created is removed first.
void write_files_atomically(const std::string& dir, const std::vector<EmittedFile>& files);

// Quoting helpers: a double-quoted literal valid in Python, TOML, YAML and JSON; a single-quoted shell word.
std::string double_quoted(const std::string& s);
std::string shell_quoted(const std::string& s);

}  // namespace shardplan::cli
