#pragma once
// What each training framework adds beyond the textbook model states: runtime allocations outside the caching
// allocator, communication buffers, FSDP/ZeRO-3 working sets, loss and optimizer temporaries. Every number is
// a named parameter with its source, so that calibration and validation can replace it — not a hidden fudge.
#include <cstdint>

#include "planner/compute_cost.hpp"
#include "planner/hardware.hpp"
#include "planner/strategy.hpp"

namespace shardplan {
struct StageParams;
}

namespace shardplan {

// What a norm layer saves for backward (FrameworkTraits::norm_impl).
enum class NormImpl : uint8_t { legacy, transformers_eager, fused };

// How a runtime overlaps its tensor-parallel collectives with GEMMs (--tp-comm-overlap), if it can:
//   userbuffers:    Transformer Engine's userbuffers under Megatron-Core (transformer_engine/pytorch/module/linear.py
//                   ub_overlap_ag/rs, ub_bulk_dgrad/wgrad): every forward and backward collective (microbatch_costs.cpp);
//   micro_pipeline: PyTorch's async TP, Inductor's micro-pipeline pass under torch.compile
//                   (torch/_inductor/fx_passes/micro_pipeline_tp.py fuse_all_gather_matmul, fuse_matmul_reduce_scatter;
//                   torchtitan compile.enable_async_tensor_parallel): an all-gather fused with the matmuls that consume
//                   it, a reduce-scatter with the one matmul that produces it, decomposed into per-rank chunks.
enum class TpOverlapKind { none, userbuffers, micro_pipeline };
// The complex64 RoPE tables of the training length a runtime keeps as buffers (memory_moments.cpp add_rope_caches):
// none (computed in each forward, or not priced), one for the model, one in every attention layer.
enum class RopeTables { none, one, per_layer };

struct FrameworkTraits {
  Framework framework = Framework::fsdp;

  // --- runtime: outside the caching allocator ---------------------------------------------------------
  int64_t cuda_context_bytes = 0;         // CUDA context and loaded kernels
  int64_t cublas_workspace_bytes = 0;     // cuBLAS/cuBLASLt workspaces
  int64_t nccl_bytes_per_communicator = 0;

  // --- caching allocator: reserved beyond allocated, as a fraction of allocated -------------------------
  double fragmentation = 0;
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as the runtime's launcher sets it (Strategy::expandable_segments
  // overrides): the reserve still shows in max_memory_reserved but cannot fail a run (memory.hpp fit_bytes).
  bool expandable_segments = false;

  // --- ZeRO-3 / FULL_SHARD working set -------------------------------------------------------------------
  int64_t zero3_prefetch_units = 0;       // units gathered ahead of the one computing
  int64_t zero3_prefetch_elements = 0;    // DeepSpeed: stage3_prefetch_bucket_size (elements), 0 = unit-based
  bool zero3_root_stays_gathered = false; // the root unit (embedding, final norm, LM head) stays unsharded
  // FSDP2 wraps the embedding and [final norm, LM head] as units of their own instead of leaving them to the root
  // (Strategy::end_units_own overrides; fsdp_end_units_split says where it changes anything).
  bool end_units_own = false;
  // Multi-token prediction as torchtitan runs it (torchtitan/models/deepseek_v3/mtp.py, since 2026-08-11):
  //  - each MTP layer is an FSDP unit of its own (apply_fsdp_to_mtp_decoder puts it among model.layers for
  //    apply_fsdp_to_decoder), not part of the [final norm, LM head] unit (where the ends are units of their own:
  //    fsdp_end_units_split);
  //  - the MTP modules embed their shifted tokens with the model's own embedding (MTPDecoder.forward), so that unit has
  //    two uses in one backward: from the MTP's backward to the embedding's last, FSDP2 keeps it gathered and autograd
  //    keeps the first use's gradient (the parameter dtype, at full vocabulary) to add the second's to it;
  //  - MTPDecoder.forward returns every depth's logits and MTPLoss takes them all (train.py keeps `pred` until the
  //    loss is computed): at the last depth's cross-entropy forward every output's logits and the earlier losses'
  //    saved tensors are alive;
  //  - activation checkpointing wraps model.layers only (distributed/activation_checkpoint.py
  //    ActivationCheckpointingConfig.apply): the MTP layers keep all their activations whatever --recompute says.
  // Megatron-Core instead recomputes its MTP layers under the uniform method (multi_token_prediction.py
  // _checkpointed_forward; "recompute_method == 'block' is not supported for MTP yet") and computes each depth's
  // loss inside the forward (process_mtp_loss).
  bool torchtitan_mtp = false;
  int64_t unsharded_grad_units = 0;       // unit gradients alive before their reduce-scatter completes
  // ZeRO-2/3: beside unsharded_grad_units blocks, the head unit's (final norm + LM head, or the tied embedding)
  // gradients are still being reduced at the peak, which is in the first block's backward.
  bool head_grads_in_flight = false;
  // A backward that reduce-scatters ends with the compute stream waiting for its last reduce-scatter (the root's), so
  // the next micro-batch's forward starts after it and its reduce-scatter input is freed first.
  bool backward_end_waits_for_reduce = false;
  // Attention that scores one (sequence, head) at a time keeps this many T×T fp32 matrices (0: flash kernels).
  int64_t attention_score_matrices = 0;

