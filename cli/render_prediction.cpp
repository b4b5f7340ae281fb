#include "cli/render_prediction.hpp"

#include <cmath>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "cli/render_network.hpp"
#include "planner/context_parallel.hpp"
#include "planner/error.hpp"
#include "planner/partition.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/recompute_modules.hpp"
#include "planner/framework.hpp"
#include "planner/moe_costs.hpp"

namespace shardplan::cli {

namespace {

using nlohmann::json;

const char* zero_label(int zero) {
  static const char* const labels[] = {"DDP (ZeRO-0)", "ZeRO-1", "ZeRO-2 (SHARD_GRAD_OP)", "ZeRO-3 (FULL_SHARD)"};
  return (zero >= 0 && zero <= 3) ? labels[zero] : "?";
}

int64_t rounded(double v) { return static_cast<int64_t>(std::llround(v)); }

// --rope-cache as priced: none where the runtime keeps no RoPE tables (FrameworkTraits::rope_tables).
const char* rope_cache_name(const Strategy& s) {
  const RopeTables kept = framework_traits(s.framework).rope_tables;
  if (kept == RopeTables::none) return "none";
  return s.rope_cache_per_layer.value_or(kept == RopeTables::per_layer) ? "per-layer" : "shared";
}

std::string gb(double bytes) { return fmt::format("{:.2f}", bytes / kGB); }

int64_t nodes(const Prediction& p) {
  return (p.strategy.gpus + p.cluster.gpus_per_node - 1) / p.cluster.gpus_per_node;
}

// The pipeline's split (planner/pipeline_layout.hpp): the flags in effect and the blocks of every rank's chunks.
json pipeline_json(const Prediction& p) {
  const Strategy& s = p.strategy;
  json ranks = json::array();
  for (int64_t r = 0; r < s.pp; ++r) {
    json chunks = json::array();
    for (int64_t c = 0; c < chunks_per_rank(s); ++c) chunks.push_back(chunk_layers(p.model, s, r, c));
    ranks.push_back(chunks);
  }
  json out = {{"first_layers", s.split.first_layers},
              {"last_layers", s.split.last_layers},
              {"embedding_layers", effective_embedding_layers(s)},
              {"loss_layers", effective_loss_layers(s)},
              {"chunk_layers", ranks}};
  // Megatron's per-stage layout (--pp-layout), as the flag takes it back.
  if (has_stage_layout(s)) out["layout"] = megatron_layout_of(p.model, s);
  return out;
}

json config_json(const Prediction& p) {
  const Strategy& s = p.strategy;
  return {{"model", p.model.name},
          {"cluster", p.cluster.name},
          {"gpu", p.cluster.gpu.name},
          {"gpus", s.gpus},
          {"gpus_per_node", p.cluster.gpus_per_node},
          {"nodes", nodes(p)},
          {"inter_node_gbps", p.cluster.inter.node_gbps()},
          {"tp", s.tp},
          {"pp", s.pp},
          {"cp", s.cp},
          {"ep", s.ep},
          {"etp", expert_tensor_parallel(s)},
          {"ep_comm_overlap", effective_ep_comm_overlap(s, framework_traits(s.framework))},
          {"cuda_graphs", to_string(s.cuda_graphs)},
          {"moe_dispatcher", to_string(s.moe_dispatcher)},
          {"moe_capacity_factor", s.moe_capacity_factor},
          {"dp", s.dp},
          {"vpp", s.vpp},
          {"schedule", to_string(s.schedule)},
          {"sp", s.sp},
          {"zero", s.zero},
          {"hsdp", s.hsdp},
          {"shard_degree", shard_degree(s)},
          {"recompute", to_string(s.recompute)},
          {"recompute_modules", recompute_modules_string(recompute_modules_in_force(s))},
          {"recompute_layers", s.recompute_layers},
          {"recompute_every", s.recompute_every},
          {"flash_attn", s.flash_attn},
          {"compile", s.compile},
          {"micro_batch", s.micro_batch},
          {"global_batch", s.global_batch},
          {"grad_accum", grad_accum_steps(s)},
          {"seq", s.seq},
          {"precision", to_string(s.precision)},
          {"framework", to_string(s.framework)},
          {"offload_optimizer", s.offload_optimizer},
          {"offload_activation_layers", s.offload_activation_layers},
          {"expandable_segments", effective_expandable_segments(s, framework_traits(s.framework))},
          {"precision_aware_optimizer", s.precision_aware_optimizer},
          {"adam_moments", s.bf16_adam_moments ? "bf16" : "fp32"},
          {"optimizer", to_string(s.optimizer)},
          {"muon_tp_mode", to_string(s.muon_tp_mode)},
          {"loss", to_string(s.loss)},
          {"fp8", to_string(s.fp8)},
          {"fp8_all_gather", s.fp8_all_gather},
          {"attention_kernel", s.flash_attn ? to_string(s.attention_kernel.value_or(framework_traits(s.framework).attention_kernel)) : "none"},
          {"attention_kv", s.kv_repeated ? "repeated" : "grouped"},
          {"fsdp_end_units", s.end_units_own.value_or(framework_traits(s.framework).end_units_own) ? "own" : "root"},
          {"rope_cache", rope_cache_name(s)},
          {"moe_probs", to_string(effective_moe_probs(s, framework_traits(s.framework)))},
          {"grad_sync", to_string(effective_grad_sync(s))},
          {"pipeline", pipeline_json(p)}};
}

// The busiest stage's model states under ZeRO stage z, with EP's routed experts sharded over the expert-DP group
// (planner/memory.hpp stage_model_states).
MemoryComponents states_at_zero(const Prediction& p, int z) {
  Strategy s = p.strategy;
  s.zero = z;
  return stage_model_states(stage_params(p.model, s, p.memory.peak_stage().stage), s);
}

json model_json(const Prediction& p) {
  const StageMemory& st = p.memory.peak_stage();
  Strategy fp32 = p.strategy;
  fp32.precision = Precision::fp32;
  const double stored =
      stage_model_states(stage_params(p.model, fp32, st.stage), fp32).params / 4.0;
  return {{"params", p.params.total},
          {"active_params", p.params.active},  // planner/moe.hpp: = params for a dense model (issue 17)
          {"mtp_params", p.params.mtp},
          {"params_per_rank", st.params_per_rank},
          {"params_stored_per_rank", rounded(stored)},
          {"parts",
           {{"blocks", p.params.blocks},
            {"per_block", p.params.block.total()},
            {"embedding", p.params.embedding},
            {"position_embedding", p.params.position_embedding},
            {"final_norm", p.params.final_norm},
            {"lm_head", p.params.lm_head}}}};
}

json memory_json(const Prediction& p) {
  const MemoryEstimate& m = p.memory;
  const StageMemory& st = m.peak_stage();
  json components = json::object();
  for (const NamedBytes& nb : component_bytes(st.peak)) components[nb.name] = nb.bytes;
  json items = json::array();
  for (const MemoryItem& it : st.items)
    items.push_back({{"component", it.component}, {"what", it.what}, {"bytes", rounded(it.bytes)}});
  json stages = json::array();
  for (const StageMemory& s : m.stages)
    stages.push_back({{"stage", s.stage}, {"peak_bytes", peak_bytes(s.peak)}, {"phase", to_string(s.peak_phase)},
                      {"block", s.peak_block}});
  json by_zero = json::array();
  for (int z = 0; z <= 3; ++z) {
    MemoryComponents c = states_at_zero(p, z);
    if (p.strategy.offload_optimizer && z > 0) c.master = c.optimizer = 0;  // on the host (ZeRO-Offload)
    by_zero.push_back({{"zero", z}, {"bytes", rounded(c.model_states())}});
  }
  // The moment of the most allocated (what torch.cuda.max_memory_allocated and PyTorch's memory trackers report),
  // less the CUDA/NCCL runtime and the allocator's reserve, which they do not see.
  json allocated_components = json::object();
  for (const NamedBytes& nb : component_bytes(st.allocated)) allocated_components[nb.name] = nb.bytes;
  const json allocated = {
      {"bytes", bytes_to_int(st.allocated.total() - st.allocated.runtime - st.allocated.fragmentation)},
      {"phase", to_string(st.allocated_phase)},
      {"block", st.allocated_block},
      {"components", allocated_components}};
  const int64_t peak = p.peak_bytes();
  return {{"peak_bytes", peak},
          {"capacity_bytes", m.capacity_bytes},
          {"fits", p.fits()},
          {"within_safety_margin", p.fit_bytes() <= m.max_hbm_fraction * static_cast<double>(m.capacity_bytes)},
          {"max_hbm_fraction", m.max_hbm_fraction},
          {"fit_rule", memory_fit_rule(m.max_hbm_fraction, m.expandable_segments)},
          {"expandable_segments", m.expandable_segments},
          {"fit_bytes", bytes_to_int(p.fit_bytes())},
          {"headroom_bytes", m.capacity_bytes - bytes_to_int(p.fit_bytes())},  // what can still be allocated
          {"peak_stage", st.stage},
          {"peak_phase", to_string(st.peak_phase)},
          {"model_states_bytes", rounded(st.peak.model_states())},
          {"components", components},
          {"items", items},
          {"stages", stages},
          {"allocated", allocated},
          {"model_states_by_zero", by_zero},
          {"host",
           {{"bytes_per_rank", rounded(m.host_bytes_per_rank)},
            {"activation_bytes_per_rank", rounded(m.host_activation_bytes_per_rank)},
            {"bytes_per_node", rounded(m.host_bytes_per_node)},
            {"capacity_bytes_per_node", rounded(m.host_capacity_bytes)}}}};
}

json flops_json(const Prediction& p) {
  json parts = json::array();
  for (const FlopsPart& part : p.flops.parts)
    parts.push_back({{"name", part.name}, {"forward", part.forward}, {"backward", part.backward},
                     {"recompute", part.recompute}});
  return {{"tokens_per_step", p.flops.tokens},
          {"model_flops", p.flops.model_flops},
          {"hardware_flops", p.flops.hardware_flops},
          {"model_flops_per_token", p.flops.model_flops_per_token()},
          {"parts", parts}};
}

}  // namespace

std::optional<TrainingEstimate> prediction_training(const Prediction& p, const std::optional<TrainingGoal>& goal) {
  if (!goal || !p.time.modelled) return std::nullopt;
  return estimate_training(*goal, p.throughput.tokens_per_s, p.strategy.gpus, p.strategy.global_batch * p.strategy.seq);
}

namespace {

json training_json(const TrainingEstimate& e) {
  return {{"tokens", e.tokens},
          {"tokens_per_s", e.tokens_per_s},
          {"gpus", e.gpus},
          {"seconds", e.seconds},
          {"days", e.days},
          {"gpu_hours", e.gpu_hours},
          {"steps", e.steps},
          {"gpu_hour_price", e.gpu_hour_price ? json(*e.gpu_hour_price) : json(nullptr)},
          {"cost", e.cost ? json(*e.cost) : json(nullptr)}};
}

// 2e12 → "2 T", 3e11 → "300 B", 1234 → "1234".
std::string token_count(double tokens) {
  const std::pair<double, const char*> units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& [scale, unit] : units)
    if (tokens >= scale) return fmt::format("{:.4g} {}", tokens / scale, unit);
  return fmt::format("{:.0f}", tokens);
}

}  // namespace

