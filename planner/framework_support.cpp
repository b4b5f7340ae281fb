// What each runtime runs, read in its source (the refusal texts name the file and function). shardplan only
// prices what the runtime would start: a layout outside this table is refused, never approximated.
#include "planner/framework_support.hpp"

#include <fmt/format.h>

#include "planner/framework.hpp"
#include "planner/moe.hpp"
#include "planner/optimizer.hpp"

namespace shardplan {

namespace {

constexpr SmallSet kAllZero = bit(0) | bit(1) | bit(2) | bit(3);
constexpr SmallSet kNoZero1 = bit(0) | bit(2) | bit(3);

// PyTorch FSDP2 (`fully_shard`), the plain loop `plan --emit` writes (train_fsdp2.py).
constexpr FrameworkSupport kFsdp2{
    kNoZero1,
    "FSDP2 has no optimizer-only sharding: fully_shard shards parameters, gradients and optimizer states together, "
    "and reshard_after_forward=False is its ZeRO-2 (torch/distributed/fsdp/_fully_shard/_fully_shard.py fully_shard); "
    "use --zero 2, or --framework deepspeed|megatron for ZeRO-1",
    bit(2) | bit(3),
    "FSDP2 shards within groups on a 2-D (replicate, shard) device mesh for ZeRO-2/3 only (fully_shard's mesh "
    "argument); use --zero 2 or 3 with --hsdp",
    true, "",
    false, 0, 0,
    "plain FSDP2 has no pipeline schedule (train_fsdp2.py stops at pp > 1); FSDP2 under torch.distributed.pipelining "
    "is torchtitan's: use --framework torchtitan, or megatron/deepspeed",
    false, 0,
    "FSDP2's CPUOffloadPolicy moves parameters and gradients to the host as well (torch/distributed/fsdp/"
    "_fully_shard/_fsdp_api.py), not only the optimizer as ZeRO-Offload does; use --framework deepspeed (or megatron "
    "--zero 1) for --offload-optimizer"};

// PyTorch FSDP1 (`FullyShardedDataParallel`, one FlatParameter per wrapped unit).
constexpr FrameworkSupport kFsdp1{
    kNoZero1,
    "FSDP1's ShardingStrategy has NO_SHARD, SHARD_GRAD_OP and FULL_SHARD, no optimizer-only sharding "
    "(torch/distributed/fsdp/api.py ShardingStrategy); use --zero 2, or --framework deepspeed|megatron for ZeRO-1",
    bit(2) | bit(3),
    "FSDP1 hybrid sharding is HYBRID_SHARD (ZeRO-3) or _HYBRID_SHARD_ZERO2 (torch/distributed/fsdp/api.py "
    "ShardingStrategy); use --zero 2 or 3 with --hsdp",
    true, "",
    false, 0, 0,
    "FSDP1 has no pipeline schedule of its own; use --framework torchtitan (FSDP2 under torch.distributed.pipelining), "
    "megatron or deepspeed for pipeline parallelism",
    false, 0,
    "FSDP1's CPUOffload(offload_params=True) moves parameters and gradients to the host as well "
    "(torch/distributed/fsdp/api.py CPUOffload); use --framework deepspeed for --offload-optimizer"};

// torchtitan: FSDP2 (dp_shard), DDP via replicate (dp_replicate), DTensor TP, torch.distributed.pipelining.
constexpr FrameworkSupport kTorchtitan{
    kNoZero1,
    "torchtitan shards with FSDP2, which has no optimizer-only sharding; its fsdp_reshard_after_forward \"never\" is "
    "ZeRO-2 (torchtitan/config/configs.py ParallelismConfig); use --zero 2 or 3, or 0 (data_parallel_replicate only)",
    bit(2) | bit(3),
    "torchtitan's HSDP is data_parallel_replicate_degree × data_parallel_shard_degree over FSDP2, ZeRO-2/3 only; use "
    "--zero 2 or 3 with --hsdp",
    true, "",
    true, kNoZero1,
    bit(Schedule::one_f_one_b) | bit(Schedule::interleaved) | bit(Schedule::gpipe) | bit(Schedule::zb_h1) |
        bit(Schedule::zbv) | bit(Schedule::dualpipev),
    "torchtitan's pipeline_parallel_schedule names torch.distributed.pipelining's schedules (get_schedule_class: 1F1B, "
    "GPipe, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV), each multi-stage one with at least 2 "
    "stages per rank (torchtitan/distributed/pipeline_parallel.py _get_pipeline_metadata), over FSDP2, which has no "
    "ZeRO-1; use --zero 0, 2 or 3, and --vpp 2 or more with --schedule interleaved or zb-h1",
    false, 0,
    "torchtitan's cpu_offload is FSDP2's CPUOffloadPolicy, which moves parameters and gradients too "
    "(torchtitan/distributed/fsdp.py apply_fsdp_to_decoder); use --framework deepspeed for --offload-optimizer",
    bit(Schedule::interleaved) | bit(Schedule::zb_h1),
    true,
    "torchtitan's TP plan always shards the norms and their activations over the sequence (SequenceParallel on "
    "attention_norm, ffn_norm and norm: torchtitan/models/llama3/infra/parallelize.py apply_tp); add --sp"};

// DeepSpeed: ZeRO engine (runtime/zero/), pipeline engine (runtime/pipe/), TP through Megatron-DeepSpeed.
constexpr FrameworkSupport kDeepspeed{
    kAllZero, "",
    bit(3),
    "DeepSpeed shards within groups only at ZeRO-3 (MiCS, zero_optimization.mics_shard_size: "
    "deepspeed/runtime/zero/mics.py); use --zero 3 with --hsdp",
    true, "",
    true, bit(0) | bit(1), bit(Schedule::one_f_one_b),
    "DeepSpeed's pipeline engine runs only TrainSchedule, a 1F1B schedule (deepspeed/runtime/pipe/schedule.py: no "
    "interleaving, zero-bubble or DualPipe schedule), and "
    "asserts \"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\" (deepspeed/runtime/pipe/engine.py "
    "PipelineEngine.__init__); use --zero 0 or 1 and --schedule 1f1b with --pp",
    true, bit(1) | bit(2) | bit(3),
    "zero_optimization.offload_optimizer is \"valid for ZeRO stage 1, 2, 3\" (DeepSpeed docs/_pages/config-json.md); "
    "use --zero 1, 2 or 3"};

// Megatron-Core: distributed optimizer (ZeRO-1), Megatron-FSDP (ZeRO-2/3: --use-megatron-fsdp
// --data-parallel-sharding-strategy optim_grads / optim_grads_params, docs/user-guide/features/megatron_fsdp.md;
// hybrid sharding through --num-distributed-optimizer-instances), TP/SP, 1F1B and interleaved pipelines.
constexpr FrameworkSupport kMegatron{
    kAllZero, "",
    bit(2) | bit(3),
    "Megatron-Core's distributed optimizer alone is not hybrid-sharded in shardplan's sense; Megatron-FSDP's hybrid "
    "sharding (--num-distributed-optimizer-instances) is ZeRO-2/3: use --zero 2 or 3 with --hsdp",
    true, "",
    true, bit(0) | bit(1), bit(Schedule::one_f_one_b) | bit(Schedule::interleaved),
    "Megatron-Core schedules are no-pipelining, 1F1B and interleaved 1F1B (megatron/core/pipeline_parallel/"
    "schedules.py get_forward_backward_func): there is no GPipe, zero-bubble or DualPipe schedule "
    "(--delay-wgrad-compute defers W only to overlap expert all-to-all); use --schedule 1f1b or interleaved, or "
    "--framework torchtitan for zb-h1, zbv and dualpipev",
    true, bit(1),
    "Megatron-Core offloads the distributed optimizer's states (--optimizer-cpu-offload, megatron/training/"
    "arguments.py), so it needs --zero 1 (--use-distributed-optimizer)",
    0, false, "",
    "Megatron-FSDP (ZeRO-2/3 under Megatron-Core) with pipeline parallelism is not modelled (its v2 refuses PP: "
    "megatron/core/distributed/fsdp/mcore_fsdp_adapter.py); use --zero 0 or 1 with --pp"};

// shardplan's reference loop (reference/): data parallelism and ZeRO-0..3 on one process group.
constexpr FrameworkSupport kReference{
    kAllZero, "",
    0, "the reference loop shards over all data-parallel ranks (reference/shard.cpp); drop --hsdp",
    false,
    "the reference loop is data-parallel only (reference/README.md); drop --tp/--sp or choose another --framework",
    false, 0, 0,
    "the reference loop is data-parallel only (reference/README.md); drop --pp or choose another --framework",
    false, 0, "the reference loop keeps the optimizer on the device; drop --offload-optimizer"};

// torch.compile of the model: what the PyTorch runtimes offer (FSDP1/FSDP2 around a compiled module; torchtitan's
// [compile] enable = true, torchtitan/config/configs.py CompileConfig). Megatron-Core's kernels are fused by
// Transformer Engine instead, and shardplan models neither DeepSpeed's engine.compile() nor the reference loop's.
bool compiles(Framework f) { return f == Framework::fsdp || f == Framework::fsdp1 || f == Framework::torchtitan; }
constexpr const char* kCompileRefusal =
    "torch.compile is modelled for the PyTorch runtimes only (fsdp, fsdp1, torchtitan: torchtitan/config/configs.py "
    "CompileConfig); Megatron-Core fuses its kernels through Transformer Engine already: drop --compile or choose "
    "one of those";

// --tp-comm-overlap, per runtime (framework.hpp TpOverlapKind): Megatron-Core's Transformer Engine userbuffers;
// PyTorch's async TP for FSDP2 and torchtitan, under torch.compile only; none in the others.
constexpr const char* kTpOverlapRefusal =
    "TP comm overlap is Megatron-Core's (Transformer Engine userbuffers) or PyTorch's async TP under torch.compile "
    "for --framework fsdp|torchtitan (torchtitan compile.enable_async_tensor_parallel); DeepSpeed, FSDP1 and the "
    "reference loop run their TP collectives unoverlapped: drop --tp-comm-overlap or choose one of those";
// --cuda-graphs: priced for Megatron-Core (--cuda-graph-impl transformer_engine | full_iteration,
// megatron/training/arguments.py), the MoE host gaps they remove (moe_costs.hpp).
constexpr const char* kCudaGraphsRefusal =
    "shardplan prices CUDA graphs as Megatron-Core captures them (--cuda-graph-impl transformer_engine with "
    "--cuda-graph-modules, or full_iteration: megatron/training/arguments.py); use --framework megatron or drop "
    "--cuda-graphs";
// --moe-capacity-factor: token dropping with padding, Megatron-Core's (--moe-expert-capacity-factor
// --moe-pad-expert-input-to-capacity, megatron/core/transformer/moe/moe_utils.py get_capacity) and DeepSpeed-MoE's
// (deepspeed/moe/layer.py MoE capacity_factor, drop_tokens); torchtitan's MoE is dropless (models/common/moe.py).
constexpr const char* kCapacityRefusal =
    "token dropping with a capacity factor is Megatron-Core's (--moe-expert-capacity-factor) and DeepSpeed-MoE's "
    "(capacity_factor); torchtitan and the FSDP loops route dropless: use --framework megatron or deepspeed, or drop "
    "--moe-capacity-factor";
// --ep-comm-overlap: Megatron-Core's batch-level EP overlap (framework.hpp ep_comm_overlap_available).
constexpr const char* kEpOverlapRefusal =
    "the batch-level EP all-to-all overlap is Megatron-Core's (--overlap-moe-expert-parallel-comm with "
    "--delay-wgrad-compute, megatron/core/transformer/moe/README.md); use --framework megatron or drop "
    "--ep-comm-overlap";
// --moe-dispatcher deepep|hybridep: Megatron-Core's flex token dispatcher (--moe-token-dispatcher-type flex
// --moe-flex-dispatcher-backend, megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher). torchtitan's
// DeepEP/HybridEP dispatchers are model-spec overrides after 0.3 (torchtitan/models/common/token_dispatcher.py) and are
// not priced; DeepSpeed-MoE has its own all-to-all only.
constexpr const char* kDispatcherRefusal =
    "shardplan prices DeepEP and HybridEP as Megatron-Core's flex token dispatcher runs them (--moe-token-dispatcher-type "
    "flex --moe-flex-dispatcher-backend: megatron/core/transformer/moe/token_dispatcher.py); use --framework megatron "
    "or --moe-dispatcher alltoall";
// --precision-aware-optimizer, --adam-moments bf16: Megatron-Core's (optimizer_config.py use_precision_aware_optimizer,
// exp_avg_dtype; Transformer Engine's FusedAdam). PyTorch's AdamW and DeepSpeed's FusedAdam keep fp32 states.
constexpr const char* kPrecisionAwareRefusal =
    "the precision-aware optimizer (16-bit master remainders, bf16 Adam moments) is Megatron-Core's "
    "(--use-precision-aware-optimizer with Transformer Engine's FusedAdam: megatron/core/optimizer/optimizer_config.py); "
    "use --framework megatron or drop --precision-aware-optimizer and --adam-moments";
// Megatron-Core's checks on the batch-level EP overlap (transformer_config.py __post_init__): with pp > 1 it needs a
// virtual pipeline ("virtual_pipeline_model_parallel_size must be specified"), and it refuses full recomputation.
constexpr const char* kEpOverlapScheduleRefusal =
    "Megatron-Core's batch-level EP overlap merges the forward and backward of adjacent micro-batches, which it runs "
    "only without full recomputation and, under pipeline parallelism, with an interleaved schedule "
    "(transformer_config.py: \"virtual_pipeline_model_parallel_size must be specified\", \"disable full recomputation\"); "
    "add --vpp 2 or more, use --recompute selective or none, or drop --ep-comm-overlap";
// --offload-activations: Megatron-Core's CPU activation offloading (--cpu-offloading-num-layers; Transformer Engine's
// get_cpu_offload_context), which transformer_config.py __post_init__ refuses under pipeline parallelism and with
// activation recomputation. A function, not a constant: the search asks it for every candidate (framework_runs).
std::string activation_offload_runtime_refusal(const Strategy& s) {
  if (s.offload_activation_layers == 0) return "";
  if (s.framework != Framework::megatron)
    return fmt::format("--offload-activations is Megatron-Core's CPU activation offloading (--cpu-offloading-num-layers, "
                       "Transformer Engine's get_cpu_offload_context); --framework {} has none priced: use --framework "
                       "megatron or drop the flag",
                       to_string(s.framework));
  if (s.pp > 1)
    return "--offload-activations with --pp > 1: Megatron-Core has \"no support for Pipeline parallelism with CPU "
           "offloading\" (transformer_config.py); drop one of them";
  if (s.recompute != Recompute::none)
    return fmt::format("--offload-activations with --recompute {}: Megatron-Core's \"CPU offloading does not work when "
                       "activation recomputation is enabled\" (transformer_config.py); use --recompute none or drop "
                       "the flag",
                       to_string(s.recompute));
  return "";
}
// --recompute-layers / --recompute-every (planner/partial_recompute.hpp): which runtime picks blocks that way.
// Megatron-Core: the first N of each chunk (--recompute-method block --recompute-num-layers N; its "uniform" method
// recomputes every block, in groups). torchtitan: every K-th (selective_ac_option "K"). FSDP2 and FSDP1 wrap whichever
// blocks a check_fn picks (torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py
// apply_activation_checkpointing; the emitted train_fsdp2.py does either). DeepSpeed's engine recomputes all or none
// (its pipeline engine's activation_checkpoint_interval groups every layer); the reference loop too.
std::string partial_recompute_runtime_refusal(const Strategy& s) {
  if (s.recompute_layers <= 0 && s.recompute_every <= 0) return "";
  const bool first_n = s.recompute_layers > 0;
  switch (s.framework) {
    case Framework::fsdp:
    case Framework::fsdp1: return "";
    case Framework::megatron:
      if (first_n) return "";
      return "--recompute-every under --framework megatron: Megatron-Core recomputes the first N blocks of each chunk "
             "(--recompute-method block --recompute-num-layers N; transformer_block.py _checkpointed_forward), not "
             "every K-th; use --recompute-layers N";
    case Framework::torchtitan:
      if (!first_n) return "";
      return "--recompute-layers under --framework torchtitan: torchtitan checkpoints every K-th block "
             "(activation_checkpoint.selective_ac_option = \"K\"; activation_checkpoint.py _apply_layer_sac), not the "
             "first N; use --recompute-every K";
    case Framework::deepspeed:
      return fmt::format("{} under --framework deepspeed: DeepSpeed recomputes every block or none (its pipeline "
                         "engine's activation_checkpoint_interval groups all layers); drop the flag or use --framework "
                         "megatron, fsdp or torchtitan",
                         first_n ? "--recompute-layers" : "--recompute-every");
    case Framework::reference:
      return fmt::format("{} under --framework reference: the reference loop recomputes every block or none; drop "
                         "the flag",
                         first_n ? "--recompute-layers" : "--recompute-every");
  }
  return "";
}
bool ep_overlap_schedule_runs(const Strategy& s) {
  if (!s.ep_comm_overlap.value_or(false)) return true;
  return s.recompute != Recompute::full && (s.pp <= 1 || s.vpp >= 2);
}
constexpr const char* kAsyncTpCompileRefusal =
    "PyTorch's async TP is an Inductor pass (torch._inductor.config._micro_pipeline_tp): torchtitan refuses it "
    "without torch.compile (torchtitan/config/configs.py CompileConfig.__post_init__); add --compile or drop "
    "--tp-comm-overlap";
// The kind is the runtime's trait (framework.cpp tp_overlap_kind): one place says which runtime overlaps how.
bool overlaps_tp(Framework f) { return framework_traits(f).tp_overlap_kind != TpOverlapKind::none; }
bool tp_overlap_needs_compile(Framework f) {
  return framework_traits(f).tp_overlap_kind == TpOverlapKind::micro_pipeline;
}

// FP8 recipes per runtime.
//   PyTorch FSDP2 and torchtitan: torchao's Float8Linear, recipes "tensorwise" and "rowwise"
//   (torchao/float8/config.py Float8LinearRecipeName; torchtitan/components/quantization/float8.py
//   Float8LinearConverter), and MXFP8 through torchao's MXLinear (torchtitan/components/quantization/mx.py);
//   torchao's FP8 all-gather is tensorwise only (Float8LinearConfig.enable_fsdp_float8_all_gather).
//   Megatron-Core: Transformer Engine recipes --fp8-recipe tensorwise|delayed|blockwise|mxfp8
//   (megatron/training/arguments.py; megatron/core/fp8_utils.py get_fp8_recipe): no rowwise recipe.
constexpr SmallSet kTorchaoRecipes = bit(Fp8Recipe::tensorwise) | bit(Fp8Recipe::rowwise) | bit(Fp8Recipe::mxfp8);
constexpr const char* kTorchaoRefusal =
    "torchao's float8 training has tensorwise and rowwise scaling and MXFP8 (torchao/float8/config.py, "
    "torchao/prototype/mx_formats), no 128x128 block scaling; use --fp8 tensorwise, rowwise or mxfp8, or --framework "
    "megatron for blockwise";
constexpr const char* kTeRefusal =
    "Megatron-Core's --fp8-recipe offers tensorwise, delayed, blockwise and mxfp8 (megatron/training/arguments.py), "
    "no rowwise scaling; use --fp8 tensorwise, blockwise or mxfp8";
constexpr const char* kNoFp8Refusal =
    "shardplan models FP8 as torchao runs it under FSDP2 and torchtitan and as Transformer Engine runs it under "
    "Megatron-Core; use --framework fsdp, torchtitan or megatron, or drop --fp8";

// Expert parallelism per runtime (issue 17).
//   Megatron-Core: --expert-model-parallel-size and --expert-tensor-parallel-size, the expert groups cut from the
//     tp·cp·dp ranks of a stage (megatron/core/parallel_state.py initialize_model_parallel; strategy.hpp
//     expert_tensor_parallel); the distributed optimizer shards expert states over
//     the expert-data-parallel group (megatron/core/distributed/distributed_data_parallel.py: expert_parallel_buffers).
//   torchtitan: parallelism.expert_parallel_degree (torchtitan/config/job_config.py Parallelism; the mesh in
//     torchtitan/distributed/parallel_dims.py borrows ep from dp_shard·cp·tp; all-to-all in
//     torchtitan/distributed/expert_parallel.py ExpertParallel), experts sharded by FSDP2 over dp_shard / ep.
//   DeepSpeed: deepspeed.moe.layer.MoE(ep_size=...) with expert-data-parallel groups (deepspeed/utils/groups.py
//     _create_expert_and_data_parallel); its engine refuses ZeRO-3 with MoE layers (deepspeed/runtime/engine.py
//     _configure_zero_optimizer: "MoE not supported with Stage 3").
//   Plain FSDP2 and FSDP1 have no expert parallelism (fully_shard / FullyShardedDataParallel shard, they do not route
//   tokens); the reference loop runs no MoE model.
constexpr EpSupport kNoEp{false, 0,
                          "it has no expert parallelism (no all-to-all token dispatcher); use --framework megatron, "
                          "torchtitan (expert_parallel_degree) or deepspeed (ep_size), or drop --ep"};
// Context parallelism per runtime. torchtitan: torch's context_parallel over the "cp" mesh dimension
// (torchtitan/distributed/context_parallel/api.py, parallelism.context_parallel_degree); Megatron-Core:
// --context-parallel-size with Transformer Engine's attention (megatron/core/transformer/dot_product_attention.py).
constexpr const char* kCpFsdp2Refusal =
    "the plain FSDP2 loop shardplan emits (train_fsdp2.py) shards only over data-parallel ranks; torch's "
    "context_parallel over FSDP2 is what torchtitan runs (torchtitan/distributed/context_parallel/api.py): use "
    "--framework torchtitan or megatron";
constexpr const char* kCpFsdp1Refusal =
    "shardplan prices context parallelism as torchtitan runs it (FSDP2 over the dp_shard x cp mesh, torch's "
    "context_parallel: torchtitan/distributed/parallel_dims.py) and as Megatron-Core runs it; no FSDP1 runtime it has "
    "read does; use --framework torchtitan or megatron";
constexpr const char* kCpDeepspeedRefusal =
    "DeepSpeed's sequence parallelism is Ulysses, an all-to-all of attention heads (deepspeed/sequence/layer.py "
    "DistributedAttention), not ring attention over sequence chunks; use --framework torchtitan or megatron for --cp";
constexpr const char* kCpReferenceRefusal =
    "the reference loop is data-parallel only (reference/README.md); drop --cp or choose --framework torchtitan or "
    "megatron";

std::string refusal(const Strategy& s, const char* what, const char* why) {
  return fmt::format("--framework {} cannot run {}: {}", to_string(s.framework), what, why);
}

}  // namespace

Fp8Support fp8_support(Framework f) {
  switch (f) {
    case Framework::fsdp:
    case Framework::torchtitan: return {kTorchaoRecipes, kTorchaoRefusal};
    case Framework::megatron:
      return {bit(Fp8Recipe::tensorwise) | bit(Fp8Recipe::blockwise) | bit(Fp8Recipe::mxfp8), kTeRefusal};
    case Framework::fsdp1:
    case Framework::deepspeed:
    case Framework::reference: return {0, kNoFp8Refusal};
  }
  return {0, kNoFp8Refusal};
}

EpSupport ep_support(Framework f) {
  switch (f) {
    // Megatron-FSDP shards expert parameters over the expert-data-parallel mesh (megatron_fsdp.md "DeviceMesh").
    case Framework::megatron: return {true, kAllZero, ""};
    case Framework::torchtitan: return {true, kNoZero1, ""};
    case Framework::deepspeed:
      return {true, bit(0) | bit(1) | bit(2),
              "DeepSpeed's engine asserts \"MoE not supported with Stage 3\" (deepspeed/runtime/engine.py "
              "_configure_zero_optimizer); use --zero 0, 1 or 2 with --ep"};
    case Framework::fsdp:
    case Framework::fsdp1:
    case Framework::reference: return kNoEp;
  }
  return kNoEp;
}

CpSupport cp_support(Framework f) {
  switch (f) {
    case Framework::torchtitan:
    case Framework::megatron: return {true, ""};
    case Framework::fsdp: return {false, kCpFsdp2Refusal};
    case Framework::fsdp1: return {false, kCpFsdp1Refusal};
    case Framework::deepspeed: return {false, kCpDeepspeedRefusal};
    case Framework::reference: return {false, kCpReferenceRefusal};
  }
  return {false, kCpReferenceRefusal};
}

const FrameworkSupport& framework_support(Framework f) {
  switch (f) {
    case Framework::fsdp: return kFsdp2;
    case Framework::fsdp1: return kFsdp1;
    case Framework::torchtitan: return kTorchtitan;
    case Framework::deepspeed: return kDeepspeed;
    case Framework::megatron: return kMegatron;
    case Framework::reference: return kReference;
  }
  return kFsdp2;
}

bool framework_runs(const Strategy& s) {
  const FrameworkSupport& fs = framework_support(s.framework);
  if (s.zero < 0 || s.zero > 3) return true;
  if (!has(fs.zero_stages, s.zero)) return false;
  if (s.hsdp > 0 && s.hsdp < s.dp && !has(fs.hsdp_zero_stages, s.zero)) return false;
  if (s.tp > 1 && !fs.tensor_parallel) return false;
  if (s.tp > 1 && fs.tp_always_sp && !s.sp) return false;
  if (s.cp > 1 && !cp_support(s.framework).runs) return false;
  if (s.pp > 1 && (!fs.pipeline || !has(fs.pipeline_zero_stages, s.zero) || !has(fs.schedules, s.schedule)))
    return false;
  if (s.pp > 1 && has(fs.multi_stage_schedules, s.schedule) && s.vpp < 2) return false;
  if (s.compile && !compiles(s.framework)) return false;
  if (s.tp_comm_overlap.value_or(false) &&
      (!overlaps_tp(s.framework) || (tp_overlap_needs_compile(s.framework) && !s.compile)))
    return false;
  if (s.fp8 != Fp8Recipe::off && !has(fp8_support(s.framework).recipes, static_cast<int>(s.fp8))) return false;
  if (s.fp8_all_gather && !fp8_all_gather_runs(s)) return false;
  if (s.ep > 1 && (!ep_support(s.framework).expert_parallel || !has(ep_support(s.framework).zero_stages, s.zero)))
    return false;
  if (s.ep_comm_overlap.value_or(false) && !framework_traits(s.framework).ep_comm_overlap_available) return false;
  if (!ep_overlap_schedule_runs(s)) return false;
  if (s.cuda_graphs != CudaGraphs::none && s.framework != Framework::megatron) return false;
  if (s.moe_capacity_factor > 0 && s.framework != Framework::megatron && s.framework != Framework::deepspeed)
    return false;
  if (s.moe_dispatcher != MoeDispatcher::alltoall && s.framework != Framework::megatron) return false;
  if ((s.precision_aware_optimizer || s.bf16_adam_moments) && s.framework != Framework::megatron) return false;
  if (s.offload_activation_layers != 0 && !activation_offload_runtime_refusal(s).empty()) return false;
  if (!muon_refusal(s).empty()) return false;
  if ((s.recompute_layers > 0 || s.recompute_every > 0) && !partial_recompute_runtime_refusal(s).empty()) return false;
  return !s.offload_optimizer || (fs.offload_optimizer && has(fs.offload_zero_stages, s.zero));
}

bool fp8_all_gather_runs(const Strategy& s) {
  // torchao's FSDP2 FP8 all-gather: tensorwise scaling, sharded parameters (Float8LinearConfig
  // enable_fsdp_float8_all_gather).
  if (s.framework == Framework::fsdp || s.framework == Framework::torchtitan)
    return s.fp8 == Fp8Recipe::tensorwise && s.zero >= 2;
  // Megatron-Core's --fp8-param-gather under the distributed optimizer (megatron/training/arguments.py validate_args;
  // every FP8 recipe: megatron/core/fp8_utils.py quantize_param_shard, post_all_gather_processing).
  // Megatron-FSDP (--zero 3, optim_grads_params) too: arguments.py "--fp8-param-gather only supported with
  // distributed optimizer, torch fsdp2, megatron fsdp"; its optim / optim_grads strategies keep whole parameters.
  if (s.framework == Framework::megatron) return s.fp8 != Fp8Recipe::off && (s.zero == 1 || s.zero == 3);
  return false;
}

std::optional<std::string> tp_comm_overlap_refusal(const Strategy& s) {
  if (s.tp_comm_overlap.value_or(false) && !overlaps_tp(s.framework))
    return refusal(s, "--tp-comm-overlap", kTpOverlapRefusal);
  if (s.tp_comm_overlap.value_or(false) && tp_overlap_needs_compile(s.framework) && !s.compile)
    return refusal(s, "--tp-comm-overlap without --compile", kAsyncTpCompileRefusal);
  return std::nullopt;
}

std::optional<std::string> framework_refusal(const Strategy& s) {
  if (framework_runs(s)) return std::nullopt;
  const FrameworkSupport& fs = framework_support(s.framework);
  if (s.zero < 0 || s.zero > 3) return std::nullopt;  // validate_strategy names the bad value
  if (!has(fs.zero_stages, s.zero)) return refusal(s, fmt::format("--zero {}", s.zero).c_str(), fs.zero_refusal);
  if (s.hsdp > 0 && s.hsdp < s.dp && !has(fs.hsdp_zero_stages, s.zero))
    return refusal(s, fmt::format("--hsdp with --zero {}", s.zero).c_str(), fs.hsdp_refusal);
  if (s.tp > 1 && !fs.tensor_parallel) return refusal(s, "--tp > 1", fs.tp_refusal);
  if (s.tp > 1 && fs.tp_always_sp && !s.sp) return refusal(s, "--tp > 1 without --sp", fs.tp_without_sp_refusal);
  if (s.cp > 1 && !cp_support(s.framework).runs) return refusal(s, "--cp > 1", cp_support(s.framework).refusal);
  if (s.pp > 1) {
    if (!fs.pipeline) return refusal(s, "--pp > 1", fs.pipeline_refusal);
    if (!has(fs.pipeline_zero_stages, s.zero))
      return refusal(s, fmt::format("--zero {} with --pp > 1", s.zero).c_str(),
                     *fs.pipeline_zero_refusal ? fs.pipeline_zero_refusal : fs.pipeline_refusal);
    if (!has(fs.schedules, s.schedule))
      return refusal(s, fmt::format("--schedule {}", to_string(s.schedule)).c_str(), fs.pipeline_refusal);
    if (has(fs.multi_stage_schedules, s.schedule) && s.vpp < 2)
      return refusal(s, fmt::format("--schedule {} with --vpp {}", to_string(s.schedule), s.vpp).c_str(),
                     fs.pipeline_refusal);
  }
  if (s.ep > 1 && !ep_support(s.framework).expert_parallel) return refusal(s, "--ep > 1", ep_support(s.framework).refusal);
  if (s.ep > 1 && !has(ep_support(s.framework).zero_stages, s.zero))
    return refusal(s, fmt::format("--ep with --zero {}", s.zero).c_str(), ep_support(s.framework).refusal);
  if (s.offload_optimizer && (!fs.offload_optimizer || !has(fs.offload_zero_stages, s.zero)))
    return refusal(s, fmt::format("--offload-optimizer with --zero {}", s.zero).c_str(), fs.offload_refusal);
  if (s.compile && !compiles(s.framework)) return refusal(s, "--compile", kCompileRefusal);
  if (auto why = tp_comm_overlap_refusal(s)) return why;
  if (s.ep_comm_overlap.value_or(false) && !framework_traits(s.framework).ep_comm_overlap_available)
    return refusal(s, "--ep-comm-overlap", kEpOverlapRefusal);
  if (!ep_overlap_schedule_runs(s))
    return refusal(s, s.recompute == Recompute::full ? "--ep-comm-overlap with --recompute full"
                                                     : "--ep-comm-overlap with --pp > 1 and no --vpp",
                   kEpOverlapScheduleRefusal);
  if (s.cuda_graphs != CudaGraphs::none && s.framework != Framework::megatron)
    return refusal(s, "--cuda-graphs", kCudaGraphsRefusal);
  if (s.moe_capacity_factor > 0 && s.framework != Framework::megatron && s.framework != Framework::deepspeed)
    return refusal(s, "--moe-capacity-factor", kCapacityRefusal);
  if (s.moe_dispatcher != MoeDispatcher::alltoall && s.framework != Framework::megatron)
    return refusal(s, fmt::format("--moe-dispatcher {}", to_string(s.moe_dispatcher)).c_str(), kDispatcherRefusal);
  if ((s.precision_aware_optimizer || s.bf16_adam_moments) && s.framework != Framework::megatron)
    return refusal(s, s.bf16_adam_moments ? "--adam-moments bf16" : "--precision-aware-optimizer", kPrecisionAwareRefusal);
  if (std::string why = activation_offload_runtime_refusal(s); !why.empty()) return why;
  if (std::string why = muon_refusal(s); !why.empty()) return why;
  if (std::string why = partial_recompute_runtime_refusal(s); !why.empty()) return why;
  if (s.fp8 != Fp8Recipe::off && !has(fp8_support(s.framework).recipes, static_cast<int>(s.fp8)))
    return refusal(s, fmt::format("--fp8 {}", to_string(s.fp8)).c_str(), fp8_support(s.framework).refusal);
  if (s.fp8_all_gather && !fp8_all_gather_runs(s)) {
    if (s.framework == Framework::megatron && s.fp8 == Fp8Recipe::off)
      return refusal(s, "--fp8-all-gather without --fp8",
                     "Megatron-Core keeps FP8 parameters (--fp8-param-gather) only for FP8 training; add --fp8 or drop "
                     "--fp8-all-gather");
    if (s.framework == Framework::megatron)
      return refusal(s, fmt::format("--fp8-all-gather with --zero {}", s.zero).c_str(),
                     "Megatron-Core gathers FP8 parameters (--fp8-param-gather) with its distributed optimizer, --zero "
                     "1, or Megatron-FSDP sharding the parameters, --zero 3 (arguments.py: '--fp8-param-gather only "
                     "supported with distributed optimizer, torch fsdp2, megatron fsdp'); use --zero 1 or 3, or drop "
                     "--fp8-all-gather");
    return refusal(s, "--fp8-all-gather",
                   "FP8 all-gather is torchao's for FSDP2 with tensorwise scaling (Float8LinearConfig."
                   "enable_fsdp_float8_all_gather) and Megatron-Core's --fp8-param-gather; use --framework fsdp or "
                   "torchtitan with --fp8 tensorwise and --zero 2 or 3, or --framework megatron with --fp8 and --zero 1 or 3");
  }
  return std::nullopt;
}

bool tp_needs_sp(Framework f, const ModelSpec& m) {
  return framework_support(f).tp_always_sp || (f == Framework::megatron && model_is_moe(m));
}

std::optional<std::string> tp_without_sp_refusal(const Strategy& s, const ModelSpec& m) {
  if (s.tp <= 1 || s.sp || !tp_needs_sp(s.framework, m)) return std::nullopt;
  if (framework_support(s.framework).tp_always_sp)
    return refusal(s, "--tp > 1 without --sp", framework_support(s.framework).tp_without_sp_refusal);
  return refusal(s, "an MoE model under --tp > 1 without --sp",
                 "Megatron-Core's MoE layer raises \"performance may degrade if MoE and tensor parallelism are enabled "
                 "without also enabling sequence parallelism\" in training (megatron/core/transformer/moe/moe_layer.py "
                 "MoELayer.forward); add --sp");
}

// torchtitan's multi-token prediction (torchtitan/models/deepseek_v3/mtp.py, since f59c215e8 of 2026-08-11; before it
// torchtitan built no MTP module): MTPDecoder.Config.update_from_config raises NotImplementedError under pipeline or
// context parallelism ("MTP does not support pipeline parallelism yet", "... context parallelism yet"), and
// MTPDecoder.forward raises ValueError under the chunked loss (skip_lm_head "is not supported with MTP decoder until
// ChunkedLoss supports MTP outputs"). Its DeepSeek-V3 configs build no MTP module unless num_mtp_layers is set.
bool mtp_runs(const Strategy& s, const ModelSpec& m) {
  if (m.mtp_layers <= 0 || s.framework != Framework::torchtitan) return true;
  return s.pp <= 1 && s.cp <= 1 && s.loss != LossKind::chunked;
}

namespace {
// Which of torchtitan's MTP limits a strategy meets first: the flag, what MTP does not support, where it raises, the
// way out.
struct MtpLimit {
  std::string flag;
  const char* what;
  const char* where;
  const char* way_out;
};

MtpLimit mtp_limit(const Strategy& s) {
  if (s.pp > 1)
    return {fmt::format("--pp {}", s.pp), "pipeline parallelism", "MTPDecoder.Config.update_from_config", "--pp 1"};
  if (s.cp > 1)
    return {fmt::format("--cp {}", s.cp), "context parallelism", "MTPDecoder.Config.update_from_config", "--cp 1"};
  return {"--loss chunked", "the chunked loss", "MTPDecoder.forward", "--loss standard or fused"};
}
}  // namespace

std::string mtp_limit_reason(const Strategy& s) {
  const MtpLimit limit = mtp_limit(s);
  return fmt::format("torchtitan's MTP does not support {} (torchtitan/models/deepseek_v3/mtp.py {}); --mtp-layers 0 "
                     "trains the main model alone, as torchtitan's DeepSeek-V3 configs do by default",
                     limit.what, limit.where);
}

std::optional<std::string> mtp_refusal(const Strategy& s, const ModelSpec& m) {
  if (mtp_runs(s, m)) return std::nullopt;
  return fmt::format("--framework torchtitan cannot run {} with the model's {} multi-token-prediction module{}: {}; or "
                     "use {} or --framework megatron",
                     mtp_limit(s).flag, m.mtp_layers, m.mtp_layers == 1 ? "" : "s", mtp_limit_reason(s),
                     mtp_limit(s).way_out);
}

void apply_framework_defaults(Strategy& s, const ModelSpec& m) {
  if (s.tp > 1 && tp_needs_sp(s.framework, m)) s.sp = true;
}

}  // namespace shardplan