  // Whether the bucketed gradient reduction (DDP, ZeRO-1/2) runs while backward computes, and whether ZeRO-1/2's
  // parameter all-gather after the step runs while the next forward computes.
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = false;

  // --- when FSDP-style units gather, free and reduce (framework.cpp gives the sources) ----------------------
  // ZeRO-2 as FSDP runs it: each unit all-gathered before its forward every micro-batch and freed after its backward
  // (SHARD_GRAD_OP, reshard_after_forward=False) — not DeepSpeed's stage 2, which keeps whole parameters and
  // reduce-scatters gradient buckets.
  bool zero2_gathers_units = false;
  // ZeRO-2 under no_sync: the units stay gathered after backward, so later micro-batches gather nothing.
  bool zero2_keeps_params_under_no_sync = false;
  // FSDP2's per-parameter shards: each all-gather's output is copied into the parameters on the compute stream,
  // and each reduce-scatter's input is copied into one buffer first. Passes (read + write = 2) over those bytes.
  double gather_copy_out_passes = 0;
  double reduce_copy_in_passes = 0;

  // --- under pipeline parallelism ----------------------------------------------------------------------------
  // Parameters stay gathered from each unit's first forward to its last backward of the step: one all-gather per
  // unit per step, and the stage's whole unsharded parameters alive throughout.
  bool pp_keeps_params_gathered = false;
  // Gradients are reduced once per step, after the stage's last backward (not overlapped with it).
  bool pp_reduces_after_last_backward = false;
  // torch.distributed.pipelining: a receive buffer per micro-batch for the stage's input and one for its output's
  // gradient, allocated once and kept across steps, and each in-flight micro-batch's output held for its backward
  // (memory.cpp add_parallel_buffers). Otherwise two boundary tensors (one in, one out), allocated per transfer.
  bool pp_buffers_per_microbatch = false;

  // --- tensor parallelism ------------------------------------------------------------------------------------
  // With sequence parallelism, the TP all-gathers and reduce-scatters are pipelined with the GEMMs that consume or
  // produce them, so only what a GEMM cannot cover is exposed: by default (Megatron-Core's recipes), and how.
  bool tp_comm_overlap = false;
  TpOverlapKind tp_overlap_kind = TpOverlapKind::none;
  // Sequence parallelism as DTensor runs it: the column-parallel linears save their all-gathered input (the whole
  // sequence) for the weight gradient, so backward gathers nothing again; Megatron-Core saves the scattered input and
  // re-gathers it beside the wgrad (Korthikanti §4.2.2). framework.cpp gives the sources.
  bool tp_saves_gathered_inputs = false;

