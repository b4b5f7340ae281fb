#include "cli/render_plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cli/render_network.hpp"
#include "cli/render_prediction.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/pipeline_layout.hpp"

namespace shardplan::cli {

namespace {

using nlohmann::json;

std::string layout(const Strategy& s) {
  std::string out = s.cp > 1 ? fmt::format("tp {} pp {} cp {} dp {}", s.tp, s.pp, s.cp, s.dp)
                             : fmt::format("tp {} pp {} dp {}", s.tp, s.pp, s.dp);
  if (s.vpp > 1) out += fmt::format(" vpp {}", s.vpp);
  if (s.pp > 1 && s.schedule != Schedule::one_f_one_b && s.schedule != Schedule::interleaved)
    out += fmt::format(" {}", to_string(s.schedule));
  if (s.sp) out += " sp";
  if (s.hsdp > 0) out += fmt::format(" hsdp {}", s.hsdp);
  if (s.ep > 1) out += fmt::format(" ep {}", s.ep);
  if (s.ep > 1 && s.tp > 1) out += fmt::format(" etp {}", expert_tensor_parallel(s));
  return out;
}

double tokens_per_gpu(const Candidate& c) { return c.tokens_per_s / static_cast<double>(c.strategy.gpus); }

// The recommendation's global batch and, when --global-batch was left out, the rule that chose it
// (planner/batch.hpp): every candidate has the rule's batch for its own dp and micro-batch.
std::string batch_line(const PlanReport& r) {
  const Strategy& s = r.top.empty() ? r.space.base : r.top[r.recommended].strategy;
  if (r.space.batch_default)
    return describe_default_batch(*r.space.batch_default, s.dp, s.micro_batch) +
           " (each candidate: the same rule for its dp and micro-batch)";
  return fmt::format("global batch {} sequences × {} tokens = {:.2f} M tokens per step (--global-batch)", s.global_batch,
                     s.seq, static_cast<double>(s.global_batch * s.seq) / 1e6);
}

std::string header(const PlanReport& r) {
  const Strategy& b = r.space.base;
  std::string out;
  out += fmt::format("plan: {} ({} parameters) on {} × {} (cluster {}), {}, {}\n", r.model.name,
                     format_param_count(static_cast<double>(count_params(r.model).total)), b.gpus, r.cluster.gpu.name, r.cluster.name,
                     std::string(to_string(b.precision)) +
                         (b.optimizer == OptimizerKind::muon ? " with Muon (ZeRO 0 or 1: Megatron-Core's)" : ""),
                     to_string(b.framework));
  out += "  " + batch_line(r) + fmt::format("; objective: {}\n", to_string(r.space.objective));
  const std::string simulated =
      r.simulation ? fmt::format(" simulated the top {} in {:.1f} ms;", r.simulation->window, r.simulation->wall_ms) : "";
  out += fmt::format("  searched {} configurations in {:.1f} ms;{} {} fit under {:.0f} % of HBM\n", r.result.evaluated,
                     r.search_ms, simulated, r.result.fitting, r.space.max_hbm_fraction * 100);
  out += "  " +
         memory_fit_rule(r.space.max_hbm_fraction,
                         effective_expandable_segments(r.space.base, framework_traits(r.space.base.framework))) +
         "\n";
  if (r.folded > 0)
    out += fmt::format("  one row per family and layout: {} variant{} (other vpp, schedule, HSDP group, micro-batch or "
                       "recompute) folded into the best of each\n", r.folded, r.folded == 1 ? "" : "s");
  return out + "\n";
}

const sim::SimulatedCandidate* simulated_at(const PlanReport& r, size_t i) {
  if (!r.simulation || i >= r.simulation->step.size() || !r.simulation->step[i]) return nullptr;
  return &*r.simulation->step[i];
}

// Tokens/s by the simulator where the candidate was simulated, else the analytic figure.
double best_tokens_per_s(const PlanReport& r, size_t i) {
  const sim::SimulatedCandidate* s = simulated_at(r, i);
  return s ? s->tokens_per_s : r.top[i].throughput.tokens_per_s;
}

// The ranked candidates. Fitted to a narrow terminal, the columns go in this order: HBM%, recompute, mb, MFU,
// tok/s/GPU, days; strategy and layout are cut last.
std::string ranked_table(const PlanReport& r, const Terminal& term) {
  // The strategy column as wide as its longest name ("ZeRO-1 + TP + PP + offload" is 26): names ran into the layout.
  size_t strategy_width = 24;
  for (const Prediction& p : r.top) strategy_width = std::max(strategy_width, family_of(p.strategy).size() + 1);
  std::vector<TableColumn> cols = {{"#", 3, false, 0, false},         {"strategy", strategy_width, false, 0, true},
                                   {"layout", 34, false, 0, true},    {"mb", 4, true, 4},
                                   {"recompute", 11, true, 5},        {"peak GB", 9, true, 0},
                                   {"HBM%", 6, true, 6},              {"step s", 9, true, 0}};
  if (r.simulation) cols.push_back({"sim s", 9, true, 0});
  cols.push_back({"tok/s/GPU", 11, true, 2});
  cols.push_back({"MFU", 7, true, 3});
  if (r.training) cols.push_back({"days", 9, true, 1});
  TextTable table("  ", cols);
  table.add_header();
  for (size_t i = 0; i < r.top.size(); ++i) {
    const Prediction& p = r.top[i];
    const Strategy& s = p.strategy;
    std::vector<std::string> cells = {
        std::to_string(i + 1), family_of(s), layout(s), std::to_string(s.micro_batch), recompute_label(s),
        fmt::format("{:.1f}", p.peak_bytes() / kGB),
        fmt::format("{:.0f}%", 100.0 * static_cast<double>(p.peak_bytes()) / static_cast<double>(p.memory.capacity_bytes)),
        fmt::format("{:.2f}", p.time.step_s)};
    if (r.simulation) {
      const sim::SimulatedCandidate* sim = simulated_at(r, i);
      cells.push_back(sim ? fmt::format("{:.2f}", sim->step_s) : "-");
    }
    cells.push_back(fmt::format("{:.0f}", p.throughput.tokens_per_s_per_gpu));
    cells.push_back(fmt::format("{:.1f}%", 100 * p.throughput.mfu));
    if (r.training) {
      const auto e = prediction_training(p, r.training);
      cells.push_back(e ? fmt::format("{:.1f}", e->days) : "");
    }
    table.add_row(std::move(cells), i == r.recommended ? "→ " : "", i == r.recommended);
  }
  return table.render(term);
}

// Which candidates the model cannot tell from the first: those within the search's tie tolerance (the error band of
// comparable published runs, when wider than the simplicity allowance). "" when only the first is that close.
std::string tie_line(const PlanReport& r) {
  if (r.top.empty() || r.result.tie_basis.empty()) return "";
  const double first = best_tokens_per_s(r, 0);
  size_t last = 0;
  for (size_t i = 1; i < r.top.size(); ++i)
    if (best_tokens_per_s(r, i) >= (1 - r.result.tie_tolerance) * first) last = i;
  if (last == 0) return "";
  return fmt::format("  #1–#{} are within {:.0f} % of #1: inside the error band of {}, so the model does not tell "
                     "them apart.\n",
                     last + 1, 100 * r.result.tie_tolerance, r.result.tie_basis);
}

// Why a re-ranked candidate's simulated figure differs from the analytic one: the step, or the peak when the
// objective is memory.
std::string why_simulated(const PlanReport& r, size_t i) {
  const sim::SimulatedCandidate& s = *simulated_at(r, i);
  return r.space.objective == Objective::memory
             ? sim::explain_peak_difference(s, static_cast<double>(r.top[i].peak_bytes()))
             : sim::explain_difference(s, r.top[i].time);
}

// What the simulator did to the order (--simulate-top), in words; "" without it.
std::string rerank_lines(const PlanReport& r) {
  if (!r.simulation) return "";
  const PlanSimulation& sim = *r.simulation;
  std::string out;
  if (!sim.order_changed) {
    double lo = 0, hi = 0;
    bool any = false;
    for (size_t i = 0; i < r.top.size(); ++i)
      if (const sim::SimulatedCandidate* s = simulated_at(r, i)) {
        const double d = 100 * (s->step_s / r.top[i].time.step_s - 1);
        lo = any ? std::min(lo, d) : d;
        hi = any ? std::max(hi, d) : d;
        any = true;
      }
    out += fmt::format("\nSimulated the top {} (--simulate-top {}): the order stands; simulated steps are {:+.1f} to "
                       "{:+.1f} % from the analytic ones.\n", sim.window, sim.k, lo, hi);
  } else {
    out += fmt::format("\nRe-ranked by the simulator (--simulate-top {}; \"sim s\" is the simulated step):\n", sim.k);
    for (size_t i = 0; i < r.top.size(); ++i) {
      const sim::SimulatedCandidate* s = simulated_at(r, i);
      if (!s || sim.analytic_rank[i] == i + 1) continue;
      out += fmt::format("  #{} {} ({}) was #{} analytic: {}.\n", i + 1, family_of(r.top[i].strategy),
                         layout(r.top[i].strategy), sim.analytic_rank[i], why_simulated(r, i));
    }
  }
  for (size_t i = 0; i < r.top.size(); ++i)
    if (!sim.skipped[i].empty()) out += fmt::format("  #{} could not be simulated: {}\n", i + 1, sim.skipped[i]);
  return out;
}

// What costs the most time beyond compute: the word for why a slower candidate loses.
std::string main_overhead(const StepTime& t) {
  const std::pair<const char*, double> parts[] = {{"exposed data-parallel communication", t.exposed_dp_s},
                                                  {"tensor-parallel communication", t.exposed_tp_s},
                                                  {"context-parallel ring", t.exposed_cp_s},
                                                  {"pipeline bubble", t.bubble_s + t.exposed_pp_s},
                                                  {"optimizer step", t.optimizer_s}};
  const auto* top = &parts[0];
  for (const auto& p : parts)
    if (p.second > top->second) top = &p;
  return fmt::format("{} {:.2f} s", top->first, top->second);
}

// The flags that give predict the pipeline split the plan priced, or "" for the runtime's default split.
std::string split_flags(const ModelSpec& m, const Strategy& s) {
  if (s.pp < 2) return "";
  if (has_stage_layout(s)) return fmt::format("--pp-layout '{}'", megatron_layout_of(m, s));
  std::string out;
  auto add = [&](const char* flag, int64_t v) { out += fmt::format("{}{} {}", out.empty() ? "" : " ", flag, v); };
  if (s.split.first_layers > 0) add("--pp-first-layers", s.split.first_layers);
  if (s.split.last_layers > 0) add("--pp-last-layers", s.split.last_layers);
  if (s.split.embedding_layers >= 0) add("--pp-embedding-layers", s.split.embedding_layers);
  if (s.split.loss_layers >= 0) add("--pp-loss-layers", s.split.loss_layers);
  return out;
}

std::string recommendation(const PlanReport& r, const Terminal& term) {
  const Prediction& best = r.top[r.recommended];
  const Strategy& s = best.strategy;
  std::string out = fmt::format(
      "\n{} {} ({}), micro-batch {} × {} accumulation steps, recompute {}{}.\n", paint("Recommended:", Style::bold, term.color),
      family_of(s), layout(s), s.micro_batch, grad_accum_steps(s),
      partial_recompute(s) ? fmt::format("full ({} block{} of each chunk)", recompute_label(s),
                                         s.recompute_layers > 1 ? "s" : "")
                           : std::string(to_string(s.recompute)),
      s.flash_attn ? ", flash attention" : "");
  // The pipeline split searched for it, with the flags that give predict (and --emit) the same one.
  if (s.pp > 1) {
    const std::string flags = split_flags(best.model, s);
    out += fmt::format("  Pipeline: {} schedule, blocks per rank {}{}.\n", to_string(s.schedule),
                       describe_stage_layers(best.model, s),
                       flags.empty() ? fmt::format(" ({}'s default split)", to_string(s.framework))
                                     : fmt::format(" ({})", flags));
  }
  if (r.simulation && r.simulation->recommendation_changed)
    out += fmt::format("  The simulator changed the recommendation: {}.\n", r.simulation->recommendation_note);
  if (r.recommended != 0) {
    // Both simulated: the simulated figures; otherwise the analytic ones.
    const bool simulated = simulated_at(r, 0) && simulated_at(r, r.recommended);
    const double faster = simulated ? best_tokens_per_s(r, 0) / best_tokens_per_s(r, r.recommended)
                                    : r.top.front().throughput.tokens_per_s / best.throughput.tokens_per_s;
    const Prediction& fastest = r.top.front();
    out += fmt::format(
        "  The fastest, {} ({}), is only {:.2g} % faster{} and needs more moving parts; within {:.0f} % the simplest "
        "strategy wins{}.\n",
        family_of(fastest.strategy), layout(fastest.strategy), 100 * (faster - 1), simulated ? " simulated" : "",
        100 * r.result.tie_tolerance,
        r.result.tie_basis.empty()
            ? ""
            : fmt::format(" (the error band of {}: the model cannot tell such gaps apart)", r.result.tie_basis));
  }
  out += fmt::format(
      "  {:.0f} tokens/s per GPU, MFU {:.1f} %, step {:.2f} s; peak {:.1f} GB of {:.1f} GB ({:.0f} %); compute is "
      "{:.0f} % of the step, the largest overhead is {}.\n",
      best.throughput.tokens_per_s_per_gpu, 100 * best.throughput.mfu, best.time.step_s, best.peak_bytes() / kGB,
      best.memory.capacity_bytes / kGB, 100.0 * best.peak_bytes() / static_cast<double>(best.memory.capacity_bytes),
      100 * best.time.compute_s / best.time.step_s, main_overhead(best.time));
  if (const sim::SimulatedCandidate* sim = simulated_at(r, r.recommended))
    out += fmt::format("  Simulated: step {:.2f} s ({:+.1f} %), {:.0f} tokens/s per GPU, peak {:.1f} GB.\n", sim->step_s,
                       100 * (sim->step_s / best.time.step_s - 1),
                       sim->tokens_per_s / static_cast<double>(s.gpus), sim->peak_bytes / kGB);
  if (const auto e = prediction_training(best, r.training)) out += "  Training " + training_line(*e) + ".\n";
  out += spine_summary(best);  // which collectives cross an oversubscribed spine (cli/render_network.hpp)
  return out;
}

std::string family_verdict(const Candidate& c, const Candidate& best, const Terminal& term) {
  if (!c.within_safety()) return fmt::format("{}: {}", paint("does not fit", Style::red, term.color), why_not_fit(c));
  const double slower = 1 - tokens_per_gpu(c) / tokens_per_gpu(best);
  if (slower <= 0.0005 && slower >= -0.0005) return "as fast as the recommendation";
  if (slower < 0)
    return fmt::format("fits ({:.1f} GB) and is {:.1f} % faster ({}, mb {}), but adds {}", c.peak_total() / kGB,
                       -100 * slower, layout(c.strategy), c.strategy.micro_batch,
                       c.strategy.cp > best.strategy.cp ? "context parallelism"
                       : c.strategy.pp > 1              ? "a pipeline"
                       : c.strategy.tp > 1              ? "tensor parallelism"
                                                        : "complexity");
  return fmt::format("fits ({:.1f} GB) but {:.1f} % slower at its best ({}, mb {}, recompute {}): {}",
                     c.peak_total() / kGB, 100 * slower, layout(c.strategy), c.strategy.micro_batch,
                     recompute_label(c.strategy), main_overhead(c.time));
}

// Families simpler than the recommendation always; all families with --all.
std::string why_others_lose(const PlanReport& r, const Terminal& term) {
  const Candidate& best = *r.result.recommended;
  const std::string chosen = family_of(best.strategy);
  std::string out = r.show_all ? "\nEvery strategy family at its best:\n" : "\nWhy not the others:\n";
  size_t shown = 0;
  for (const Candidate& c : r.result.families) {
    const std::string fam = family_of(c.strategy);
    if (fam == chosen) continue;
    const bool simpler = c.strategy.tp == 1 && c.strategy.pp == 1 && c.strategy.hsdp == 0 && !c.strategy.offload_optimizer;
    if (!r.show_all && !simpler && shown >= 6) continue;
    out += fmt::format("  {:<24}{}\n", fam + ":", family_verdict(c, best, term));
    ++shown;
  }
  // What the framework cannot run was not searched: say so, with the runtime's reason.
  for (const NotRun& n : r.result.not_run)
    out += fmt::format("  {:<24}not run by --framework {}: {}\n", n.what + ":", to_string(r.space.base.framework),
                       n.reason);
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
          {"cp", c.strategy.cp},
          {"ep", c.strategy.ep},
          {"etp", expert_tensor_parallel(c.strategy)},
          {"dp", c.strategy.dp},
          {"zero", c.strategy.zero},
          {"hsdp", c.strategy.hsdp},
          {"micro_batch", c.strategy.micro_batch},
          {"recompute", to_string(c.strategy.recompute)},
          {"recompute_layers", c.strategy.recompute_layers},
          {"recompute_every", c.strategy.recompute_every},
          {"reason", c.within_safety() ? "" : why_not_fit(c)},
          {"components", components_json(c.memory.peak)}};  // the peak by component (reports chart it)
}

// A re-ranked candidate's "simulated" object (--simulate-top).
json simulated_json(const PlanReport& r, size_t i) {
  const sim::SimulatedCandidate& s = *simulated_at(r, i);
  const Prediction& p = r.top[i];
  const sim::StageTime& t = s.stage;
  const double peak = static_cast<double>(p.peak_bytes());
  return {{"step_s", s.step_s},
          {"tokens_per_s", s.tokens_per_s},
          {"tokens_per_s_per_gpu", s.tokens_per_s / static_cast<double>(p.strategy.gpus)},
          {"peak_bytes", bytes_to_int(s.peak_bytes)},
          {"fits", s.within_safety()},
          {"time",
           {{"compute_s", t.busy_compute_s},
            {"exposed_comm_s", t.exposed_tp_s + t.exposed_cp_s + t.exposed_pp_s + t.exposed_dp_s + t.exposed_ep_s},
            {"exposed_comm_by_group_s",
             {{"tp", t.exposed_tp_s}, {"cp", t.exposed_cp_s}, {"pp", t.exposed_pp_s}, {"dp", t.exposed_dp_s},
              {"ep", t.exposed_ep_s}}},
            {"bubble_s", t.bubble_s},
            {"optimizer_s", t.optimizer_s},
            {"stage", t.stage}}},
          {"difference_pct",
           {{"step_s", 100 * (s.step_s / p.time.step_s - 1)}, {"peak_bytes", peak > 0 ? 100 * (s.peak_bytes / peak - 1) : 0}}},
          {"ops", s.ops},
          {"analytic_rank", r.simulation->analytic_rank[i]},
          {"rank", i + 1},
          {"explanation", why_simulated(r, i)}};
}

json not_run_json(const std::vector<NotRun>& not_run) {
  json out = json::array();
  for (const NotRun& n : not_run) out.push_back({{"what", n.what}, {"reason", n.reason}});
  return out;
}

}  // namespace

