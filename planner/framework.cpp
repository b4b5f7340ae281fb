#include "planner/framework.hpp"

#include "planner/partition.hpp"

namespace shardplan {

namespace {

constexpr int64_t kMiB = 1024 * 1024;

// Shared by the PyTorch-based frameworks (FSDP, DeepSpeed): PyTorch eager kernels and caching allocator.
FrameworkTraits pytorch_base() {
  FrameworkTraits t;
  // CUDA context + kernels: 0.3–1 GB outside the allocator (pytorch#28113, #107667); 512 MiB is the middle of
  // what CUDA 12 with lazy loading shows on A100/H100.
  t.cuda_context_bytes = 512 * kMiB;
  // PyTorch's default CUBLAS_WORKSPACE_CONFIG ":4096:8" on Hopper = 8 × 4 MiB.
  t.cublas_workspace_bytes = 32 * kMiB;
  // NCCL buffers per communicator: 0.5–2 GB depending on channels and peers (nccl#864); the lower end is
  // what one ring/tree communicator of 8 NVLink peers with default NCCL_BUFFSIZE takes.
  t.nccl_bytes_per_communicator = 512 * kMiB;
  // Caching allocator: reserved exceeds allocated by typically 5–15 % (torchtune#1185); the middle.
  t.fragmentation = 0.10;
  // Unfused cross-entropy on bf16 logits: bf16 logits (2) + fp32 upcast (4) + fp32 gradient (4) per element
  // (NeMo Automodel PR #2603: the spike a chunked loss removes).
  t.logits_bytes_per_element = 10;
  // Eager SwiGLU saves gate, SiLU(gate), up and their product: 4 tensors of width ffn_hidden.
  t.swiglu_saved_intermediates = 4;
  // Eager PyTorch runs each elementwise op as its own kernel. RMSNorm alone is upcast, pow, mean, rsqrt, two
  // multiplies and a downcast (torchtitan/HF implementations): ~36 bytes per element in fp32 against ~4 fused;
  // SiLU·up is two kernels (10 bytes/element against 6); rotary embedding through complex views ~4 passes.
  // Weighted by their share of a Llama block's traffic, about 4× the fused minimum.
  t.elementwise_traffic_factor = 4;
  // x.float() * rsqrt(x.float().pow(2).mean(-1) + eps): the multiply saves the fp32 copy (torchtitan, HF Llama).
  t.rmsnorm_saves_fp32_input = true;
  return t;
}

// PyTorch FSDP2 (`fully_shard`): what fsdp1 and torchtitan below share, and FSDP2's own behaviours.
FrameworkTraits fsdp2_traits() {
  FrameworkTraits t = pytorch_base();
  t.framework = Framework::fsdp;
  // The FSDP2 loop --emit writes runs with expandable segments (cli/emit_torch.cpp torchrun.sh), as torchtitan's
  // launcher does (run_train.sh PYTORCH_ALLOC_CONF="expandable_segments:True", since a5e57e4a9, 2024-10-22).
  t.expandable_segments = true;
  // DTensor tensor parallelism under torch.compile can run PyTorch's async TP (torch._inductor.config.
  // _micro_pipeline_tp; framework.hpp TpOverlapKind): off unless asked (--tp-comm-overlap, with --compile).
  t.tp_overlap_kind = TpOverlapKind::micro_pipeline;
  // torch.distributed.tensor.parallel: PrepareModuleInput / ColwiseParallel redistribute the sequence-sharded input to
  // Replicate (an all-gather) and nn.Linear's autograd saves that whole input; backward redistributes only the
  // gradients (torch/distributed/tensor/parallel/style.py). Measured on PyTorch 2.15's own allocations
  // (bench/torch/fsdp2_mem.py --tp: 54.3 KB per token per block for Llama-3 8B at TP 4 without recompute, of which
  // 2 × 8 KB are the two gathered inputs) and its collectives: without recompute no all-gather is repeated in backward,
  // with full recompute only the recomputed forward's.
  t.tp_saves_gathered_inputs = true;
  // FSDP prefetches one unit ahead in forward and BACKWARD_PRE (FSDP2 keeps two all-gather outputs alive:
  // current + prefetch; pytorch PR #98354 on limit_all_gathers).
  t.zero3_prefetch_units = 1;
  // The root unit is not resharded after forward: FSDP1 skips it, and FSDP2's fully_shard sets the root's
  // reshard_after_forward to False "as a heuristic since its parameters would typically be immediately all-gathered
  // for backward" (torch/distributed/fsdp/_fully_shard/_fully_shard.py docstring). The root unit holds embedding,
  // final norm and LM head when blocks are wrapped (transformer_auto_wrap_policy; torchtitan's apply_fsdp).
  t.zero3_root_stays_gathered = true;
  // The root's post-backward callback makes the compute stream wait for every unit's reduce-scatter: FSDP2
  // _fsdp_state.py _root_post_backward_final_callback → _fsdp_param_group.py FSDPParamGroup.finalize_backward →
  // _wait_for_post_backward (current_stream().wait_event(_post_reduce_event)); FSDP1 _runtime_utils.py
  // _post_backward_final_callback (current_stream().wait_stream(_post_backward_stream)).
  t.backward_end_waits_for_reduce = true;
  // The unit being reduced and the one whose backward is producing gradients.
  t.unsharded_grad_units = 2;
  // torch DDP: gradient_as_bucket_view=False by default, so buckets copy every gradient.
  t.ddp_bucket_copy = true;
  t.zero2_keeps_shard_copy = true;
  // SHARD_GRAD_OP / reshard_after_forward=False gathers per unit like ZeRO-3, once per micro-batch.
  t.zero2_gathers_units = true;
  // FSDP2 reshards after backward even when the gradient sync is off, unless the loop calls
  // set_reshard_after_backward(False) (torch/distributed/fsdp/_fully_shard/_fully_shard.py FSDPModule): under no_sync
  // every micro-batch gathers again.
  t.zero2_keeps_params_under_no_sync = false;
  // Per-parameter DTensor shards: after each all-gather, foreach_all_gather_copy_out copies the rank-major output
  // into every parameter (split_with_sizes_copy on the compute stream); before each reduce-scatter,
  // foreach_reduce's chunk_cat copies the gradients into the reduce buffer on the reduce-scatter stream
  // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). Each is one read and one write of the bytes.
  t.gather_copy_out_passes = 2;
  t.reduce_copy_in_passes = 2;
  // torch.optim.AdamW(foreach=True), the default on CUDA: one intermediate per parameter (denominator) in fp32.
  t.optimizer_temp_bytes_per_param = 4;
  // PyTorch FSDP reduces every backward unless the loop opts into no_sync (the seed article does; torchtitan's
  // trainer.py forward_backward_step and Composer do not, since no_sync keeps unsharded gradients): --grad-sync step
  // models no_sync.
  t.default_grad_sync = GradSync::per_micro;
  t.default_grad_sync_sharded = GradSync::per_micro;
  // torchtitan's selective activation checkpointing (apply_ac, "op" mode, the FSDP2 reference): saves the outputs
  // of every other matmul and of attention, recomputes the other matmuls and every elementwise op.
  t.selective_recompute_gemm_share = 0.5;
  t.selective_recomputes_elementwise = true;
  // Mixed precision reduces gradients in fp32: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) is
  // torchtitan's default (config_manager.py --training.mixed_precision_reduce "float32", the only choice), and
  // Composer's FSDP mixed_precision DEFAULT sets reduce_dtype=float32 (mosaicml/composer PR #2628, Oct 2023;
  // PURE reduces in bf16). DDP under torch.autocast all-reduces the fp32 gradients of fp32 parameters.
  t.amp_grads_reduced_in_fp32 = true;
  // Tensor parallelism through DTensor (torchtitan's plan: the embedding RowwiseParallel): its embedding gradient is
  // full-vocabulary until the reduction (framework.hpp).
  t.embedding_grad_full_vocab_under_tp = true;
  // Memory as FSDP2 allocates it, cross-checked against PyTorch's own allocations (reports/fsdp2-memory.md): the
  // moments of planner/memory_moments.hpp. `fsdp` runs our emitted script on transformers' LlamaForCausalLM: its
  // LlamaRMSNorm.forward (transformers/models/llama/modeling_llama.py) saves the fp32 upcast for pow and the
  // multiply, the normalised tensor in the input dtype for the weight multiply, and the fp32 rsqrt; its loss runs
  // inside the root's forward (labels=...).
  t.memory_moments = true;
  t.units_on_one_rank = true;  // fully_shard on a one-rank mesh (framework.hpp); torchtitan applies it at any degree
  t.norm_impl = NormImpl::transformers_eager;
  t.selective_saves_odd_matmuls = true;
  t.loss_inside_root_forward = true;
  // ForCausalLMLoss (transformers/loss/loss_utils.py) upcasts with logits.float(): at _log_softmax_backward_data the
  // log_softmax output (4), nll_loss_backward's gradient (4) and the result (4) are alive; the bf16 logits are freed.
  t.loss_backward_bytes_per_logit = 12;
  // At a SwiGLU (or GELU) MLP's backward: the product's gradient and the two gradients mul's backward writes, less the
  // down projection's input freed after its backward (measured 4 B/ffn element per token); transformers also holds
  // one h-wide gradient more (measured 2.06 B/hidden element: 70B full recompute s8192, block 78).
  t.block_backward_f_tensors = 2;
  t.block_backward_h_tensors = 1;
  // _fsdp_collectives.py foreach_reduce: the reduce-scatter output (the unit's new sharded gradient) is allocated
  // under device_handle.stream(reduce_scatter_stream); FSDP1 allocates new_sharded_grad under
  // _post_backward_stream (_runtime_utils.py _post_backward_hook, _reduce_grad).
  t.sharded_grads_on_reduce_stream = true;
  return t;
}

// PyTorch FSDP1 (`FullyShardedDataParallel`): one FlatParameter per wrapped unit.
FrameworkTraits fsdp1_traits() {
  FrameworkTraits t = fsdp2_traits();
  t.framework = Framework::fsdp1;
  t.units_on_one_rank = false;  // NO_SHARD at world size 1 (framework.hpp)
  // FSDP1 stacks (llm-foundry, Accelerate, fms-fsdp) leave the allocator at its default.
  t.expandable_segments = false;
  t.tp_overlap_kind = TpOverlapKind::none;  // async TP is a DTensor + FSDP2 path (torchtitan); not modelled for FSDP1
  // The all-gather writes straight into the unit's padded unsharded FlatParameter and the reduce-scatter reads the
  // flat gradient (torch/distributed/fsdp/_flat_param.py FlatParamHandle.unshard; _runtime_utils.py _reduce_grad):
  // no copy-out or copy-in.
  t.gather_copy_out_passes = 0;
  t.reduce_copy_in_passes = 0;
  // _should_free_in_backward (torch/distributed/fsdp/_runtime_utils.py) frees a SHARD_GRAD_OP unit after backward
  // only when gradients are synchronised this micro-batch: under no_sync later micro-batches gather nothing.
  t.zero2_keeps_params_under_no_sync = true;
  return t;
}

// torchtitan: FSDP2 with its own policies under pipeline parallelism.
FrameworkTraits torchtitan_traits() {
  FrameworkTraits t = fsdp2_traits();
  t.framework = Framework::torchtitan;
  // Under PP, fsdp_reshard_after_forward "default" is `not pp_enabled` "to avoid per-microbatch all-gathers"
  // (torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy), and torch.distributed.pipelining
  // calls set_reshard_after_backward(False) before every backward but the last (torch/distributed/pipelining/
  // stage.py _PipelineStageBase.backward_maybe_with_nosync): each unit is gathered once per step.
  t.pp_keeps_params_gathered = true;
  // ... and set_requires_gradient_sync(False) until the last backward, whose run_post_backward then reduce-scatters
  // every unit (same function): one reduction per step, after the stage's last backward.
  t.pp_reduces_after_last_backward = true;
  // torch.distributed.pipelining's buffers (torch/distributed/pipelining/stage.py): _prepare_forward_infra creates
  // args_recv_info[chunk] with a receive buffer for every micro-batch, _prepare_backward_infra grad_recv_info likewise;
  // both persist across steps (only clear_runtime_states' `.grad = None` runs between them), and
  // forward_one_chunk keeps each micro-batch's stage output in fwd_cache until its backward pops it.
  t.pp_buffers_per_microbatch = true;
  // With the model compiled, the loss is too: build_cross_entropy_loss wraps it in torch.compile when
  // training.compile (torchtitan/components/loss.py, since bbb1b616e 2025-04-02; until then train.py kept it eager:
  // "TODO: compiling loss function causes CUDA errors"); today CompileConfig.components defaults to ["model", "loss"]
  // (torchtitan/config/configs.py). Inductor fuses the upcast, log-softmax and NLL forward and their backward: the bf16
  // logits stay, the fp32 ones never exist, the gradient is written in bf16 (PyTorch's own allocations: the TT-2506
  // rows' 47–48 GiB).
  t.compile_compiles_loss = true;
  // torchtitan's own model (torchtitan/models/llama3): nn.RMSNorm runs the fused aten::_fused_rms_norm kernel, which
  // saves its bf16 input and the fp32 rstd; the Q/K/V projection is one matmul (FusedQKVLinear); the loss follows the
  // model's forward (train.py: logits out, cross_entropy_loss, `del pred`), so no block is prefetched at its backward;
  // each attention layer holds its own complex64 RoPE cache (models/common/rope.py ComplexRoPE).
  t.norm_impl = NormImpl::fused;
  t.fused_qkv_projection = true;
  t.loss_inside_root_forward = false;
  // Since 83e694105 (2025-07-28) the embedding is a unit of its own (resharded after forward as the blocks) and the
  // final norm with the LM head another, kept gathered after forward ("FSDP would prefetch them immediately"); the
  // root holds nothing (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder; tied weights: one unit of all three,
  // not resharded). Earlier rows set --fsdp-end-units root.
  t.end_units_own = true;
  // Its MTP layers are units of their own and reuse the embedding unit (FrameworkTraits::torchtitan_mtp;
  // models/deepseek_v3/mtp.py apply_fsdp_to_mtp_decoder, MTPDecoder.forward; PyTorch's own allocations in
  // reports/fsdp2-memory-mtp.md).
  t.torchtitan_mtp = true;
  // Under TP the loss runs on vocabulary-sharded logits (train.py: loss_parallel unless
  // parallelism.disable_loss_parallel): torch/distributed/tensor/parallel/loss.py's _log_softmax_backward_data
  // handler computes exp(output) and its product with the summed gradient beside the saved output and
  // nll_loss_backward's gradient: 16 B per local logit, measured on PyTorch 2.15 (bench/torch/fsdp2_mem.py --tp 4,
  // derived.max_logit_bytes_per_element) against 12 without TP.
  t.loss_parallel_backward_bytes_per_logit = 16;
  t.block_backward_h_tensors = 0;
  // One RoPE table per attention layer since 02d24f017 (2026-06-05: models/common/rope.py ComplexRoPE registers its own
  // cache of max_context_length); one for the model before (--rope-cache shared).
  t.rope_tables = RopeTables::per_layer;
  // Its MoE experts run as torch._grouped_mm, one kernel for every local expert (torchtitan/models/common/moe.py
  // GroupedExperts._grouped_mm, torchtitan 0.3.0); its EP dispatcher still syncs the host for the all-to-all's splits
  // (token_dispatcher.py: input_splits.tolist()).
  t.moe_launches_per_expert = false;
  // Its combine scales the expert outputs by the scores in fp32: (routed_output.to(float32) * scores), whose product
  // saves the fp32 copy, 4 B per element (models/common/token_dispatcher.py LocalTokenDispatcher.combine; earlier
  // releases scaled the inputs instead, score_before_experts, saving the same fp32 copy of the routed inputs).
  t.moe_combine_saved_bytes = 4;
  // Its router computes the gate under torch.autocast(dtype=float32) (moe.py TokenChoiceTopKRouter.forward), so the
  // gate linear saves an fp32 copy of the layer's input: 4 B per element (bench/torch/moe_saved.py).
  t.moe_router_input_bytes = 4;
  return t;
}

FrameworkTraits deepspeed_traits() {
  FrameworkTraits t = pytorch_base();
  t.framework = Framework::deepspeed;
  // DeepSpeed ZeRO-3 defaults: stage3_prefetch_bucket_size = 5e7 elements gathered ahead.
  t.zero3_prefetch_elements = 50'000'000;
  t.zero3_prefetch_units = 0;
  t.unsharded_grad_units = 0;
  // DeepSpeed reduce_bucket_size default 5e8 elements: the gradient bucket being reduced.
  t.reduce_bucket_elements = 500'000'000;
  // FusedAdam (multi-tensor apply) makes no per-parameter temporaries.
  t.optimizer_temp_bytes_per_param = 0;
  // The step's fp32 gradient: ZeRO-1/2 flattens the partition's gradients and casts them for the fp32 optimizer
  // (deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer.step: single_grad_partition =
  // flatten_dense_tensors_aligned(...).to(fp32 dtype), set as single_partition_of_fp32_groups[i].grad); ZeRO-3 does it
  // per sub-group (stage3.py _prepare_fp32_grad_for_sub_group; zero_optimization.sub_group_size default 1e9).
  t.optimizer_fp32_grad_copy_bytes = 4;
  t.optimizer_sub_group_elements = 1'000'000'000;
  // zero_optimization.overlap_comm defaults to false for stages 1 and 2 (DeepSpeed config docs; stage 3 overlaps
  // its own way, modelled per unit).
  t.overlap_grad_reduce = false;
  // engine.py allreduce_gradients: stages 0 and 1 "communicate only at gradient accumulation boundaries"; stage 2
  // and 3 reduce every micro-batch into their partitions (no_sync is refused for them).
  t.default_grad_sync = GradSync::per_step;
  t.default_grad_sync_sharded = GradSync::per_micro;
  // Each backward's epilogue waits for its reductions: stage_1_and_2.py independent_gradient_partition_epilogue
  // (torch.cuda.synchronize() under overlap_comm, reductions in-stream without), stage3.py the same function
  // (reduce_and_partition_stream.synchronize()).
  t.backward_end_waits_for_reduce = true;
  // The pipeline engine's TrainSchedule issues ReduceGrads once, after the batch's last backward
  // (deepspeed/runtime/pipe/schedule.py TrainSchedule.steps; engine.py _exec_reduce_grads).
  t.pp_reduces_after_last_backward = true;
  // Gradients are reduced in the model's half dtype: engine.py communication_data_type returns fp16/bf16 when
  // that mode is enabled and no communication_data_type is configured (amp_grads_reduced_in_fp32 stays false).
  return t;
}

FrameworkTraits megatron_traits() {
  FrameworkTraits t = pytorch_base();
  t.framework = Framework::megatron;
  // Megatron keeps parameters and gradients in contiguous buffers, so little is left to fragment.
  t.fragmentation = 0.05;
  // Vocab-parallel cross-entropy: bf16 logits (2) + the fp32 softmax it computes in place and saves (4);
  // the gradient overwrites the saved softmax.
  t.logits_bytes_per_element = 6;
  // --loss fused: Transformer Engine's fused cross-entropy as Megatron-Bridge runs it (model.cross_entropy_loss_fusion
  // True, cross_entropy_fusion_impl "te" in its performance overrides since bf75c658c, 2025-11): the forward keeps the
  // bf16 logits and per-row statistics, the backward writes the gradient into the logits' own buffer
  // (transformer_engine/pytorch/triton/cross_entropy.py cross_entropy_backward): one copy. (Megatron's "native" fusion
  // upcasts to fp32 like the unfused loss: megatron/core/tensor_parallel/cross_entropy.py calculate_logits_max.)
  t.fused_loss_copies = 1;
  // Megatron-Core's TEDotProductAttention: Transformer Engine picks cuDNN's fused attention on Hopper
  // (compute_cost.cpp), flash-attn's FlashAttention-2 on Ampere.
  t.attention_kernel = AttentionKernel::cudnn;
  // Fused bias-SwiGLU saves the fc1 output (gate and up) and the down-projection input: 3 tensors.
  t.swiglu_saved_intermediates = 3;
  // Transformer Engine's norms save their input in the compute dtype and the fp32 rsigma per row, not an fp32 copy:
  // the pre-attention and dense pre-MLP norms inside TELayerNormColumnParallelLinear (transformer_engine/pytorch/
  // module/layernorm_linear.py _LayerNormLinear.forward: inputmat, rsigma; ln_out is the GEMM's own saved input), an
  // MoE layer's TENorm alike.
  t.norm_impl = NormImpl::fused;
  // Megatron-FSDP (--zero 3): only the blocks are FSDP units (mcore_fsdp_adapter.py: TransformerLayer,
  // MoETransformerLayer); the embedding, final norm and output layer are gathered once and kept ("Non-unit modules
  // should remain persistently allocated", megatron_fsdp/param_and_grad_buffer.py AllGatherPipeline.release_bucket),
  // and their gradients are one bucket (bucket_size unset: _get_parameter_groups groups the non-unit parameters
  // together), allocated at the output layer's backward and reduce-scattered once the embedding's gradient is ready.
  t.zero3_root_stays_gathered = true;
  // Megatron fuses LayerNorm, bias-GELU and bias-dropout-add (apex/TE kernels); the rest (residual copies,
  // dropout masks, layout transposes for attention without flash) is about 1.5× the fused minimum.
  t.elementwise_traffic_factor = 1.5;
  t.optimizer_temp_bytes_per_param = 0;  // FusedAdam
  t.default_grad_sync = GradSync::per_step;  // main-grad buffer accumulates locally
  // Megatron-FSDP (ZeRO-2/3): "Gradient reduce-scatter is overlapped with backward compute and accumulated during
  // every backward pass" (docs/user-guide/features/megatron_fsdp.md, sharding strategies).
  t.default_grad_sync_sharded = GradSync::per_micro;
  // Megatron-FSDP's units: one all-gather buffer ahead of the layer computing (--fsdp-double-buffer, the recipes'
  // setting), the gradients of the layer being reduced beside the one producing them; its parameters and gradients
  // live in the communication buckets themselves, so no copy-in or copy-out pass ("Avoids redundant COPY operations
  // before and after collectives", same file, Optimizations).
  t.zero3_prefetch_units = 1;
  t.unsharded_grad_units = 2;
  t.gather_copy_out_passes = 0;
  t.reduce_copy_in_passes = 0;
  // Megatron-Core as it is run today: DistributedDataParallelConfig's own defaults are False, but Megatron-Bridge's
  // pretraining recipes set overlap_grad_reduce=True and overlap_param_gather=True with the distributed optimizer
  // (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/common.py _pretrain_common), as Megatron-LM's
  // --overlap-grad-reduce/--overlap-param-gather do. The runs of Narayanan et al. 2021 and Korthikanti et al. 2022
  // predate them ("no grad overlap", K22 §6.3): --no-overlap-grad-reduce --no-overlap-param-gather.
  t.overlap_grad_reduce = true;
  t.overlap_param_gather = true;
  // The recipes' TP layouts run sequence parallelism with tp_comm_overlap=True (Transformer Engine userbuffers;
  // Megatron-Bridge recipes/llama/h100/llama3.py CommOverlapConfig; Megatron-LM requires --sequence-parallel for it,
  // megatron/training/arguments.py).
  t.tp_comm_overlap = true;
  t.tp_overlap_kind = TpOverlapKind::userbuffers;
  // Transformer Engine's linears save their FP8 input casts (framework.hpp).
  t.fp8_saves_quantized_linear_inputs = true;
  // TEGroupedMLP builds its fc2 with skip_bias_add and adds the bias itself, expert by expert: t + b·p over
  // torch.split of the output and of the fp32 probabilities, torch.cat, a cast back (moe/experts.py
  // TEGroupedMLP._apply_bias, since a329dd6da5 "Enable bias in expert mlp [gpt-oss 5/5]", 2025-09; Megatron-LM
  // d98e8a6).
  t.moe_expert_bias_per_expert = true;
  // The experts' activation applies the router's probabilities (weighted_bias_swiglu_impl, weighted_squared_relu_impl,
  // or activation × probs: moe/experts.py TEGroupedMLP bias_act_func), so the combine's unpermute saves nothing
  // (token_dispatcher.py combine_postprocess calls unpermute without probs): Megatron-Core since 2659630721
  // ("Memory efficient token permutation", 2025-04-09; core_v0.13.0 on). Earlier releases: --moe-probs combine.
  t.moe_probs = MoeProbs::activation;
  // Selective recomputation with "core_attn" (its default module list) wraps the core attention in a checkpoint
  // whatever the kernel: Attention.checkpoint_core_attention = recompute_granularity == 'selective' and "core_attn"
  // in recompute_modules, then _checkpointed_attention_forward (transformer/attention.py), so Transformer Engine's
  // fused attention runs its forward again in backward to rebuild the output and softmax statistics its backward
  // reads. torchtitan's op-level policy saves the flash kernel's outputs instead (no repeat).
  t.core_attn_recompute_repeats_fused = true;
  // Batch-level EP overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute; moe/README.md, "Batch-level
  // overlapping to hide EP-A2A communication", MCore v0.14): off by default (its argument table), on in the
  // Megatron-Bridge recipes that set overlap_moe_expert_parallel_comm (bench/data/megatron_bridge_rows.md).
  t.ep_comm_overlap_available = true;
  t.ep_comm_overlap = false;
  return t;
}

// shardplan's own reference loop (reference/): one arena, exact accounting, fused kernels. These are its
// design values; `validate` measures them.
FrameworkTraits reference_traits() {
  FrameworkTraits t;
  t.framework = Framework::reference;
  t.cuda_context_bytes = 512 * kMiB;
  t.cublas_workspace_bytes = 32 * kMiB;
  t.nccl_bytes_per_communicator = 512 * kMiB;
  t.fragmentation = 0;  // one arena sized up front
  t.zero3_prefetch_units = 1;
  // The peak is in the first block's backward (reference/README.md): that block's unsharded gradients, and the
  // head unit's, whose reduce-scatter is in flight.
  t.unsharded_grad_units = 1;
  t.head_grads_in_flight = true;
  t.attention_score_matrices = 2;  // scores and their gradient, per (sequence, head), in backward
  // One logits tensor in the compute dtype; the fused cross-entropy writes the gradient in place
  // (reference/model.cpp head_forward_backward).
  t.logits_bytes_per_element = 0;
  t.logits_compute_dtype_copies = 1;
  t.block_backward_scratch = true;  // the loop's one reused set of block gradient scratch (reference/README.md)
  t.swiglu_saved_intermediates = 3;
  t.optimizer_temp_bytes_per_param = 0;
  t.default_grad_sync = GradSync::per_step;
  t.default_grad_sync_sharded = GradSync::per_step;
  // The loop gathers and reduce-scatters per unit under ZeRO-2 as under ZeRO-3 (reference/shard.cpp), into flat
  // buffers (no copies).
  t.zero2_gathers_units = true;
  return t;
}

}  // namespace

FrameworkTraits framework_traits(Framework f) {
  switch (f) {
    case Framework::fsdp: return fsdp2_traits();
    case Framework::fsdp1: return fsdp1_traits();
    case Framework::torchtitan: return torchtitan_traits();
    case Framework::deepspeed: return deepspeed_traits();
    case Framework::megatron: return megatron_traits();
    case Framework::reference: return reference_traits();
  }
  return fsdp2_traits();
}

FrameworkTraits framework_traits(Framework f, const GpuSpec& device) {
  FrameworkTraits t = framework_traits(f);
  if (device.cpu_ranks) {
    // CPU ranks (MPI processes): no CUDA context, no cuBLAS workspace, no NCCL communicator buffers on the device.
    t.cuda_context_bytes = 0;
    t.cublas_workspace_bytes = 0;
    t.nccl_bytes_per_communicator = 0;
  } else if (f == Framework::reference) {
    // The reference loop's CUDA attention is an online softmax (reference/README_cuda.md): no T×T workspace.
    t.attention_score_matrices = 0;
  }
  return t;
}

GradSync effective_grad_sync(const Strategy& s, const FrameworkTraits& fw) {
  if (s.grad_sync) return *s.grad_sync;
  if (s.pp > 1 && fw.pp_reduces_after_last_backward) return GradSync::per_step;
  return s.zero >= 2 ? fw.default_grad_sync_sharded : fw.default_grad_sync;
}

GradSync effective_grad_sync(const Strategy& s) { return effective_grad_sync(s, framework_traits(s.framework)); }

bool effective_overlap_grad_reduce(const Strategy& s, const FrameworkTraits& fw) {
  // A reduction the runtime issues after the last backward overlaps nothing.
  if (s.pp > 1 && fw.pp_reduces_after_last_backward) return false;
  return s.overlap_grad_reduce.value_or(fw.overlap_grad_reduce);
}

bool effective_overlap_param_gather(const Strategy& s, const FrameworkTraits& fw) {
  return s.overlap_param_gather.value_or(fw.overlap_param_gather);
}

double loss_backward_bytes_per_logit(const Strategy& s, const FrameworkTraits& fw) {
  return s.tp > 1 && fw.loss_parallel_backward_bytes_per_logit > 0 ? fw.loss_parallel_backward_bytes_per_logit
                                                                     : fw.loss_backward_bytes_per_logit;
}

LossKind default_loss(Framework f, bool compile) {
  return compile && framework_traits(f).compile_compiles_loss ? LossKind::fused : LossKind::standard;
}

bool effective_ep_comm_overlap(const Strategy& s, const FrameworkTraits& fw) {
  return fw.ep_comm_overlap_available && s.ep > 1 && s.ep_comm_overlap.value_or(fw.ep_comm_overlap);
}

MoeProbs effective_moe_probs(const Strategy& s, const FrameworkTraits& fw) { return s.moe_probs.value_or(fw.moe_probs); }

bool effective_expandable_segments(const Strategy& s, const FrameworkTraits& fw) {
  return s.expandable_segments.value_or(fw.expandable_segments);
}

bool fsdp_end_units_split(const Strategy& s, const FrameworkTraits& fw, const StageParams& st) {
  return fw.memory_moments && s.end_units_own.value_or(fw.end_units_own) && s.pp == 1 && st.embedding > 0 &&
         st.lm_head > 0;  // StageParams::lm_head is 0 when tied
}

bool effective_tp_comm_overlap(const Strategy& s, const FrameworkTraits& fw) {
  if (fw.tp_overlap_kind == TpOverlapKind::none) return false;
  // Inductor's pass runs only on compiled graphs (torchtitan/config/configs.py CompileConfig.__post_init__: "Async TP
  // requires ... --compile.enable"); framework_support.cpp refuses the combination, the price never assumes it.
  if (fw.tp_overlap_kind == TpOverlapKind::micro_pipeline && !s.compile) return false;
  return s.tp > 1 && s.sp && s.tp_comm_overlap.value_or(fw.tp_comm_overlap);
}

}  // namespace shardplan