  // --- expert parallelism ------------------------------------------------------------------------------------
  // The runtime can run one micro-batch's forward beside another's backward so that each one's EP all-to-alls hide
  // behind the other's compute (Megatron-Core's batch-level EP overlap, --overlap-moe-expert-parallel-comm with
  // --delay-wgrad-compute, MCore v0.14: moe/README.md), and whether it does by default (Megatron-Core: off).
  bool ep_comm_overlap_available = false;
  bool ep_comm_overlap = false;
  // The routed experts' GEMMs are launched one per local expert (Transformer Engine's GroupedLinear, DeepSpeed's and
  // transformers' expert loops), or as one grouped kernel (torch._grouped_mm): the per-expert part of an eager MoE
  // layer's host time (moe_costs.hpp moe_host_gap_s).
  bool moe_launches_per_expert = true;
  // The routed experts' output bias (GPT-OSS's down_proj_bias) is added outside the grouped GEMM, per local expert and
  // in fp32 (the router's probabilities scale it), where no CUDA graph captures the layer (moe_costs.hpp
  // moe_expert_bias_bytes).
  bool moe_expert_bias_per_expert = false;
  // Where the router's probabilities scale the experts (strategy.hpp MoeProbs), and the bytes per element of the
  // expert outputs a combine-side product saves: the compute dtype's (0) or fp32's where the runtime upcasts first.
  MoeProbs moe_probs = MoeProbs::combine;
  double moe_combine_saved_bytes = 0;
  // Bytes per element of the router's saved input: the compute dtype's (0), or fp32's where the router's gate runs
  // under an fp32 autocast, which saves the upcast input for the weight's gradient.
  double moe_router_input_bytes = 0;

  // --- data-parallel communication (framework.cpp gives the sources) --------------------------------------
  // amp-* policies: the gradient reduction (all-reduce, reduce-scatter) runs in fp32, 4 B per parameter on the
  // wire, although the memory model counts the gradients at 2 B (precision.cpp).
  bool amp_grads_reduced_in_fp32 = false;

  // --- ZeRO-0/1/2 gradient reduction buffers ---------------------------------------------------------------
  bool ddp_bucket_copy = false;           // DDP buckets hold a second copy of every gradient
  int64_t reduce_bucket_elements = 0;     // DeepSpeed reduce_bucket_size
  bool zero2_keeps_shard_copy = false;    // FSDP SHARD_GRAD_OP: sharded flat param beside the unsharded one

  // --- loss and MLP implementation -------------------------------------------------------------------------
  double logits_bytes_per_element = 0;    // bytes per logit element alive at the loss (see framework.cpp)
  double logits_compute_dtype_copies = 0; // plus this many copies in the compute dtype (2 B bf16, 4 B fp32)
  // One block's backward temporaries (activations.hpp block_backward_scratch_bytes) are counted. The logits are
  // freed before the blocks' backward, so the last stage holds the larger of the two, not both.
  bool block_backward_scratch = false;
  int64_t loss_chunks = 8;                // LossKind::chunked: the logits are materialised 1/chunks at a time
  double fused_loss_copies = 2;           // LossKind::fused: compute-dtype copies of the logits alive at its backward
  // torch.compile of the model compiles the loss too (default_loss): one Inductor kernel per pass, which keeps the
  // compute-dtype logits and writes their gradient in that dtype, as LossKind::fused.
  bool compile_compiles_loss = false;
  int64_t swiglu_saved_intermediates = 3; // tensors of width ffn_hidden saved by a SwiGLU MLP

