#include "cli/render_plan.hpp"

#include <fmt/format.h>

#include "cli/render_prediction.hpp"
#include "planner/error.hpp"

namespace shardplan::cli {

namespace {

using nlohmann::json;

std::string layout(const Strategy& s) {
  std::string out = fmt::format("tp {} pp {} dp {}", s.tp, s.pp, s.dp);
  if (s.vpp > 1) out += fmt::format(" vpp {}", s.vpp);
  if (s.sp) out += " sp";
  if (s.hsdp > 0) out += fmt::format(" hsdp {}", s.hsdp);
  return out;
}

double tokens_per_gpu(const Candidate& c) { return c.tokens_per_s / static_cast<double>(c.strategy.gpus); }

std::string header(const PlanReport& r) {
  const Strategy& b = r.space.base;
  std::string out;
  if (r.cluster_defaulted) out += "note: no --cluster or --gpu given; using the a800x8 preset\n";
  out += fmt::format("plan: {} ({:.2f} B parameters) on {} × {} (cluster {}), {}, {}\n", r.model.name,
                     count_params(r.model).total / 1e9, b.gpus, r.cluster.gpu.name, r.cluster.name,
                     to_string(b.precision), to_string(b.framework));
  out += fmt::format("  global batch {} sequences × {} tokens = {:.2f} M tokens per step; objective: {}\n",
                     b.global_batch, b.seq, static_cast<double>(b.global_batch * b.seq) / 1e6,
                     to_string(r.space.objective));
  out += fmt::format("  searched {} configurations in {:.1f} ms; {} fit under 80 % of HBM\n\n", r.result.evaluated,
                     r.search_ms, r.result.fitting);
  return out;
}

std::string ranked_table(const PlanReport& r) {
  std::string out = fmt::format("  {:<3}{:<24}{:<34}{:>4}{:>11}{:>9}{:>6}{:>9}{:>11}{:>7}", "#", "strategy", "layout",
                                "mb", "recompute", "peak GB", "HBM%", "step s", "tok/s/GPU", "MFU");
  out += r.training ? fmt::format("{:>9}\n", "days") : "\n";
  for (size_t i = 0; i < r.top.size(); ++i) {
    const Prediction& p = r.top[i];
    const Strategy& s = p.strategy;
    out += fmt::format("{}{:<3}{:<24}{:<34}{:>4}{:>11}{:>9.1f}{:>5.0f}%{:>9.2f}{:>11.0f}{:>6.1f}%", i == r.recommended ? "→ " : "  ", i + 1,
                       family_of(s), layout(s), s.micro_batch, to_string(s.recompute), p.peak_bytes() / kGB,
                       100.0 * static_cast<double>(p.peak_bytes()) / static_cast<double>(p.memory.capacity_bytes),
                       p.time.step_s, p.throughput.tokens_per_s_per_gpu, 100 * p.throughput.mfu);
    const auto e = prediction_training(p, r.training);
    out += e ? fmt::format("{:>9.1f}\n", e->days) : "\n";
  }
  return out;
}

// What costs the most time beyond compute: the word for why a slower candidate loses.
std::string main_overhead(const StepTime& t) {
  const std::pair<const char*, double> parts[] = {{"exposed data-parallel communication", t.exposed_dp_s},
                                                  {"tensor-parallel communication", t.exposed_tp_s},
                                                  {"pipeline bubble", t.bubble_s + t.exposed_pp_s},
                                                  {"optimizer step", t.optimizer_s}};
  const auto* top = &parts[0];
  for (const auto& p : parts)
    if (p.second > top->second) top = &p;
  return fmt::format("{} {:.2f} s", top->first, top->second);
}

std::string recommendation(const PlanReport& r) {
  const Prediction& best = r.top[r.recommended];
  const Strategy& s = best.strategy;
  std::string out = fmt::format(
      "\nRecommended: {} ({}), micro-batch {} × {} accumulation steps, recompute {}{}.\n", family_of(s), layout(s),
      s.micro_batch, grad_accum_steps(s), to_string(s.recompute), s.flash_attn ? ", flash attention" : "");
  if (r.recommended != 0) {
    const Prediction& fastest = r.top.front();
    out += fmt::format(
        "  The fastest, {} ({}), is only {:.2g} % faster and needs more moving parts; within {:.0f} % the simplest "
        "strategy wins.\n",
        family_of(fastest.strategy), layout(fastest.strategy),
        100 * (fastest.throughput.tokens_per_s / best.throughput.tokens_per_s - 1), 100 * kSimplicityTolerance);
  }
  out += fmt::format(
      "  {:.0f} tokens/s per GPU, MFU {:.1f} %, step {:.2f} s; peak {:.1f} GB of {:.1f} GB ({:.0f} %); compute is "
      "{:.0f} % of the step, the largest overhead is {}.\n",
      best.throughput.tokens_per_s_per_gpu, 100 * best.throughput.mfu, best.time.step_s, best.peak_bytes() / kGB,
      best.memory.capacity_bytes / kGB, 100.0 * best.peak_bytes() / static_cast<double>(best.memory.capacity_bytes),
      100 * best.time.compute_s / best.time.step_s, main_overhead(best.time));
  if (const auto e = prediction_training(best, r.training)) out += "  Training " + training_line(*e) + ".\n";
  return out;
}

std::string family_verdict(const Candidate& c, const Candidate& best) {
  if (!c.within_safety()) return fmt::format("does not fit: {}", why_not_fit(c));
  const double slower = 1 - tokens_per_gpu(c) / tokens_per_gpu(best);
  if (slower <= 0.0005 && slower >= -0.0005) return "as fast as the recommendation";
  if (slower < 0)
    return fmt::format("fits ({:.1f} GB) and is {:.1f} % faster ({}, mb {}), but adds {}", c.peak_total() / kGB,
                       -100 * slower, layout(c.strategy), c.strategy.micro_batch,
                       c.strategy.pp > 1 ? "a pipeline" : c.strategy.tp > 1 ? "tensor parallelism" : "complexity");
  return fmt::format("fits ({:.1f} GB) but {:.1f} % slower at its best ({}, mb {}, recompute {}): {}",
                     c.peak_total() / kGB, 100 * slower, layout(c.strategy), c.strategy.micro_batch,
                     to_string(c.strategy.recompute), main_overhead(c.time));
}

// Families simpler than the recommendation always; all families with --all.
std::string why_others_lose(const PlanReport& r) {
  const Candidate& best = *r.result.recommended;
  const std::string chosen = family_of(best.strategy);
  std::string out = r.show_all ? "\nEvery strategy family at its best:\n" : "\nWhy not the others:\n";
  size_t shown = 0;
  for (const Candidate& c : r.result.families) {
    const std::string fam = family_of(c.strategy);
    if (fam == chosen) continue;
    const bool simpler = c.strategy.tp == 1 && c.strategy.pp == 1 && c.strategy.hsdp == 0 && !c.strategy.offload_optimizer;
    if (!r.show_all && !simpler && shown >= 6) continue;
    out += fmt::format("  {:<24}{}\n", fam + ":", family_verdict(c, best));
    ++shown;
  }
  if (!r.show_all) out += "  (--all lists every family)\n";
  return out;
}

// A candidate's peak by component, rounded as predict's memory.components.
json components_json(const MemoryComponents& m) {
  json out = json::object();
  for (const NamedBytes& nb : component_bytes(m)) out[nb.name] = nb.bytes;
  return out;
}

json family_json(const Candidate& c) {
  return {{"family", family_of(c.strategy)},
          {"fits", c.within_safety()},
          {"peak_bytes", bytes_to_int(c.peak_total())},
          {"tokens_per_s_per_gpu", tokens_per_gpu(c)},
          {"tp", c.strategy.tp},
          {"pp", c.strategy.pp},
          {"dp", c.strategy.dp},
          {"zero", c.strategy.zero},
          {"hsdp", c.strategy.hsdp},
          {"micro_batch", c.strategy.micro_batch},
          {"recompute", to_string(c.strategy.recompute)},
          {"reason", c.within_safety() ? "" : why_not_fit(c)},
          {"components", components_json(c.memory.peak)}};  // the peak by component (reports chart it)
}

}  // namespace

json plan_json(const PlanReport& r) {
  json candidates = json::array();
  for (const Prediction& p : r.top) candidates.push_back(prediction_json(p, r.training));
  json rejected = json::array(), families = json::array();
  for (const Candidate& c : r.result.families) {
    families.push_back(family_json(c));
    if (!c.within_safety()) rejected.push_back({{"config", family_json(c)}, {"reason", why_not_fit(c)}});
  }
  return {{"candidates", candidates},
          {"recommended", r.recommended},
          {"rejected", rejected},
          {"families", families},
          {"evaluated", r.result.evaluated},
          {"fitting", r.result.fitting},
          {"search_ms", r.search_ms},
          {"objective", to_string(r.space.objective)}};
}

std::string render_plan_table(const PlanReport& r) {
  return header(r) + ranked_table(r) + recommendation(r) + why_others_lose(r);
}

std::string render_plan(const PlanReport& r, const std::string& format) {
  if (format == "table") return render_plan_table(r);
  if (format == "markdown") return "```\n" + render_plan_table(r) + "```\n";
  if (format == "json") return plan_json(r).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(plan_json(r));
  if (format == "csv") return json_to_csv(plan_json(r));
  throw InputError(fmt::format("--format '{}' is not one of: table, json, yaml, csv, markdown", format));
}

}  // namespace shardplan::cli
