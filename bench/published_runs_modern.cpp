// The modern published-run set (bench/data/published_runs_modern.csv; columns and sources in bench/data/README.md):
// rows that name their model and cluster presets, their runtime, schedule, precision and metric, and what they need
// that shardplan does not model. A row is predicted only from those presets and its published layout.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/published_runs.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/megatron_layout.hpp"
#include "planner/recompute_modules.hpp"

namespace shardplan::validation {

namespace {

// Columns every modern row has (bench/data/README.md); the first 22 are the shared set's.
constexpr const char* kColumns[] = {"source", "model",  "params",    "layers",   "hidden", "heads",  "kv_heads", "ffn",
                                    "vocab",  "seq",    "gpu",       "n_gpus",   "TP",     "PP",     "DP",       "CP_SP",
                                    "zero_fsdp", "recompute", "mbs", "gbs",      "measured", "notes", "framework", "vpp",
                                    "precision", "metric", "preset", "cluster", "options", "needs",  "reference"};

struct ModernRow {
  const std::map<std::string, size_t>* index;
  std::vector<std::string> f;
  int line = 0;
  const std::string& at(const char* column) const { return f[index->at(column)]; }
  bool unpublished(const char* column) const { return at(column) == "?"; }
  int64_t num(const char* column) const {
    const double v = first_number(at(column));
    if (std::isnan(v)) throw std::runtime_error(fmt::format("line {}: column {} is not a number: '{}'", line, column, at(column)));
    return static_cast<int64_t>(v);
  }
  std::string where() const { return fmt::format("{} {} ({} GPUs)", at("source"), at("model"), at("n_gpus")); }
};

// options: "zero=3;hsdp=8;sp=1;flash=1;overlap_grad_reduce=1" (bench/data/README.md).
std::map<std::string, std::string> parse_options(const ModernRow& r) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : split_fields(r.at("options"), ';')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) throw std::runtime_error(fmt::format("line {}: option '{}' is not key=value", r.line, kv));
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!out.count("zero")) throw std::runtime_error(fmt::format("line {}: options need zero=N", r.line));
  // Every key is one the loader prices or one recorded from the source for the reader (bench/data/README.md); a key
  // outside both is a typo, not a setting to drop in silence.
  static const std::set<std::string> priced = {
      "zero", "hsdp", "ep", "etp", "sp", "flash", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
      "loss", "attn", "kv", "fp8", "fp8_all_gather", "pp_first_layers", "pp_last_layers", "pp_embedding_layers",
      "pp_loss_layers", "pp_layout", "mtp", "ep_overlap", "cuda_graph", "capacity_factor", "pad_to_capacity", "dispatcher",
      "moe_probs",
      "precision_aware_optimizer", "adam_moments", "recompute_modules", "recompute_layers", "recompute_every",
      "act_offload_layers", "expandable_segments", "optimizer",
      "end_units", "rope", "mcore_flops"};
  static const std::set<std::string> recorded = {
      "grad_reduce_in_fp32", "main_grads", "delay_wgrad",
      "shared_expert_overlap", "fp8_attn", "fp8_output_proj", "moe_rank_capacity"};
  for (const auto& [key, value] : out)
    if (!priced.count(key) && !recorded.count(key))
      throw std::runtime_error(fmt::format("line {}: option '{}' is not one bench/data/README.md lists", r.line, key));
  return out;
}

