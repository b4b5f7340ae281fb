#include "bench/published_runs.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace shardplan::validation {

namespace {


std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, sep)) out.push_back(field);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The first number in a string ("137 TFLOP/s/GPU (44%)" → 137; "iter 1.42 s" → 1.42).
double first_number(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i]))) return std::stod(s.substr(i));
  return NAN;
}

struct Row {
  std::vector<std::string> f;  // columns as in the CSV header
  std::string source() const { return f[0]; }
  std::string model() const { return f[1]; }
  int64_t num(size_t i) const { return static_cast<int64_t>(first_number(f[i])); }
};


// The preset with the row's architecture. Among several (Llama 2 70B and Llama 3 70B differ only in the
// vocabulary: 32000 against 128256 rows of embedding and LM head), the one with the row's vocabulary; a row whose
// vocabulary no preset has exactly (GPT-3's 51200, padded, against the preset's 50257) keeps the first match.
const ModelSpec* match_model(const std::vector<ModelSpec>& models, const Row& r) {
  const int64_t layers = r.num(3), hidden = r.num(4), heads = r.num(5), kv = r.num(6);
  const int64_t ffn = r.f[7] == "4h" ? 4 * hidden : r.num(7);
  const int64_t vocab = r.num(8);
  const ModelSpec* first = nullptr;
  for (const ModelSpec& m : models)
    if (m.layers == layers && m.hidden == hidden && m.heads == heads && m.kv_heads == kv && m.ffn_hidden == ffn) {
      if (m.vocab == vocab) return &m;
      if (!first) first = &m;
    }
  return first;
}

std::string cluster_for(const std::string& gpu) {
  if (contains(gpu, "V100")) return "dgx-2-v100";
  if (contains(gpu, "A800")) return "a800x8";
  if (contains(gpu, "40GB")) return "dgx-a100-40g";
  return "dgx-a100-80g";
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
  s.framework = s.zero == 3 ? (contains(zero, "FSDP") || contains(zero, "FULL_SHARD") ? Framework::fsdp
                                                                                      : Framework::deepspeed)
                            : Framework::megatron;
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
  if (megatron) {
    const bool fp16 = contains(r.f[10], "fp16") || contains(r.f[10], "V100");  // V100 has no bf16
    s.precision = fp16 ? Precision::megatron_fp16 : Precision::megatron_bf16;
  } else {
    s.precision = contains(zero, "PURE") ? Precision::pure_bf16 : Precision::amp_bf16;
  }
  // MLM20 ran PyTorch DDP (gradient all-reduce overlapping backward); K22 §6.3 says its runs did not overlap,
  // which is Megatron's default; N21 does not say.
  if (src == "MLM20") s.overlap_grad_reduce = true;
  if (src.rfind("N21", 0) == 0 && s.dp > 1 && s.zero == 0) assumptions.push_back("gradient reduce not overlapped (Megatron default)");
  if (contains(notes, "interleaved")) {
    // The sources name the schedule, not always the chunk count; K22 says 3 stages per chunk set.
    s.schedule = Schedule::interleaved;
    s.vpp = m.layers % (s.pp * 3) == 0 ? 3 : 2;
    assumptions.push_back(fmt::format("interleaved, vpp {} assumed", s.vpp));
  }
  return s;
}

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

}  // namespace

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::hardware_tflops: return "HW TFLOP/s/GPU";
    case Metric::iteration_s: return "iteration s";
    case Metric::tokens_per_gpu: return "tokens/s/GPU";
  }
  return "?";
}

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
    row.f = split(line, ',');
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
    out.runs.push_back(std::move(run));
  }
  return out;
}

double predicted_metric(const PublishedRun& run, const Prediction& p) {
  switch (run.metric) {
    case Metric::hardware_tflops:
      return n21_iteration_flops(run.model, run.strategy) / p.time.step_s / static_cast<double>(run.strategy.gpus) / 1e12;
    case Metric::iteration_s: return p.time.step_s;
    case Metric::tokens_per_gpu: return p.throughput.tokens_per_s_per_gpu;
  }
  return NAN;
}

}  // namespace shardplan::validation