json plan_json(const PlanReport& r) {
  json candidates = json::array();
  for (size_t i = 0; i < r.top.size(); ++i) {
    json c = prediction_json(r.top[i], r.training);
    if (simulated_at(r, i)) {
      c["simulated"] = simulated_json(r, i);
      const size_t was = r.simulation->analytic_rank[i];
      if (was != i + 1)
        c["rerank_note"] = fmt::format("{} from #{} to #{} by the simulator: {}", was > i + 1 ? "up" : "down", was,
                                       i + 1, why_simulated(r, i));
    } else if (r.simulation && !r.simulation->skipped[i].empty()) {
      c["simulation_skipped"] = r.simulation->skipped[i];
    }
    candidates.push_back(c);
  }
  json rejected = json::array(), families = json::array();
  for (const Candidate& c : r.result.families) {
    families.push_back(family_json(c));
    if (!c.within_safety()) rejected.push_back({{"config", family_json(c)}, {"reason", why_not_fit(c)}});
  }
  json out = {{"candidates", candidates},
          {"recommended", r.recommended},
          {"rejected", rejected},
          {"families", families},
          {"not_run_by_framework", not_run_json(r.result.not_run)},
          {"tie_tolerance", r.result.tie_tolerance},
          {"tie_basis", r.result.tie_basis},
          {"evaluated", r.result.evaluated},
          {"fitting", r.result.fitting},
          {"search_ms", r.search_ms},
          {"objective", to_string(r.space.objective)},
          {"folded_variants", r.folded}};
  {
    const Strategy& s = r.top.empty() ? r.space.base : r.top[r.recommended].strategy;
    json batch = {{"given", !r.space.batch_default.has_value()}, {"sequences", s.global_batch},
                  {"tokens", s.global_batch * s.seq}, {"accumulation_steps", grad_accum_steps(s)},
                  {"rule", batch_line(r)}};
    if (r.space.batch_default) {
      batch["target_tokens"] = r.space.batch_default->tokens;
      batch["target_sequences"] = r.space.batch_default->sequences;
      batch["basis"] = r.space.batch_default->basis;
    }
    out["global_batch"] = batch;
  }
  if (r.simulation) {
    const PlanSimulation& sim = *r.simulation;
    out["simulate_top"] = {{"k", sim.k},
                           {"simulated", sim.window},
                           {"order_changed", sim.order_changed},
                           {"recommendation_changed", sim.recommendation_changed},
                           {"recommendation_note", sim.recommendation_note}};
  }
  return out;
}

