#pragma once
// The reference GPT's layers, forward and backward, on top of the CPU kernels. A block is pre-norm:
//   x_mid = x + Wo·attn(rope(Wqkv·norm1(x)));  y = x_mid + W2·act(W1·norm2(x_mid)).
// What each block keeps for backward is BlockActs (tensors of the backend's dtype, statistics fp32); the residual
// stream x is owned by the caller.
// Every pointer is memory of the backend `k` that runs the kernels (backend.hpp).
#include <functional>

#include "reference/arena.hpp"
#include "reference/layout.hpp"

namespace shardplan::reference {

// Tensors one block saves for its backward (category activations). N tokens.
struct BlockActs {
  Buf ln1;        // [N,C]   norm1 output (input of the qkv GEMM)
  Buf ln1_mean;   // [N]     LayerNorm only (fp32, as all statistics)
  Buf ln1_rstd;   // [N]
  Buf qkv;        // [N,QKV] q, k after rotary, v
  Buf att;        // [N,QW]  attention output (input of the out GEMM)
  Buf lse;        // [B,NH,T] softmax log-sum-exp per score row
  Buf x_mid;      // [N,C]   residual stream after attention
  Buf ln2;        // [N,C]   norm2 output (input of fc1)
  Buf ln2_mean;   // [N]     LayerNorm only
  Buf ln2_rstd;   // [N]
  Buf fc1;        // [N,F1]  fc1 output: pre-GELU, or gate | up for SwiGLU
  Buf act;        // [N,F]   activation output (input of fc2)
};
BlockActs block_acts_allocate(Arena& a, const Dims& d);

// Gradients of activations used while a block runs backward (category activations), allocated once per
// backward pass and reused by every block.
struct BlockScratch {
  Buf d_c;    // [N,C]   ∂/∂(norm output)
  Buf d_act;  // [N,F]
  Buf d_fc1;  // [N,F1]
  Buf d_att;  // [N,QW]
  Buf d_qkv;  // [N,QKV]
  Buf work;   // [2,T,T] attention scores and their gradient on CPU, empty on GPU (category buffers: workspace)
};
BlockScratch block_scratch_allocate(Arena& a, const Dims& d);

// Called between kernels so that communication in flight makes progress (OpenMPI progresses only inside MPI).
using Poll = std::function<void()>;

// out[N,C] = block(x[N,C]); fills acts. work[T,T] scratch.
void block_forward(Backend& k, floatX* out, const floatX* x, BlockActs& acts, const BlockView& w, float* work, const Dims& d,
                   const Poll& poll);
// d_resid[N,C]: on entry ∂loss/∂out, on return ∂loss/∂x. Parameter gradients accumulate into g.
void block_backward(Backend& k, floatX* d_resid, const floatX* x, const BlockActs& acts, const BlockView& w, const BlockView& g,
                    BlockScratch& s, const Dims& d, const Poll& poll);

// Final norm, LM head and cross-entropy, forward and backward at once (the logits never outlive the loss):
// d_resid[N,C] = ∂loss/∂x (overwritten) for x[N,C] the last block's output; targets[N]; the gradient is
// scaled by `scale` (1 / tokens of the global batch). lm_head is head.lm_head or, tied, the embedding's wte
// (and d_lm_head the matching gradient). Returns Σ −log p over the N tokens.
double head_forward_backward(Backend& k, floatX* d_resid, const floatX* x, const int32_t* targets, const HeadView& w,
                             const HeadView& g, const floatX* lm_head, floatX* d_lm_head, Arena& a, const Dims& d,
                             float scale);

}  // namespace shardplan::reference
