// reference/ CPU kernels on bf16 storage (reference/bf16.hpp, cpu_kernels.hpp): the rounding itself (hand-computed
// bit patterns), every kernel's bf16 instantiation against its fp32 instantiation on the same bf16-representable
// inputs, and the AdamW update with and without an fp32 master copy.
//
// Tolerance. Both instantiations widen the same values and compute in fp32; the bf16 one rounds once when it
// stores. Round-to-nearest-even to 8 significant bits moves y by at most half a spacing: for |y| ∈ [2^e, 2^(e+1))
// the spacing is 2^(e−7), so |round(y) − y| ≤ 2^(e−8) ≤ 2^−8·|y|. Where the bf16 path also sums in another order
// (Eigen on widened temporaries, a gradient summed from zero then added once instead of the running dw += …) the
// fp32 reordering error is of order 1e-7·rms per term over at most 64 terms here, far below 2^−8·rms. So:
// |bf16 − fp32| ≤ 2^−8·(|fp32| + rms(fp32)) (kernel_compare::compare). Elementwise kernels, whose fp32 arithmetic is
// the same operation for operation, are held to the exact fact bf16 == round(fp32), bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/precision.hpp"
#include "reference/backend.hpp"
#include "reference/bf16.hpp"
#include "reference/cpu_kernels.hpp"
#include "tests/kernel_compare.hpp"

using namespace shardplan::reference;
using shardplan::DType;

namespace {

using Vec = std::vector<float>;
using B16 = std::vector<bf16>;

constexpr double kOneRounding = 1.0 / 256;  // 2^−8: one bf16 rounding, relative (header comment)

float bits_float(uint32_t u) { return f32_from_bits(u); }
uint16_t bf16_bits(float f) { return bf16_from_float(f).bits; }
float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

// Random values rounded to bf16, so that the fp32 and bf16 kernels read exactly the same numbers.
Vec random_bf16(std::size_t n, unsigned seed, float scale = 1.0f, float shift = 0.0f) {
  Vec v = kernel_compare::random_vec(n, seed, scale, shift);
  for (auto& x : v) x = bf16_round(x);
  return v;
}

// Host vectors in bf16 storage and back (rounded to nearest even; widened exactly).
B16 to_bf16(const Vec& v) { return kernel_compare::stored<bf16>(v); }
Vec widen(const B16& v) { return kernel_compare::widened(v); }

// The bf16 result within one rounding (plus fp32 reordering) of the fp32 result; and not equal to it everywhere,
// which would mean nothing was rounded (the inputs are random, most fp32 results need more than 8 bits).
void check_close(const std::string& what, const Vec& fp32, const B16& b) {
  const Vec w = widen(b);
  kernel_compare::compare(what, fp32, w, kOneRounding, "bf16");
  CHECK_MESSAGE(w != fp32, what << ": bf16 equals fp32 everywhere");
}

// The bf16 result is the fp32 result rounded once, bit for bit.
void check_rounded_once(const std::string& what, const Vec& fp32, const B16& b) {
  REQUIRE(fp32.size() == b.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i].bits != bf16_bits(fp32[i]) && bad++ == 0) first = i;
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements differ from round(fp32), first " << first << " fp32 "
                               << fp32[first] << " bf16 " << bf16_to_float(b[first]));
  CHECK_MESSAGE(widen(b) != fp32, what << ": bf16 equals fp32 everywhere");
}

}  // namespace