// What a `needs` token stands for, as the bench reports it.
std::string need_reason(const std::string& token) {
  static const std::map<std::string, std::string> reasons = {
      {"cp", "needs --cp (context parallelism)"},
      {"fp8", "needs --fp8 (FP8 GEMMs)"},
      {"compile", "needs --compile (torch.compile)"},
      {"async-tp", "needs async tensor parallelism"},
      // torchao's rowwise recipe converted every linear then, and the small K/V projections under TP 8 ran ~40 %
      // slower in FP8 than in bf16 (pytorch/ao#2410's root cause of pytorch/torchtitan#1207); shardplan has no
      // per-shape cost of torchao's rowwise kernels and casts beyond one factor (planner/fp8.cpp).
      {"fp8-rowwise-tp", "needs the per-shape cost of torchao's rowwise FP8 linears under TP (pytorch/ao#2410)"},
      {"b200", "no B200 preset"},
      {"block-ac", "needs activation checkpointing of every k-th block (k not published)"},
      {"unverified", "measurement read in a secondary source only"},
      // Token dropping is priced padded to capacity (--moe-capacity-factor, Megatron-Bridge 25.09's apply_moe_token_drop);
      // a row that names no capacity factor, or drops without padding, is not.
      {"tokendrop", "needs token dropping without padding or with an unpublished capacity factor (priced: padded, "
                    "--moe-capacity-factor)"},
      // A row whose recipe set Megatron's pipeline_model_parallel_layout gives it as `pp_layout` (--pp-layout); one
      // whose layout is not published keeps the need.
      {"pp-layout", "needs the Megatron pipeline layout it ran (pipeline_model_parallel_layout not published)"}};
  const auto it = reasons.find(token);
  return it == reasons.end() ? "needs " + token : it->second;
}

// The runtime the row ran, as a --framework value this build prices. fsdp1 and torchtitan are priced as fsdp
// (FSDP2's traits) until their own traits are in planner/framework.cpp; the row says so in its assumptions.
Framework framework_for_family(const std::string& family) {
  if (const auto f = parse_framework(family); f && *f != Framework::reference) return *f;
  throw std::runtime_error("unknown framework family '" + family + "' (fsdp, fsdp1, torchtitan, deepspeed, megatron)");
}

Metric parse_metric(const ModernRow& r) {
  const std::string& m = r.at("metric");
  if (m == "tokens_per_gpu") return Metric::tokens_per_gpu;
  if (m == "iteration_s") return Metric::iteration_s;
  if (m == "mcore_model_tflops") return Metric::mcore_model_tflops;
  if (m == "hardware_tflops") return Metric::hardware_tflops;
  throw std::runtime_error(fmt::format("line {}: unknown metric '{}'", r.line, m));
}

double measured_of(const ModernRow& r, Metric metric) {
  const std::string& m = r.at("measured");
  const size_t iter = m.find("iter");
  return first_number(metric == Metric::iteration_s && iter != std::string::npos ? m.substr(iter) : m);
}

// The model TFLOP/s a tokens/s row states beside its figure ("4912 tok/s/GPU; 1276 TFLOP/s/GPU"); 0 when none.
double stated_model_tflops_of(const ModernRow& r, Metric metric) {
  const std::string& m = r.at("measured");
  const size_t unit = m.find(" TFLOP/s/GPU");
  const size_t sep = m.find("; ");
  if (metric != Metric::tokens_per_gpu || unit == std::string::npos || sep == std::string::npos || sep > unit)
    return 0.0;
  const double v = first_number(m.substr(sep + 2, unit - sep - 2));
  return std::isfinite(v) && v > 0 ? v : 0.0;
}

// The peak memory a row's measured column states ("5762 tok/s/GPU; 82.4 GiB"), in bytes; 0 when it states none.
// torchtitan's tables print the log's `memory:` figure, torch.cuda.max_memory_reserved (torchtitan
// components/metrics.py, DeviceMemoryMonitor.get_peak_stats → max_reserved_gib).
double measured_peak_bytes_of(const ModernRow& r) {
  const std::string& m = r.at("measured");
  const size_t gib = m.find(" GiB");
  if (gib == std::string::npos) return 0.0;
  size_t start = m.rfind(' ', gib - 1);
  start = start == std::string::npos ? 0 : start + 1;
  const double v = first_number(m.substr(start, gib - start));
  return std::isfinite(v) && v > 0 ? v * 1073741824.0 : 0.0;
}