std::string training_line(const TrainingEstimate& e) {
  std::string out = fmt::format("{} tokens: {:.1f} days on {} GPUs, {:.0f} GPU-hours", token_count(e.tokens), e.days,
                                e.gpus, e.gpu_hours);
  if (e.cost) out += fmt::format(", cost {:.2f} at {:.2f} per GPU-hour", *e.cost, *e.gpu_hour_price);
  return out;
}

json prediction_json(const Prediction& p, const std::optional<TrainingGoal>& goal) {
  const StepTime& t = p.time;
  const Throughput& r = p.throughput;
  json out = {{"config", config_json(p)},
          {"model", model_json(p)},
          {"memory", memory_json(p)},
          {"flops", flops_json(p)},
          {"time",
           {{"modelled", t.modelled},
            {"step_s", t.step_s},
            {"compute_s", t.compute_s},
            {"exposed_comm_s", t.exposed_comm_s},
            {"bubble_s", t.bubble_s},
            {"optimizer_s", t.optimizer_s},
            {"exposed_comm_by_group_s",
             {{"tp", t.exposed_tp_s}, {"cp", t.exposed_cp_s}, {"pp", t.exposed_pp_s}, {"dp", t.exposed_dp_s},
              {"ep", t.exposed_ep_s}}},
            {"dp_comm_total_s", t.dp_comm_total_s},
            {"overlap_slowdown_s", t.overlap_slowdown_s}}},
          {"throughput",
           {{"tokens_per_s", r.tokens_per_s},
            {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
            {"model_tflops_per_gpu", r.model_tflops_per_gpu},
            {"hardware_tflops_per_gpu", r.hardware_tflops_per_gpu},
            {"mfu", r.mfu},
            {"hfu", r.hfu}}}};
  if (p.band) {
    // CONTRACT.md: the range the measured errors of comparable published runs imply, and which runs those are.
    out["time"]["step_s_low"] = p.band->step_low_s;
    out["time"]["step_s_high"] = p.band->step_high_s;
    out["time"]["band_basis"] = p.band->basis;
  }
  out["network"] = network_json(p);  // which tier each group's collectives reach (cli/render_network.hpp)
  if (const auto e = prediction_training(p, goal)) out["training"] = training_json(*e);
  return out;
}

namespace {

std::string headline(const Prediction& p) {
  const Strategy& s = p.strategy;
  const std::string active = p.params.active < p.params.total  // MoE (issue 17)
                                 ? fmt::format(", {} active", format_param_count(static_cast<double>(p.params.active)))
                                 : std::string();
  std::string out = fmt::format("{} ({} parameters{}) on {} × {} — cluster {}, {} node{}\n", p.model.name,
                                format_param_count(static_cast<double>(p.params.total)), active, s.gpus,
                                p.cluster.gpu.name, p.cluster.name, nodes(p),
                                nodes(p) == 1 ? "" : "s");
  const std::string stages = describe_stage_layers(p.model, s);
  out += fmt::format("  tp {} · pp {}{} · dp {}{} · {}{} · {} · {}\n", s.tp, s.pp,
                     (s.vpp > 1 ? fmt::format(" (vpp {})", s.vpp) : "") +
                         (s.pp > 1 ? fmt::format(" {} · blocks per stage {}", to_string(s.schedule), stages) : "") +
                         (s.cp > 1 ? fmt::format(" · cp {} ({})", s.cp, to_string(cp_comm(s.framework))) : ""),
                     s.dp, s.ep > 1 ? fmt::format(" · ep {} (expert TP {}, expert-DP {})", s.ep, expert_tensor_parallel(s),
                                           expert_data_parallel(s))
                               : "",
                     zero_label(s.zero),
                     (s.hsdp > 0 ? fmt::format(" HSDP groups of {}", s.hsdp) : "") +
                         std::string(s.optimizer == OptimizerKind::muon
                                         ? (s.zero >= 1 ? " · Muon (layer-wise distributed" : " · Muon (") +
                                               std::string(s.zero >= 1 ? ", " : "") + "TP mode " +
                                               to_string(s.muon_tp_mode) + ")"
                                         : ""),
                     std::string(to_string(s.precision)) +
                         (s.fp8 != Fp8Recipe::off ? fmt::format(" · FP8 GEMMs ({}{})", to_string(s.fp8),
                                                                s.fp8_all_gather ? ", FP8 all-gather" : "")
                                                  : ""),
                     to_string(s.framework));
  const std::string recompute =
      s.recompute_modules ? fmt::format("selective ({})", recompute_modules_string(s.recompute_modules))
      : partial_recompute(s) ? fmt::format("full, {} block{} of each chunk", recompute_label(s), s.recompute_layers > 1 ? "s" : "")
                             : std::string(to_string(s.recompute));
  out += fmt::format("  micro-batch {} × {} micro-batches · global batch {} · seq {} · recompute {} · {}{}{}\n",
                     s.micro_batch, grad_accum_steps(s), s.global_batch, s.seq, recompute,
                     s.flash_attn ? "flash attention" : "no flash attention", s.sp ? " · sequence parallel" : "",
                     s.offload_optimizer ? " · optimizer offloaded" : "");
  return out;
}

std::string memory_table(const Prediction& p, const Terminal& term) {
  const MemoryEstimate& m = p.memory;
  const StageMemory& st = m.peak_stage();
  std::string out = fit_lines(fmt::format("\nMemory per GPU (busiest rank: pipeline stage {}, peak during {}), GB = 10^9 bytes\n",
                                          st.stage, to_string(st.peak_phase)), term.width);
  // component | what (cut first on a narrow terminal) | GB
  TextTable table("  ", {{"", 14, false, 0, false}, {"", 70, false, 0, true}, {"", 9, true, 0, false}});
  std::string last_component;
  for (const MemoryItem& it : st.items) {
    table.add_row({it.component == last_component ? "" : it.component, it.what, gb(it.bytes)});
    last_component = it.component;
  }
  const int64_t peak = p.peak_bytes();
  table.add_row({"peak", gb(static_cast<double>(peak))}, "", false, 2);
  table.add_row({p.cluster.gpu.cpu_ranks
                     ? fmt::format("capacity (the base preset's {} GiB; CPU ranks use host memory)", p.cluster.gpu.memory_gib)
                     : fmt::format("capacity ({} GiB = {} GB)", p.cluster.gpu.memory_gib, gb(static_cast<double>(m.capacity_bytes))),
                 gb(static_cast<double>(m.capacity_bytes))}, "",
                false, 2);
  out += table.render(term);
  // What decides the fit: the peak, or under expandable segments the peak less the allocator's reserve.
  const double need = p.fit_bytes();
  const double used = need / static_cast<double>(m.capacity_bytes);
  const std::string less = m.expandable_segments ? " (peak less the allocator reserve: expandable segments)" : "";
  if (!p.fits()) {
    out += fmt::format("  {}: {} GB over capacity ({:.0f} % of HBM){}\n", paint("DOES NOT FIT", Style::red, term.color),
                       gb(need - static_cast<double>(m.capacity_bytes)), used * 100, less);
  } else {
    out += fmt::format("  {}: {:.0f} % of HBM{}, {} GB headroom{}\n", paint("fits", Style::green, term.color), used * 100,
                       less, gb(static_cast<double>(m.capacity_bytes) - need),
                       used <= m.max_hbm_fraction
                           ? ""
                           : fmt::format(" — above the {:.0f} % line that planned runs keep under", m.max_hbm_fraction * 100));
  }
  out += fit_lines("  " + memory_fit_rule(m.max_hbm_fraction, m.expandable_segments) + "\n", term.width);
  if (m.host_bytes_per_rank > 0) {
    const bool acts = m.host_activation_bytes_per_rank > 0, states = m.host_bytes_per_rank > m.host_activation_bytes_per_rank;
    out += fmt::format("  host memory ({}): {} GB per rank, {} GB per node",
                       acts && states ? "offloaded optimizer and activations" : acts ? "offloaded activations" : "offloaded optimizer",
                       gb(m.host_bytes_per_rank), gb(m.host_bytes_per_node));
    out += m.host_capacity_bytes > 0 ? fmt::format(" of {} GB\n", gb(m.host_capacity_bytes)) : "\n";
  }
  return out;
}

std::string zero_comparison(const Prediction& p, const Terminal& term) {
  const StageMemory& st = p.memory.peak_stage();
  const double psi = static_cast<double>(st.params_per_rank);
  const int64_t n = shard_degree(p.strategy);
  std::string out = fit_lines(fmt::format(
      "\nModel states per GPU by ZeRO stage ({:.3f} B parameters on this rank, {}, sharded over {}{}):\n", psi / 1e9,
      to_string(p.strategy.precision), n,
      p.strategy.ep > 1 ? fmt::format("; routed experts over the expert-DP group of {}", expert_data_parallel(p.strategy))
                        : ""), term.width);
  TextTable table("  ", {{"", 24, false, 0, true}, {"params", 9, true, 3}, {"grads", 9, true, 2}, {"master", 9, true, 2},
                         {"optimizer", 11, true, 1}, {"total", 9, true, 0}, {"", 0, false, 4}});
  table.add_header();
  // ZeRO-Offload keeps the master copy and the optimizer states on the host (memory.host_*), not on the GPU.
  const bool offloaded = p.strategy.offload_optimizer;
  if (offloaded) out += "  (optimizer offloaded: master weights and optimizer states are on the host, 0 on the GPU)\n";
  // Megatron-Core runs Muon with ZeRO 0 or 1 only (planner/optimizer.hpp muon_refusal): the other rows are what the
  // states would take, not layouts it runs.
  if (p.strategy.optimizer == OptimizerKind::muon)
    out += "  (Muon: Megatron-Core runs it with ZeRO-0 and ZeRO-1 only; ZeRO-2/3 rows for comparison)\n";
  for (int z = 0; z <= 3; ++z) {
    MemoryComponents c = states_at_zero(p, z);
    if (offloaded && z > 0) c.master = c.optimizer = 0;
    const bool over = c.model_states() > static_cast<double>(p.memory.capacity_bytes);
    table.add_row({zero_label(z), gb(c.params), gb(c.grads), gb(c.master), gb(c.optimizer), gb(c.model_states()),
                   over ? "  > capacity before activations" : ""});
  }
  return out + table.render(term);
}

std::string flops_and_time(const Prediction& p, const Terminal& term) {
  const StepTime& t = p.time;
  const Throughput& r = p.throughput;
  std::string out = fmt::format("\nFLOPs per step: model {:.3g} PFLOP ({:.3g} GFLOP/token), hardware {:.3g} PFLOP\n",
                                p.flops.model_flops / 1e15, p.flops.model_flops_per_token() / 1e9,
                                p.flops.hardware_flops / 1e15);
  if (!t.modelled) return out;
  // what | seconds | share of the step
  TextTable table("  ", {{"", 40, false, 0, true}, {"", 12, true, 0}, {"", 10, true, 1}});
  auto row = [&](const std::string& what, double s) {
    table.add_row({what, fmt::format("{:.3f} s", s), fmt::format("{:.1f} %", t.step_s > 0 ? 100 * s / t.step_s : 0)});
  };
  out += "\nStep time (busiest pipeline stage)\n";
  row("compute (incl. recomputation)", t.compute_s - t.overlap_slowdown_s);
  if (t.overlap_slowdown_s > 0) row("compute slowed by overlapped comm", t.overlap_slowdown_s);
  if (t.exposed_tp_s > 0) row("tensor-parallel comm (exposed)", t.exposed_tp_s);
  if (t.exposed_cp_s > 0) row("context-parallel K/V ring (exposed)", t.exposed_cp_s);
  if (t.exposed_pp_s > 0) row("pipeline sends (exposed)", t.exposed_pp_s);
  if (t.exposed_ep_s > 0) row("expert-parallel all-to-all (exposed)", t.exposed_ep_s);
  if (t.dp_comm_total_s > 0) row(fmt::format("data-parallel comm exposed (of {:.3f} s)", t.dp_comm_total_s), t.exposed_dp_s);
  if (t.bubble_s > 0) row("pipeline bubble", t.bubble_s);
  row("optimizer step", t.optimizer_s);
  row("step", t.step_s);
  out += table.render(term);
  out += fmt::format("  {:.0f} tokens/s, {:.0f} tokens/s per GPU, {:.0f} model TFLOP/s per GPU (MFU {:.1f} %, HFU {:.1f} %)\n",
                     r.tokens_per_s, r.tokens_per_s_per_gpu, r.model_tflops_per_gpu, 100 * r.mfu, 100 * r.hfu);
  if (p.band)
    out += fmt::format("  Error band: step {:.3f}–{:.3f} s, from the measured/predicted steps of {} ({}; "
                       "bench/shardplan_accuracy)\n",
                       p.band->step_low_s, p.band->step_high_s, p.band->basis,
                       p.band->runs >= kPercentileRuns ? "10th–90th percentile" : "their smallest and largest");
  else
    out += "  Error band: none (no comparable published runs of this framework family)\n";
  // The routing the MoE terms assume (planner/moe_costs.hpp), said so that a user with measured imbalance knows what
  // it would change; the MoE rows of the public set are outside the band's fit (bench/sustained_fit.cpp).
  if (p.model.experts > 0)
    out += fmt::format("  MoE routing assumed: dropless and balanced ({} of {} experts per token, T·k/E tokens per "
                       "expert); a busiest expert with f× the mean load stretches its grouped GEMMs and all-to-all "
                       "about f×, not modelled\n",
                       p.model.experts_per_token, p.model.experts);
  // The host-bound launch gaps of its eager layers (planner/moe_costs.hpp), which CUDA graphs remove.
  if (p.model.experts > 0) {
    const double gap = moe_host_gap_s(p.model, p.strategy, p.cluster);
    out += gap > 0 ? fmt::format("  MoE host launch gaps: {:.2f} ms per MoE layer and micro-batch in the compute above "
                                 "(eager launches and the {} dispatcher's host sync; --cuda-graphs {}: {})\n",
                                 1e3 * gap, to_string(p.strategy.moe_dispatcher), to_string(p.strategy.cuda_graphs),
                                 p.strategy.cuda_graphs == CudaGraphs::none ? "partial graphs leave the per-expert part, full none"
                                                                            : "full-iteration graphs leave none")
                   : "  MoE host launch gaps: none (full-iteration CUDA graphs)\n";
  }
  return out;
}

}  // namespace

std::string render_prediction_table(const Prediction& p, const std::optional<TrainingGoal>& goal, const Terminal& term) {
  std::string out = headline(p) + memory_table(p, term) + zero_comparison(p, term) + flops_and_time(p, term) +
                    network_lines(p);
  if (const auto e = prediction_training(p, goal)) out += "\nTime to train " + training_line(*e) + "\n";
  return fit_lines(out, term.width);  // the tables fit already; the prose wraps at spaces
}

std::string render_prediction_markdown(const Prediction& p, const std::optional<TrainingGoal>& goal) {
  const StageMemory& st = p.memory.peak_stage();
  std::string out = fmt::format("### {} on {} × {}\n\n", p.model.name, p.strategy.gpus, p.cluster.gpu.name);
  out += "| component | what | GB |\n|---|---|---:|\n";
  for (const MemoryItem& it : st.items) out += fmt::format("| {} | {} | {} |\n", it.component, it.what, gb(it.bytes));
  out += fmt::format("| **peak** | stage {}, {} | **{}** |\n", st.stage, to_string(st.peak_phase),
                     gb(static_cast<double>(p.peak_bytes())));
  out += fmt::format("| capacity | {} | {} |\n", p.fits() ? "fits" : "does not fit",
                     gb(static_cast<double>(p.memory.capacity_bytes)));
  out += "\n" + memory_fit_rule(p.memory.max_hbm_fraction, p.memory.expandable_segments) + ".\n";
  if (const auto e = prediction_training(p, goal)) out += "\nTime to train " + training_line(*e) + ".\n";
  return out;
}

namespace {

void emit_yaml(YAML::Emitter& e, const json& j) {
  if (j.is_object()) {
    e << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      e << YAML::Key << k << YAML::Value;
      emit_yaml(e, v);
    }
    e << YAML::EndMap;
  } else if (j.is_array()) {
    e << YAML::BeginSeq;
    for (const auto& v : j) emit_yaml(e, v);
    e << YAML::EndSeq;
  } else if (j.is_string()) {
    e << j.get<std::string>();
  } else if (j.is_boolean()) {
    e << j.get<bool>();
  } else if (j.is_number_integer()) {
    e << j.get<int64_t>();
  } else if (j.is_number()) {
    e << j.get<double>();
  } else {
    e << YAML::Null;
  }
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void flatten(const json& j, const std::string& prefix, std::string& out) {
  if (j.is_object() || j.is_array()) {
    size_t i = 0;
    for (const auto& [k, v] : j.items()) {
      const std::string key = j.is_array() ? std::to_string(i++) : k;
      flatten(v, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  out += csv_escape(prefix) + "," + csv_escape(j.is_string() ? j.get<std::string>() : j.dump()) + "\n";
}

}  // namespace

std::string json_to_yaml(const json& j) {
  YAML::Emitter e;
  emit_yaml(e, j);
  return std::string(e.c_str()) + "\n";
}

std::string json_to_csv(const json& j) {
  std::string out = "key,value\n";
  flatten(j, "", out);
  return out;
}

std::string render_prediction(const Prediction& p, const std::string& format, const std::optional<TrainingGoal>& goal,
                              const Terminal& term) {
  if (format == "table") return render_prediction_table(p, goal, term);
  if (format == "json") return prediction_json(p, goal).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(prediction_json(p, goal));
  if (format == "csv") return json_to_csv(prediction_json(p, goal));
  if (format == "markdown") return render_prediction_markdown(p, goal);
  throw InputError(fmt::format("--format '{}' is not one of: table, json, yaml, csv, markdown", format));
}

}  // namespace shardplan::cli
