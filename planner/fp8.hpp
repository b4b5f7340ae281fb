#pragma once
// FP8 GEMMs (--fp8, planner/fp8_recipe.hpp): which GEMMs run in FP8, the casts each recipe adds per linear layer,
// the FP8 copies a runtime keeps, and which GPUs can run a recipe. The runtime's own support is data in
// planner/framework_support.cpp (FrameworkSupport::fp8_recipes).
//
// The four linear layers of every block (QKV, attention output, MLP up/gate, MLP down) take FP8 inputs; the LM head,
// the attention core (flash attention in bf16) and the optimizer do not: torchtitan's float8 converter leaves the
// "output" layer out (torchtitan/components/quantization/float8.py, filter_fqns), Megatron-Core's output layer is a
// plain ColumnParallelLinear outside Transformer Engine's fp8_autocast. Under sequence parallelism the TP all-gathers
// move FP8 where the runtime casts first (tp_gather_bytes_per_element, by site); reduce-scatters and all-reduces stay
// in the compute dtype.
#include <optional>
#include <string>

#include "planner/framework.hpp"
#include "planner/hardware.hpp"
#include "planner/precision.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

inline bool fp8_on(const Strategy& s) { return s.fp8 != Fp8Recipe::off; }

// The dtype of the blocks' linear GEMMs: fp8 under --fp8, the compute dtype otherwise.
DType linear_gemm_dtype(const Strategy& s);

// How much longer an FP8 GEMM of the recipe takes than a tensorwise one of the same shape (1 for tensorwise).
double fp8_gemm_time_factor(const Strategy& s);

// Bytes the FP8 casts of one linear layer move per micro-batch, X [T×k] · W [k×n] → Y [T×n]: forward and backward.
// `microbatches` = micro-batches per optimizer step (a runtime that caches the weight's cast does it once a step).
struct Fp8CastBytes {
  double fwd = 0, bwd = 0;
};
Fp8CastBytes fp8_linear_cast_bytes(const Strategy& s, double T, double k, double n,
                                   double microbatches);

// torchtitan's float8 TP plan (parallelize_llama apply_tp enable_float8_tensorwise_tp: tensorwise only): torchao's
// Float8ColwiseParallel / PrepareFloat8ModuleInput cast a TP linear's input before gathering it, Float8RowwiseParallel
// casts its input and its output gradient (torchao/float8/float8_tensor_parallel.py).
bool torchao_float8_tp_plan(const Strategy& s);

// Where a block's sequence-parallel TP all-gather sits: the attention's input (QKV, forward and its re-gather for the
// weight gradient), the attention output projection's output gradient (backward), or the MLP's (its input and its
// down projection's output gradient).
enum class TpGatherSite { attention_input, attention_output_grad, mlp };

// Bytes per element of that all-gather: where the runtime casts before it gathers, FP8 and its scales; else
// `compute_bytes`.
double tp_gather_bytes_per_element(const ModelSpec& m, const Strategy& s, double compute_bytes, TpGatherSite site);

// Bytes per block parameter of FP8 weight copies kept across the step (Transformer Engine: the weight's cast and
// its transpose, cached from the first micro-batch); 0 for a runtime that casts per use (torchao).
double fp8_cached_weight_bytes_per_param(const Strategy& s);

// Megatron-Core's --fp8-param-gather (--fp8-all-gather under megatron): the blocks' linear weights exist only in FP8,
// no bf16 copy beside them, and the distributed optimizer (--zero 1) or Megatron-FSDP (--zero 3) all-gathers them in
// one byte.
bool fp8_params_only(const Strategy& s);
// Bytes per parameter of a Megatron-FSDP FP8 weight shard: the FP8 data, and for MXFP8 a column-wise buffer beside it.
double fp8_sharded_weight_bytes_per_param(const Strategy& s);

// Bytes per block parameter that an FSDP all-gather moves: 1 with FSDP2's FP8 all-gather, the compute dtype's
// otherwise.
double gathered_block_param_bytes(const Strategy& s);

// Why shardplan does not price the recipe on this model (one line), or nothing: FSDP2's FP8 all-gather of a
// mixture-of-experts model (its grouped experts are not Float8Linear weights).
std::optional<std::string> fp8_model_refusal(const Strategy& s, const ModelSpec& m);

// Why the GPU cannot run the recipe (one line naming the GPU and the way out), or nothing.
std::optional<std::string> fp8_gpu_refusal(const Strategy& s, const GpuSpec& g);

}  // namespace shardplan