// The row's architecture columns against its preset: a mismatch is a data error, not something to predict around.
void check_architecture(const ModernRow& r, const ModelSpec& m) {
  const int64_t hidden = r.num("hidden");
  const int64_t ffn = r.at("ffn") == "4h" ? 4 * hidden : r.num("ffn");
  const bool same = m.layers == r.num("layers") && m.hidden == hidden && m.heads == r.num("heads") &&
                    m.kv_heads == r.num("kv_heads") && m.ffn_hidden == ffn &&
                    (m.vocab == r.num("vocab") || model_padded_vocab(m) == r.num("vocab"));
  if (!same) throw std::runtime_error(fmt::format("line {}: {} does not have the architecture of preset {}", r.line, r.where(), m.name));
}

Recompute recompute_of(const ModernRow& r, std::vector<std::string>& assumptions) {
  const std::string& v = r.at("recompute");
  if (v == "full") return Recompute::full;
  if (v == "selective") return Recompute::selective;
  if (v == "none") return Recompute::none;
  if (v == "?") {
    assumptions.push_back("recompute not published: none");
    return Recompute::none;
  }
  throw std::runtime_error(fmt::format("line {}: recompute '{}' (none, selective, full, ?)", r.line, v));
}

Strategy strategy_of(const ModernRow& r, const std::map<std::string, std::string>& opt, std::vector<std::string>& assumptions) {
  Strategy s;
  s.gpus = r.num("n_gpus");
  s.tp = r.num("TP");
  s.pp = r.num("PP");
  s.dp = r.num("DP");  // data-parallel replicas, CP apart (bench/data/README.md): n_gpus = TP · PP · CP · DP
  // CP_SP "CPn": context parallelism over n ranks (--cp); "-" or a Ulysses/SP value leaves it at 1.
  if (const std::string cp = r.at("CP_SP"); cp.rfind("CP", 0) == 0 && first_number(cp) > 1)
    s.cp = static_cast<int64_t>(first_number(cp));
  s.zero = static_cast<int>(std::stol(opt.at("zero")));
  if (opt.count("hsdp")) s.hsdp = std::stol(opt.at("hsdp"));
  if (opt.count("ep")) s.ep = std::stol(opt.at("ep"));  // expert parallelism (issue 17)
  if (opt.count("etp")) s.etp = std::stol(opt.at("etp"));  // expert tensor parallelism (planner/strategy.hpp)
  s.sp = s.tp > 1 && opt.count("sp") && opt.at("sp") == "1";
  s.flash_attn = !opt.count("flash") || opt.at("flash") == "1";
  if (opt.count("fp8")) {
    const auto recipe = parse_fp8_recipe(opt.at("fp8"));
    if (!recipe) throw std::runtime_error(fmt::format("line {}: fp8 '{}' (tensorwise, rowwise, blockwise, mxfp8)", r.line, opt.at("fp8")));
    s.fp8 = *recipe;
  }
  if (opt.count("fp8_all_gather")) s.fp8_all_gather = opt.at("fp8_all_gather") == "1";
  if (opt.count("attn")) {
    const auto kernel = parse_attention_kernel(opt.at("attn"));
    if (!kernel) throw std::runtime_error(fmt::format("line {}: attn '{}' (flash2, cudnn, triton)", r.line, opt.at("attn")));
    s.attention_kernel = *kernel;
  }
  if (opt.count("end_units")) {  // FSDP2's wrapping of the model's ends (--fsdp-end-units)
    if (opt.at("end_units") != "root" && opt.at("end_units") != "own")
      throw std::runtime_error(fmt::format("line {}: end_units '{}' (root, own)", r.line, opt.at("end_units")));
    s.end_units_own = opt.at("end_units") == "own";
  }
  if (opt.count("rope")) {  // torchtitan's RoPE tables (--rope-cache)
    if (opt.at("rope") != "shared" && opt.at("rope") != "per-layer")
      throw std::runtime_error(fmt::format("line {}: rope '{}' (shared, per-layer)", r.line, opt.at("rope")));
    s.rope_cache_per_layer = opt.at("rope") == "per-layer";
  }
  if (opt.count("kv")) {
    if (opt.at("kv") != "repeated" && opt.at("kv") != "grouped")
      throw std::runtime_error(fmt::format("line {}: kv '{}' (grouped, repeated)", r.line, opt.at("kv")));
    s.kv_repeated = opt.at("kv") == "repeated";
  }
  if (opt.count("loss")) {
    const auto loss = parse_loss(opt.at("loss"));
    if (!loss) throw std::runtime_error(fmt::format("line {}: loss '{}' (standard, chunked, fused)", r.line, opt.at("loss")));
    s.loss = *loss;
  }
  if (opt.count("overlap_grad_reduce")) s.overlap_grad_reduce = opt.at("overlap_grad_reduce") == "1";
  if (opt.count("overlap_param_gather")) s.overlap_param_gather = opt.at("overlap_param_gather") == "1";
  if (opt.count("tp_comm_overlap")) s.tp_comm_overlap = opt.at("tp_comm_overlap") == "1";
  if (opt.count("ep_overlap")) s.ep_comm_overlap = opt.at("ep_overlap") == "1";  // --ep-comm-overlap
  if (opt.count("capacity_factor")) s.moe_capacity_factor = std::stod(opt.at("capacity_factor"));  // token dropping
  // Megatron-Core's precision-aware optimizer (--precision-aware-optimizer) and bf16 Adam moments (--adam-moments).
  if (opt.count("precision_aware_optimizer")) s.precision_aware_optimizer = opt.at("precision_aware_optimizer") == "1";
  if (opt.count("adam_moments")) s.bf16_adam_moments = opt.at("adam_moments") == "bf16";
  // Megatron's selective module list (--recompute-modules), '+'-separated in the CSV.
  if (opt.count("recompute_modules")) {
    std::string list = opt.at("recompute_modules");
    std::replace(list.begin(), list.end(), '+', ',');
    const auto mask = parse_recompute_modules(list);
    if (!mask) throw std::runtime_error(fmt::format("line {}: recompute_modules '{}'", r.line, opt.at("recompute_modules")));
    s.recompute_modules = *mask;
  }
  // Full recomputation of some blocks only (--recompute-layers / --recompute-every, planner/partial_recompute.hpp).
  if (opt.count("recompute_layers")) s.recompute_layers = std::stol(opt.at("recompute_layers"));
  if (opt.count("recompute_every")) s.recompute_every = std::stol(opt.at("recompute_every"));
  if (opt.count("act_offload_layers")) s.offload_activation_layers = std::stol(opt.at("act_offload_layers"));  // --offload-activations
  if (opt.count("moe_probs")) {  // --moe-probs: where the router's probabilities scale the experts (memory)
    const auto p = parse_moe_probs(opt.at("moe_probs"));
    if (!p) throw std::runtime_error(fmt::format("line {}: moe_probs '{}' (activation, combine)", r.line, opt.at("moe_probs")));
    s.moe_probs = *p;
  }
  if (opt.count("optimizer")) {  // --optimizer (planner/optimizer.hpp)
    const auto o = parse_optimizer(opt.at("optimizer"));
    if (!o) throw std::runtime_error(fmt::format("line {}: optimizer '{}' (adamw, muon)", r.line, opt.at("optimizer")));
    s.optimizer = *o;
  }
  if (opt.count("dispatcher")) {  // --moe-dispatcher
    const auto d = parse_moe_dispatcher(opt.at("dispatcher"));
    if (!d) throw std::runtime_error(fmt::format("line {}: dispatcher '{}' (alltoall, deepep, hybridep)", r.line, opt.at("dispatcher")));
    s.moe_dispatcher = *d;
  }
  // CUDA graphs (--cuda-graphs): Megatron's full_iteration captures everything; Transformer Engine's per-module graphs
  // (te_attn+moe_router+moe_preprocess, te_moe_router+...) and 25.09's per-layer local graphs capture the static parts.
  if (opt.count("cuda_graph")) {
    const std::string& g = opt.at("cuda_graph");
    // `partial` prices graphs that capture the attention too (strategy.hpp CudaGraphs): graphs of the router and the
    // preprocessing alone leave the attention's launches eager after each dispatch sync, so they are priced as none.
    const bool attention_captured = g.find("attn") != std::string::npos || g == "local_layer";
    s.cuda_graphs = g == "full_iteration" ? CudaGraphs::full
                    : attention_captured  ? CudaGraphs::partial
                                          : CudaGraphs::none;
  }
  // The pipeline split (planner/pipeline_split.hpp): pp_first_layers / pp_last_layers (Megatron uneven ends),
  // pp_embedding_layers / pp_loss_layers (the ends counted as layers, e.g. DeepSpeed 'type:transformer|embedding').
  if (opt.count("pp_first_layers")) s.split.first_layers = std::stol(opt.at("pp_first_layers"));
  if (opt.count("pp_last_layers")) s.split.last_layers = std::stol(opt.at("pp_last_layers"));
  if (opt.count("pp_embedding_layers")) s.split.embedding_layers = std::stol(opt.at("pp_embedding_layers"));
  if (opt.count("pp_loss_layers")) s.split.loss_layers = std::stol(opt.at("pp_loss_layers"));
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True where the row's launcher set it (--expandable-segments).
  if (opt.count("expandable_segments")) s.expandable_segments = opt.at("expandable_segments") == "1";
  if (opt.count("pp_layout")) {  // --pp-layout: Megatron's per-stage layout (planner/megatron_layout.hpp)
    const LayoutParse parsed = parse_megatron_layout(opt.at("pp_layout"));
    if (!parsed.error.empty()) throw std::runtime_error(fmt::format("line {}: pp_layout: {}", r.line, parsed.error));
    s.split.layout = parsed.layout;
  }
  s.recompute = recompute_of(r, assumptions);
  s.micro_batch = r.unpublished("mbs") ? 1 : r.num("mbs");
  if (r.unpublished("mbs")) assumptions.push_back("micro-batch not published: 1");
  s.global_batch = r.num("gbs");
  s.seq = r.num("seq");
  s.vpp = r.unpublished("vpp") ? 1 : r.num("vpp");
  if (r.unpublished("vpp") && s.pp > 1) assumptions.push_back("schedule not published: 1F1B");
  if (s.vpp > 1) s.schedule = Schedule::interleaved;
  const std::optional<Precision> precision = parse_precision(r.at("precision"));
  if (!precision) throw std::runtime_error(fmt::format("line {}: precision '{}' is not a --precision value", r.line, r.at("precision")));
  s.precision = *precision;
  s.framework = framework_for_family(r.at("framework"));
  return s;
}

}  // namespace

