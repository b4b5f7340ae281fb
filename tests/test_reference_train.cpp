// reference/ training loop on one rank: parameter count equals the planner's, check_config names what it
// rejects, the data source reshuffles per epoch, the loss falls on the shipped corpus, and the persistent bytes
// are the hand-computed ones. (Multi-rank equivalence runs under mpirun: tests/mpi/reference_equivalence.sh.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "comm/comm.hpp"
#include "io/preset_store.hpp"
#include "reference/data.hpp"
#include "reference/layout.hpp"
#include "reference/backend.hpp"
#include "reference/reference.hpp"

using namespace shardplan;
using namespace shardplan::reference;

// LeakSanitizer's interface, weak: present in the sanitized CI pass (scripts/test.sh), null in other builds.
extern "C" void __lsan_disable() __attribute__((weak));
extern "C" void __lsan_enable() __attribute__((weak));

namespace {

// MPI as a singleton (no mpirun): a real 1-rank communicator, initialised once for the test binary.
comm::Communicator& world_single() {
  // What OpenMPI allocates while it starts is its own: LeakSanitizer ignores allocations made while it is
  // disabled. MPI is never finalised here: MPI_Finalize unloads OpenMPI's plugins, and what they allocated since
  // would then be reported as unreachable; the process exit ends the singleton.
  if (__lsan_disable) __lsan_disable();
  static comm::MpiSession* session = new comm::MpiSession(nullptr, nullptr);
  (void)session;
  static std::unique_ptr<comm::Communicator> world = comm::make_world("mpi");
  if (__lsan_enable) __lsan_enable();
  return *world;
}

const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

}  // namespace

