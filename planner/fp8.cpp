// FP8 casts and copies per recipe and runtime (planner/fp8.hpp). Per cast, bytes per element of the bf16 source:
//   torchao, dynamic scaling (torchao/float8/float8_scaling_utils.py hp_tensor_to_float8_dynamic): an amax pass
//     (read 2 B: tensor_to_amax) and a scale-clamp-cast pass (read 2, write 1): 5 B once Inductor fuses each chain;
//     eager runs abs, amax, mul, clamp and the cast as five kernels (2+2 + 2 + 2+2 + 2+2 + 2+1 = 17 B);
//     an MX cast (torchao/prototype/mx_formats, one E8M0 scale per 32 elements) finds each block's amax inside the
//     cast kernel: read 2, write 1 (+1/32 for scales) ≈ 3 B.
//   torchao's autograd function saves the high-precision input and weight (torchao/float8/float8_linear.py
//     matmul_with_hp_or_float8_args.forward: save_for_backward(input_hp, weight_hp_t)) and casts each GEMM operand
//     for its role: X and W in forward, dY for dgrad and wgrad, W again for dgrad, X again for wgrad: 6 casts.
//   Transformer Engine casts X once in forward and dY once in backward with a fused cast-transpose that writes both
//     layouts (transformer_engine/common/transpose/cast_transpose.cu): amax + read 2 + write 1 + 1 = 6 B (tensorwise),
//     4 B for block or MX scales found in the kernel; the weight's cast is cached from the first micro-batch of a
//     step (transformer_engine/pytorch/module/linear.py, is_first_microbatch; Megatron-Core sets it per step).
#include "planner/fp8.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "planner/moe.hpp"