std::string render_plan_table(const PlanReport& r, const Terminal& term) {
  // The table fits by dropping columns; the prose around it wraps at spaces.
  return fit_lines(header(r), term.width) + ranked_table(r, term) +
         fit_lines(tie_line(r) + rerank_lines(r) + recommendation(r, term) + why_others_lose(r, term), term.width);
}

namespace {

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// One row per shown candidate, in the table's order: the columns of the terminal table, unrounded, plus the layout's
// parts as their own columns for a spreadsheet or pandas.
std::vector<std::vector<std::string>> candidate_rows(const PlanReport& r, bool with_header) {
  std::vector<std::vector<std::string>> rows;
  if (with_header)
    rows.push_back({"rank", "recommended", "strategy", "layout", "tp", "pp", "dp", "vpp", "schedule", "sp", "zero",
                    "hsdp", "offload_optimizer", "micro_batch", "grad_accum", "global_batch", "seq", "recompute",
                    "precision", "framework", "peak_bytes", "capacity_bytes", "hbm_fraction", "step_s", "sim_step_s",
                    "analytic_rank", "tokens_per_s_per_gpu", "mfu"});
  for (size_t i = 0; i < r.top.size(); ++i) {
    const Prediction& p = r.top[i];
    const Strategy& s = p.strategy;
    const sim::SimulatedCandidate* sim = simulated_at(r, i);
    rows.push_back({std::to_string(i + 1), i == r.recommended ? "yes" : "no", family_of(s), layout(s),
                    std::to_string(s.tp), std::to_string(s.pp), std::to_string(s.dp), std::to_string(s.vpp),
                    to_string(s.schedule), s.sp ? "yes" : "no", std::to_string(s.zero), std::to_string(s.hsdp),
                    s.offload_optimizer ? "yes" : "no", std::to_string(s.micro_batch),
                    std::to_string(grad_accum_steps(s)), std::to_string(s.global_batch), std::to_string(s.seq),
                    to_string(s.recompute), to_string(s.precision), to_string(s.framework),
                    std::to_string(p.peak_bytes()), std::to_string(p.memory.capacity_bytes),
                    fmt::format("{:.4f}", static_cast<double>(p.peak_bytes()) / static_cast<double>(p.memory.capacity_bytes)),
                    fmt::format("{:.6g}", p.time.step_s), sim ? fmt::format("{:.6g}", sim->step_s) : "",
                    r.simulation && i < r.simulation->analytic_rank.size() ? std::to_string(r.simulation->analytic_rank[i]) : "",
                    fmt::format("{:.6g}", p.throughput.tokens_per_s_per_gpu), fmt::format("{:.4f}", p.throughput.mfu)});
  }
  return rows;
}

std::string plan_csv(const PlanReport& r) {
  std::string out;
  for (const auto& row : candidate_rows(r, true)) {
    for (size_t c = 0; c < row.size(); ++c) out += (c ? "," : "") + csv_cell(row[c]);
    out += "\n";
  }
  return out;
}

std::string md_cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

// GitHub-flavoured Markdown: the ranked table as a real table (GB = 10^9 bytes, as the terminal), then the prose.
std::string plan_markdown(const PlanReport& r) {
  std::string out = fmt::format("## plan: {} on {} × {} (cluster {})\n\n", r.model.name, r.space.base.gpus,
                                r.cluster.gpu.name, r.cluster.name);
  out += batch_line(r) + ".\n\n";
  out += "| # | strategy | layout | mb | recompute | peak GB | HBM | step s |";
  if (r.simulation) out += " sim s |";
  out += " tok/s/GPU | MFU |\n|---:|---|---|---:|---|---:|---:|---:|";
  if (r.simulation) out += "---:|";
  out += "---:|---:|\n";
  for (size_t i = 0; i < r.top.size(); ++i) {
    const Prediction& p = r.top[i];
    const Strategy& s = p.strategy;
    const bool rec = i == r.recommended;
    out += fmt::format("| {}{} | {} | {} | {} | {} | {:.1f} | {:.0f} % | {:.2f} |", i + 1, rec ? " →" : "",
                       md_cell(rec ? "**" + family_of(s) + "**" : family_of(s)), md_cell(layout(s)), s.micro_batch,
                       recompute_label(s), p.peak_bytes() / kGB,
                       100.0 * static_cast<double>(p.peak_bytes()) / static_cast<double>(p.memory.capacity_bytes),
                       p.time.step_s);
    if (r.simulation) {
      const sim::SimulatedCandidate* sim = simulated_at(r, i);
      out += sim ? fmt::format(" {:.2f} |", sim->step_s) : " — |";
    }
    out += fmt::format(" {:.0f} | {:.1f} % |\n", p.throughput.tokens_per_s_per_gpu, 100 * p.throughput.mfu);
  }
  // The prose as the terminal has it, unwrapped.
  out += "\n" + tie_line(r) + rerank_lines(r) + recommendation(r, kPlainTerminal);
  const Candidate& best = *r.result.recommended;
  out += "\n| family | verdict |\n|---|---|\n";
  for (const Candidate& c : r.result.families) {
    if (family_of(c.strategy) == family_of(best.strategy)) continue;
    out += fmt::format("| {} | {} |\n", md_cell(family_of(c.strategy)), md_cell(family_verdict(c, best, kPlainTerminal)));
  }
  return out;
}

}  // namespace

std::string render_plan(const PlanReport& r, const std::string& format, const Terminal& term) {
  if (format == "table") return render_plan_table(r, term);
  if (format == "markdown") return plan_markdown(r);
  if (format == "json") return plan_json(r).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(plan_json(r));
  if (format == "csv") return plan_csv(r);
  throw InputError(fmt::format("--format '{}' is not one of: table, json, yaml, csv, markdown", format));
}

}  // namespace shardplan::cli
