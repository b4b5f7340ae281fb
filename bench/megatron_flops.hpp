#pragma once
// Megatron-LM's model FLOP count (megatron/training/training.py num_floating_point_operations, transformer_flops): what
// the "model TFLOP/s" of Megatron-LM's logs, NeMo's and Megatron-Bridge's performance tables and Megatron-LM's MoE
// recipe table divides by the step time. Its own formula, not shardplan's count (planner/flops.hpp): GEMMs of the
// blocks, MTP modules and logits at 6 FLOPs per parameter-token (forward + wgrad + dgrad, FMA = 2), the core attention
// as 2·s per token and query width per layer and matmul, no recomputation counted.
#include <cstdint>

#include "planner/model.hpp"

namespace shardplan::validation {

// How the count takes the core attention: the causal half (Megatron-LM's training.py since c7590d8c37 of 2025-10-13,
// "causal mask (only half of the mask is non-zero)"; Megatron-Bridge's tables, 25.09–26.08), or the whole s×s score
// matrix (Megatron-Core r0.8.0's 12·B·s·l·h²·(s/h)·(q/h) term; NeMo's 24.07 summary).
// causal_windowed: the causal count with each sliding-window layer's queries over their window's keys, as
// Megatron-Bridge 26.06–26.08 prints GPT-OSS (32.6 G a token; 27.2 G until 26.04.01, which none of the three gives).
enum class AttentionCount { causal, full, causal_windowed };

// Model FLOPs of one token of a seq-token sequence: MoE layers by the model's layer pattern (an MTP module is a layer
// of the last layer's kind), SwiGLU-style gated MLPs at 3 matrices, MLA by its low-rank projections, the padded
// vocabulary's logits once per MTP module and once for the model. Sliding windows count only under causal_windowed
// (training.py counts every layer's attention over the whole sequence).
double megatron_flops_per_token(const ModelSpec& m, int64_t seq, AttentionCount attention);

}  // namespace shardplan::validation
