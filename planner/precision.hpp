#pragma once
// Precision policies: bytes per parameter of each model state, and the dtypes of compute and activations.
#include <cstdint>

#include "planner/strategy.hpp"

namespace shardplan {

// fp8: E4M3 or E5M2 GEMM inputs (planner/fp8_recipe.hpp), one byte per element.
enum class DType { fp32, bf16, fp16, fp8 };
int64_t dtype_bytes(DType d);
const char* to_string(DType d);

// Bytes per parameter of each model state before any sharding (CONTRACT.md "Precision policies").
struct StateBytes {
  double params = 0;     // the weights the forward pass reads (bf16/fp16 copy, or fp32)
  double grads = 0;      // the gradients the backward pass produces and the reduction moves
  double master = 0;     // fp32 master weights, where kept apart from `params`
  double optimizer = 0;  // Adam m and v
  double total() const { return params + grads + master + optimizer; }
};

StateBytes precision_state_bytes(Precision p);
// The strategy's bytes per parameter: its precision policy, with Megatron-Core's precision-aware optimizer where it is
// on (Strategy::precision_aware_optimizer, bf16_adam_moments). Every memory and optimizer-time term reads this one.
StateBytes strategy_state_bytes(const Strategy& s);
DType precision_compute_dtype(Precision p);  // GEMM inputs and saved activations
DType precision_grad_dtype(Precision p);     // dtype of gradients as the memory model counts them
// Dtype the gradient reduction moves on the wire. A communication dtype may differ from the memory one: under
// amp-* the framework may reduce in fp32 (FrameworkTraits::amp_grads_reduced_in_fp32; CONTRACT.md: amp-bf16 has
// fp32 grads) while the memory model keeps ZeRO's 2 B accounting.
DType precision_grad_reduce_dtype(Precision p, bool amp_grads_reduced_in_fp32);

}  // namespace shardplan
