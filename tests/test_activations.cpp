// Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198), Table 2, exactly.
#include <doctest/doctest.h>

#include "io/preset_store.hpp"
#include "planner/activations.hpp"
#include "planner/framework.hpp"
#include "planner/pipeline_layout.hpp"

using namespace shardplan;

namespace {

// Their setting: GPT (MHA, GELU 4h, LayerNorm, dropout), fp16 activations, no flash attention.
struct Korthikanti {
  ModelSpec m = PresetStore::builtin().model("gpt-22b");
  Strategy s;
  FrameworkTraits fw = framework_traits(Framework::megatron);
  double sbh, as_over_h;
  Korthikanti(int64_t t, bool sp, Recompute r) {
    fw.norm_impl = NormImpl::legacy;  // their count: a LayerNorm keeps its input, not its fp32 mean and rstd too
    s.precision = Precision::megatron_fp16;
    s.flash_attn = false;
    s.seq = 2048;
    s.micro_batch = 4;
    s.tp = t;
    s.sp = sp;
    s.recompute = r;
    sbh = static_cast<double>(s.seq * s.micro_batch * m.hidden);
    as_over_h = static_cast<double>(m.heads * s.seq) / static_cast<double>(m.hidden);
  }
  double bytes() const { return block_activation_bytes(m, s, fw); }
};

// The tiny preset with 11 blocks, on pp 2 × vpp 2 with 4 micro-batches under the interleaved schedule, the
// embedding and the loss each counted as that many layers.
ModelSpec eleven_blocks() {
  ModelSpec m = PresetStore::builtin().model("tiny");
  m.layers = 11;
  return m;
}

Strategy interleaved_pp2_vpp2(int64_t embedding_layers, int64_t loss_layers) {
  Strategy s;
  s.pp = 2, s.vpp = 2, s.dp = 1, s.micro_batch = 1, s.global_batch = 4;  // m = 4 micro-batches
  s.schedule = Schedule::interleaved;
  s.split.embedding_layers = embedding_layers, s.split.loss_layers = loss_layers;
  return s;
}

}  // namespace