TEST_SUITE("reference kernels bf16") {
  TEST_CASE("bf16 rounding: ties to even, NaN, overflow, exact widening") {
    // 1.0f = 0x3F800000. 2^−8 is mantissa bit 15 (0x8000): 1 + 2^−8 = 0x3F808000 lies halfway between 0x3F80 (1)
    // and 0x3F81 (1 + 2^−7); the tie goes to the even 0x3F80.
    CHECK(bf16_bits(bits_float(0x3F808000u)) == 0x3F80);
    // 1 + 3·2^−8 = 0x3F818000: halfway between 0x3F81 and 0x3F82; even 0x3F82 = 1 + 2^−6.
    CHECK(bits_float(0x3F818000u) == 1.0f + 3.0f / 256);
    CHECK(bf16_bits(1.0f + 3.0f / 256) == 0x3F82);
    CHECK(bf16_to_float(bf16{0x3F82}) == 1.0f + 1.0f / 64);
    // One fp32 ulp either side of the tie: nearest, not even.
    CHECK(bf16_bits(bits_float(0x3F808001u)) == 0x3F81);
    CHECK(bf16_bits(bits_float(0x3F807FFFu)) == 0x3F80);
    // The sign bit is carried: −(1 + 3·2^−8) → 0xBF82.
    CHECK(bf16_bits(-(1.0f + 3.0f / 256)) == 0xBF82);
    // NaN stays NaN, quiet: 0x7F800001 (payload only in the low bits) would truncate to 0x7F80 = Inf.
    CHECK(bf16_bits(bits_float(0x7F800001u)) == 0x7FC0);
    CHECK(std::isnan(bf16_round(std::numeric_limits<float>::quiet_NaN())));
    // ±Inf stay; the largest finite bf16 is 0x7F7F = (2 − 2^−7)·2^127. fp32 0x7F7F8000 = (2 − 2^−8)·2^127 is the
    // tie with 2^128, which goes to the even 0x7F80 = +Inf; FLT_MAX (0x7F7FFFFF) too; 0x7F7F7FFF stays finite.
    CHECK(bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
    CHECK(bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
    CHECK(bf16_bits(bits_float(0x7F7F8000u)) == 0x7F80);
    CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);
    CHECK(bf16_bits(-std::numeric_limits<float>::max()) == 0xFF80);
    CHECK(bf16_bits(bits_float(0x7F7F7FFFu)) == 0x7F7F);
    // Widening is exact: every one of the 65536 − 2·(2^7 − 1) = 65282 non-NaN bf16 patterns round-trips, and each
    // of the 254 NaN patterns (exponent 0xFF, mantissa ≠ 0) comes back a NaN.
    int round_trips = 0, nans = 0;
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const float f = bf16_to_float(bf16{static_cast<uint16_t>(b)});
      if (std::isnan(f)) {
        nans += std::isnan(bf16_round(f));
      } else {
        round_trips += bf16_bits(f) == b;
      }
    }
    CHECK(round_trips == 65282);
    CHECK(nans == 254);
    // accumulate: x = round(x + v) — 1 + 2^−9 is below the half spacing above 1 (2^−8) and rounds back to 1.
    bf16 one = bf16_from_float(1.0f);
    accumulate(one, 1.0f / 512);
    CHECK(one.bits == 0x3F80);
  }

  TEST_CASE("bf16 matmul forward and backward against fp32") {
    const int64_t N = 16, I = 40, O = 24;
    const Vec in = random_bf16(N * I, 1), w = random_bf16(O * I, 2, 0.2f), bias = random_bf16(O, 3),
              dout = random_bf16(N * O, 4), dw0 = random_bf16(O * I, 5, 0.1f), db0 = random_bf16(O, 6, 0.1f);
    for (bool with_bias : {true, false}) {
      CAPTURE(with_bias);
      Vec out(N * O);
      B16 outb(N * O), inb = to_bf16(in), wb = to_bf16(w), biasb = to_bf16(bias);
      matmul_forward<float>(out.data(), in.data(), w.data(), with_bias ? bias.data() : nullptr, N, I, O);
      matmul_forward<bf16>(outb.data(), inb.data(), wb.data(), with_bias ? biasb.data() : nullptr, N, I, O);
      check_close("matmul_forward out", out, outb);
    }
    // Backward onto nonzero parameter gradients (accumulate).
    Vec din(N * I), dw = dw0, db = db0;
    B16 dinb(N * I), dwb = to_bf16(dw0), dbb = to_bf16(db0);
    matmul_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), N, I, O);
    const B16 doutb = to_bf16(dout), inb = to_bf16(in), wb = to_bf16(w);
    matmul_backward(dinb.data(), dwb.data(), dbb.data(), doutb.data(), inb.data(), wb.data(), N, I, O);
    check_close("matmul_backward din", din, dinb);
    check_close("matmul_backward dw", dw, dwb);
    check_close("matmul_backward dbias", db, dbb);
  }

  TEST_CASE("bf16 parameter gradients sum over all rows in fp32, then round once") {
    // dw[0,0] = 1 + Σ over N = 4 rows of dout·in = 1 + 4·(1·2^−9) = 1 + 2^−7, exactly a bf16 (0x3F81). Rounding per
    // row would give round(1 + 2^−9) = 1 each time (below half the spacing 2^−7 above 1) and leave 0x3F80.
    const int64_t N = 4;
    const B16 dout(N, bf16_from_float(1.0f)), in(N, bf16_from_float(1.0f / 512)), w(1, bf16_from_float(1.0f));
    B16 din(N), dw(1, bf16_from_float(1.0f)), db(1, bf16_from_float(1.0f));
    const B16 dout_small(N, bf16_from_float(1.0f / 512));
    matmul_backward(din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), N, 1, 1);
    CHECK(dw[0].bits == 0x3F81);
    B16 din2(N), dw2(1, bf16_from_float(0.0f)), db2(1, bf16_from_float(1.0f));
    matmul_backward(din2.data(), dw2.data(), db2.data(), dout_small.data(), in.data(), w.data(), N, 1, 1);
    CHECK(db2[0].bits == 0x3F81);  // dbias = 1 + 4·2^−9
    // Embedding: token 3 at all 4 positions, dout 2^−9 each, onto dwte[3] = 1 → 1 + 2^−7; dwpe (T = 1) likewise.
    const std::vector<int32_t> tokens = {3, 3, 3, 3};
    B16 dwte(4, bf16_from_float(1.0f)), dwpe(1, bf16_from_float(1.0f));
    embedding_backward(dwte.data(), dwpe.data(), dout_small.data(), tokens.data(), 4, 1, 1);
    CHECK(dwte[3].bits == 0x3F81);
    CHECK(dwte[0].bits == 0x3F80);  // rows of absent tokens untouched
    CHECK(dwpe[0].bits == 0x3F81);
  }

  TEST_CASE("bf16 residual and sum of squares against fp32") {
    const int64_t n = 300;
    const Vec x0 = random_bf16(n, 7), y = random_bf16(n, 8);
    Vec x = x0;
    B16 xb = to_bf16(x0), yb = to_bf16(y);
    residual_accumulate(x.data(), y.data(), n);
    residual_accumulate(xb.data(), yb.data(), n);
    check_rounded_once("residual_accumulate", x, xb);
    // Same widened values, same double sum: equal.
    CHECK(sum_squares(yb.data(), n) == sum_squares(y.data(), n));
  }

  TEST_CASE("bf16 LayerNorm and RMSNorm against fp32") {
    for (bool rms : {false, true}) {
      CAPTURE(rms);
      const int64_t N = 6, C = 48;
      const Vec x = random_bf16(N * C, 9, 2.0f, 0.5f), w = random_bf16(C, 10, 0.5f, 1.0f), b = random_bf16(C, 11),
                dout = random_bf16(N * C, 12), dx0 = random_bf16(N * C, 13, 0.1f), dw0 = random_bf16(C, 14, 0.1f),
                db0 = random_bf16(C, 15, 0.1f);
      const B16 xb = to_bf16(x), wb = to_bf16(w), bb = to_bf16(b), doutb = to_bf16(dout);
      Vec out(N * C), mean(N), rstd(N), meanb(N), rstdb(N);
      B16 outb(N * C);
      norm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), w.data(), rms ? nullptr : b.data(), N, C,
                          rms);
      norm_forward<bf16>(outb.data(), meanb.data(), rstdb.data(), xb.data(), wb.data(), rms ? nullptr : bb.data(), N,
                         C, rms);
      check_rounded_once("norm_forward out", out, outb);
      CHECK(mean == meanb);  // fp32 statistics of the same values
      CHECK(rstd == rstdb);
      Vec dx = dx0, dw = dw0, db = db0;
      B16 dxb = to_bf16(dx0), dwb = to_bf16(dw0), dbb = to_bf16(db0);
      norm_backward_accumulate<float>(dx.data(), dw.data(), rms ? nullptr : db.data(), dout.data(), x.data(),
                                      w.data(), mean.data(), rstd.data(), N, C, rms);
      norm_backward_accumulate<bf16>(dxb.data(), dwb.data(), rms ? nullptr : dbb.data(), doutb.data(), xb.data(),
                                     wb.data(), mean.data(), rstd.data(), N, C, rms);
      check_rounded_once("norm_backward dx", dx, dxb);  // one term per element: round(dx + v)
      check_close("norm_backward dw", dw, dwb);
      if (!rms) check_close("norm_backward dbias", db, dbb);
      if (rms) CHECK(widen(dbb) == db0);  // null dbias: nothing written
    }
  }

  TEST_CASE("bf16 rotary embedding and GQA attention against fp32") {
    const AttentionShape s{2, 7, 4, 2, 8};  // B 2, T 7, 4 query heads on 2 KV heads, head_dim 8
    const int64_t N = s.batch * s.seq;
    const Vec qkv0 = random_bf16(N * s.qkv_width(), 16);
    Vec qkv = qkv0;
    B16 qkvb = to_bf16(qkv0);
    rope_forward(qkv.data(), s);
    rope_forward(qkvb.data(), s);
    check_rounded_once("rope_forward", qkv, qkvb);
    Vec back = widen(qkvb);  // the same (bf16) input on both sides
    B16 backb = qkvb;
    rope_backward(back.data(), s);
    rope_backward(backb.data(), s);
    check_rounded_once("rope_backward", back, backb);

    // Attention on the same (rounded) rotated qkv.
    const Vec q = widen(qkvb);
    Vec out(N * s.q_width()), lse(s.batch * s.heads * s.seq), lseb(lse.size()), work(2 * s.seq * s.seq);
    B16 outb(out.size());
    attention_forward(out.data(), lse.data(), q.data(), work.data(), s);
    attention_forward(outb.data(), lseb.data(), qkvb.data(), work.data(), s);
    check_close("attention_forward out", out, outb);
    kernel_compare::compare("attention_forward lse", lse, lseb, 1e-6, "bf16");  // fp32 statistics, fp32 reordering
    // Backward from the same saved tensors: out rounded to bf16 on both sides, the fp32 lse.
    const Vec dout = random_bf16(out.size(), 17), o = widen(outb);
    const B16 doutb = to_bf16(dout);
    Vec dqkv(q.size());
    B16 dqkvb(q.size());
    attention_backward(dqkv.data(), dout.data(), o.data(), lse.data(), q.data(), work.data(), s);
    attention_backward(dqkvb.data(), doutb.data(), outb.data(), lse.data(), qkvb.data(), work.data(), s);
    check_close("attention_backward dqkv", dqkv, dqkvb);
  }

  TEST_CASE("bf16 GELU and SwiGLU against fp32") {
    const int64_t N = 5, F = 33;
    const Vec x = random_bf16(N * F, 18, 2.0f), fc1 = random_bf16(N * 2 * F, 19, 2.0f), dout = random_bf16(N * F, 20);
    const B16 xb = to_bf16(x), fc1b = to_bf16(fc1), doutb = to_bf16(dout);
    Vec out(N * F), din(N * F), dfc1(N * 2 * F);
    B16 outb(N * F), dinb(N * F), dfc1b(N * 2 * F);
    gelu_forward(out.data(), x.data(), N * F);
    gelu_forward(outb.data(), xb.data(), N * F);
    check_rounded_once("gelu_forward", out, outb);
    gelu_backward(din.data(), x.data(), dout.data(), N * F);
    gelu_backward(dinb.data(), xb.data(), doutb.data(), N * F);
    check_rounded_once("gelu_backward", din, dinb);
    swiglu_forward(out.data(), fc1.data(), N, F);
    swiglu_forward(outb.data(), fc1b.data(), N, F);
    check_rounded_once("swiglu_forward", out, outb);
    swiglu_backward(dfc1.data(), fc1.data(), dout.data(), N, F);
    swiglu_backward(dfc1b.data(), fc1b.data(), doutb.data(), N, F);
    check_rounded_once("swiglu_backward", dfc1, dfc1b);
  }

  TEST_CASE("bf16 embedding and softmax cross-entropy against fp32") {
    const int64_t B = 3, T = 5, C = 16, V = 7;
    const Vec wte = random_bf16(V * C, 21), wpe = random_bf16(T * C, 22);
    const B16 wteb = to_bf16(wte), wpeb = to_bf16(wpe);
    const std::vector<int32_t> tokens = kernel_compare::random_tokens(B * T, V, 23);
    Vec out(B * T * C);
    B16 outb(out.size());
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    embedding_forward(outb.data(), tokens.data(), wteb.data(), wpeb.data(), B, T, C);
    check_rounded_once("embedding_forward", out, outb);
    // Backward onto nonzero gradients; 15 tokens over a vocabulary of 7 repeat.
    const Vec dout = random_bf16(out.size(), 24), dwte0 = random_bf16(V * C, 25), dwpe0 = random_bf16(T * C, 26);
    const B16 doutb = to_bf16(dout);
    Vec dwte = dwte0, dwpe = dwpe0;
    B16 dwteb = to_bf16(dwte0), dwpeb = to_bf16(dwpe0);
    embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    embedding_backward(dwteb.data(), dwpeb.data(), doutb.data(), tokens.data(), B, T, C);
    check_close("embedding_backward dwte", dwte, dwteb);
    check_close("embedding_backward dwpe", dwpe, dwpeb);

    // Cross-entropy over 50 of 56 columns: the loss is computed in fp32/double from the same values (equal); the
    // gradient p − [target], scaled, is rounded once (the −scale of the target is applied before rounding).
    const int64_t N = 6, Vp = 56, Vu = 50;
    const Vec logits = random_bf16(N * Vp, 27, 3.0f);
    const std::vector<int32_t> targets = kernel_compare::random_tokens(N, static_cast<int32_t>(Vu), 28);
    Vec g = logits;
    B16 gb = to_bf16(logits);
    const double loss = softmax_xent_forward_backward(g.data(), targets.data(), N, Vp, Vu, 0.25f);
    const double lossb = softmax_xent_forward_backward(gb.data(), targets.data(), N, Vp, Vu, 0.25f);
    CHECK(lossb == loss);
    check_rounded_once("softmax_xent gradient", g, gb);
    for (int64_t i = 0; i < N; ++i) CHECK(gb[i * Vp + Vp - 1].bits == 0);  // padding column: +0
  }

  TEST_CASE("AdamW: fp32 step by hand, master copy, pure-bf16") {
    // The hand-computed step of test_reference_kernels.cpp ("AdamW: one step by hand"): t = 1, m̂ = g, v̂ = g², so
    // p = 1 − 0.1·(2/2 + 0.1·1) = 0.89, for the float instantiation without and with a master copy.
    const AdamWParams a{0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    const float g = 2.0f;
    float p = 1.0f, m = 0.0f, v = 0.0f;
    adamw_step_shard(&p, nullptr, &g, &m, &v, 1, a);
    CHECK(m == doctest::Approx(0.2f));
    CHECK(v == doctest::Approx(0.2f));
    CHECK(p == doctest::Approx(0.89f));
    float p2 = 1.0f, master = 1.0f, m2 = 0.0f, v2 = 0.0f;
    adamw_step_shard(&p2, &master, &g, &m2, &v2, 1, a);
    CHECK(master == p);  // the same fp32 update, on the master copy
    CHECK(p2 == master);

    // bf16 with lr 1e-3, no weight decay, g = 2 every step: each step moves the weight by lr·m̂/(√v̂ + eps) ≈ 1e-3.
    // The spacing of bf16 below 1 is 2^−8 ≈ 3.9e-3: the midpoint between 1 − 2^−8 = 0.99609375 and 1 is
    // 0.998046875. amp-bf16 (master): master 0.999 after step 1 (p = round = 1.0), 0.997 after step 3
    // (p = 0x3F7F = 0.99609375). pure-bf16 (master null): 1 − 1e-3 rounds back to 1.0 at every step — the update
    // is lost, which is why mixed precision keeps an fp32 master (Micikevicius et al. 2018 §3.1).
    AdamWParams s{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f};
    const bf16 gb = bf16_from_float(g);
    bf16 p_amp = bf16_from_float(1.0f), p_pure = bf16_from_float(1.0f);
    float w = 1.0f, m_amp = 0, v_amp = 0, m_pure = 0, v_pure = 0;
    for (int64_t t = 1; t <= 3; ++t) {
      s.t = t;
      adamw_step_shard(&p_amp, &w, &gb, &m_amp, &v_amp, 1, s);
      adamw_step_shard(&p_pure, nullptr, &gb, &m_pure, &v_pure, 1, s);
      CHECK(p_amp.bits == bf16_bits(w));  // p == round(master) after every step
      CHECK(m_pure == m_amp);             // the moments do not depend on where the weight lives
      CHECK(v_pure == v_amp);
      if (t == 1) CHECK(p_amp.bits == 0x3F80);
    }
    CHECK(w == doctest::Approx(0.997).epsilon(1e-6));
    CHECK(p_amp.bits == 0x3F7F);
    CHECK(p_pure.bits == 0x3F80);

    // Many elements: the bf16 instantiation is the fp32 step on the widened weight, rounded once; the moments are
    // those of the fp32 run.
    const int64_t n = 200;
    const Vec p0 = random_bf16(n, 29), g0 = random_bf16(n, 30);
    AdamWParams r = kernel_compare::adamw_test_params();
    r.t = 3;
    Vec pf = p0, mf(n, 0.01f), vf(n, 0.02f), mb = mf, vb = vf, mm = mf, vm = vf, wm = p0;
    B16 pb = to_bf16(p0), pm = to_bf16(p0);
    const B16 gbv = to_bf16(g0);
    adamw_step_shard(pf.data(), nullptr, g0.data(), mf.data(), vf.data(), n, r);
    adamw_step_shard(pb.data(), nullptr, gbv.data(), mb.data(), vb.data(), n, r);
    adamw_step_shard(pm.data(), wm.data(), gbv.data(), mm.data(), vm.data(), n, r);
    check_rounded_once("adamw pure-bf16 p", pf, pb);
    CHECK(mb == mf);
    CHECK(vb == vf);
    CHECK(wm == pf);  // master starts at the same (bf16-representable) weights: the fp32 step exactly
    check_rounded_once("adamw amp-bf16 p", wm, pm);
  }

  TEST_CASE("cpu backend: dtype, description, fp16 refused, kernels of the backend's dtype") {
    auto f32 = make_cpu_backend();
    CHECK(f32->dtype() == DType::fp32);
    CHECK(f32->description() == "cpu (fp32, Eigen)");
    auto b16 = make_backend("cpu", DType::bf16);
    CHECK(b16->dtype() == DType::bf16);
    CHECK(b16->description() == "cpu (bf16 storage, fp32 compute, Eigen)");
    CHECK_THROWS_AS(make_cpu_backend(DType::fp16), std::runtime_error);
    CHECK_THROWS_AS(make_backend("cpu", DType::fp16), std::runtime_error);
    CHECK_THROWS_AS(make_backend("tpu", DType::bf16), std::runtime_error);

    // CPU backend memory is host memory: the backend on host buffers gives what the kernel of its dtype gives,
    // bit for bit (a bf16 buffer read as fp32 would be garbage, and the reverse would read past the end).
    const int64_t N = 4, I = 12, O = 10;
    const Vec in = random_bf16(N * I, 31), w = random_bf16(O * I, 32, 0.3f), bias = random_bf16(O, 33);
    const B16 inb = to_bf16(in), wb = to_bf16(w), biasb = to_bf16(bias);
    auto X = [](auto& v) { return reinterpret_cast<floatX*>(v.data()); };
    auto CX = [](const auto& v) { return reinterpret_cast<const floatX*>(v.data()); };
    B16 direct(N * O), via(N * O);
    matmul_forward(direct.data(), inb.data(), wb.data(), biasb.data(), N, I, O);
    b16->matmul_forward(X(via), CX(inb), CX(wb), CX(biasb), N, I, O);
    CHECK(widen(via) == widen(direct));
    Vec direct32(N * O), via32(N * O);
    matmul_forward(direct32.data(), in.data(), w.data(), bias.data(), N, I, O);
    f32->matmul_forward(X(via32), CX(in), CX(w), CX(bias), N, I, O);
    CHECK(via32 == direct32);
    CHECK(b16->sum_squares(CX(inb), N * I) == sum_squares(in.data(), N * I));
    // amp-bf16 AdamW through the backend: the float master is passed as is.
    B16 p = inb;
    Vec master = in, m(N * I, 0.0f), v(N * I, 0.0f);
    AdamWParams a = kernel_compare::adamw_test_params();
    a.t = 1;
    b16->adamw_step_shard(X(p), master.data(), CX(inb), m.data(), v.data(), N * I, a);
    CHECK(master != in);
    for (int64_t i = 0; i < N * I; ++i) REQUIRE(p[i].bits == bf16_bits(master[i]));
  }
}
