#pragma once
// The fused attention kernel a runtime calls. They differ in the fraction of peak they reach
// (compute_cost.cpp flash_attention_efficiency):
//   flash2: FlashAttention-2 (PyTorch SDPA's flash backend, flash-attn);
//   cudnn:  cuDNN's fused attention (Transformer Engine's FusedAttention, which it prefers on Hopper);
//   triton: the Triton FlashAttention of 2022-23 (flash-attn's flash_attn_triton.py, vendored by llm-foundry as
//           attn_impl 'triton').
namespace shardplan {

enum class AttentionKernel { flash2, cudnn, triton };

}  // namespace shardplan
