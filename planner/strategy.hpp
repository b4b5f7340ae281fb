#pragma once
// A fully specified training configuration: parallel layout, sharding, recomputation, precision, batch.
#include <cstdint>
#include <optional>
#include <string>

#include "planner/attention_kernel.hpp"
#include "planner/fp8_recipe.hpp"
#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/pipeline_split.hpp"

namespace shardplan {

enum class Recompute { none, selective, full };
// zb_h1: Zero Bubble's ZB-H1 (Qi et al. 2024, arXiv 2401.10241 §2.1), backward split into B (input gradient) and
// W (weight gradient); with vpp > 1 its interleaved form (torch.distributed.pipelining ScheduleInterleavedZeroBubble).
// zbv: ZB-V (ibid. §6), two chunks per rank in a V. dualpipev: DualPipeV (DeepSeek-V3 report §3.2.1, cut in half:
// torch.distributed.pipelining ScheduleDualPipeV). planner/pipeline_schedule.hpp has their bubbles and memory.
enum class Schedule { one_f_one_b, interleaved, gpipe, zb_h1, zbv, dualpipev };
// fsdp = PyTorch FSDP2 (`fully_shard`); fsdp1 = FullyShardedDataParallel (FlatParameter); torchtitan = FSDP2 with
// torchtitan's TP/PP policies; deepspeed = DeepSpeed's ZeRO and pipeline engines; megatron = Megatron-Core;
// reference = shardplan's own loop (reference/). framework.cpp gives each one's behaviours and their sources.
enum class Framework { fsdp, fsdp1, torchtitan, deepspeed, megatron, reference };
enum class Precision { pure_bf16, amp_bf16, megatron_bf16, fp32, pure_fp16, amp_fp16, megatron_fp16 };
// How the cross-entropy is computed:
//   standard: eager log_softmax + nll_loss on an fp32 upcast of the logits (torch.nn.functional.cross_entropy);
//   chunked:  the same, over chunks of tokens (the logits are materialised 1/chunks at a time);
//   fused:    one kernel reads the logits and writes their gradient in the compute dtype, keeping only a per-row
//             log-sum-exp (flash_attn/ops/triton/cross_entropy.py CrossEntropyLoss: backward allocates
//             dlogits = torch.empty_like(logits); llm-foundry's default loss_fn 'fused_crossentropy',
//             llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM); under megatron, Transformer Engine's
//             fused cross-entropy, whose gradient overwrites the logits (framework.hpp fused_loss_copies).
enum class LossKind { standard, chunked, fused };
// When gradients are reduced under gradient accumulation.
//   per_step: one reduction per optimizer step (PyTorch no_sync; Megatron's local grad buffer); with
//             ZeRO-2/3 the unsharded gradients are kept across micro-batches.
//   per_micro: one reduction per micro-batch (DeepSpeed; FSDP without no_sync).
enum class GradSync { per_step, per_micro };
// CUDA graphs around the step's kernels, which the host then launches as one (moe_costs.hpp moe_host_gap_s):
//   none:    eager launches (Megatron-Core's default, cuda_graph_impl "none");
//   partial: the static-shape parts of each layer (Transformer Engine graphs of attn, moe_router, moe_preprocess:
//            Megatron-Core --cuda-graph-impl transformer_engine --cuda-graph-modules ...); the routed experts, whose
//            token counts change every step, stay eager. The attention must be among them: the dispatcher's host
//            sync stalls the GPU while the host launches what follows it, and an eager attention is most of that
//            (graphs of the router and preprocessing alone are priced as none; reports/accuracy.md);
//   full:    the whole iteration (--cuda-graph-impl full_iteration, with static expert buffers; torchtitan 0.3's
//            default where it applies).
enum class CudaGraphs { none, partial, full };

// How an MoE layer moves its tokens between expert-parallel ranks (Megatron-Core --moe-token-dispatcher-type and
// --moe-flex-dispatcher-backend, megatron/core/transformer/moe/token_dispatcher.py):
//   alltoall: MoEAlltoAllTokenDispatcher — the routing map reduced to split sizes by a chain of small kernels, the
//             splits exchanged and copied to the host, permute, torch all_to_all_single, sort by local expert;
//   deepep:   MoEFlexTokenDispatcher over _DeepepManager — DeepEP's fused layout/notify kernel and its own NVLink/RDMA
//             dispatch kernels (github.com/deepseek-ai/DeepEP);
//   hybridep: MoEFlexTokenDispatcher over _HybridEPManager — permute, all-to-all and the sort by expert in one
//             dispatch call (the DeepEP hybrid-ep branch; the only backend for multi-node NVLink domains).
// Both flex backends still size their outputs on the host (tokens_per_expert.sum(), .item()): they sync as the
// all-to-all one does, with fewer launches before the sync (moe_costs.hpp moe_host_gap_s).
enum class MoeDispatcher { alltoall, deepep, hybridep };
// Where an MoE layer scales its experts' outputs by the router's top-k probabilities (activations.cpp):
//   activation: inside the experts, in their activation function (Megatron-Core since 2659630721, 2025-04-09, in
//               core_v0.13.0: moe/experts.py TEGroupedMLP bias_act_func, weighted_bias_swiglu_impl): the combine's
//               unpermute then takes no probabilities and saves nothing for its backward;
//   combine:    at the combine, the expert outputs times the probabilities (Megatron-Core before, moe_utils.py
//               unpermute(probs=...); torchtitan token_dispatcher.py LocalTokenDispatcher.combine; DeepSpeed-MoE's
//               einsum; transformers' expert loops): the product saves the k expert outputs for the probabilities'
//               gradient.
enum class MoeProbs { activation, combine };
// The optimizer of the step (planner/optimizer.hpp prices it):
//   adamw: Adam(W), two moments per parameter (every runtime's default);
//   muon:  Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is Scalable for LLM Training") as Megatron-Core runs it
//          (--optimizer muon, megatron/core/optimizer/emerging_optimizers.py TensorParallelMuon): one momentum per 2-D
//          weight, orthogonalized by Newton-Schulz iterations; Adam for the embedding, output layer, norms and biases
//          (_is_nonlinear_or_embedding). With the distributed optimizer (--zero 1) Megatron's
//          LayerWiseDistributedOptimizer gives each data-parallel rank whole matrices (layer_wise_optimizer.py).
enum class OptimizerKind { adamw, muon };
// How Muon orthogonalizes a TP-split matrix (Megatron --muon-tp-mode, emerging_optimizers muon_utils.py
// newton_schulz_tp; planner/optimizer.hpp prices each):
//   duplicated:  every TP rank all-gathers the fp32 shards and orthogonalizes the whole matrix (Megatron's default);
//   distributed: the shards stay; each Newton–Schulz step all-reduces the Gram matrix A over TP (newton_schulz_step);
//   blockwise:   each shard orthogonalized on its own, no communication (a different update: Megatron's help says
//                the result then depends on the parallel layout).
enum class MuonTpMode { duplicated, distributed, blockwise };

struct Strategy {
  int64_t gpus = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t cp = 1;                   // context parallelism: each sequence split over cp ranks (ring / all-gather KV)
  int64_t ep = 1;                   // expert parallelism: routed experts split over ep ranks (of tp·cp·dp / etp)
  int64_t etp = 0;                  // expert tensor parallelism: each routed expert split over etp ranks; 0 = the
                                    // runtime's default (expert_tensor_parallel)
  int64_t dp = 1;
  int64_t vpp = 1;                  // virtual pipeline stages per rank (interleaved 1F1B)
  Schedule schedule = Schedule::one_f_one_b;
  PipelineSplit split;              // blocks per stage: first/last counts, embedding and loss as layers
  bool sp = false;                  // sequence parallelism (needs tp > 1 to matter)
  int zero = 3;                     // 0 DDP, 1 optimizer, 2 + grads, 3 + params
  int64_t hsdp = 0;                 // shard group size for hybrid sharding; 0 = shard across all of dp
  Recompute recompute = Recompute::none;
  // Megatron-Core's --recompute-modules under selective recomputation: a mask of RecomputeModule
  // (planner/recompute_modules.hpp); 0 = its default, core_attn.
  uint32_t recompute_modules = 0;
  // Under full recomputation, which blocks of each model chunk recompute (planner/partial_recompute.hpp): the first
  // N (Megatron-Core's --recompute-method block --recompute-num-layers N) or every K-th (torchtitan's
  // selective_ac_option "K"); 0 and 0 = every block.
  int64_t recompute_layers = 0;
  int64_t recompute_every = 0;
  bool flash_attn = true;
  bool compile = false;             // torch.compile (Inductor) of the model: fused elementwise kernels
  int64_t micro_batch = 1;          // sequences per micro-batch per data-parallel replica
  int64_t global_batch = 0;         // sequences per optimizer step, all replicas
  int64_t seq = 0;                  // tokens per sequence
  Precision precision = Precision::amp_bf16;
  Framework framework = Framework::fsdp;
  bool offload_optimizer = false;
  LossKind loss = LossKind::standard;
  std::optional<GradSync> grad_sync;  // unset: the framework's default (framework_traits)
  std::optional<bool> overlap_grad_reduce;  // DDP/ZeRO-1/2 reduction during backward; unset: the framework's default
  std::optional<bool> overlap_param_gather;  // ZeRO-1/2 parameter all-gather during the next forward; unset: framework's
  std::optional<bool> tp_comm_overlap;       // TP collectives pipelined with their GEMMs (needs sp); unset: framework's
  std::optional<bool> ep_comm_overlap;       // EP all-to-alls behind another micro-batch's compute; unset: framework's
  std::optional<AttentionKernel> attention_kernel;  // the fused attention kernel; unset: the framework's
  // K and V copied to every query head before the attention kernel (planner/attention_linears.hpp
  // attention_kv_heads_per_rank), not shared by each query group inside it.
  bool kv_repeated = false;
  // PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); unset: the framework's launcher's.
  std::optional<bool> expandable_segments;
  // FSDP2's wrapping of the model's ends: true = the embedding and [final norm, LM head] are units of their own
  // (torchtitan since 2025-07), false = both sit in the root unit with everything not in a block; unset: the
  // framework's (FrameworkTraits::end_units_own; planner/framework.hpp fsdp_end_units_split).
  std::optional<bool> end_units_own;
  // torchtitan's RoPE tables: true = one complex64 table of the training length in each attention layer (since
  // 02d24f017, 2026-06-05), false = one table for the model; unset: the framework's (FrameworkTraits::
  // rope_tables; planner/memory_moments.cpp add_rope_caches).
  std::optional<bool> rope_cache_per_layer;
  Fp8Recipe fp8 = Fp8Recipe::off;   // FP8 GEMMs of the blocks' linear layers (planner/fp8.hpp)
  bool fp8_all_gather = false;      // FSDP2 all-gathers the linear weights in FP8 (torchao, tensorwise only)
  CudaGraphs cuda_graphs = CudaGraphs::none;  // what CUDA graphs capture (host launch gaps of eager MoE layers)
  // MoE token dropping: 0 = dropless; F > 0 = each expert takes at most ⌈T·k/E · F⌉ tokens from each rank and is padded
  // to it (Megatron-Core --moe-expert-capacity-factor F --moe-pad-expert-input-to-capacity; DeepSpeed-MoE
  // capacity_factor with drop_tokens): static shapes, every expert's GEMMs on its padded capacity (moe_costs.hpp).
  double moe_capacity_factor = 0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;  // the EP token dispatcher (megatron; others: all-to-all)
  std::optional<MoeProbs> moe_probs;  // where the router's probabilities scale the experts; unset: the framework's
  // Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer; optimizer/__init__.py: Transformer
  // Engine's FusedAdam keeps the master weights and the Adam moments in the dtypes asked for): in bf16 training without
  // FP8 the fp32 master weights are kept as the 16-bit remainders beside the bf16 weights (store_param_remainders,
  // distrib_optimizer.py: an int16 shard), 2 B/param instead of 4 (precision.hpp strategy_state_bytes).
  bool precision_aware_optimizer = false;
  bool bf16_adam_moments = false;  // Adam m and v in bf16 (--exp-avg-dtype/--exp-avg-sq-dtype bf16): 4 B/param, not 8
  // Megatron-Core's CPU activation offloading (--cpu-offloading-num-layers N; Transformer Engine's
  // get_cpu_offload_context): the saved activations of N of the layers go to host memory during forward and come back
  // for backward, over the GPU's host link (GpuSpec::host_link_gbps); 0 = none.
  int64_t offload_activation_layers = 0;
  OptimizerKind optimizer = OptimizerKind::adamw;
  MuonTpMode muon_tp_mode = MuonTpMode::duplicated;  // with optimizer muon and tp (or etp) > 1
  bool operator==(const Strategy&) const = default;
};

// Ranks over which model states are sharded and gradients reduced: (hsdp group, or all of dp) × cp. Context-parallel
// ranks hold the same weights and see different tokens, so the runtimes fold them into the sharding group:
// torchtitan's FSDP mesh is dp_shard × cp flattened (torchtitan/distributed/parallel_dims.py ParallelDims:
// expected_sizes["fsdp"] = dp_shard * cp), Megatron-Core's distributed optimizer and gradient reduce use
// get_data_parallel_group(with_context_parallel=True) (megatron/core/parallel_state.py).
int64_t shard_degree(const Strategy& s);
// Expert parallelism as Megatron-Core lays it out with MoE Parallel Folding (Liu et al. 2025, arXiv 2504.14960;
// megatron/core/parallel_state.py initialize_model_parallel: the expert ranks of a pipeline stage, tp·cp·dp of them,
// are re-cut as etp × ep × expert-dp in the order "tp-ep-dp-pp", with tp the expert TP size): each rank holds
// experts/ep of the routed experts, each split over etp ranks, and the ranks holding the same expert shard form the
// expert-data-parallel group of tp·cp·dp/(etp·ep) ranks that reduces (and under ZeRO shards) the expert states.
// torchtitan lays out its EP mesh over dp_shard·cp·tp the same way with etp = 1 (torchtitan/distributed/
// parallel_dims.py _validate: "expert_parallel_degree must divide dp_shard * cp * tp"). With etp = tp this is the older
// layout where EP is carved from the data- and context-parallel ranks.
// The expert tensor-parallel size in force: --etp when given; otherwise, with EP, 1 under megatron and torchtitan
// (every Megatron-Bridge MoE recipe sets expert_tensor_parallel_size = 1, e.g. recipes/qwen/h100/qwen3_moe.py, and
// Megatron-Core's MoE README recommends it for fine-grained experts; Megatron-Core's own default is --tp,
// megatron/training/arguments.py; torchtitan's expert_tensor_parallel_degree defaulted to 1 and was removed in
// pytorch/torchtitan#3167), and tp for DeepSpeed (its expert slicing reuses the TP group:
// deepspeed/moe/layer.py MoE enable_expert_tensor_parallelism) and without EP (experts split as a dense MLP).
int64_t expert_tensor_parallel(const Strategy& s);
// The one place the expert-DP degree is derived: tp·cp·dp / (etp·ep).
int64_t expert_data_parallel(const Strategy& s);
// Ranks that reduce each gradient: dp · cp (the batch is split over dp replicas and each sequence over cp ranks).
int64_t grad_reduce_degree(const Strategy& s);
// Tokens of one sequence on one rank: seq / cp (each rank holds 2 of the sequence's 2·cp chunks).
int64_t seq_per_rank(const Strategy& s);
// Micro-batches per optimizer step per replica: global / (micro · dp).
int64_t grad_accum_steps(const Strategy& s);

// Why --cp cannot split this strategy's sequence (seq not divisible by 2·cp, no fused attention), or "".
std::string context_parallel_refusal(const Strategy& s);
// Why --offload-activations N is refused for this model: Megatron-Core offloads fewer layers than it has
// (transformer_config.py __post_init__), or "". What the runtime refuses with it (another runtime, PP, recomputation)
// is framework_support.cpp's activation_offload_runtime_refusal, which the search applies too.
std::string activation_offload_refusal(const Strategy& s, const ModelSpec& m);
// Why --precision-aware-optimizer / --adam-moments bf16 are refused for this strategy's precision, or "".
std::string precision_aware_optimizer_refusal(const Strategy& s);
// Why a --moe-capacity-factor value is refused (negative, not a number, or above 64), or "".
std::string moe_capacity_factor_refusal(double factor);
// Why --hsdp with --ep is refused (hybrid sharding of the expert-data-parallel group is not modelled).
std::string hsdp_with_ep_refusal(int64_t hsdp, int64_t ep);

// Checks the strategy against the model and the cluster; throws InputError naming the flag.
void validate_strategy(const Strategy& s, const ModelSpec& m, const ClusterSpec& c);

const char* to_string(Recompute r);
const char* to_string(Schedule s);
const char* to_string(Framework f);
const char* to_string(Precision p);
const char* to_string(LossKind l);
const char* to_string(AttentionKernel k);
const char* to_string(Fp8Recipe r);
const char* to_string(GradSync g);
const char* to_string(CudaGraphs g);
const char* to_string(MoeDispatcher d);
const char* to_string(MoeProbs p);
const char* to_string(OptimizerKind o);
const char* to_string(MuonTpMode m);

std::optional<Recompute> parse_recompute(const std::string& s);
std::optional<Schedule> parse_schedule(const std::string& s);
std::optional<Framework> parse_framework(const std::string& s);
std::optional<Precision> parse_precision(const std::string& s);
std::optional<LossKind> parse_loss(const std::string& s);
std::optional<AttentionKernel> parse_attention_kernel(const std::string& s);
std::optional<Fp8Recipe> parse_fp8_recipe(const std::string& s);
std::optional<GradSync> parse_grad_sync(const std::string& s);
std::optional<CudaGraphs> parse_cuda_graphs(const std::string& s);
std::optional<MoeDispatcher> parse_moe_dispatcher(const std::string& s);
std::optional<MoeProbs> parse_moe_probs(const std::string& s);
std::optional<OptimizerKind> parse_optimizer(const std::string& s);
std::optional<MuonTpMode> parse_muon_tp_mode(const std::string& s);
std::optional<MlpKind> parse_mlp(const std::string& s);
std::optional<NormKind> parse_norm(const std::string& s);
std::optional<PositionKind> parse_position(const std::string& s);
std::optional<LinkKind> parse_link(const std::string& s);

}  // namespace shardplan
