// The document of a plan: the recommendation, the ranked candidates, and every strategy family at its best.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report/parts.hpp"

namespace shardplan::report {

namespace {

// A bar chart's numbers as a table (Markdown shows it in place of the chart): a column per series that occurs,
// and the total.
Table bar_chart_table(const BarChart& c, const std::string& first_column) {
  Table t;
  t.header = {first_column};
  t.numeric = {false};
  std::vector<const Series*> cols;
  for (const Series& s : c.series)
    for (const Bar& b : c.bars)
      if (std::any_of(b.segments.begin(), b.segments.end(), [&](const Segment& g) { return g.key == s.key && g.value > 0; })) {
        cols.push_back(&s);
        break;
      }
  for (const Series* s : cols) {
    t.header.push_back(s->name);
    t.numeric.push_back(true);
  }
  t.header.push_back("total" + c.unit);
  t.numeric.push_back(true);
  for (const Bar& b : c.bars) {
    std::vector<std::string> row = {b.label};
    for (const Series* s : cols) {
      double v = 0;
      for (const Segment& g : b.segments)
        if (g.key == s->key) v += g.value;
      row.push_back(fmt::format("{:.{}f}", v / c.scale, c.decimals));
    }
    row.push_back(fmt::format("{:.{}f}", b.total() / c.scale, c.decimals));
    t.rows.push_back(std::move(row));
    t.highlight.push_back(b.highlight);
  }
  return t;
}

struct FamilyRow {
  std::string name;
  bool fits = false;
  double peak = 0, per_gpu = 0;
  int64_t tp = 1, pp = 1, dp = 1, zero = 0, hsdp = 0, micro_batch = 1;
  std::string recompute, reason;
  std::vector<Segment> components;  // empty when the document predates them
};

}  // namespace

Document plan_document(const json& doc, const Reader& r) {
  const json& cands = r.array(doc, "candidates");
  if (cands.empty()) r.fail("", "candidates", "is empty");
  std::vector<Pred> preds;
  for (size_t i = 0; i < cands.size(); ++i) preds.push_back(read_prediction(r, cands[i], fmt::format("candidates[{}]", i)));
  const double rec_d = r.num(doc, "recommended");
  if (rec_d < 0 || rec_d >= static_cast<double>(preds.size())) r.fail("", "recommended", "is not an index into candidates");
  const size_t rec = static_cast<size_t>(rec_d);
  const Pred& best = preds[rec];
  const double capacity = best.memory.capacity;

  std::vector<FamilyRow> families;
  if (const json* fams = r.find(doc, "families"); fams && fams->is_array()) {
    for (size_t i = 0; i < fams->size(); ++i) {
      const json& f = (*fams)[i];
      const std::string where = fmt::format("families[{}]", i);
      FamilyRow row;
      row.name = r.str(f, "family", where);
      row.fits = r.flag_or(f, "fits", true);
      row.peak = r.num(f, "peak_bytes", where);
      row.per_gpu = r.num_or(f, "tokens_per_s_per_gpu", 0);
      row.tp = static_cast<int64_t>(r.num_or(f, "tp", 1));
      row.pp = static_cast<int64_t>(r.num_or(f, "pp", 1));
      row.dp = static_cast<int64_t>(r.num_or(f, "dp", 1));
      row.zero = static_cast<int64_t>(r.num_or(f, "zero", 0));
      row.hsdp = static_cast<int64_t>(r.num_or(f, "hsdp", 0));
      row.micro_batch = static_cast<int64_t>(r.num_or(f, "micro_batch", 1));
      row.recompute = recompute_named(r, f, "");
      row.reason = r.str_or(f, "reason", "");
      if (const json* comp = r.find(f, "components"); comp && comp->is_object())
        for (const Series& s : memory_series()) row.components.push_back({s.key, r.num_or(*comp, s.key, 0)});
      families.push_back(std::move(row));
    }
  }
  const Config& bc = best.config;
  auto is_recommended = [&](const FamilyRow& f) {
    return f.tp == bc.tp && f.pp == bc.pp && f.dp == bc.dp && f.zero == bc.zero && f.hsdp == bc.hsdp &&
           f.micro_batch == bc.micro_batch && f.recompute == bc.recompute;
  };

  Document d;
  d.title = fmt::format("plan: {} on {} × {}", bc.model, bc.gpus, bc.gpu);
  d.subtitle = {fmt::format("{} ({} parameters) · {}", bc.model, param_count(best.params), config_line(bc))};
  if (const json* ev = r.find(doc, "evaluated"); ev && ev->is_number())
    d.subtitle.push_back(fmt::format("searched {} configurations{}; {} fit under 80 % of HBM; objective {}",
                                     ev->get<int64_t>(),
                                     r.find(doc, "search_ms") ? fmt::format(" in {:.1f} ms", r.num(doc, "search_ms")) : "",
                                     static_cast<int64_t>(r.num_or(doc, "fitting", 0)), r.str_or(doc, "objective", "throughput")));
  // The batch and, for a default one, the rule that chose it (planner/batch.hpp), as the terminal's header says.
  if (const json* gb = r.find(doc, "global_batch"); gb && gb->is_object()) {
    const std::string rule = r.str_or(*gb, "rule", "");
    if (!rule.empty()) d.subtitle.push_back(rule);
  }
  d.cards.push_back({"recommended", family(bc), layout(bc) + fmt::format(", mb {}, recompute {}", bc.micro_batch, bc.recompute), "accent"});
  for (Card& c : prediction_cards(best)) d.cards.push_back(std::move(c));

  // The recommendation in words.
  Section recs{"Recommendation", {}};
  std::string words = strategy_line(bc, true) + ".";
  if (rec != 0) {
    const Pred& fastest = preds.front();
    words += fmt::format(
        " The fastest candidate, {} ({}), is only {:.2g} % faster and has more moving parts; within {:.0f} % the "
        "simplest strategy is recommended.",
        family(fastest.config), layout(fastest.config), 100 * (fastest.rates.tokens_per_s / best.rates.tokens_per_s - 1),
        100 * r.num_or(doc, "tie_tolerance", 0.02));
  }
  recs.blocks.push_back(paragraph(words));
  // The simulator's re-ranking (plan --simulate-top K): the terminal's "sim s" column and its reasons, so the report
  // ranks as the terminal does and says why.
  std::vector<std::string> sim_step(preds.size()), analytic_rank(preds.size());
  bool any_simulated = false;
  std::string moved;
  for (size_t i = 0; i < cands.size(); ++i) {
    const json* sim = r.find(cands[i], "simulated");
    if (sim == nullptr || !sim->is_object()) continue;
    any_simulated = true;
    const std::string where = fmt::format("candidates[{}].simulated", i);
    sim_step[i] = secs(r.num(*sim, "step_s", where));
    analytic_rank[i] = std::to_string(static_cast<int64_t>(r.num_or(*sim, "analytic_rank", static_cast<double>(i + 1))));
    const std::string note = r.str_or(cands[i], "rerank_note", "");
    if (!note.empty()) moved += fmt::format(" #{} {} ({}): {}.", i + 1, family(preds[i].config), layout(preds[i].config), note);
  }
  if (const json* st = r.find(doc, "simulate_top"); st && st->is_object() && any_simulated) {
    const bool changed = r.flag_or(*st, "order_changed", false);
    std::string text = fmt::format(
        "The best {} candidates were played through the event-driven simulator (plan --simulate-top {}); the table "
        "is in the simulator's order: \"sim s\" is the simulated step, \"analytic #\" the rank the analytic model gave.",
        static_cast<int64_t>(r.num_or(*st, "simulated", 0)), static_cast<int64_t>(r.num_or(*st, "k", 0)));
    text += changed ? " The simulator changed the order:" + moved : " The simulator left the order as it was.";
    const std::string rec_note = r.str_or(*st, "recommendation_note", "");
    if (r.flag_or(*st, "recommendation_changed", false) && !rec_note.empty())
      text += " It changed the recommendation: " + rec_note + ".";
    recs.blocks.push_back(paragraph(text));
  }
  Table ranked;
  ranked.header = {"#", "strategy", "layout", "mb", "recompute", "peak GB", "HBM", "step s"};
  ranked.numeric = {true, false, false, true, false, true, true, true};
  if (any_simulated) {
    ranked.header.insert(ranked.header.end(), {"sim s", "analytic #"});
    ranked.numeric.insert(ranked.numeric.end(), {true, true});
  }
  ranked.header.insert(ranked.header.end(), {"tok/s/GPU", "MFU"});
  ranked.numeric.insert(ranked.numeric.end(), {true, true});
  for (size_t i = 0; i < preds.size(); ++i) {
    const Pred& p = preds[i];
    std::vector<std::string> row = {std::to_string(i + 1), family(p.config) + (i == rec ? " ★" : ""), layout(p.config),
                                    std::to_string(p.config.micro_batch), p.config.recompute, gb(p.memory.peak),
                                    pct(p.memory.peak / p.memory.capacity), secs(p.time.step)};
    if (any_simulated) {
      row.push_back(sim_step[i].empty() ? "—" : sim_step[i]);
      row.push_back(analytic_rank[i].empty() ? "—" : analytic_rank[i]);
    }
    row.push_back(fmt::format("{:.0f}", p.rates.per_gpu));
    row.push_back(pct(p.rates.mfu, 1));
    ranked.rows.push_back(std::move(row));
    ranked.highlight.push_back(i == rec);
  }
  recs.blocks.push_back(table_block(std::move(ranked)));
  d.sections.push_back(std::move(recs));

  // Memory: every family at its best when the document lists their components, else the ranked candidates.
  Section mem{"Memory per GPU by strategy", {}};
  BarChart mc = memory_chart("memory", capacity);
  const bool by_family = !families.empty() && std::all_of(families.begin(), families.end(),
                                                          [](const FamilyRow& f) { return !f.components.empty(); });
  if (by_family) {
    mem.blocks.push_back(paragraph(
        "Each strategy family at its best configuration: the busiest rank's memory at its peak, by component, in GB. "
        "Past the 80 % line a plan is not recommended; past the capacity it does not fit."));
    for (const FamilyRow& f : families)
      mc.bars.push_back({f.name,
                         layout(f.tp, f.pp, f.dp, 1, false, f.hsdp) + fmt::format(" · mb {} · recompute {}", f.micro_batch, f.recompute),
                         f.components, is_recommended(f), "", memory_value_color(f.peak, capacity)});
  } else {
    mem.blocks.push_back(paragraph("The ranked candidates: the busiest rank's memory at its peak, by component, in GB."));
    for (size_t i = 0; i < preds.size(); ++i)
      mc.bars.push_back({family(preds[i].config),
                         layout(preds[i].config) + fmt::format(" · mb {} · recompute {}", preds[i].config.micro_batch,
                                                               preds[i].config.recompute),
                         preds[i].memory.components, i == rec, "",
                         memory_value_color(preds[i].memory.peak, capacity)});
  }
  mem.blocks.push_back(chart_block(stacked_bar_chart(mc), bar_chart_table(mc, "strategy")));
  d.sections.push_back(std::move(mem));

  // Step time of the ranked candidates, whole and beyond compute.
  if (best.time.modelled) {
    Section time{"Step time of the ranked candidates", {}};
    time.blocks.push_back(paragraph(fmt::format(
        "Compute is {} of the recommended step. Beyond compute come the slowdown of compute under overlapped "
        "communication, exposed communication per process group, the pipeline bubble and the optimizer step: that is "
        "where the candidates differ.",
        pct(best.time.compute / best.time.step))));
    BarChart whole = time_chart("step-time", true), beyond = time_chart("step-overhead", false);
    for (size_t i = 0; i < preds.size(); ++i) {
      const Pred& p = preds[i];
      const std::string detail = layout(p.config) + fmt::format(" · mb {} · recompute {}", p.config.micro_batch, p.config.recompute);
      const std::string label = fmt::format("{}. {}", i + 1, family(p.config));
      whole.bars.push_back({label, detail, time_segments(p.time, true), i == rec, "", ""});
      beyond.bars.push_back({label, detail, time_segments(p.time, false), i == rec,
                             fmt::format("{} s ({})", secs(p.time.overhead()), pct(p.time.overhead() / p.time.step, 1)),
                             ""});
    }
    time.blocks.push_back(chart_block(stacked_bar_chart(whole), bar_chart_table(whole, "candidate"),
                                      "The whole step of each ranked candidate."));
    time.blocks.push_back(chart_block(stacked_bar_chart(beyond), {},
                                      "Only what comes on top of compute, on its own scale; the label gives its share "
                                      "of the step."));
    time.blocks.push_back(paragraph("The recommendation's step:"));
    time.blocks.push_back(table_block(time_table(best.time)));
    d.sections.push_back(std::move(time));
  }

  if (!families.empty()) {
    Section fams{"Every strategy family at its best", {}};
    Table t;
    t.header = {"family", "layout", "mb", "recompute", "peak GB", "HBM", "tok/s/GPU", "verdict"};
    t.numeric = {false, false, true, false, true, true, true, false};
    for (const FamilyRow& f : families) {
      std::string verdict;
      if (is_recommended(f)) verdict = "recommended";
      else if (!f.fits) verdict = "does not fit: " + f.reason;
      else if (best.rates.per_gpu > 0) {
        const double diff = f.per_gpu / best.rates.per_gpu - 1;
        verdict = std::abs(diff) < 0.0005 ? "as fast as the recommendation"
                  : diff > 0 ? fmt::format("{:.1f} % faster, more moving parts", 100 * diff)
                             : fmt::format("{:.1f} % slower", -100 * diff);
      }
      t.rows.push_back({f.name, layout(f.tp, f.pp, f.dp, 1, false, f.hsdp), std::to_string(f.micro_batch), f.recompute,
                        gb(f.peak), pct(f.peak / capacity), f.per_gpu > 0 ? fmt::format("{:.0f}", f.per_gpu) : "—",
                        verdict});
      t.highlight.push_back(is_recommended(f));
    }
    fams.blocks.push_back(table_block(std::move(t)));
    d.sections.push_back(std::move(fams));
  }

  Section detail{"Memory of the recommendation", {}};
  detail.blocks.push_back(table_block(memory_items_table(r, best)));
  d.sections.push_back(std::move(detail));
  return d;
}

}  // namespace shardplan::report
