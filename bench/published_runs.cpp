#include "bench/published_runs.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/moe.hpp"

namespace shardplan::validation {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

struct Row {
  std::vector<std::string> f;  // columns as in the CSV header
  std::string source() const { return f[0]; }
  std::string model() const { return f[1]; }
  int64_t num(size_t i) const { return static_cast<int64_t>(first_number(f[i])); }
};


// The preset with the row's architecture. Among several (Llama 2 70B and Llama 3 70B differ only in the
// vocabulary: 32000 against 128256 rows of embedding and LM head), the one with the row's vocabulary, else the one
// with the nearest: GPT-3's 51200 (padded) rows take gpt3-175b (50257), not mcore-gpt-177b (131072), whose blocks
// are the same.
const ModelSpec* match_model(const std::vector<ModelSpec>& models, const Row& r) {
  const int64_t layers = r.num(3), hidden = r.num(4), heads = r.num(5), kv = r.num(6);
  const int64_t ffn = r.f[7] == "4h" ? 4 * hidden : r.num(7);
  const int64_t vocab = r.num(8);
  const ModelSpec* best = nullptr;
  for (const ModelSpec& m : models)
    if (m.layers == layers && m.hidden == hidden && m.heads == heads && m.kv_heads == kv && m.ffn_hidden == ffn) {
      if (!best || std::llabs(m.vocab - vocab) < std::llabs(best->vocab - vocab)) best = &m;
    }
  return best;
}

std::string cluster_for(const std::string& gpu) {
  if (contains(gpu, "V100")) return "dgx-2-v100";
  if (contains(gpu, "A800")) return "a800x8";
  if (contains(gpu, "40GB")) return "dgx-a100-40g";
  return "dgx-a100-80g";
}

// N21 Table 1 as its authors launched it: Megatron-LM examples/academic_paper_scripts/sc21/run_table_1.sh
// (de7dc40f, 2021-08, "scripts that were used to produce the results" of the paper, at Megatron-LM 6985e58). The
// table gives neither micro-batch nor schedule; the script sets, per model size, --micro-batch-size,
// --num-layers-per-virtual-pipeline-stage (absent: 1F1B) and --DDP-impl (torch: PyTorch DDP, whose bucketed
// all-reduce runs during the last micro-batch's backward, schedules.py forward_backward_no_pipelining under
// model.no_sync; local: Megatron's own DDP, which all-reduces after the backward). Keyed by layer count.
struct Sc21Table1Run {
  int64_t layers;
  int64_t micro_batch;
  int64_t layers_per_virtual_stage;  // 0: not interleaved
  bool torch_ddp;
};
constexpr Sc21Table1Run kSc21Table1[] = {
    {24, 16, 0, true}, {30, 16, 0, true}, {36, 16, 0, true}, {40, 8, 0, true}, {48, 4, 0, false},
    {60, 2, 5, false}, {80, 2, 5, false}, {96, 1, 3, false}, {105, 1, 1, false}, {128, 1, 0, false},
};

const Sc21Table1Run* sc21_table1_run(int64_t layers) {
  for (const Sc21Table1Run& run : kSc21Table1)
    if (run.layers == layers) return &run;
  return nullptr;
}

// The published configuration as a Strategy; every guess is recorded in `assumptions`.
Strategy strategy_of(const Row& r, const ModelSpec& m, std::vector<std::string>& assumptions) {
  const std::string src = r.source(), zero = r.f[16], recompute = r.f[17], notes = r.f[21];
  Strategy s;
  s.gpus = r.num(11);
  s.tp = r.num(12);
  s.pp = r.num(13);
  s.dp = r.num(14);
  if (contains(r.f[13], "[u]")) assumptions.push_back("pp uncertain in the source");
  s.sp = r.f[15] == "SP";
  const bool megatron = src.rfind("N21", 0) == 0 || src.rfind("K22", 0) == 0 || src == "MLM20";
  s.zero = contains(zero, "ZeRO-3") || contains(zero, "FSDP") || contains(zero, "FULL_SHARD") ? 3 : 0;
  // The runtime each source ran: torchtitan's docs/performance.md (TTA) ran FSDP2 under torchtitan; llm-foundry (MPT)
  // wraps PyTorch's FullyShardedDataParallel (FSDP1) through Composer; FlagPerf's row and N21 Table 2's ZeRO-3 rows
  // are DeepSpeed; the rest is Megatron-LM.
  const bool fsdp = contains(zero, "FSDP") || contains(zero, "FULL_SHARD");
  s.framework = s.zero != 3 ? Framework::megatron
                : fsdp      ? (src == "TTA" ? Framework::torchtitan : Framework::fsdp1)
                            : Framework::deepspeed;
  // TTA's torchtitan (2024) kept the embedding and the LM head in the root unit; its own units came with 83e694105
  // (2025-07-28; planner/framework.cpp end_units_own).
  // Its RoPE table was one for the model; one per attention layer came with 02d24f017 (2026-06-05).
  if (s.framework == Framework::torchtitan) s.end_units_own = false, s.rope_cache_per_layer = false;
  s.recompute = contains(recompute, "full")        ? Recompute::full
                : contains(recompute, "selective") ? Recompute::selective
                                                   : Recompute::none;
  s.micro_batch = r.num(18);
  if (r.f[18] == "?") {
    s.micro_batch = 1;
    assumptions.push_back("micro-batch not published: 1");
  }
  s.global_batch = r.num(19);
  s.seq = r.num(9);
  s.flash_attn = !megatron;  // Megatron runs of 2020–22 predate flash attention
  // llm-foundry's MPT computes its loss with flash-attn's fused cross-entropy unless loss_fn says otherwise
  // (llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM: loss_fn default 'fused_crossentropy').
  if (src == "MPT") {
    s.loss = LossKind::fused;
    assumptions.push_back("fused cross-entropy (llm-foundry default)");
  }
  if (megatron) {
    const bool fp16 = contains(r.f[10], "fp16") || contains(r.f[10], "V100");  // V100 has no bf16
    s.precision = fp16 ? Precision::megatron_fp16 : Precision::megatron_bf16;
  } else {
    s.precision = contains(zero, "PURE") ? Precision::pure_bf16 : Precision::amp_bf16;
  }
  // Megatron-LM of 2020–22 had none of today's overlaps (framework.cpp megatron_traits): no distributed optimizer to
  // gather for, no TE userbuffers, and K22 §6.3 says its runs did not overlap the gradient reduce; N21 does not say.
  // MLM20 ran PyTorch DDP, whose all-reduce overlaps backward.
  if (megatron) {
    s.overlap_grad_reduce = src == "MLM20";
    s.overlap_param_gather = false;
    s.tp_comm_overlap = false;
  }
  const Sc21Table1Run* sc21 = src == "N21-Tab1" ? sc21_table1_run(m.layers) : nullptr;
  if (sc21) {
    // CONFIG.sh passes --fp16 without --accumulate-allreduce-grads-in-fp32: fp16 gradients, all-reduced in fp16
    // (arguments.py at 6985e58), an fp32 master copy in the optimizer: amp-fp16's 16 B, not Megatron-Core's 18.
    s.precision = Precision::amp_fp16;
    s.micro_batch = sc21->micro_batch;
    s.overlap_grad_reduce = sc21->torch_ddp;
    if (sc21->layers_per_virtual_stage > 0) {
      s.schedule = Schedule::interleaved;
      s.vpp = m.layers / (s.pp * sc21->layers_per_virtual_stage);
    }
    std::erase(assumptions, std::string("micro-batch not published: 1"));  // the script settles it
    assumptions.push_back(fmt::format("sc21/run_table_1.sh: micro-batch {}, {}, {} DDP", s.micro_batch,
                                      s.vpp > 1 ? fmt::format("interleaved vpp {}", s.vpp) : std::string("1F1B"),
                                      sc21->torch_ddp ? "torch" : "local"));
    return s;
  }
  if (src.rfind("N21", 0) == 0 && s.dp > 1 && s.zero == 0) assumptions.push_back("gradient reduce not overlapped (Megatron default)");
  if (contains(notes, "interleaved")) {
    // The sources name the schedule, not always the chunk count; K22 says 3 stages per chunk set.
    s.schedule = Schedule::interleaved;
    s.vpp = m.layers % (s.pp * 3) == 0 ? 3 : 2;
    assumptions.push_back(fmt::format("interleaved, vpp {} assumed", s.vpp));
  }
  return s;
}

// The runtime the source ran, for grouping (strategy_of chose it).
std::string family_of(const Row&, const Strategy& s) { return to_string(s.framework); }

Metric metric_of(const Row& r) {
  const std::string src = r.source();
  if (src.rfind("K22", 0) == 0) return Metric::iteration_s;
  if (src == "MLM20") return Metric::iteration_s;
  if (src.rfind("N21", 0) == 0) return Metric::hardware_tflops;
  return Metric::tokens_per_gpu;
}

double measured_of(const Row& r, Metric metric) {
  const std::string& m = r.f[20];
  if (metric == Metric::iteration_s)
    return r.source() == "MLM20" ? first_number(m.substr(m.find("iter"))) / 1000 : first_number(m.substr(m.find("iter")));
  return first_number(m);
}

// N21 eq. 3: hardware FLOPs per iteration with full recomputation, the figure N21 and MLM20 report.
double n21_iteration_flops(const ModelSpec& m, const Strategy& s) {
  const double B = static_cast<double>(s.global_batch), seq = static_cast<double>(s.seq);
  const double l = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double V = static_cast<double>(model_padded_vocab(m));
  return 96 * B * seq * l * h * h * (1 + seq / (6 * h) + V / (16 * l * h));
}

// Megatron's model FLOPs of one iteration (bench/megatron_flops.hpp): global batch × seq tokens.
double mcore_iteration_flops(const PublishedRun& run) {
  const Strategy& s = run.strategy;
  return megatron_flops_per_token(run.model, s.seq, run.mcore_attention) * static_cast<double>(s.global_batch) *
         static_cast<double>(s.seq);
}

}  // namespace

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::hardware_tflops: return "HW TFLOP/s/GPU";
    case Metric::iteration_s: return "iteration s";
    case Metric::tokens_per_gpu: return "tokens/s/GPU";
    case Metric::mcore_model_tflops: return "model TFLOP/s/GPU";
  }
  return "?";
}