PublishedRuns load_modern_runs(const std::string& csv_path, const PresetStore& store) {
  std::ifstream in(csv_path);
  if (!in) throw std::runtime_error("cannot read " + csv_path + " (give the path to published_runs_modern.csv)");
  std::string line;
  std::getline(in, line);
  std::map<std::string, size_t> index;
  const std::vector<std::string> header = split_fields(line, ',');
  for (size_t i = 0; i < header.size(); ++i) index[header[i]] = i;
  for (const char* c : kColumns)
    if (!index.count(c)) throw std::runtime_error(fmt::format("{}: no column '{}' (bench/data/README.md)", csv_path, c));
  PublishedRuns out;
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    ModernRow r{&index, split_fields(line, ','), line_no};
    if (r.f.size() != header.size())
      throw std::runtime_error(fmt::format("{}:{}: {} fields, the header has {}", csv_path, line_no, r.f.size(), header.size()));
    // The model preset resolves for every row that names one, skipped or not, so that tests can check it.
    const PresetEntry* model_entry = store.find(PresetKind::model, r.at("preset"));
    std::optional<ModelSpec> model;
    if (model_entry) {
      model = store.model(r.at("preset"));
      check_architecture(r, *model);
      if (!r.unpublished("seq")) model->seq = r.num("seq");  // learned position tables are max_seq_len long
      out.presets.push_back({r.at("source"), r.at("model"), *model, parse_param_count(r.at("params")), r.at("params")});
    }
    // --compile exists now (the model's time under torch.compile); every other need is still a reason to skip.
    const std::map<std::string, std::string> options = parse_options(r);
    std::string reasons;
    bool compiled = false, async_tp = false;
    if (r.at("needs") != "-")
      for (const std::string& token : split_fields(r.at("needs"), ';')) {
        if (token == "compile") {
          compiled = true;
          continue;
        }
        // PyTorch's async TP is --tp-comm-overlap under fsdp/torchtitan with --compile (framework.hpp TpOverlapKind).
        if (token == "async-tp") {
          async_tp = true;
          continue;
        }
        // --fp8 exists now: a row that names its recipe (options fp8=...) is predicted with it.
        if (token == "fp8" && options.count("fp8")) continue;
        if (token == "pp-layout" && options.count("pp_layout")) continue;  // --pp-layout
        // Token dropping with padding is --moe-capacity-factor (a capacity without padding is not priced).
        if (token == "tokendrop" && options.count("capacity_factor") && options.count("pad_to_capacity") &&
            options.at("pad_to_capacity") == "1")
          continue;
        reasons += (reasons.empty() ? "" : "; ") + need_reason(token);
      }
    if (reasons.empty() && !model) reasons = "no preset with its architecture";
    if (reasons.empty() && !store.find(PresetKind::cluster, r.at("cluster"))) reasons = "no cluster preset '" + r.at("cluster") + "'";
    if (!reasons.empty()) {
      out.skipped.push_back(fmt::format("{}: {}", r.where(), reasons));
      continue;
    }
    PublishedRun run;
    run.source = r.at("source");
    run.label = r.at("model");
    run.model = *model;
    run.cluster = store.cluster(r.at("cluster"));
    // mtp=0: the run trained without DeepSeek's multi-token-prediction module that the preset has (the tables' "w/o
    // MTP"); mtp=1 keeps the preset's.
    if (options.count("mtp") && options.at("mtp") == "0" && run.model.mtp_layers > 0) {
      run.model.mtp_layers = 0;
      run.assumptions.push_back("without MTP");
    }
    run.strategy = strategy_of(r, options, run.assumptions);
    run.strategy.compile = compiled;
    if (!options.count("loss")) run.strategy.loss = default_loss(run.strategy.framework, compiled);  // as the CLI
    if (async_tp) run.strategy.tp_comm_overlap = true;
    apply_framework_defaults(run.strategy, run.model);  // as the CLI: torchtitan's TP, Megatron's MoE under TP: SP
    run.metric = parse_metric(r);
    run.measured = measured_of(r, run.metric);
    run.stated_model_tflops = stated_model_tflops_of(r, run.metric);
    if (options.count("mcore_flops")) {  // how the source's Megatron counts the core attention (megatron_flops.hpp)
      const std::string& count = options.at("mcore_flops");
      if (count != "causal" && count != "full")
        throw std::runtime_error(fmt::format("line {}: mcore_flops '{}' (causal, full)", r.line, count));
      run.mcore_attention = count == "causal" ? AttentionCount::causal : AttentionCount::full;
    }
    run.measured_peak_bytes = measured_peak_bytes_of(r);
    run.family = r.at("framework");
    run.generation = to_string(shardplan::gpu_generation(run.cluster.gpu));
    run.modern = true;
    run.stated_params = parse_param_count(r.at("params"));
    run.reference = r.at("reference");
    out.runs.push_back(std::move(run));
  }
  return out;
}

}  // namespace shardplan::validation
