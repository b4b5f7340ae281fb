#pragma once
// What the PyTorch cross-checks (reports/fsdp2-memory.json, reports/tp-memory.json, reports/fsdp2-memory-outside.json)
// compare: the predicted peak less the runtime's allocations and the allocator's reserve, which the fake-tensor
// tracker cannot see; and how a row of those tables (bench/torch/compare.py's `case`) becomes a model and a strategy.
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "io/preset_store.hpp"
#include "planner/predict.hpp"

namespace shardplan::test {

// The built-in presets, loaded once, and the one H100-SXM rank the PyTorch tables were predicted for.
inline const PresetStore& presets() {
  static const PresetStore store = PresetStore::builtin();
  return store;
}

inline ClusterSpec h100() { return cluster_from_gpu(presets().gpu("h100-sxm")); }

inline double tracked_allocation(const Prediction& p) {
  const MemoryComponents& c = p.memory.peak_stage().allocated;  // at the moment of the most allocated
  return c.total() - c.runtime - c.fragmentation;
}

// compare.py's recompute names: none, selective, full, layersN (the first N blocks), everyK (every K-th block).
inline Recompute recompute_named(const std::string& r) {
  if (r.rfind("layers", 0) == 0 || r.rfind("every", 0) == 0) return Recompute::full;
  return r == "full" ? Recompute::full : r == "selective" ? Recompute::selective : Recompute::none;
}
inline int64_t recompute_count_named(const std::string& r, const char* prefix) {
  const std::string p(prefix);
  return r.rfind(p, 0) == 0 ? std::stoll(r.substr(p.size())) : 0;
}

// A committed report's JSON (reports/NAME).
inline nlohmann::json report_json(const std::string& name) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/reports/" + name);
  if (!in.good()) throw std::runtime_error("cannot read reports/" + name);
  return nlohmann::json::parse(in);
}

// A case's model: a preset name, or a YAML path under bench/torch/ (compare.py keeps it relative to the repository).
inline ModelSpec case_model(const PresetStore& presets, const std::string& model) {
  if (model.size() < 5 || model.substr(model.size() - 5) != ".yaml") return presets.model(model);
  const std::size_t at = model.find("bench/torch/");
  return presets.model_file(std::string(SHARDPLAN_SOURCE_DIR) + "/" + (at == std::string::npos ? model : model.substr(at)));
}

// A case's strategy: FSDP2 (ZeRO-2/3, per-block units and the root, or the ends as units too where `wrap` is `titan`;
// `hf` as --framework fsdp, `titan` as torchtitan)
// over ranks / tp data-parallel ranks, sharded within groups of `hsdp` where set, torchtitan's TP plan with sequence
// parallelism where tp > 1, `grad_accum` micro-batches a step; bf16 parameters, fp32 reductions.
inline Strategy case_strategy(const nlohmann::json& c) {
  Strategy s;
  s.framework = c["impl"] == "titan" ? Framework::torchtitan : Framework::fsdp;
  s.precision = Precision::amp_bf16;
  s.gpus = c["ranks"];
  s.tp = c.value("tp", 1);
  s.sp = s.tp > 1;
  s.cp = c.value("cp", 1);  // fsdp2_mem.py --cp: torch's ring under torchtitan's (dp_shard, cp) mesh
  s.dp = s.gpus / s.tp / s.cp;
  s.kv_repeated = c.value("kv", std::string("grouped")) == "repeated";
  s.zero = c["zero"];
  s.recompute = recompute_named(c["recompute"]);
  s.recompute_layers = recompute_count_named(c["recompute"], "layers");
  s.recompute_every = recompute_count_named(c["recompute"], "every");
  s.hsdp = c.value("hsdp", 0);
  s.seq = c["seq"];
  s.micro_batch = c["micro_batch"];
  s.global_batch = s.micro_batch * s.dp * c.value("grad_accum", 1);
  // fsdp2_mem.py --wrap: `blocks` (the default) puts the embedding and LM head in the root, as torchtitan did before
  // 2025-07-28; `titan` gives them units of their own, as torchtitan does today (compare.py end_units).
  s.end_units_own = c.value("wrap", std::string("blocks")) == "titan";
  return s;
}

// torchtitan's FSDP2 over `ranks` data-parallel ranks, one micro-batch a step, bf16 parameters and fp32 reductions.
inline Strategy titan_strategy(int64_t ranks, int zero, Recompute rc, int64_t seq) {
  Strategy s;
  s.framework = Framework::torchtitan;
  s.precision = Precision::amp_bf16;
  s.gpus = s.dp = ranks;
  s.zero = zero;
  s.recompute = rc;
  s.seq = seq;
  s.micro_batch = 1;
  s.global_batch = ranks;
  return s;
}

}  // namespace shardplan::test