std::vector<std::string> split_fields(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, sep)) out.push_back(field);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

double first_number(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i]))) return std::stod(s.substr(i));
  return NAN;
}

double parse_param_count(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && !std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == s.size()) return 0;
  size_t used = 0;
  const double v = std::stod(s.substr(i), &used);
  const char unit = i + used < s.size() ? s[i + used] : ' ';
  return unit == 'T' ? v * 1e12 : unit == 'B' ? v * 1e9 : unit == 'M' ? v * 1e6 : v;
}

std::string modern_csv_path() { return std::string(SHARDPLAN_SOURCE_DIR) + "/bench/data/published_runs_modern.csv"; }

std::string default_csv_path() { return std::string(SHARDPLAN_SOURCE_DIR) + "/../shared/validation/published_runs.csv"; }

PublishedRuns load_published_runs(const std::string& csv_path, const PresetStore& store) {
  std::ifstream in(csv_path);
  if (!in) throw std::runtime_error("cannot read " + csv_path + " (give the path to published_runs.csv)");
  std::vector<ModelSpec> models;
  for (const std::string& n : store.names(PresetKind::model)) models.push_back(store.model(n));
  PublishedRuns out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    Row row;
    row.f = split_fields(line, ',');
    if (row.f.size() < 22) continue;
    const ModelSpec* m = match_model(models, row);
    if (!m) {
      out.skipped.push_back(fmt::format("{} {}: no preset with its architecture", row.source(), row.model()));
      continue;
    }
    PublishedRun run;
    run.source = row.source();
    run.label = row.model();
    run.model = *m;
    run.cluster = store.cluster(cluster_for(row.f[10]));
    run.strategy = strategy_of(row, run.model, run.assumptions);
    run.metric = metric_of(row);
    run.measured = measured_of(row, run.metric);
    run.family = family_of(row, run.strategy);
    run.generation = to_string(shardplan::gpu_generation(run.cluster.gpu));
    run.historical = row.source() == "N21-Tab2" && run.strategy.zero == 3;
    run.stated_params = parse_param_count(row.f[2]);
    out.runs.push_back(std::move(run));
  }
  return out;
}

