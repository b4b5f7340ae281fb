#pragma once
// CPU fp32 kernels of the reference GPT (Eigen for the GEMMs, plain loops for the rest), in the style of llm.c:
// every pointer argument names its shape. Row-major throughout; N = B·T tokens. Backward kernels accumulate
// (+=) into parameter gradients, so micro-batches and tied weights add up; input gradients are overwritten
// unless the name says `accumulate`.
#include <cstdint>

namespace shardplan::reference {

// --- matmul (cpu_kernels_matmul.cpp) --------------------------------------------------------------------
// out[N,O] = in[N,I] · w[O,I]ᵀ + bias[O] (bias may be null). Weights are stored [out, in] as in PyTorch.
void matmul_forward(float* out, const float* in, const float* w, const float* bias, int64_t n, int64_t in_dim,
                    int64_t out_dim);
// din[N,I] = dout[N,O] · w[O,I]; dw[O,I] += doutᵀ · in; dbias[O] += Σ_rows dout (dbias may be null).
void matmul_backward(float* din, float* dw, float* dbias, const float* dout, const float* in, const float* w,
                     int64_t n, int64_t in_dim, int64_t out_dim);
// x[n] += y[n] (residual connections).
void residual_accumulate(float* x, const float* y, int64_t n);
// Σ x[i]² in double (gradient-norm clipping).
double sum_squares(const float* x, int64_t n);

// --- norms (cpu_kernels_norm.cpp) ------------------------------------------------------------------------
// LayerNorm (Ba et al. 2016) when `rms` is false, RMSNorm (Zhang & Sennrich 2019) when true; eps 1e-5.
// out[N,C]; mean[N] (LayerNorm only; may be null for RMSNorm), rstd[N] saved for backward; bias[C] may be null.
void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* bias,
                  int64_t n, int64_t c, bool rms);
// dx[N,C] += ∂loss/∂x; dw[C] += ; dbias[C] += (may be null). x, mean, rstd as saved by norm_forward.
void norm_backward_accumulate(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                              const float* w, const float* mean, const float* rstd, int64_t n, int64_t c,
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
void rope_forward(float* qkv, const AttentionShape& s);
void rope_backward(float* dqkv, const AttentionShape& s);
// Causal softmax attention with grouped-query heads (Ainslie et al. 2023: q head h reads kv head h/(NH/KVH)).
// out[B,T,NH·HD]; lse[B,NH,T] the log-sum-exp of each score row (saved instead of the T×T probabilities, as
// FlashAttention does — Dao et al. 2022 §3.1); work[T,T] scratch.
void attention_forward(float* out, float* lse, const float* qkv, float* work, const AttentionShape& s);
// dqkv[B,T,QKV] = ∂loss/∂qkv (overwritten); recomputes the probabilities from qkv and lse.
// work[2,T,T] scratch.
void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                        float* work, const AttentionShape& s);

// --- MLP activations (cpu_kernels_mlp.cpp) ----------------------------------------------------------------
// GELU, tanh approximation (Hendrycks & Gimpel 2016 §2): out[n] = gelu(in[n]); din[n] = gelu'(in)·dout.
void gelu_forward(float* out, const float* in, int64_t n);
void gelu_backward(float* din, const float* in, const float* dout, int64_t n);
// SwiGLU (Shazeer 2020): fc1[N,2F] = [gate | up] per row; out[N,F] = silu(gate)·up.
void swiglu_forward(float* out, const float* fc1, int64_t n, int64_t f);
// dfc1[N,2F] from dout[N,F].
void swiglu_backward(float* dfc1, const float* fc1, const float* dout, int64_t n, int64_t f);

// --- embedding and loss (cpu_kernels_loss.cpp) -------------------------------------------------------------
// out[B,T,C] = wte[tokens] (+ wpe[t] when wpe is not null). tokens[B,T].
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t b,
                       int64_t t, int64_t c);
// dwte[V,C] += , dwpe[T,C] += (may be null) from dout[B,T,C].
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t b, int64_t t,
                        int64_t c);
// Fused softmax cross-entropy over the first `vocab` of `padded_vocab` columns: logits[N,Vp] are overwritten by
// ∂loss/∂logits · scale (padding columns get 0). targets[N]. Returns Σ over rows of −log p(target).
double softmax_xent_forward_backward(float* logits, const int32_t* targets, int64_t n, int64_t padded_vocab,
                                     int64_t vocab, float scale);

// --- optimizer (cpu_kernels_adamw.cpp) ----------------------------------------------------------------------
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t t;          // 1-based step (bias correction)
  float grad_scale;   // clipping coefficient applied to the gradient
};
// AdamW (Loshchilov & Hutter 2019, Algorithm 2) on n elements: p, m, v updated in place from g.
void adamw_step_shard(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a);

}  // namespace shardplan::reference
