// The reference GPT's block and head (model.hpp).
#include "reference/model.hpp"

namespace shardplan::reference {

BlockActs block_acts_allocate(Arena& a, const Dims& d) {
  const int64_t N = d.tokens(), C = d.hidden;
  const AttentionShape s = d.attention();
  const Category k = Category::activations;
  BlockActs b;
  b.ln1 = Buf(a, N * C, k);
  if (!d.rms) b.ln1_mean = Buf(a, N, k);
  b.ln1_rstd = Buf(a, N, k);
  b.qkv = Buf(a, N * s.qkv_width(), k);
  b.att = Buf(a, N * s.q_width(), k);
  b.lse = Buf(a, d.batch * d.heads * d.seq, k);
  b.x_mid = Buf(a, N * C, k);
  b.ln2 = Buf(a, N * C, k);
  if (!d.rms) b.ln2_mean = Buf(a, N, k);
  b.ln2_rstd = Buf(a, N, k);
  b.fc1 = Buf(a, N * d.fc1_width, k);
  b.act = Buf(a, N * d.ffn, k);
  return b;
}

BlockScratch block_scratch_allocate(Arena& a, const Dims& d) {
  const int64_t N = d.tokens();
  const AttentionShape s = d.attention();
  BlockScratch b;
  b.d_c = Buf(a, N * d.hidden, Category::activations);
  b.d_act = Buf(a, N * d.ffn, Category::activations);
  b.d_fc1 = Buf(a, N * d.fc1_width, Category::activations);
  b.d_att = Buf(a, N * s.q_width(), Category::activations);
  b.d_qkv = Buf(a, N * s.qkv_width(), Category::activations);
  b.work = Buf(a, a.backend().attention_work_floats(s, true), Category::buffers);
  return b;
}

void block_forward(Backend& k, float* out, const float* x, BlockActs& A, const BlockView& w, float* work, const Dims& d,
                   const Poll& poll) {
  const int64_t N = d.tokens(), C = d.hidden;
  const AttentionShape s = d.attention();
  k.norm_forward(A.ln1.data(), A.ln1_mean.data(), A.ln1_rstd.data(), x, w.ln1_w, w.ln1_b, N, C, d.rms);
  k.matmul_forward(A.qkv.data(), A.ln1.data(), w.qkv_w, w.qkv_b, N, C, s.qkv_width());
  poll();
  if (d.rope) k.rope_forward(A.qkv.data(), s);
  k.attention_forward(A.att.data(), A.lse.data(), A.qkv.data(), work, s);
  poll();
  k.matmul_forward(A.x_mid.data(), A.att.data(), w.out_w, w.out_b, N, s.q_width(), C);
  k.residual_accumulate(A.x_mid.data(), x, N * C);
  k.norm_forward(A.ln2.data(), A.ln2_mean.data(), A.ln2_rstd.data(), A.x_mid.data(), w.ln2_w, w.ln2_b, N, C,
               d.rms);
  k.matmul_forward(A.fc1.data(), A.ln2.data(), w.fc1_w, w.fc1_b, N, C, d.fc1_width);
  poll();
  if (d.swiglu) {
    k.swiglu_forward(A.act.data(), A.fc1.data(), N, d.ffn);
  } else {
    k.gelu_forward(A.act.data(), A.fc1.data(), N * d.ffn);
  }
  k.matmul_forward(out, A.act.data(), w.fc2_w, w.fc2_b, N, d.ffn, C);
  k.residual_accumulate(out, A.x_mid.data(), N * C);
  poll();
}

void block_backward(Backend& k, float* d_resid, const float* x, const BlockActs& A, const BlockView& w, const BlockView& g,
                    BlockScratch& S, const Dims& d, const Poll& poll) {
  const int64_t N = d.tokens(), C = d.hidden;
  const AttentionShape s = d.attention();
  // MLP: d_resid is ∂/∂out = ∂/∂(fc2 output) and flows unchanged along the residual to x_mid.
  k.matmul_backward(S.d_act.data(), g.fc2_w, g.fc2_b, d_resid, A.act.data(), w.fc2_w, N, d.ffn, C);
  if (d.swiglu) {
    k.swiglu_backward(S.d_fc1.data(), A.fc1.data(), S.d_act.data(), N, d.ffn);
  } else {
    k.gelu_backward(S.d_fc1.data(), A.fc1.data(), S.d_act.data(), N * d.ffn);
  }
  poll();
  k.matmul_backward(S.d_c.data(), g.fc1_w, g.fc1_b, S.d_fc1.data(), A.ln2.data(), w.fc1_w, N, C, d.fc1_width);
  k.norm_backward_accumulate(d_resid, g.ln2_w, g.ln2_b, S.d_c.data(), A.x_mid.data(), w.ln2_w, A.ln2_mean.data(),
                           A.ln2_rstd.data(), N, C, d.rms);
  poll();
  // Attention: d_resid is now ∂/∂x_mid = ∂/∂(out GEMM output), and flows on to x.
  k.matmul_backward(S.d_att.data(), g.out_w, g.out_b, d_resid, A.att.data(), w.out_w, N, s.q_width(), C);
  k.attention_backward(S.d_qkv.data(), S.d_att.data(), A.att.data(), A.lse.data(), A.qkv.data(), S.work.data(), s);
  poll();
  if (d.rope) k.rope_backward(S.d_qkv.data(), s);
  k.matmul_backward(S.d_c.data(), g.qkv_w, g.qkv_b, S.d_qkv.data(), A.ln1.data(), w.qkv_w, N, C, s.qkv_width());
  k.norm_backward_accumulate(d_resid, g.ln1_w, g.ln1_b, S.d_c.data(), x, w.ln1_w, A.ln1_mean.data(),
                           A.ln1_rstd.data(), N, C, d.rms);
  poll();
}

double head_forward_backward(Backend& k, float* d_resid, const float* x, const int32_t* targets, const HeadView& w,
                             const HeadView& g, const float* lm_head, float* d_lm_head, Arena& a, const Dims& d,
                             float scale) {
  const int64_t N = d.tokens(), C = d.hidden, Vp = d.padded_vocab;
  Buf lnf(a, N * C, Category::activations);                     // [N,C]
  Buf mean = d.rms ? Buf() : Buf(a, N, Category::activations);  // [N]
  Buf rstd(a, N, Category::activations);                        // [N]
  k.norm_forward(lnf.data(), mean.data(), rstd.data(), x, w.lnf_w, w.lnf_b, N, C, d.rms);
  double loss = 0;
  {
    Buf logits(a, N * Vp, Category::logits);  // [N,Vp] logits, then ∂loss/∂logits in place
    k.matmul_forward(logits.data(), lnf.data(), lm_head, nullptr, N, C, Vp);
    loss = k.softmax_xent_forward_backward(logits.data(), targets, N, Vp, d.vocab, scale);
    Buf d_lnf(a, N * C, Category::activations);  // [N,C]
    k.matmul_backward(d_lnf.data(), d_lm_head, nullptr, logits.data(), lnf.data(), lm_head, N, C, Vp);
    logits.reset();
    k.memory_zero(d_resid, static_cast<std::size_t>(N * C) * sizeof(float));
    k.norm_backward_accumulate(d_resid, g.lnf_w, g.lnf_b, d_lnf.data(), x, w.lnf_w, mean.data(), rstd.data(), N, C,
                             d.rms);
  }
  return loss;
}

}  // namespace shardplan::reference