bool recompute_published(const PublishedRun& run) {
  for (const std::string& a : run.assumptions)
    if (a.rfind("recompute not published", 0) == 0) return false;
  return true;
}

double predicted_metric(const PublishedRun& run, const Prediction& p) {
  switch (run.metric) {
    case Metric::hardware_tflops:
      return n21_iteration_flops(run.model, run.strategy) / p.time.step_s / static_cast<double>(run.strategy.gpus) / 1e12;
    case Metric::iteration_s: return p.time.step_s;
    case Metric::tokens_per_gpu: return p.throughput.tokens_per_s_per_gpu;
    case Metric::mcore_model_tflops:
      return mcore_iteration_flops(run) / p.time.step_s / static_cast<double>(run.strategy.gpus) / 1e12;
  }
  return NAN;
}

double measured_over_predicted_step(const PublishedRun& run, double predicted) {
  // Iteration seconds are the step itself; throughput and FLOP/s figures are proportional to its inverse.
  return run.metric == Metric::iteration_s ? run.measured / predicted : predicted / run.measured;
}

std::vector<PublishedError> published_errors(const PublishedRuns& runs) {
  std::vector<PublishedError> out;
  for (const PublishedRun& r : runs.runs) {
    if (r.historical) continue;
    try {
      const Prediction p = predict(r.model, r.strategy, r.cluster);
      out.push_back({r.strategy.framework, r.cluster.gpu, measured_over_predicted_step(r, predicted_metric(r, p)),
                     model_is_moe(r.model), r.strategy.cp > 1});
    } catch (const InputError&) {
      // A row the model refuses is not predicted (the accuracy bench lists it as skipped).
    }
  }
  return out;
}

