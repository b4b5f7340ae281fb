// The reference GPT's block and head (model.hpp).
#include "reference/model.hpp"

namespace shardplan::reference {

BlockActs block_acts_allocate(Arena& a, const Dims& d) {
  const int64_t N = d.tokens(), C = d.hidden;
  const AttentionShape s = d.attention();
  const Category k = Category::activations;
  BlockActs b;
  b.ln1 = Buf::of_backend_dtype(a, N * C, k);
  if (!d.rms) b.ln1_mean = Buf(a, N, DType::fp32, k);
  b.ln1_rstd = Buf(a, N, DType::fp32, k);
  b.qkv = Buf::of_backend_dtype(a, N * s.qkv_width(), k);
  b.att = Buf::of_backend_dtype(a, N * s.q_width(), k);
  b.lse = Buf(a, d.batch * d.heads * d.seq, DType::fp32, k);
  b.x_mid = Buf::of_backend_dtype(a, N * C, k);
  b.ln2 = Buf::of_backend_dtype(a, N * C, k);
  if (!d.rms) b.ln2_mean = Buf(a, N, DType::fp32, k);
  b.ln2_rstd = Buf(a, N, DType::fp32, k);
  b.fc1 = Buf::of_backend_dtype(a, N * d.fc1_width, k);
  b.act = Buf::of_backend_dtype(a, N * d.ffn, k);
  return b;
}

BlockScratch block_scratch_allocate(Arena& a, const Dims& d) {
  const int64_t N = d.tokens();
  const AttentionShape s = d.attention();
  BlockScratch b;
  b.d_c = Buf::of_backend_dtype(a, N * d.hidden, Category::activations);
  b.d_act = Buf::of_backend_dtype(a, N * d.ffn, Category::activations);
  b.d_fc1 = Buf::of_backend_dtype(a, N * d.fc1_width, Category::activations);
  b.d_att = Buf::of_backend_dtype(a, N * s.q_width(), Category::activations);
  b.d_qkv = Buf::of_backend_dtype(a, N * s.qkv_width(), Category::activations);
  b.work = Buf(a, a.backend().attention_work_floats(s, true), DType::fp32, Category::buffers);
  return b;
}

void block_forward(Backend& k, floatX* out, const floatX* x, BlockActs& A, const BlockView& w, float* work, const Dims& d,
                   const Poll& poll) {
  const int64_t N = d.tokens(), C = d.hidden;
  const AttentionShape s = d.attention();
  k.norm_forward(A.ln1.x(), A.ln1_mean.f(), A.ln1_rstd.f(), x, w.ln1_w, w.ln1_b, N, C, d.rms);
  k.matmul_forward(A.qkv.x(), A.ln1.x(), w.qkv_w, w.qkv_b, N, C, s.qkv_width());
  poll();
  if (d.rope) k.rope_forward(A.qkv.x(), s);
  k.attention_forward(A.att.x(), A.lse.f(), A.qkv.x(), work, s);
  poll();
  k.matmul_forward(A.x_mid.x(), A.att.x(), w.out_w, w.out_b, N, s.q_width(), C);
  k.residual_accumulate(A.x_mid.x(), x, N * C);
  k.norm_forward(A.ln2.x(), A.ln2_mean.f(), A.ln2_rstd.f(), A.x_mid.x(), w.ln2_w, w.ln2_b, N, C,
               d.rms);
  k.matmul_forward(A.fc1.x(), A.ln2.x(), w.fc1_w, w.fc1_b, N, C, d.fc1_width);
  poll();
  if (d.swiglu) {
    k.swiglu_forward(A.act.x(), A.fc1.x(), N, d.ffn);
  } else {
    k.gelu_forward(A.act.x(), A.fc1.x(), N * d.ffn);
  }
  k.matmul_forward(out, A.act.x(), w.fc2_w, w.fc2_b, N, d.ffn, C);
  k.residual_accumulate(out, A.x_mid.x(), N * C);
  poll();
}

void block_backward(Backend& k, floatX* d_resid, const floatX* x, const BlockActs& A, const BlockView& w, const BlockView& g,
                    BlockScratch& S, const Dims& d, const Poll& poll) {
  const int64_t N = d.tokens(), C = d.hidden;
  const AttentionShape s = d.attention();
  // MLP: d_resid is ∂/∂out = ∂/∂(fc2 output) and flows unchanged along the residual to x_mid.
  k.matmul_backward(S.d_act.x(), g.fc2_w, g.fc2_b, d_resid, A.act.x(), w.fc2_w, N, d.ffn, C);
  if (d.swiglu) {
    k.swiglu_backward(S.d_fc1.x(), A.fc1.x(), S.d_act.x(), N, d.ffn);
  } else {
    k.gelu_backward(S.d_fc1.x(), A.fc1.x(), S.d_act.x(), N * d.ffn);
  }
  poll();
  k.matmul_backward(S.d_c.x(), g.fc1_w, g.fc1_b, S.d_fc1.x(), A.ln2.x(), w.fc1_w, N, C, d.fc1_width);
  k.norm_backward_accumulate(d_resid, g.ln2_w, g.ln2_b, S.d_c.x(), A.x_mid.x(), w.ln2_w, A.ln2_mean.f(),
                           A.ln2_rstd.f(), N, C, d.rms);
  poll();
  // Attention: d_resid is now ∂/∂x_mid = ∂/∂(out GEMM output), and flows on to x.
  k.matmul_backward(S.d_att.x(), g.out_w, g.out_b, d_resid, A.att.x(), w.out_w, N, s.q_width(), C);
  k.attention_backward(S.d_qkv.x(), S.d_att.x(), A.att.x(), A.lse.f(), A.qkv.x(), S.work.f(), s);
  poll();
  if (d.rope) k.rope_backward(S.d_qkv.x(), s);
  k.matmul_backward(S.d_c.x(), g.qkv_w, g.qkv_b, S.d_qkv.x(), A.ln1.x(), w.qkv_w, N, C, s.qkv_width());
  k.norm_backward_accumulate(d_resid, g.ln1_w, g.ln1_b, S.d_c.x(), x, w.ln1_w, A.ln1_mean.f(),
                           A.ln1_rstd.f(), N, C, d.rms);
  poll();
}

double head_forward_backward(Backend& k, floatX* d_resid, const floatX* x, const int32_t* targets, const HeadView& w,
                             const HeadView& g, const floatX* lm_head, floatX* d_lm_head, Arena& a, const Dims& d,
                             float scale) {
  const int64_t N = d.tokens(), C = d.hidden, Vp = d.padded_vocab;
  Buf lnf = Buf::of_backend_dtype(a, N * C, Category::activations);            // [N,C]
  Buf mean = d.rms ? Buf() : Buf(a, N, DType::fp32, Category::activations);  // [N]
  Buf rstd(a, N, DType::fp32, Category::activations);                         // [N]
  k.norm_forward(lnf.x(), mean.f(), rstd.f(), x, w.lnf_w, w.lnf_b, N, C, d.rms);
  double loss = 0;
  {
    Buf logits = Buf::of_backend_dtype(a, N * Vp, Category::logits);  // [N,Vp] logits, then ∂loss/∂logits in place
    k.matmul_forward(logits.x(), lnf.x(), lm_head, nullptr, N, C, Vp);
    loss = k.softmax_xent_forward_backward(logits.x(), targets, N, Vp, d.vocab, scale);
    Buf d_lnf = Buf::of_backend_dtype(a, N * C, Category::activations);  // [N,C]
    k.matmul_backward(d_lnf.x(), d_lm_head, nullptr, logits.x(), lnf.x(), lm_head, N, C, Vp);
    logits.reset();
    k.memory_zero(d_resid, static_cast<std::size_t>(N * C * dtype_bytes(k.dtype())));
    k.norm_backward_accumulate(d_resid, g.lnf_w, g.lnf_b, d_lnf.x(), x, w.lnf_w, mean.f(), rstd.f(), N, C,
                             d.rms);
  }
  return loss;
}

}  // namespace shardplan::reference