TEST_SUITE("reference loop") {
  TEST_CASE("the loop's parameters are exactly the planner's count, for every shipped model") {
    // Layouts only (no allocation): every preset, padded to 8 ranks, unpadded total = count_params.
    for (const char* name : {"tiny", "llama3-8b", "llama2-70b", "gpt-1.7b", "gpt3-175b", "mpt-7b", "gpt2-1.2b", "2b"}) {
      CAPTURE(name);
      const ModelSpec m = presets().model(name);
      const auto units = layout_make(dims_make(m, 1, m.seq), m.layers, 8);
      CHECK(layout_params(units) == count_params(m).total);
      CHECK(static_cast<int64_t>(units.size()) == m.layers + 2);
      for (const auto& u : units) CHECK(u.padded % 8 == 0);
    }
    // tiny.yaml: 4·184,576 (blocks) + 32,768 (embedding) + 128 (final norm) + 32,768 (LM head) = 803,968.
    CHECK(count_params(presets().model("tiny")).total == 803'968);
  }

  TEST_CASE("check_config rejects what the loop cannot run, naming it") {
    RunConfig c;
    c.model = presets().model("tiny");
    CHECK(check_config(c, 1).empty());
    RunConfig bad = c;
    bad.precision = Precision::megatron_bf16;
    CHECK(check_config(bad, 2).find("--precision") != std::string::npos);
    bad = c, bad.zero = 4;
    CHECK(check_config(bad, 2).find("--zero") != std::string::npos);
    bad = c, bad.recompute = Recompute::selective;
    CHECK(check_config(bad, 2).find("selective") != std::string::npos);
    bad = c, bad.seq = 4096;
    CHECK(check_config(bad, 2).find("--seq") != std::string::npos);
    bad = c, bad.model.position = PositionKind::alibi;
    CHECK(check_config(bad, 2).find("alibi") != std::string::npos);
    bad = c, bad.backend = "gloo";
    CHECK(check_config(bad, 2).find("--backend") != std::string::npos);
    bad = c, bad.backend = "cuda";  // refused only where the build has no CUDA backend
    CHECK(check_config(bad, 2).empty() == cuda_backend_built());
    bad = c, bad.model.vocab = 100;
    CHECK(check_config(bad, 2).find("vocab") != std::string::npos);
    bad = c, bad.model.kv_heads = 3;  // does not divide heads
    CHECK_FALSE(check_config(bad, 2).empty());
    CHECK_THROWS_AS(run_training(bad, world_single()), std::invalid_argument);
  }

  TEST_CASE("corpus windows: every epoch visits each window once, in a new order") {
    TokenSource s("corpus", "", 64, 256, 7);  // "": the shipped corpus
    const int64_t n = s.windows();
    CHECK(n > 1000);  // ≈ 300 KB / 64
    std::vector<int32_t> tok(64), tgt(64);
    std::vector<int32_t> first0, first1;
    std::set<std::vector<int32_t>> seen;
    for (int64_t g = 0; g < n; ++g) {
      s.sequence_read(g, tok.data(), tgt.data());
      CHECK(std::equal(tok.begin() + 1, tok.end(), tgt.begin()));  // targets are the next bytes
      seen.insert(tok);
      if (g < 8) first0.insert(first0.end(), tok.begin(), tok.end());
    }
    CHECK(static_cast<int64_t>(seen.size()) >= n - 2);  // windows are distinct text (repeats are rare)
    for (int64_t g = n; g < n + 8; ++g) {
      s.sequence_read(g, tok.data(), tgt.data());
      first1.insert(first1.end(), tok.begin(), tok.end());
    }
    CHECK(first0 != first1);  // epoch 1 is reshuffled
    // Deterministic: a second reader (another rank) sees the same sequence for the same index.
    TokenSource again("corpus", "", 64, 256, 7);
    std::vector<int32_t> tok2(64), tgt2(64);
    again.sequence_read(n + 3, tok2.data(), tgt2.data());
    s.sequence_read(n + 3, tok.data(), tgt.data());
    CHECK(tok == tok2);
  }

  TEST_CASE("the loss falls on the shipped corpus; states and records are measured") {
    RunConfig c;
    c.model = presets().model("tiny");
    c.model.layers = 2;  // keeps the test under a few seconds on one core
    c.seq = 64;
    c.micro_batch = 4;
    c.zero = 3;
    c.steps = 40;
    c.warmup_steps = 1;
    c.lr = 3e-3;
    std::vector<StepRecord> seen;
    const RunResult r = run_training(c, world_single(), [&](const StepRecord& s) { seen.push_back(s); });
    REQUIRE(r.steps.size() == 41);
    CHECK(seen.size() == 41);
    CHECK(r.steps[0].warmup);
    CHECK_FALSE(r.steps[1].warmup);
    // Byte-level text starts at ln 256 = 5.55 nats per byte; 40 steps of AdamW must get below the corpus's
    // unigram entropy, 2.99 nats per byte (byte frequencies alone), so it has learned more than frequencies.
    const double first = r.steps.front().loss, last = r.steps.back().loss;
    MESSAGE("loss " << first << " -> " << last << ", median step " << r.median_step_s << " s, peak " << r.peak_bytes
            << " = params " << r.at_peak.params << " grads " << r.at_peak.grads << " optimizer " << r.at_peak.optimizer
            << " activations " << r.at_peak.activations << " logits " << r.at_peak.logits << " buffers " << r.at_peak.buffers);
    CHECK(first == doctest::Approx(std::log(256.0)).epsilon(0.05));
    CHECK(last < 2.98);
    CHECK(r.steps.back().grad_norm > 0);
    CHECK(r.median_step_s > 0);
    CHECK(r.steps.back().compute_s <= r.steps.back().step_s);
    // 1 rank: nothing is padded beyond the unit sizes; P = 2·184,576 + 32,768 + 128 + 32,768 = 434,816.
    const int64_t P = 434'816;
    CHECK(r.params_total == P);
    CHECK(r.params_per_rank == P);
    CHECK(r.between_steps.params == 4 * P);
    CHECK(r.between_steps.grads == 4 * P);
    CHECK(r.between_steps.optimizer == 8 * P);
    CHECK(r.between_steps.activations == 0);
    // The peak is the states plus at least the logits of the micro-batch: 4·64 tokens × 256 × 4 B = 262,144 B.
    CHECK(r.peak_bytes >= 16 * P + 262'144);
    CHECK(r.at_peak.total() == r.peak_bytes);
    CHECK(r.steps.back().rss_bytes > r.peak_bytes);
    // The loop's own up-front estimate bounds what it then allocated, without being far above it.
    CHECK(bytes_needed(c, 1) >= r.peak_bytes);
    CHECK(bytes_needed(c, 1) < 2 * r.peak_bytes);
  }

  TEST_CASE("the communicator names its library (calibrate's meta.versions)") {
    const std::string v = world_single().library_version();
    CHECK(v.find("MPI") != std::string::npos);  // "Open MPI v4.1.4" on Debian 12
    CHECK(v.find(',') == std::string::npos);    // the first line's head only
    CHECK(v == comm::mpi_library_version());
  }

  TEST_CASE("a loss that stops being finite ends the run, naming the step") {
    RunConfig c;
    c.model = presets().model("tiny");
    c.model.layers = 1;
    c.seq = 16;
    c.micro_batch = 1;
    c.steps = 6;
    c.warmup_steps = 0;
    c.lr = 1e36;  // the first AdamW step moves every weight by ~1e36: the next forward overflows fp32
    c.clip_norm = 0;
    std::string what;
    try {
      run_training(c, world_single());
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    MESSAGE(what);
    CHECK(what.find("the loss became") != std::string::npos);
    CHECK(what.find("at step 1") != std::string::npos);  // step 0 trains on the initial weights
  }

  TEST_CASE("full recompute and gradient accumulation change memory, not the result") {
    RunConfig c;
    c.model = presets().model("tiny");
    c.model.layers = 2;
    c.seq = 32;
    c.micro_batch = 2;
    c.steps = 2;
    c.warmup_steps = 0;
    c.data = "synthetic";
    c.keep_params = true;
    const RunResult base = run_training(c, world_single());
    RunConfig rc = c;
    rc.recompute = Recompute::full;
    const RunResult recomputed = run_training(rc, world_single());
    // The recomputed forward is the same arithmetic: bit-identical parameters, fewer saved activations.
    CHECK(recomputed.final_params == base.final_params);
    CHECK(recomputed.at_peak.activations < base.at_peak.activations);
    // Two micro-batches of 1 sum the same gradients in another order: equal to fp32 rounding.
    RunConfig ac = c;
    ac.micro_batch = 1;
    ac.grad_accum = 2;
    const RunResult accumulated = run_training(ac, world_single());
    double num = 0, den = 0;
    REQUIRE(accumulated.final_params.size() == base.final_params.size());
    for (std::size_t i = 0; i < base.final_params.size(); ++i) {
      const double e = accumulated.final_params[i] - base.final_params[i];
      num += e * e;
      den += static_cast<double>(base.final_params[i]) * base.final_params[i];
    }
    CHECK(std::sqrt(num / den) < 1e-5);
    CHECK(accumulated.steps[1].loss == doctest::Approx(base.steps[1].loss).epsilon(1e-5));
    // Synthetic tokens follow x' = 5x + 3 + noise (mod 256): the loss starts near ln 256.
    CHECK(base.steps[0].loss == doctest::Approx(std::log(256.0)).epsilon(0.05));
  }

  TEST_CASE("mixed precision: bf16 training follows fp32, with the states of its policy") {
    RunConfig c;
    c.model = presets().model("tiny");
    c.model.layers = 2;
    c.seq = 64;
    c.micro_batch = 4;
    c.zero = 0;
    c.steps = 20;
    c.warmup_steps = 0;
    const RunResult fp32 = run_training(c, world_single());
    // 1 rank: P = 434,816 parameters (the fp32 test above).
    const int64_t P = 434'816;
    for (const Precision p : {Precision::pure_bf16, Precision::amp_bf16}) {
      const std::string name = to_string(p);
      CAPTURE(name);
      RunConfig b = c;
      b.precision = p;
      const RunResult r = run_training(b, world_single());
      // CONTRACT.md precision policies, per parameter: pure-bf16 2 + 2 + 8 = 12 B; amp-bf16 adds the 4 B fp32 master.
      CHECK(r.between_steps.params == 2 * P);
      CHECK(r.between_steps.grads == 2 * P);
      CHECK(r.between_steps.optimizer == 8 * P);
      CHECK(r.between_steps.master == (p == Precision::amp_bf16 ? 4 * P : 0));
      // Activations and logits are bf16: half of fp32's at the peak (the same tensors, 2 B instead of 4), except
      // the per-row statistics (norm rstd, attention log-sum-exp), which stay fp32: a little over half.
      CHECK(2 * r.at_peak.logits == fp32.at_peak.logits);
      CHECK(2 * r.at_peak.activations > fp32.at_peak.activations);
      CHECK(2 * r.at_peak.activations < 1.01 * static_cast<double>(fp32.at_peak.activations));
      CHECK(bytes_needed(b, 1) >= r.peak_bytes);
      CHECK(bytes_needed(b, 1) < 2 * r.peak_bytes);
      // The loss follows fp32's: bf16 keeps 8 significant bits, so per-step losses agree to about 1 % over 20 steps
      // of training from the same initial values (rounded to bf16), while both fall by more than 1.5 nats.
      double worst = 0;
      for (std::size_t s = 0; s < r.steps.size(); ++s)
        worst = std::max(worst, std::fabs(r.steps[s].loss - fp32.steps[s].loss) / fp32.steps[s].loss);
      MESSAGE(name << ": loss " << r.steps.front().loss << " -> " << r.steps.back().loss << " (fp32 "
              << fp32.steps.back().loss << "), worst per-step difference " << worst);
      CHECK(worst < 0.02);
      CHECK(r.steps.back().loss < r.steps.front().loss - 1.5);
    }
  }

  TEST_CASE("a model that cannot fit stops with an error before allocating") {
    RunConfig c;
    c.model = presets().model("llama3-70b");  // 70.6e9 parameters × 16 B of fp32 states ≈ 1.1 TB on one rank
    c.zero = 0;
    c.data = "synthetic";
    c.seq = 128;
    CHECK(bytes_needed(c, 1) > 16 * count_params(c.model).total);
    try {
      run_training(c, world_single());
      FAIL("run_training did not refuse a 1.1 TB run");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find("GiB per rank") != std::string::npos);
    }
  }
}
