// reference/ CPU kernels: every backward against central finite differences of its forward (objective
// J = Σ out·R for fixed random R, evaluated in double), AdamW against a hand-computed step, the arena's accounting.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "reference/arena.hpp"
#include "reference/cpu_kernels.hpp"
#include "reference/layout.hpp"
#include "reference/model.hpp"

using namespace shardplan;
using namespace shardplan::reference;

namespace {

std::vector<float> random_vec(int64_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Largest |analytic − numeric| relative to the largest |numeric|, over `probes` coordinates of x (all when 0).
// J() evaluates the objective at the current x; fp32 forward, so h = 1e-2 keeps rounding below truncation.
double fd_error(std::vector<float>& x, const std::vector<float>& analytic, const std::function<double()>& J,
                int probes = 0, float h = 1e-2f) {
  double worst = 0, scale = 1e-6;
  const std::size_t n = x.size();
  const std::size_t step = probes > 0 && n > static_cast<std::size_t>(probes) ? n / probes : 1;
  for (std::size_t i = 0; i < n; i += step) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = J();
    x[i] = keep - h;
    const double down = J();
    x[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    worst = std::max(worst, std::fabs(numeric - analytic[i]));
    scale = std::max(scale, std::fabs(numeric));
  }
  return worst / scale;
}

// Host vectors as CPU-backend tensors of dtype fp32.
floatX* as_x(std::vector<float>& v) { return reinterpret_cast<floatX*>(v.data()); }

constexpr double kTol = 2e-2;  // fp32 forward, central differences with h = 1e-2: errors of order h²·f''' and 1e-7/h

}  // namespace

TEST_SUITE("reference kernels") {
  TEST_CASE("matmul backward: input, weight and bias gradients") {
    const int64_t N = 6, I = 5, O = 4;
    auto in = random_vec(N * I, 1), w = random_vec(O * I, 2), b = random_vec(O, 3), R = random_vec(N * O, 4);
    std::vector<float> out(N * O), din(N * I), dw(O * I, 0.0f), db(O, 0.0f);
    auto J = [&] { matmul_forward(out.data(), in.data(), w.data(), b.data(), N, I, O); return dot(out, R); };
    matmul_backward(din.data(), dw.data(), db.data(), R.data(), in.data(), w.data(), N, I, O);
    CHECK(fd_error(in, din, J) < kTol);
    CHECK(fd_error(w, dw, J) < kTol);
    CHECK(fd_error(b, db, J) < kTol);
    // Parameter gradients accumulate: a second call doubles them.
    const float dw0 = dw[3];
    matmul_backward(din.data(), dw.data(), db.data(), R.data(), in.data(), w.data(), N, I, O);
    CHECK(dw[3] == doctest::Approx(2 * dw0));
  }

  TEST_CASE("LayerNorm and RMSNorm backward") {
    for (bool rms : {false, true}) {
      CAPTURE(rms);
      const int64_t N = 4, C = 8;
      auto x = random_vec(N * C, 5), w = random_vec(C, 6), b = random_vec(C, 7), R = random_vec(N * C, 8);
      std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
      float* bias = rms ? nullptr : b.data();
      auto J = [&] {
        norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C, rms);
        return dot(out, R);
      };
      J();
      norm_backward_accumulate(dx.data(), dw.data(), rms ? nullptr : db.data(), R.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), N, C, rms);
      CHECK(fd_error(x, dx, J, 0, 1e-3f) < kTol);
      CHECK(fd_error(w, dw, J) < kTol);
      if (!rms) CHECK(fd_error(b, db, J) < kTol);
    }
  }

  TEST_CASE("causal GQA attention with rotary embedding, backward") {
    const AttentionShape s{2, 5, 4, 2, 4};  // B 2, T 5, 4 query heads sharing 2 KV heads, head_dim 4
    const int64_t N = s.batch * s.seq;
    auto qkv = random_vec(N * s.qkv_width(), 9), R = random_vec(N * s.q_width(), 10);
    std::vector<float> roped(qkv.size()), out(N * s.q_width()), lse(s.batch * s.heads * s.seq),
        work(2 * s.seq * s.seq), dqkv(qkv.size());
    auto J = [&] {
      roped = qkv;
      rope_forward(roped.data(), s);
      attention_forward(out.data(), lse.data(), roped.data(), work.data(), s);
      return dot(out, R);
    };
    J();
    attention_backward(dqkv.data(), R.data(), out.data(), lse.data(), roped.data(), work.data(), s);
    rope_backward(dqkv.data(), s);
    CHECK(fd_error(qkv, dqkv, J, 0, 1e-2f) < kTol);
    // Causality: the first token's output depends only on itself (v of token 0 of its KV head).
    for (int64_t d = 0; d < s.head_dim; ++d) CHECK(out[d] == doctest::Approx(roped[s.q_width() + s.kv_width() + d]));
  }

  TEST_CASE("GELU and SwiGLU backward") {
    const int64_t N = 3, F = 5;
    auto x = random_vec(N * F, 11), R = random_vec(N * F, 12);
    std::vector<float> out(N * F), dx(N * F);
    auto Jg = [&] { gelu_forward(out.data(), x.data(), N * F); return dot(out, R); };
    gelu_backward(dx.data(), x.data(), R.data(), N * F);
    CHECK(fd_error(x, dx, Jg) < kTol);
    auto fc1 = random_vec(N * 2 * F, 13);
    std::vector<float> dfc1(N * 2 * F);
    auto Js = [&] { swiglu_forward(out.data(), fc1.data(), N, F); return dot(out, R); };
    swiglu_backward(dfc1.data(), fc1.data(), R.data(), N, F);
    CHECK(fd_error(fc1, dfc1, Js) < kTol);
  }

  TEST_CASE("softmax cross-entropy: loss value and gradient; embedding backward") {
    const int64_t N = 4, Vp = 8, V = 6;
    auto logits = random_vec(N * Vp, 14);
    const std::vector<int32_t> targets = {0, 5, 2, 3};
    // Uniform logits: the loss is log V per token (padding columns excluded).
    std::vector<float> zeros(N * Vp, 0.0f);
    CHECK(softmax_xent_forward_backward(zeros.data(), targets.data(), N, Vp, V, 1.0f) ==
          doctest::Approx(N * std::log(6.0)));
    std::vector<float> grad = logits;
    softmax_xent_forward_backward(grad.data(), targets.data(), N, Vp, V, 1.0f);
    auto J = [&] {
      std::vector<float> tmp = logits;
      return softmax_xent_forward_backward(tmp.data(), targets.data(), N, Vp, V, 1.0f);
    };
    CHECK(fd_error(logits, grad, J, 0, 1e-3f) < kTol);
    for (int64_t i = 0; i < N; ++i) CHECK(grad[i * Vp + 7] == 0.0f);  // padding column
    // Embedding: d wte[token] collects every occurrence; d wpe[t] every sequence.
    const int64_t B = 2, T = 2, C = 3;
    const std::vector<int32_t> tok = {1, 1, 0, 1};
    std::vector<float> dout(B * T * C, 1.0f), dwte(2 * C, 0.0f), dwpe(T * C, 0.0f);
    embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    CHECK(dwte[C] == 3.0f);   // token 1 appears 3 times
    CHECK(dwte[0] == 1.0f);
    CHECK(dwpe[0] == 2.0f);   // position 0 in both sequences
  }

  TEST_CASE("a whole block and the head, backward against finite differences") {
    for (bool llama : {true, false}) {
      CAPTURE(llama);
      ModelSpec m;
      m.layers = 1, m.hidden = 8, m.heads = 2, m.kv_heads = llama ? 1 : 2, m.ffn_hidden = 12, m.vocab = 10;
      m.vocab_pad_to = 4, m.seq = 4;
      m.mlp = llama ? MlpKind::swiglu : MlpKind::gelu;
      m.norm = llama ? NormKind::rmsnorm : NormKind::layernorm;
      m.position = llama ? PositionKind::rotary : PositionKind::learned;
      m.qkv_bias = m.out_bias = !llama;
      const Dims d = dims_make(m, 2, 4);
      const auto units = layout_make(d, 1, 1);
      auto cpu = make_cpu_backend();
      Arena arena(*cpu);
      auto params = random_vec(units[1].padded, 15, 0.3f);
      std::vector<float> grads(params.size(), 0.0f);
      const int64_t N = d.tokens(), C = d.hidden;
      auto x = random_vec(N * C, 16), R = random_vec(N * C, 17);
      std::vector<float> out(N * C), work(d.seq * d.seq);
      auto J = [&] {
        BlockActs a = block_acts_allocate(arena, d);
        block_forward(*cpu, as_x(out), as_x(x), a, block_view(units[1], as_x(params), DType::fp32), work.data(), d,
                      [] {});
        return dot(out, R);
      };
      BlockActs a = block_acts_allocate(arena, d);
      block_forward(*cpu, as_x(out), as_x(x), a, block_view(units[1], as_x(params), DType::fp32), work.data(), d, [] {});
      BlockScratch s = block_scratch_allocate(arena, d);
      std::vector<float> dx = R;
      block_backward(*cpu, as_x(dx), as_x(x), a, block_view(units[1], as_x(params), DType::fp32),
                     block_view(units[1], as_x(grads), DType::fp32), s, d, [] {});
      CHECK(fd_error(x, dx, J, 0, 1e-2f) < kTol);
      CHECK(fd_error(params, grads, J, 0, 1e-2f) < kTol);

      // Head: final norm + LM head + cross-entropy; the returned sum is the objective.
      auto hp = random_vec(units[2].padded, 18, 0.5f);
      std::vector<float> hg(hp.size(), 0.0f), d_resid(N * C);
      const std::vector<int32_t> targets = {1, 2, 3, 4, 5, 6, 7, 8};
      auto Jh = [&] {
        std::vector<float> scratch_g(hp.size(), 0.0f), dr(N * C);
        const HeadView w = head_view(units[2], as_x(hp), DType::fp32), g = head_view(units[2], as_x(scratch_g), DType::fp32);
        return head_forward_backward(*cpu, as_x(dr), as_x(x), targets.data(), w, g, w.lm_head, g.lm_head, arena, d,
                                     1.0f);
      };
      const HeadView w = head_view(units[2], as_x(hp), DType::fp32), g = head_view(units[2], as_x(hg), DType::fp32);
      head_forward_backward(*cpu, as_x(d_resid), as_x(x), targets.data(), w, g, w.lm_head, g.lm_head, arena, d, 1.0f);
      CHECK(fd_error(x, d_resid, Jh, 0, 1e-2f) < kTol);
      CHECK(fd_error(hp, hg, Jh, 64, 1e-2f) < kTol);
    }
  }

  TEST_CASE("AdamW: one step by hand") {
    // t = 1: m = 0.1·g, v = 0.05·g² (β 0.9, 0.95); bias correction gives m̂ = g, v̂ = g², so the update is
    // lr·(g/(|g| + eps) + wd·p): p = 1, g = 2, lr 0.1, wd 0.1 → 1 − 0.1·(1 + 0.1) = 0.89.
    float p = 1.0f, g = 2.0f, m = 0.0f, v = 0.0f;
    adamw_step_shard(&p, nullptr, &g, &m, &v, 1, AdamWParams{0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f});
    CHECK(m == doctest::Approx(0.2f));
    CHECK(v == doctest::Approx(0.2f));
    CHECK(p == doctest::Approx(0.89f));
    // grad_scale 0.5 (clipping) scales the gradient before the moments: m = 0.1.
    float p2 = 1.0f, m2 = 0.0f, v2 = 0.0f;
    adamw_step_shard(&p2, nullptr, &g, &m2, &v2, 1, AdamWParams{0.1f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 0.5f});
    CHECK(m2 == doctest::Approx(0.1f));
  }

  TEST_CASE("the arena records the peak and what was live at it") {
    auto cpu = make_cpu_backend();
    Arena a(*cpu);
    Buf p(a, 100, DType::fp32, Category::params);  // 400 B
    {
      Buf act(a, 250, DType::fp32, Category::activations);  // 1000 B
      Buf lg(a, 50, DType::bf16, Category::logits);         // 100 B (2 B per bf16) → peak 1500 B
    }
    Buf buf(a, 10, DType::fp32, Category::buffers);  // 40 B: live 440, below the peak
    CHECK(a.peak() == 1500);
    CHECK(a.at_peak().params == 400);
    CHECK(a.at_peak().activations == 1000);
    CHECK(a.at_peak().logits == 100);
    CHECK(a.at_peak().buffers == 0);
    CHECK(a.live_total() == 440);
    a.reset_peak();
    CHECK(a.peak() == 440);
    CHECK(rss_bytes_read() > 0);
    // A tensor is handed to kernels only in the backend's dtype, and as fp32 only when it is fp32.
    CHECK_THROWS_AS(Buf(a, 4, DType::bf16, Category::activations).x(), std::logic_error);
    CHECK_THROWS_AS(Buf(a, 4, DType::bf16, Category::activations).f(), std::logic_error);
    CHECK(Buf::of_backend_dtype(a, 4, Category::activations).dtype() == DType::fp32);
  }
}