std::string error_band_source(const std::vector<ErrorBandGroup>& groups) {
  auto family = [](FrameworkFamily f) {
    switch (f) {
      case FrameworkFamily::pytorch_fsdp: return "FrameworkFamily::pytorch_fsdp";
      case FrameworkFamily::megatron: return "FrameworkFamily::megatron";
      case FrameworkFamily::deepspeed: return "FrameworkFamily::deepspeed";
      case FrameworkFamily::moe: return "FrameworkFamily::moe";
      case FrameworkFamily::context_parallel: return "FrameworkFamily::context_parallel";
      case FrameworkFamily::reference: break;
    }
    return "FrameworkFamily::reference";
  };
  auto generation = [](GpuGeneration g) {
    switch (g) {
      case GpuGeneration::volta: return "GpuGeneration::volta";
      case GpuGeneration::ampere: return "GpuGeneration::ampere";
      case GpuGeneration::hopper: return "GpuGeneration::hopper";
      case GpuGeneration::cdna3: return "GpuGeneration::cdna3";
      case GpuGeneration::cdna4: return "GpuGeneration::cdna4";
      case GpuGeneration::blackwell: break;
    }
    return "GpuGeneration::blackwell";
  };
  std::string out =
      "// Generated by `build/bench/shardplan_accuracy --emit-bands planner/error_band_data.cpp` from the public set\n"
      "// (bench/data/published_runs_modern.csv and ../shared/validation/published_runs.csv); do not edit by hand.\n"
      "// Each row: measured step / predicted step of a group's published runs at its 10th and 90th percentiles\n"
      "// (smallest and largest under 10 runs). tests/test_error_band.cpp checks it against the model.\n"
      "#include \"planner/error_band.hpp\"\n\nnamespace shardplan {\n\nnamespace {\n\n"
      "constexpr ErrorBandGroup kGroups[] = {\n";
  for (const ErrorBandGroup& g : groups)
    out += fmt::format("    {{{}, {}, {}, {}, {:.6f}, {:.6f}}},\n", family(g.family), generation(g.generation),
                       g.all_generations ? "true" : "false", g.runs, g.low, g.high);
  out += "};\n\n}  // namespace\n\nstd::span<const ErrorBandGroup> error_band_table() { return kGroups; }\n\n"
         "}  // namespace shardplan\n";
  return out;
}

}  // namespace shardplan::validation
