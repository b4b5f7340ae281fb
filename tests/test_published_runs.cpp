// The public validation set: accuracy the model holds today, pinned so that a regression is caught
// (reports/accuracy.md has the full table).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/published_runs.hpp"
#include "planner/error.hpp"
#include "planner/moe.hpp"

using namespace shardplan;
using namespace shardplan::validation;

namespace {

struct Scored {
  const PublishedRun* run;
  double error;  // (predicted − measured) / measured
};

std::vector<Scored> score(const PublishedRuns& runs) {
  std::vector<Scored> out;
  for (const PublishedRun& r : runs.runs) {
    const Prediction p = predict(r.model, r.strategy, r.cluster);
    out.push_back({&r, (predicted_metric(r, p) - r.measured) / r.measured});
  }
  return out;
}

bool megatron_row(const PublishedRun& r) { return r.strategy.framework == Framework::megatron; }

}  // namespace

TEST_SUITE("published runs") {
  TEST_CASE("predictions of the published runs stay within the accuracy reports/accuracy.md states") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) {
      MESSAGE("validation set not found at " << csv << "; skipped");
      return;
    }
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    REQUIRE(runs.runs.size() >= 40);
    const std::vector<Scored> scored = score(runs);
    double megatron_sum = 0;
    int megatron_rows = 0;
    for (const Scored& s : scored) {
      CAPTURE(s.run->source);
      CAPTURE(s.run->label);
      CAPTURE(s.error);
      if (megatron_row(*s.run)) {
        // Megatron (N21, K22, MLM20): every row within 16 % (the worst: K22's MT-NLG 530B interleaved, full
        // recomputation, +14.5 %; N21's 18.4B on 256 GPUs, −15.5 % at micro-batch 1, is −1.5 % at the 8 its launch
        // script sets).
        CHECK(std::fabs(s.error) <= 0.16);
        megatron_sum += std::fabs(s.error);
        ++megatron_rows;
      } else if (s.run->strategy.framework == Framework::torchtitan || s.run->strategy.framework == Framework::fsdp1) {
        // PyTorch FSDP (torchtitan, MosaicML's FSDP1): within ±10 % (−7.1 … +8.3 %).
        CHECK(std::fabs(s.error) <= 0.10);
      }
    }
    REQUIRE(megatron_rows >= 25);
    CHECK(megatron_sum / megatron_rows <= 0.06);
  }

  TEST_CASE("a row gets the preset with its architecture and, among those, its vocabulary") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) return;
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    // torchtitan's Llama 3 70B and Llama 2 70B rows share every block dimension; the CSV's vocab column (128256
    // against 32000) tells them apart. GPT-3's 51200 (padded) matches no preset exactly: its architecture does.
    int llama70 = 0, gpt3 = 0;
    for (const PublishedRun& r : runs.runs) {
      CAPTURE(r.label);
      if (r.source == "TTA" && r.model.layers == 80) {
        ++llama70;
        CHECK(r.model.name == (r.label == "Llama3 70B" ? "llama3-70b" : "llama2-70b"));
        CHECK(r.model.vocab == (r.label == "Llama3 70B" ? 128256 : 32000));
      }
      if (r.label == "GPT-3") {
        ++gpt3;
        CHECK(r.model.name == "gpt3-175b");
      }
    }
    CHECK(llama70 == 2);
    CHECK(gpt3 >= 5);
  }

  TEST_CASE("K22's full-recomputation iterations within 16 % (+8.1, +10.5, +14.5, +11.8 %)") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) return;
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    int checked = 0;
    for (const Scored& s : score(runs))
      if (s.run->source == "K22-Tab5" && s.run->strategy.recompute == Recompute::full) {
        CAPTURE(s.run->label);
        CHECK(std::fabs(s.error) <= 0.16);
        ++checked;
      }
    CHECK(checked == 4);
  }

  TEST_CASE("the historical DeepSpeed-2021 ZeRO-3 rows, and only they, are flagged") {
    const std::string csv = default_csv_path();
    if (!std::filesystem::exists(csv)) return;
    const PublishedRuns runs = load_published_runs(csv, PresetStore::builtin());
    // N21 Table 2 has five ZeRO-3 rows without model parallelism (GPT-3 on 384/768/1536, 530B on 640/2240 GPUs);
    // its four model-parallel rows and every other source are in the headline.
    int historical = 0;
    for (const PublishedRun& r : runs.runs) {
      CAPTURE(r.source);
      CAPTURE(r.strategy.gpus);
      const bool n21_zero3 = r.source == "N21-Tab2" && r.strategy.zero == 3 && r.strategy.framework == Framework::deepspeed;
      CHECK(r.historical == n21_zero3);
      historical += r.historical;
    }
    CHECK(historical == 5);
    const PublishedRuns modern = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    for (const PublishedRun& r : modern.runs) CHECK_FALSE(r.historical);
  }

  TEST_CASE("published peaks: mean within 10 %; the runs that happened fit their GPU") {
    // torchtitan's tables print torch.cuda.max_memory_reserved: 82.4 / 77.0 / 76.8 GiB (Table 1: eager, compiled,
    // compiled + Float8; 8 GPUs), 67.0 / 62.0 / 61.8 GiB (Table 3, 128 GPUs), 83.9 / 84.2 / 84.0 / 84.5 (Table 2, seq
    // 32768, then CP 2/4/8 at 64/128/256 K: predicted flat too, +2.5 … +3.1 %), 71.9 / 67.6 (Table 4, 70B TP 8, without / with async TP), 82.5 / 72.7
    // (Table 5, 405B PP 8, 1F1B / interleaved: the interleaved run reduces and reshards each chunk after its own last
    // backward, so its two chunks' gradients never coexist with 8 micro-batches on 8 stages; both were ~16 GB low until
    // the first stage's full-vocabulary fp32 embedding gradient under DTensor TP and no_sync, measured on PyTorch's
    // own pipelining by bench/torch/pp_mem.py: −13.9 / −12.6 %), 75.3 / 75.9 / 77.1 / 84.9 (Table 6, CP 1/2/4/8:
    // −5.6 … −14.7 %), 47.96 / 46.97 (Trainy's H200 runs of June 2025, selective op AC from the toml they ran, the
    // loss compiled with the model: framework.cpp compile_compiles_loss); compared without the CUDA/NCCL runtime, and
    // only where the source gives the recomputation; the gradient shards FSDP allocates on its reduce-scatter stream
    // are reserved beside the compute stream's high-water mark (framework.hpp sharded_grads_on_reduce_stream). Every row
    // within 15 %; the H200 rows, 20 GiB below Table 3's at the same micro-batch, within 5 % (with the eager loss's fp32
    // logits: +41 %).
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    int with_peak = 0;
    double sum = 0;
    for (const PublishedRun& r : runs.runs) {
      CAPTURE(r.source);
      CAPTURE(r.label);
      CAPTURE(r.strategy.gpus);
      Prediction p;
      try {
        p = predict(r.model, r.strategy, r.cluster);
      } catch (const InputError&) {
        continue;  // a layout shardplan's runtimes refuse (Megatron-FSDP): skipped by the bench, with its reason
      }
      // Every torchtitan and llm-foundry row ran, so its peak must be within the GPU's memory (llm-foundry's fused
      // loss, torchtitan's sequence-parallel TP: the rows that were predicted beyond it before those traits).
      if (r.family != "megatron") CHECK(p.fits());
      // So does every Megatron-Bridge and Megatron-LM MoE row (Megatron-Core 0.14 on): five of them were predicted
      // beyond memory while the combine was priced as saving the k expert outputs, which these releases no longer
      // do (FrameworkTraits::moe_probs).
      if (model_is_moe(r.model) && (r.source.rfind("MB-", 0) == 0 || r.source.rfind("MLM-MOE", 0) == 0))
        CHECK(p.fits());
      if (r.measured_peak_bytes > 0 && recompute_published(r)) {
        ++with_peak;
        const double reserved = p.peak_bytes() - p.memory.peak_stage().peak.runtime;
        const double err = std::fabs(reserved - r.measured_peak_bytes) / r.measured_peak_bytes;
        sum += err;
        // Torchtitan's 405B pipeline rows (Table 5, Table 6 at CP 8) miss by 12–15 %, under-predicted. PyTorch's own
        // allocations of their first stage under Float8 agree with shardplan's within 2.2 % (the test below): what is
        // missing is reserve, which the eager allocator replay (reports/allocator-replay.md) puts 4–5 GiB higher still.
        // Table 6 at CP 8 measures 9.6 GiB above CP 1 with the same tokens a rank, unexplained (reports/cp-memory.md:
        // PyTorch's own ring holds its K/V buffers inside each attention only).
        CHECK(err <= 0.15);
        if (r.source == "TT-2506-H200") CHECK(err <= 0.05);
      }
    }
    CHECK(with_peak == 20);
    CHECK(sum / with_peak <= 0.06);
    const PublishedRun* t1 = nullptr;
    for (const PublishedRun& r : runs.runs)
      if (r.source == "TT-2412-T1" && !r.strategy.compile) t1 = &r;
    REQUIRE(t1);
    CHECK(t1->measured_peak_bytes == doctest::Approx(82.4 * 1073741824.0));
  }

  TEST_CASE("torchtitan's 405B first pipeline stage under Float8: shardplan's allocations are PyTorch's") {
    // PyTorch's own allocations on stage 0 of Table 5's 1F1B layout and Table 6's CP 1 and CP 8 layouts (the same
    // 32,768 tokens per micro-batch and rank), eager, with torchao's float8 linears, float8 TP plan and FP8
    // all-gather, measured on fake tensors by bench/torch/pp_mem.py --float8 (CP 8 with --cp: torch's ring;
    // reports/pp-memory-float8-*.json, reports/pp-memory.md, reports/cp-memory.md). shardplan's stage-0 peak less its
    // CUDA/NCCL runtime and allocator reserve is within 3 % of all three; the published max_memory_reserved is 19, 12
    // and 21 GiB above the measured allocations, and Table 5's and Table 6 CP 1's allocations being equal,
    // what the two reserved differs by 7 GiB: the gap the three 405B PP rows show is the allocator's (under
    // torch.compile and async TP), not an allocation shardplan misses.
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    for (const char* name : {"t5", "t6cp1", "t6cp8"}) {
      CAPTURE(name);
      std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/reports/pp-memory-float8-" + name + ".json");
      REQUIRE(in.good());
      const nlohmann::json j = nlohmann::json::parse(in);
      const nlohmann::json& c = j.at("case");
      REQUIRE(c.at("float8").get<bool>());
      REQUIRE(c.at("pp_rank").get<int>() == 0);
      const PublishedRun* row = nullptr;
      for (const PublishedRun& r : runs.runs)
        if (r.model.name == "llama3-405b" && r.strategy.pp == c.at("pp").get<int64_t>() && r.strategy.vpp == 1 &&
            r.strategy.cp == c.value("cp", int64_t{1}) && r.strategy.seq == c.at("seq").get<int64_t>() &&
            r.strategy.micro_batch == c.at("micro_batch").get<int64_t>())
          row = &r;
      REQUIRE(row);
      CHECK(row->strategy.fp8 == Fp8Recipe::tensorwise);
      const Prediction p = predict(row->model, row->strategy, row->cluster);
      const MemoryComponents& stage0 = p.memory.stages.at(0).peak;
      const double allocated = peak_bytes(stage0) - stage0.runtime - stage0.fragmentation;
      const double measured = j.at("peak").at("bytes").get<double>();
      CHECK(std::fabs(allocated - measured) / measured <= 0.03);
      CHECK(row->measured_peak_bytes - measured > 10 * 1073741824.0);
    }
  }

  TEST_CASE("torchtitan's published reserves, replayed: shardplan's reserved peak within 8 % of the replay") {
    // bench/torch/replay_published.py: each row's PyTorch allocations (fake tensors) placed by the caching allocator's
    // rules, stream by stream (reports/allocator-replay.json, .md: 2.7 % from the published reserves on average). The
    // replay is the reserve's measurement shardplan is held to: without FSDP's gradient shards on the reduce-scatter
    // stream (framework.hpp sharded_grads_on_reduce_stream) three rows fall 8–10 % short of it.
    std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/reports/allocator-replay.json");
    REQUIRE(in.good());
    const nlohmann::json j = nlohmann::json::parse(in);
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    double sum = 0;
    int n = 0;
    for (const nlohmann::json& row : j.at("rows")) {
      const std::string source = row.at("source");
      CAPTURE(source);
      const PublishedRun* run = nullptr;
      for (const PublishedRun& r : runs.runs)  // the eager bf16 row where a table has several (the harness's)
        if (r.source == source && r.model.name == row.at("model").get<std::string>() &&
            r.strategy.seq == row.at("seq").get<int64_t>() && r.strategy.micro_batch == row.at("micro_batch").get<int64_t>() &&
            r.strategy.cp == 1 && r.strategy.vpp == 1 && r.measured_peak_bytes > 0 && !run)
          run = &r;
      REQUIRE(run);
      const Prediction p = predict(run->model, run->strategy, run->cluster);
      const double reserved = p.peak_bytes() - p.memory.peak_stage().peak.runtime;
      const double err = reserved / row.at("replayed_reserved_bytes").get<double>() - 1;
      CHECK(std::fabs(err) <= 0.08);
      sum += std::fabs(err);
      ++n;
    }
    CHECK(n == 6);
    CHECK(sum / n <= 0.05);
  }

  TEST_CASE("every modern row loads: predicted, or skipped with a reason") {
    const std::string csv = modern_csv_path();
    REQUIRE(std::filesystem::exists(csv));
    std::ifstream in(csv);
    std::string line;
    int data_rows = -1;  // the header
    while (std::getline(in, line)) data_rows += !line.empty();
    const PublishedRuns runs = load_modern_runs(csv, PresetStore::builtin());
    CHECK(static_cast<int>(runs.runs.size() + runs.skipped.size()) == data_rows);
    CHECK(runs.runs.size() >= 50);
    const std::set<std::string> families = {"fsdp", "fsdp1", "torchtitan", "deepspeed", "megatron"};
    int predicted = 0;
    for (const PublishedRun& r : runs.runs) {
      CAPTURE(r.source);
      CAPTURE(r.label);
      CAPTURE(r.strategy.gpus);
      CHECK(r.modern);
      CHECK(families.count(r.family) == 1);
      CHECK((r.generation == "Ampere-class" || r.generation == "Hopper-class" || r.generation == "Blackwell-class"));
      CHECK(r.measured > 0);
      CHECK(r.strategy.tp * r.strategy.pp * r.strategy.cp * r.strategy.dp == r.strategy.gpus);
      CHECK_FALSE(r.reference.empty());
      try {
        const Prediction p = predict(r.model, r.strategy, r.cluster);
        CHECK(std::isfinite(predicted_metric(r, p)));
        ++predicted;
      } catch (const InputError&) {
        // a layout the model cannot price yet: the accuracy bench lists it as skipped with the message
      }
    }
    CHECK(predicted >= 50);
    for (const std::string& s : runs.skipped) CHECK(s.find(": ") != std::string::npos);
  }

  TEST_CASE("modern rows read the figures their sources print") {
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    auto find = [&](const char* source, int64_t gpus) -> const PublishedRun* {
      for (const PublishedRun& r : runs.runs)
        if (r.source == source && r.strategy.gpus == gpus) return &r;
      return nullptr;
    };
    // bigscience tr11-176B-ml README, iteration 85376: "elapsed time per iteration (s): 104.70", GBS 2048, 384 GPUs.
    const PublishedRun* bloom = find("BLOOM-tr11", 384);
    REQUIRE(bloom);
    CHECK(bloom->metric == Metric::iteration_s);
    CHECK(bloom->measured == doctest::Approx(104.70));
    CHECK(bloom->strategy.tp == 4);
    CHECK(bloom->strategy.pp == 12);
    CHECK(bloom->strategy.micro_batch == 2);
    CHECK(bloom->family == "deepspeed");
    // Megatron-LM README model table: 1.7B on 48 GPUs at 408.8 TFLOP/s per GPU.
    const PublishedRun* mcore = find("MLM24-weak", 48);
    REQUIRE(mcore);
    CHECK(mcore->metric == Metric::mcore_model_tflops);
    CHECK(mcore->measured == doctest::Approx(408.8));
    // torchtitan Dec 2024 Table 1, FSDP on 8 GPUs (eager): 5,762 tokens/s/GPU; its compiled row (6,667) is predicted
    // with --compile, the compiled rows that also need FP8, async TP or CP are skipped.
    const PublishedRun* titan = find("TT-2412-T1", 8);
    REQUIRE(titan);
    CHECK(titan->measured == doctest::Approx(5762));
    CHECK(titan->family == "torchtitan");
    CHECK(titan->cluster.gpu.name == "h100-96g-500w");
    const PublishedRun* compiled = nullptr;
    for (const PublishedRun& r : runs.runs)
      if (r.source == "TT-2412-T1" && r.strategy.gpus == 8 && r.strategy.compile && r.strategy.fp8 == Fp8Recipe::off)
        compiled = &r;
    REQUIRE(compiled);
    CHECK(compiled->measured == doctest::Approx(6667));
    // Its Float8 row (8,532) is predicted with torchao's tensorwise recipe.
    const PublishedRun* float8 = nullptr;
    for (const PublishedRun& r : runs.runs)
      if (r.source == "TT-2412-T1" && r.strategy.fp8 == Fp8Recipe::tensorwise) float8 = &r;
    REQUIRE(float8);
    CHECK(float8->measured == doctest::Approx(8532));
    CHECK(float8->strategy.compile);
    int compile_skips = 0, compile_predicted = 0;
    for (const std::string& s : runs.skipped) compile_skips += s.find("needs --compile") != std::string::npos;
    for (const PublishedRun& r : runs.runs) compile_predicted += r.strategy.compile;
    CHECK(compile_skips == 0);         // --compile exists: "compile" alone no longer skips a row
    CHECK(compile_predicted >= 7);     // TT-2412 T1/T3, TT-2408, TT-2506 (2), FMS-compile (2)
  }

  TEST_CASE("Megatron's model FLOPs per iteration, by hand") {
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    const PublishedRun* r = nullptr;
    for (const PublishedRun& x : runs.runs)
      if (x.source == "MLM24-weak" && x.model.name == "mcore-gpt-1.7b") r = &x;
    REQUIRE(r);
    // GELU 4h and MHA reduce num_floating_point_operations to 72·B·s·l·h²·(1 + s/(6h) + V/(12lh)):
    // B 192, s 4096, l 24, h 2048, V 131072: 72·192·4096·24·2048² = 5.699868e15; the bracket 1 + 1/3 + 2/9
    // = 1.555556; F = 8.866462e15 per iteration. Over 48 GPUs at a 1 s step: 184.718 TFLOP/s per GPU.
    Prediction p;
    p.time.step_s = 1.0;
    CHECK(predicted_metric(*r, p) == doctest::Approx(184.718).epsilon(1e-4));
  }

  TEST_CASE("each modern row's preset has the size its source states") {
    const PublishedRuns runs = load_modern_runs(modern_csv_path(), PresetStore::builtin());
    REQUIRE(runs.presets.size() >= 90);
    for (const RowPreset& r : runs.presets) {
      CAPTURE(r.source);
      CAPTURE(r.label);
      CAPTURE(r.stated_params_text);
      REQUIRE(r.stated_params > 0);
      const double total = static_cast<double>(count_params(r.model).total);
      CAPTURE(total);
      // A size stated as "1.7B" is only that precise: the bound is the larger of 2 % and half a unit of its last
      // digit (1.7B: ±0.05 B; the Megatron table's 1.7B model has 1.745 B parameters).
      const std::string& t = r.stated_params_text;
      const double unit = r.stated_params / first_number(t);  // 1e9 for "1.7B", 1 for a plain count
      const size_t dot = t.find('.');
      const size_t end = dot == std::string::npos ? dot : t.find_first_not_of("0123456789", dot + 1);
      const double digits = dot == std::string::npos ? 0 : static_cast<double>((end == std::string::npos ? t.size() : end) - dot - 1);
      const double half_unit = 0.5 * unit * std::pow(10.0, -digits);
      CHECK(std::fabs(total - r.stated_params) <= std::max(0.02 * r.stated_params, half_unit));
      // llm-foundry's NumParams column is exact: learned positions of SeqLen rows and biases (mpt-*-foundry).
      if (r.source == "MPT-H100") CHECK(total == r.stated_params);
    }
    // The BLOOM README's parts: embedding 250880 × 14336 = 3,596,615,680; one block 12h² + 13h = 2,466,437,120.
    const ParamCounts bloom = count_params(PresetStore::builtin().model("bloom-176b"));
    CHECK(bloom.embedding == 3596615680);
    CHECK(bloom.block.total() == 2466437120);
  }
}