TEST_SUITE("activations") {
  TEST_CASE("no parallelism: sbh(34 + 5as/h)") {
    Korthikanti k(1, false, Recompute::none);
    CHECK(k.bytes() == doctest::Approx(k.sbh * (34 + 5 * k.as_over_h)).epsilon(1e-12));
  }
  TEST_CASE("tensor parallel: sbh(10 + 24/t + 5as/(ht))") {
    for (int64_t t : {2, 4, 8}) {
      Korthikanti k(t, false, Recompute::none);
      CHECK(k.bytes() == doctest::Approx(k.sbh * (10 + 24.0 / t + 5 * k.as_over_h / t)).epsilon(1e-12));
    }
  }
  TEST_CASE("tensor + sequence parallel: sbh/t (34 + 5as/h)") {
    Korthikanti k(8, true, Recompute::none);
    CHECK(k.bytes() == doctest::Approx(k.sbh / 8 * (34 + 5 * k.as_over_h)).epsilon(1e-12));
  }
  TEST_CASE("tensor parallel + selective recomputation: sbh(10 + 24/t)") {
    Korthikanti k(8, false, Recompute::selective);
    CHECK(k.bytes() == doctest::Approx(k.sbh * (10 + 24.0 / 8)).epsilon(1e-12));
  }
  TEST_CASE("tensor + sequence parallel + selective: 34 sbh/t") {
    Korthikanti k(8, true, Recompute::selective);
    CHECK(k.bytes() == doctest::Approx(34 * k.sbh / 8).epsilon(1e-12));
  }
  TEST_CASE("full recomputation: 2sbh, divided by t under sequence parallelism") {
    Korthikanti k(8, false, Recompute::full);
    CHECK(k.bytes() == doctest::Approx(2 * k.sbh).epsilon(1e-12));
    Korthikanti ksp(8, true, Recompute::full);
    CHECK(ksp.bytes() == doctest::Approx(2 * ksp.sbh / 8).epsilon(1e-12));
  }
  TEST_CASE("flash attention removes the 5as/h term and adds only its fp32 log-sum-exp") {
    Korthikanti k(1, false, Recompute::none);
    k.s.flash_attn = true;
    const double lse = 4.0 * static_cast<double>(k.m.heads * k.s.seq * k.s.micro_batch);
    CHECK(k.bytes() == doctest::Approx(34 * k.sbh + lse).epsilon(1e-12));
  }
  TEST_CASE("without dropout the masks go: 34 → 32 sbh and 5as/h → 2as/h") {
    Korthikanti k(1, false, Recompute::none);
    k.m.dropout = false;
    // Masks: 2 × 1 byte/h on the residual paths; scores: the dropout mask and output (as² terms, 3 of 5) go.
    CHECK(k.bytes() == doctest::Approx(k.sbh * (32 + 2 * k.as_over_h)).epsilon(1e-12));
  }
  TEST_CASE("squared ReLU keeps what GELU keeps: one ffn-wide tensor and the down projection's input") {
    // relu(x)² saves relu's output once (relu and pow share it), GELU its input: both 2·4h bytes per token in fp16.
    Korthikanti gelu(1, false, Recompute::none), relu2(1, false, Recompute::none);
    relu2.m.mlp = MlpKind::squared_relu;
    CHECK(relu2.bytes() == doctest::Approx(gelu.bytes()).epsilon(1e-12));
    CHECK(count_params(relu2.m).total == count_params(gelu.m).total);
  }
  TEST_CASE("SwiGLU keeps the framework's number of intermediates; GQA shrinks K and V") {
    ModelSpec m = PresetStore::builtin().model("llama3-8b");
    Strategy s;
    s.seq = 8192;
    s.micro_batch = 1;
    s.precision = Precision::amp_bf16;
    const FrameworkTraits fsdp = framework_traits(Framework::fsdp);
    const double tokens = 8192.0, h = 4096, f = 14336, kv = 1024;
    // fsdp runs transformers' LlamaRMSNorm, which keeps its fp32 upcast (4h), the normalised bf16 tensor (2h) and
    // the fp32 rsqrt (4) per norm: 2·(6h + 4); qkv and mlp inputs 2·2h, q and k 2(h + kv), v 2kv, lse 4·heads,
    // attention output 2h, SwiGLU 4·2f: 16h + 4q + 4kv + 8f + 4·heads + 8 = 200,840 B/token, as PyTorch allocates
    // it (reports/fsdp2-memory.md).
    const double expected = tokens * (2 * (6 * h + 4) + 4 * h + 2 * (h + kv) + 2 * kv + 4 * 32 + 2 * h + 4 * 2 * f);
    CHECK(expected / tokens == 200840);
    CHECK(block_activation_bytes(m, s, fsdp) == doctest::Approx(expected).epsilon(1e-12));
    // torchtitan's fused RMSNorm keeps its bf16 input and the fp32 rstd: 2·(2h + 4), 8h less: 168,072 B/token.
    const FrameworkTraits titan = framework_traits(Framework::torchtitan);
    CHECK(block_activation_bytes(m, s, titan) == doctest::Approx(tokens * 168072).epsilon(1e-12));
    // Megatron: Transformer Engine's norms keep their bf16 input and the fp32 rsigma, 2·(2h + 4), and its fused
    // bias-SwiGLU 3 tensors of width f.
    const FrameworkTraits megatron = framework_traits(Framework::megatron);
    CHECK(block_activation_bytes(m, s, megatron) ==
          doctest::Approx(tokens * (2 * (2 * h + 4) + 4 * h + 2 * (h + kv) + 2 * kv + 4 * 32 + 2 * h + 3 * 2 * f))
              .epsilon(1e-12));
    // Under FP8 its linears keep FP8 casts of their inputs (1 B), and the attention kernel still keeps its bf16
    // output beside the out-projection's FP8 cast: norms 2·(2h + 4), qkv and fc1 inputs h each, q k v as before,
    // attention output 2h + h, fc1 output 2·2f and fc2 input f.
    s.fp8 = Fp8Recipe::tensorwise;
    CHECK(block_activation_bytes(m, s, megatron) ==
          doctest::Approx(tokens * (2 * (2 * h + 4) + 2 * h + 2 * (h + kv) + 2 * kv + 4 * 32 + 3 * h + 5 * f))
              .epsilon(1e-12));
  }
  TEST_CASE("op-level selective checkpointing saves the 1st, 3rd, ... matmul of each block") {
    ModelSpec m = PresetStore::builtin().model("llama3-8b");
    Strategy s;
    s.seq = 8192;
    s.micro_batch = 1;
    s.precision = Precision::amp_bf16;
    s.recompute = Recompute::selective;
    const double h = 4096, kv = 1024, f = 14336, tokens = 8192;
    // Block input 2h, SDPA output 2h and lse 4·32; transformers' matmuls q, k, v, o, gate, up, down: q, v, gate,
    // down saved: 2(h + kv + f + h) = 63,616 B/token with the rest (measured: 63,616).
    const double hf = 2 * h + 2 * h + 128 + 2 * (h + kv + f + h);
    CHECK(hf == 63616);
    CHECK(block_activation_bytes(m, s, framework_traits(Framework::fsdp)) == doctest::Approx(tokens * hf).epsilon(1e-12));
    // torchtitan's fused qkv, wo, w1, w3, w2: qkv, w1, w2 saved: 2(h + 2kv + f + h) → 65,664 (measured: 65,664).
    const double titan = 2 * h + 2 * h + 128 + 2 * (h + 2 * kv + f + h);
    CHECK(titan == 65664);
    CHECK(block_activation_bytes(m, s, framework_traits(Framework::torchtitan)) ==
          doctest::Approx(tokens * titan).epsilon(1e-12));
  }
  TEST_CASE("pipeline in-flight micro-batches") {
    Strategy s;
    s.pp = 4;
    s.dp = 1;
    s.micro_batch = 1;
    s.global_batch = 8;  // m = 8
    CHECK(in_flight_microbatches(s, 0) == 4);
    CHECK(in_flight_microbatches(s, 3) == 1);
    s.global_batch = 2;  // m < p: only m exist
    CHECK(in_flight_microbatches(s, 0) == 2);
    s.global_batch = 8;
    s.schedule = Schedule::gpipe;
    CHECK(in_flight_microbatches(s, 2) == 8);
    // Interleaved: p(1 + (p − 1)/(p·v)) on the first stage (Korthikanti §4.2.3).
    s.schedule = Schedule::interleaved;
    s.vpp = 2;
    CHECK(in_flight_microbatches(s, 0) == doctest::Approx(4 * (1 + 3.0 / 8)));
    s.pp = 1;
    CHECK(in_flight_microbatches(s, 0) == 1);
  }
  TEST_CASE("interleaved in-flight blocks follow the schedule with each chunk's own size") {
    // 11 blocks and the embedding counted as one on pp 2 × vpp 2: virtual stages of 2 (+ the embedding), 3, 3, 3
    // blocks, so rank 0 runs a chunk of 2 blocks (virtual stage 0) and one of 3 (virtual stage 2).
    const ModelSpec m = eleven_blocks();
    Strategy s = interleaved_pp2_vpp2(1, 0);
    REQUIRE(chunk_layers(m, s, 0, 0) == 2);
    REQUIRE(chunk_layers(m, s, 0, 1) == 3);
    // Warm-up (p − 1)·2 + (v − 1)·p = 4 forwards, then the fifth: chunks 0, 0, 1, 1, 0 → 2 + 2 + 3 + 3 + 2 = 12
    // blocks. Steady state, forward k then backward j (forward chunk (k mod 4)/2, backward chunk 1 − (j mod 4)/2):
    // +F5 (chunk 0: 2) −B0 (chunk 1: 3) = 11; +F6 (1: 3) −B1 (1: 3) = 11; +F7 (1: 3) −B2 (0: 2) = 12. At most 12 of
    // the rank's 5 blocks: 2.4 micro-batches, where the even-chunk formula gives 5 chunks / 2 = 2.5.
    CHECK(in_flight_microbatches(s, 0) == doctest::Approx(2.5));
    CHECK(in_flight_stage_microbatches(m, s, 0) == doctest::Approx(12.0 / 5.0));
    // 1F1B: the plain count.
    s.schedule = Schedule::one_f_one_b, s.vpp = 1;
    CHECK(in_flight_stage_microbatches(m, s, 0) == in_flight_microbatches(s, 0));
  }
  TEST_CASE("the last stage's loss starts a last-chunk backward: interleaved, it holds fewer than the stage's worst") {
    // 11 blocks and the loss counted as one on pp 2 × vpp 2: virtual stages of 3, 3, 3, 2 (+ the loss) blocks, so
    // the last rank runs a chunk of 3 (virtual stage 1) and one of 2 (virtual stage 3).
    const ModelSpec m = eleven_blocks();
    Strategy s = interleaved_pp2_vpp2(0, 1);
    s.seq = 256, s.precision = Precision::amp_bf16;
    REQUIRE(chunk_layers(m, s, 1, 0) == 3);
    REQUIRE(chunk_layers(m, s, 1, 1) == 2);
    const FrameworkTraits fw = framework_traits(Framework::megatron);
    const double per_block = block_activation_bytes(m, s, fw);
    REQUIRE(per_block > 0);
    // Warm-up (p − 2)·2 + (v − 1)·p = 2, so backward j starts with forwards 0..2 + j less backwards 0..j − 1 held
    // (forward chunk (k mod 4)/2, backward chunk 1 − (j mod 4)/2): B0 (chunk 1) 3 + 3 + 2 = 8 blocks, B1 (1) 8,
    // B2 (0) 9, B3 (0) 9, B4 (1) 8. The worst is B2, chunk 0's pass from its last block (the stage's block 2); the
    // loss starts B0, B1 or B4: 8.
    const StageActivationHold worst = stage_activation_hold(m, s, fw, 1, false);
    CHECK(worst.in_flight == doctest::Approx(9.0 / 5.0));
    CHECK(worst.bytes == doctest::Approx(9 * per_block));
    CHECK(worst.block == 2);
    CHECK(in_flight_stage_microbatches(m, s, 1) == doctest::Approx(9.0 / 5.0));
    const StageActivationHold loss = stage_activation_hold(m, s, fw, 1, true);
    CHECK(loss.in_flight == doctest::Approx(8.0 / 5.0));
    CHECK(loss.block == 4);
    // 1F1B: one moment, the stage's last block.
    s.schedule = Schedule::one_f_one_b, s.vpp = 1;
    const StageActivationHold plain = stage_activation_hold(m, s, fw, 1, true);
    CHECK(plain.in_flight == in_flight_microbatches(s, 1));
    CHECK(plain.block == rank_layers(m, s, 1) - 1);
  }
  TEST_CASE("pipeline buffers: torch.distributed.pipelining keeps one per micro-batch, Megatron two boundary tensors") {
    const ModelSpec m = PresetStore::builtin().model("llama3-8b");
    Strategy s;
    s.precision = Precision::amp_bf16;
    s.pp = 4;
    s.dp = 1;
    s.micro_batch = 1;
    s.seq = 4096;
    s.global_batch = 8;  // 8 micro-batches; 1F1B holds 4 − i of them on stage i
    const double boundary = 2.0 * 4096 * 4096;  // [1, 4096, 4096] bf16
    const FrameworkTraits titan = framework_traits(Framework::torchtitan);
    // Stage 1: 8 input buffers of which the 3 in flight are the first block's saved input, 8 output-gradient buffers,
    // 3 in-flight outputs in fwd_cache.
    CHECK(pipeline_buffer_bytes(m, s, titan, 1, false, false) == doctest::Approx((5 + 8 + 3) * boundary));
    // The first stage receives no input; the last no output gradient, and its output is the logits.
    CHECK(pipeline_buffer_bytes(m, s, titan, 0, true, false) == doctest::Approx((0 + 8 + 4) * boundary));
    CHECK(pipeline_buffer_bytes(m, s, titan, 3, false, true) == doctest::Approx((7 + 0 + 0) * boundary));
    // Megatron's p2p_communication allocates a receive tensor per transfer: one in, one out.
    CHECK(pipeline_buffer_bytes(m, s, framework_traits(Framework::megatron), 1, false, false) ==
          doctest::Approx(2 * boundary));
    // Under SP the boundary is the sequence-scattered activation.
    s.tp = 2;
    s.sp = true;
    CHECK(pipeline_buffer_bytes(m, s, titan, 1, false, false) == doctest::Approx((5 + 8 + 3) * boundary / 2));
    s.pp = 1;
    CHECK(pipeline_buffer_bytes(m, s, titan, 0, true, true) == 0);
  }
}