namespace shardplan {

namespace {

constexpr double kTorchaoCastCompiled = 5, kTorchaoCastEager = 17, kMxCast = 3;
constexpr double kTeCastTensorwise = 6, kTeCastBlock = 4;

bool transformer_engine(const Strategy& s) { return s.framework == Framework::megatron; }

}  // namespace

double fp8_gemm_time_factor(const Strategy& s) {
  // torchao's rowwise recipe runs torch._scaled_mm with per-row scales (CUTLASS kernels on Hopper) where tensorwise
  // runs cuBLAS. torchtitan commit 7a04053 (Jan 2025, Llama 3 8B on 8 H100, torch.compile) measured 6,424 tokens/s
  // with rowwise against 7,186 with tensorwise (its FP8 all-gather on): 12 % longer steps, of which the linear GEMMs
  // are about two thirds, so ~1/0.85 per GEMM. One measurement, outside the public set; an assumption beyond it.
  if (s.fp8 == Fp8Recipe::rowwise && s.framework != Framework::megatron) return 1 / 0.85;
  return 1.0;
}

DType linear_gemm_dtype(const Strategy& s) {
  return fp8_on(s) ? DType::fp8 : precision_compute_dtype(s.precision);
}

Fp8CastBytes fp8_linear_cast_bytes(const Strategy& s, double T, double k, double n,
                                   double microbatches) {
  if (!fp8_on(s)) return {};
  const double x = T * k, w = k * n, dy = T * n;
  if (transformer_engine(s)) {
    const double b = s.fp8 == Fp8Recipe::tensorwise ? kTeCastTensorwise : kTeCastBlock;
    // FP8 parameters are cast once per step, on the optimizer's shard, not here.
    const double weight = fp8_params_only(s) ? 0.0 : w / std::max(microbatches, 1.0);
    return {b * (x + weight), b * dy};
  }
  const double b = s.fp8 == Fp8Recipe::mxfp8 ? kMxCast : s.compile ? kTorchaoCastCompiled : kTorchaoCastEager;
  // FSDP2's FP8 all-gather casts the weight shard before gathering it (torchao/float8/fsdp_utils.py
  // WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather): the gathered weight is already FP8, neither pass casts it.
  const double weight_casts = s.fp8_all_gather ? 0 : 1;
  return {b * (x + weight_casts * w), b * (2 * dy + x + weight_casts * w)};
}

bool torchao_float8_tp_plan(const Strategy& s) {
  return s.framework == Framework::torchtitan && s.tp > 1 && s.fp8 == Fp8Recipe::tensorwise;
}

double tp_gather_bytes_per_element(const ModelSpec& m, const Strategy& s, double compute_bytes,
                                   TpGatherSite site) {
  if (!fp8_on(s) || s.tp <= 1 || !s.sp) return compute_bytes;
  // An MoE layer's MLP half stays in the compute dtype (Megatron's token dispatchers gather the tokens themselves,
  // moe/token_dispatcher.py gather_from_sequence_parallel_region), and so does MLA's input (multi_latent_attention.py
  // gathers its latents explicitly); their attention's output projection is Transformer Engine's as in a dense block.
  if (site == TpGatherSite::mlp && model_is_moe(m)) return compute_bytes;
  if (site == TpGatherSite::attention_input && model_has_mla(m)) return compute_bytes;
  // Transformer Engine quantizes a column-parallel layer's input before the sequence-parallel gather and a
  // row-parallel layer's output gradient before its backward gather, for every recipe (module/layernorm_linear.py
  // and linear.py: gather_along_first_dim(..., quantizer=...), or the userbuffers' all-gather buffers, uint8 under
  // FP8: module/base.py initialize_ub, fp8_buf for every layer in layers_all_gather_overlap); the input saved for
  // the weight gradient is the FP8 cast, re-gathered as such. Reduce-scatters carry GEMM outputs in bf16.
  // torchtitan's float8 TP plan (torchao_float8_tp_plan) does the same; its output-gradient cast is e5m2
  // (NoopFwToFloat8BwDynamic).
  if (!transformer_engine(s) && !torchao_float8_tp_plan(s)) return compute_bytes;
  // Scales: one fp32 per tensor (tensorwise), one E8M0 byte per 32 elements (MXFP8), one fp32 per 128 (blockwise).
  switch (s.fp8) {
    case Fp8Recipe::mxfp8: return 1.0 + 1.0 / 32;
    case Fp8Recipe::blockwise: return 1.0 + 4.0 / 128;
    default: return 1.0;
  }
}

double fp8_cached_weight_bytes_per_param(const Strategy& s) {
  // The FP8 weight and its transpose (Hopper's FP8 GEMM takes K-major operands only), or MXFP8's rowwise and
  // columnwise copies on Blackwell: 2 × 1 B per parameter.
  return fp8_on(s) && transformer_engine(s) ? 2.0 : 0.0;
}

// megatron/core/fp8_utils.py: the optimizer step quantizes each rank's fp32 master shard straight into the FP8
// parameter (quantize_param_shard), the all-gather moves the rowwise bytes, post_all_gather_processing builds the
// transpose (tensorwise) or column-wise copy (block scales) kept beside them; the DDP buffer holds the FP8 storage
// (distributed/param_and_grad_buffer.py: param_dtype uint8) or, for MXFP8 with reuse_grad_buf_for_mxfp8_param_ag,
// borrows the gradient buffer for the gather. Megatron-Bridge's FP8 recipes set it (training/mixed_precision.py
// bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed: fp8_param_gather True).
// Megatron-FSDP (megatron/core/distributed/fsdp/src/README.md: "Only FSDP / ZeRO-3 supports FP8 parameters") keeps the
// FP8 weights sharded in its model-weight buffer (param_and_grad_buffer.py: dtype "float8"), gathers them per unit
// and quantizes the fp32 main shard into them after each step.
bool fp8_params_only(const Strategy& s) {
  return transformer_engine(s) && fp8_on(s) && s.fp8_all_gather && (s.zero == 1 || s.zero == 3);
}

double fp8_sharded_weight_bytes_per_param(const Strategy& s) {
  // param_and_grad_buffer.py _init_each_parameter_group_buffers: a transpose_weight_buffer "only mxfp8 needs"
  // (column-wise data for the backward); the tensorwise transpose is made at use (keep_fp8_transpose_cache False).
  return s.fp8 == Fp8Recipe::mxfp8 ? 2.0 : 1.0;
}

double gathered_block_param_bytes(const Strategy& s) {
  return s.fp8_all_gather ? 1.0 : static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
}

std::optional<std::string> fp8_model_refusal(const Strategy& s, const ModelSpec& m) {
  // Megatron-Core's FP8 parameters include the grouped experts (TE GroupedLinear built under quantized model init).
  if (!fp8_on(s) || !s.fp8_all_gather || !model_is_moe(m) || transformer_engine(s)) return std::nullopt;
  // torchao's FP8 all-gather wraps Float8Linear weights (torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor);
  // grouped expert weights are plain parameters cast per use, so the experts would gather in bf16.
  return fmt::format("--fp8-all-gather with model '{}', a mixture of experts: FSDP2's FP8 all-gather covers dense "
                     "Float8Linear weights, not the grouped experts; drop --fp8-all-gather", m.name);
}

std::optional<std::string> fp8_gpu_refusal(const Strategy& s, const GpuSpec& g) {
  if (!fp8_on(s)) return std::nullopt;
  if (!(g.fp8_tflops > 0))
    return fmt::format("--fp8 {} needs FP8 tensor cores, and GPU '{}' has none (or its preset gives no fp8_tflops): "
                       "Hopper, Ada, Blackwell and CDNA3 have them; drop --fp8 or choose such a GPU",
                       to_string(s.fp8), g.name);
  // MXFP8's block scales are a Blackwell (and CDNA4) tensor-core format (NVIDIA Blackwell architecture technical
  // brief; AMD CDNA 4 white paper); Hopper has none.
  const GpuGeneration gen = gpu_generation(g);
  if (s.fp8 == Fp8Recipe::mxfp8 && gen != GpuGeneration::blackwell && gen != GpuGeneration::cdna4)
    return fmt::format("--fp8 mxfp8 needs tensor cores with microscaling (Blackwell, CDNA4), and GPU '{}' is {}; use "
                       "--fp8 tensorwise, rowwise or blockwise there", g.name, to_string(gen));
  return std::nullopt;
}

}  // namespace shardplan