  // --- compute ---------------------------------------------------------------------------------------------
  // The fused attention kernel it calls (compute_cost.hpp): FlashAttention-2 through PyTorch SDPA, or cuDNN's
  // through Transformer Engine.
  AttentionKernel attention_kernel = AttentionKernel::flash2;
  // Memory traffic of a block's elementwise work (norms, residual adds, activation, rotary, dropout) relative to
  // fully fused kernels that read and write each tensor once (see framework.cpp for the kernel counts).
  double elementwise_traffic_factor = 1;
  // What --recompute selective repeats beyond the attention core (Korthikanti §5): the share of a block's forward
  // GEMMs, and whether all elementwise work is recomputed too (PyTorch's op-level selective checkpointing).
  double selective_recompute_gemm_share = 0;
  bool selective_recomputes_elementwise = false;
  // Whether checkpointing the attention core (selective recomputation's "core_attn") repeats a fused kernel's forward
  // too: Megatron-Core checkpoints the core whatever the kernel; others save a fused kernel's output instead.
  bool core_attn_recompute_repeats_fused = false;
  // Eager RMSNorm keeps its fp32 upcast of the input for backward (4 B/element) where a fused norm keeps the
  // input itself.
  bool rmsnorm_saves_fp32_input = false;
  // Under --fp8 a linear layer saves its input for the weight gradient in FP8 (1 B/element: the cast the forward
  // GEMM made), not in the compute dtype. Transformer Engine does (transformer_engine/pytorch/module/linear.py
  // _Linear.forward: saved_inputmat = the FP8 inputmat / inputmat_t unless the recipe keeps wgrad in high
  // precision; grouped_linear.py alike); torchao saves the high-precision input (float8_linear.py
  // matmul_with_hp_or_float8_args.forward: save_for_backward(input_hp, weight_hp_t)).
  bool fp8_saves_quantized_linear_inputs = false;

  // --- optimizer ---------------------------------------------------------------------------------------
  double optimizer_temp_bytes_per_param = 0;  // temporaries of the step, per local (sharded) parameter
  // DeepSpeed ZeRO casts the half-precision gradient partition to an fp32 copy for the step (bytes per local
  // parameter), under ZeRO-3 one sub-group of this many elements at a time (0: the whole partition at once).
  double optimizer_fp32_grad_copy_bytes = 0;
  int64_t optimizer_sub_group_elements = 0;

  // --- memory as the FSDP-family runtimes allocate it (planner/memory_moments.hpp; reports/fsdp2-memory.md) ----
  // The peak is the largest of the step's distinct moments (cross-entropy backward, a block's backward, the root's
  // post-backward, the optimizer step), each with what is live then, instead of every part's maximum added up.
  bool memory_moments = false;
  // Over a single data-parallel rank the runtime still shards unit by unit (FSDP2's fully_shard on a one-rank mesh:
  // the gathers are copies, the bf16 copies are freed, no gradients live between steps), so the moments hold there
  // too; FSDP1 instead switches to NO_SHARD at world size 1 (torch/distributed/fsdp/_init_utils.py: "FSDP is switching
  // to use `NO_SHARD` ... since the world size is 1").
  bool units_on_one_rank = false;
  // What a norm saves for its backward (activations.cpp norm_saved_bytes): the legacy figure
  // (rmsnorm_saves_fp32_input), transformers' eager LlamaRMSNorm (fp32 upcast, normalised tensor, fp32 rsqrt), or a
  // fused kernel (input and fp32 rstd; aten::_fused_rms_norm, native_layer_norm adds the mean).
  NormImpl norm_impl = NormImpl::legacy;
  // Op-level selective checkpointing saves the outputs of the 1st, 3rd, ... matmul of each block (torchtitan
  // activation_checkpoint.py _get_custom_policy: mm_count % 2 == 0 is recomputed); a fused Q/K/V projection is one mm.
  bool selective_saves_odd_matmuls = false;
  bool fused_qkv_projection = false;
  // The loss runs inside the root module's forward (transformers' LlamaForCausalLM(labels=...)): the root's
  // pre-backward, which prefetches the last block's all-gather, has run by the cross-entropy backward.
  bool loss_inside_root_forward = false;
  // Bytes per logit alive during the cross-entropy backward: fp32 log_softmax output, nll_loss_backward's [T, V]
  // gradient and _log_softmax_backward_data's result (the bf16 logits already freed).
  double loss_backward_bytes_per_logit = 0;
  // The same under TP when the runtime computes the loss on vocabulary-sharded logits (loss_parallel); 0: it does not.
  double loss_parallel_backward_bytes_per_logit = 0;
  // The vocabulary-parallel embedding's weight gradient is the whole table on every TP rank: DTensor has no row-wise
  // strategy for the embedding's backward, so the gradient comes out Partial at full size and reaches the
  // parameter's Shard(0) only at FSDP's reduce-scatter (torch/distributed/tensor/_ops/_embedding_ops.py
  // embedding_dense_backward_strategy; _fsdp_param.py _get_grad_inner_tensor). Under no_sync it is kept, in the
  // reduce dtype, from the first micro-batch's embedding backward to the step's reduction (bench/torch/pp_mem.py).
  bool embedding_grad_full_vocab_under_tp = false;
  // Gradients of a block's intermediates alive at its backward's peak, beyond its saved tensors, per token: f-wide
  // and h-wide tensors in the compute dtype (measured: reports/fsdp2-memory.md, block moments).
  double block_backward_f_tensors = 0;
  double block_backward_h_tensors = 0;
  // The RoPE tables it keeps (torchtitan: one per attention layer since 02d24f017 of 2026-06-05, ComplexRoPE;
  // Strategy::rope_cache_per_layer chooses between one and per-layer where there are any).
  RopeTables rope_tables = RopeTables::none;
  // Each unit's new gradient shard is allocated on FSDP's reduce-scatter stream, and the caching allocator serves a
  // stream only from the blocks it cached for that stream (c10/cuda/CUDACachingAllocator.cpp: BlockPool entries are
  // keyed by stream): the compute stream's cached free blocks cannot hold the shards, so a step reserves, beside the
  // compute stream's high-water mark, every shard still to come (memory_moments.cpp add_reduce_stream_reserve;
  // measured by replaying PyTorch's allocations: reports/allocator-replay.md).
  bool sharded_grads_on_reduce_stream = false;

