#pragma once
// CPU kernels of the reference GPT (Eigen for the GEMMs, plain loops for the rest), in the style of llm.c:
// every pointer argument names its shape. Row-major throughout; N = B·T tokens. Backward kernels accumulate
// (+=) into parameter gradients, so micro-batches and tied weights add up; input gradients are overwritten
// unless the name says `accumulate`.
// Every kernel is a template over the storage type T of its tensors, float or bf16 (reference/bf16.hpp; both
// instantiated in the .cpp files): it computes in fp32 (GEMMs accumulate in fp32, as tensor cores do) and rounds
// once when it stores. Statistics (mean, rstd, lse), scratch (`work`), AdamW moments and the master copy are float.
#include <cstdint>

#include "reference/bf16.hpp"

namespace shardplan::reference {

// --- matmul (cpu_kernels_matmul.cpp) --------------------------------------------------------------------
// out[N,O] = in[N,I] · w[O,I]ᵀ + bias[O] (bias may be null). Weights are stored [out, in] as in PyTorch.
template <typename T>
void matmul_forward(T* out, const T* in, const T* w, const T* bias, int64_t n, int64_t in_dim,
                    int64_t out_dim);
// din[N,I] = dout[N,O] · w[O,I]; dw[O,I] += doutᵀ · in; dbias[O] += Σ_rows dout (dbias may be null).
template <typename T>
void matmul_backward(T* din, T* dw, T* dbias, const T* dout, const T* in, const T* w,
                     int64_t n, int64_t in_dim, int64_t out_dim);
// x[n] += y[n] (residual connections).
template <typename T>
void residual_accumulate(T* x, const T* y, int64_t n);
// Σ x[i]² in double (gradient-norm clipping).
template <typename T>
double sum_squares(const T* x, int64_t n);

// --- norms (cpu_kernels_norm.cpp) ------------------------------------------------------------------------
// LayerNorm (Ba et al. 2016) when `rms` is false, RMSNorm (Zhang & Sennrich 2019) when true; eps 1e-5.
// out[N,C]; mean[N] (LayerNorm only; may be null for RMSNorm), rstd[N] saved for backward; bias[C] may be null.
template <typename T>
void norm_forward(T* out, float* mean, float* rstd, const T* x, const T* w, const T* bias,
                  int64_t n, int64_t c, bool rms);
// dx[N,C] += ∂loss/∂x; dw[C] += ; dbias[C] += (may be null). x, mean, rstd as saved by norm_forward.
template <typename T>
void norm_backward_accumulate(T* dx, T* dw, T* dbias, const T* dout, const T* x,
                              const T* w, const float* mean, const float* rstd, int64_t n, int64_t c,
                              bool rms);

// --- attention (cpu_kernels_attention.cpp) ----------------------------------------------------------------
// Shapes of the fused projection: qkv[B,T,QKV] with QKV = (NH + 2·KVH)·HD: q heads, then k heads, then v heads.
struct AttentionShape {
  int64_t batch, seq, heads, kv_heads, head_dim;
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
};
// Rotary position embedding (Su et al. 2021, RoFormer §3.4; the rotate-half pairing of GPT-NeoX/Llama) on the
// q and k heads of qkv[B,T,QKV], in place; base 10000. rope_backward applies the inverse rotation to dqkv.
template <typename T>
void rope_forward(T* qkv, const AttentionShape& s);
template <typename T>
void rope_backward(T* dqkv, const AttentionShape& s);
// Causal softmax attention with grouped-query heads (Ainslie et al. 2023: q head h reads kv head h/(NH/KVH)).
// out[B,T,NH·HD]; lse[B,NH,T] the log-sum-exp of each score row (saved instead of the T×T probabilities, as
// FlashAttention does — Dao et al. 2022 §3.1); work[T,T] scratch.
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, float* work, const AttentionShape& s);
// dqkv[B,T,QKV] = ∂loss/∂qkv (overwritten); recomputes the probabilities from qkv and lse.
// work[2,T,T] scratch.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* out, const float* lse, const T* qkv,
                        float* work, const AttentionShape& s);

// --- MLP activations (cpu_kernels_mlp.cpp) ----------------------------------------------------------------
// GELU, tanh approximation (Hendrycks & Gimpel 2016 §2): out[n] = gelu(in[n]); din[n] = gelu'(in)·dout.
template <typename T>
void gelu_forward(T* out, const T* in, int64_t n);
template <typename T>
void gelu_backward(T* din, const T* in, const T* dout, int64_t n);
// SwiGLU (Shazeer 2020): fc1[N,2F] = [gate | up] per row; out[N,F] = silu(gate)·up.
template <typename T>
void swiglu_forward(T* out, const T* fc1, int64_t n, int64_t f);
// dfc1[N,2F] from dout[N,F].
template <typename T>
void swiglu_backward(T* dfc1, const T* fc1, const T* dout, int64_t n, int64_t f);

// --- embedding and loss (cpu_kernels_loss.cpp) -------------------------------------------------------------
// out[B,T,C] = wte[tokens] (+ wpe[t] when wpe is not null). tokens[B,T].
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                       int64_t t, int64_t c);
// dwte[V,C] += , dwpe[T,C] += (may be null) from dout[B,T,C].
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t b, int64_t t,
                        int64_t c);
// Fused softmax cross-entropy over the first `vocab` of `padded_vocab` columns: logits[N,Vp] are overwritten by
// ∂loss/∂logits · scale (padding columns get 0). targets[N]. Returns Σ over rows of −log p(target).
template <typename T>
double softmax_xent_forward_backward(T* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                     int64_t vocab, float scale);

// --- optimizer (cpu_kernels_adamw.cpp) ----------------------------------------------------------------------
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t t;          // 1-based step (bias correction)
  float grad_scale;   // clipping coefficient applied to the gradient
};
// AdamW (Loshchilov & Hutter 2019, Algorithm 2) on n elements: m, v updated in place from g. master[n] null: p is
// updated in place (fp32; or pure-bf16, rounded every step). Otherwise the fp32 master copy is updated and p becomes
// its rounded copy (amp-bf16: Micikevicius et al. 2018 §3.1, master weights).
template <typename T>
void adamw_step_shard(T* p, float* master, const T* g, float* m, float* v, int64_t n, const AdamWParams& a);

}  // namespace shardplan::reference