  // When gradients are reduced under accumulation by default: with replicated gradients (DDP, ZeRO-1) and with
  // sharded ones (ZeRO-2/3). pp_reduces_after_last_backward makes it once per step under a pipeline.
  GradSync default_grad_sync = GradSync::per_step;
  GradSync default_grad_sync_sharded = GradSync::per_step;
};

FrameworkTraits framework_traits(Framework f);
// The same on a device: CPU ranks (GpuSpec::cpu_ranks) carry none of the CUDA/NCCL runtime allocations.
FrameworkTraits framework_traits(Framework f, const GpuSpec& device);
// The strategy's --grad-sync, or the framework's default.
GradSync effective_grad_sync(const Strategy& s);
GradSync effective_grad_sync(const Strategy& s, const FrameworkTraits& fw);
// The strategy's overlap flags, or the framework's defaults.
bool effective_overlap_grad_reduce(const Strategy& s, const FrameworkTraits& fw);
bool effective_overlap_param_gather(const Strategy& s, const FrameworkTraits& fw);
bool effective_tp_comm_overlap(const Strategy& s, const FrameworkTraits& fw);
bool effective_ep_comm_overlap(const Strategy& s, const FrameworkTraits& fw);
bool effective_expandable_segments(const Strategy& s, const FrameworkTraits& fw);
MoeProbs effective_moe_probs(const Strategy& s, const FrameworkTraits& fw);
// Whether a stage's embedding and [final norm, LM head] are FSDP units of their own (effective end_units_own) where
// that differs from the root holding them: untied (tied, the three are one unit kept gathered, as the root), one
// pipeline stage (under PP torchtitan keeps every unit gathered and reduces after the last backward either way:
// torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy), and FSDP's unit-by-unit memory.
bool fsdp_end_units_split(const Strategy& s, const FrameworkTraits& fw, const StageParams& st);
// Bytes per logit element alive at the cross-entropy backward (loss_parallel's under TP where the runtime uses it).
double loss_backward_bytes_per_logit(const Strategy& s, const FrameworkTraits& fw);
// The cross-entropy a run gets when none is asked for (--loss unset): fused where the runtime compiles its loss with
// the model (FrameworkTraits::compile_compiles_loss under --compile), else standard.
LossKind default_loss(Framework f, bool compile);

}  // namespace shardplan
