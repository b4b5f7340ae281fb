// `shardplan plan`: search every valid strategy, recommend one, and say why the others lose.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/config_flags.hpp"
#include "cli/emit_launch.hpp"
#include "cli/render_prediction.hpp"
#include "cli/render_plan.hpp"
#include "cli/report_option.hpp"
#include "cli/terminal.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/fp8.hpp"
#include "planner/plan_advice.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/recompute_modules.hpp"
#include "sim/rerank.hpp"

namespace shardplan::cli {

namespace {

struct PlanOptions {
  ConfigFlags config;
  std::string format = "table";
  std::string objective = "throughput";
  std::string report;    // --report FILE.md|FILE.html (cli/report_option.hpp)
  std::string emit_dir;  // --emit DIR: launch files for the recommendation (cli/emit_launch.hpp)
  bool all = false;
  size_t top = 5;
  size_t simulate_top = 3;  // --simulate-top K: re-rank the best K with the simulator (sim/rerank.hpp); 0 = off
  TerminalFlags terminal;   // --color / --no-color (cli/terminal.hpp)
};

// --simulate-top: play the first K ranked candidates (and the recommendation) out, re-order r.top by the simulated
// step, and move the recommendation where the simulator says (sim/rerank.hpp). A bar on stderr when it is a TTY.
void simulate_top(PlanReport& r, size_t k) {
  const auto start = std::chrono::steady_clock::now();
  const size_t window = std::min({k, r.result.ranked.size(), r.top.size()});
  ProgressBar bar("simulating the top candidates", window + (r.recommended >= window ? 1 : 0));
  const sim::RerankResult rr =
      sim::rerank_candidates(r.top, r.result.ranked.size(), r.recommended, k, r.space.objective,
                             [&](size_t done, size_t) { bar.update(done); }, r.result.tie_tolerance);
  bar.finish();
  PlanSimulation out;
  out.k = k;
  out.window = rr.window;
  out.order_changed = rr.order_changed;
  out.recommendation_changed = rr.recommendation_changed;
  out.recommendation_note = rr.recommendation_note;
  std::vector<Prediction> reordered;
  for (size_t pos = 0; pos < rr.order.size(); ++pos) {
    const size_t old = rr.order[pos];
    reordered.push_back(r.top[old]);
    out.step.push_back(rr.simulated[old]);
    out.skipped.push_back(rr.skipped[old]);
    out.analytic_rank.push_back(old + 1);
  }
  r.top = std::move(reordered);
  r.recommended = rr.recommended;
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  r.simulation = std::move(out);
}

SearchSpace search_space(const PlanOptions& o, const ModelSpec& m, const ClusterSpec& c) {
  const ConfigFlags& f = o.config;
  SearchSpace sp;
  Strategy& b = sp.base;
  b.framework = parse_framework_flag(f.framework);
  b.precision = parse_precision_flag(f.precision);
  if (!f.loss.empty()) b.loss = parse_loss_flag(f.loss);
  if (!f.grad_sync.empty()) b.grad_sync = parse_grad_sync_flag(f.grad_sync);
  b.flash_attn = f.flash_attn;
  b.attention_kernel = parse_attention_kernel_flag(f.attention_kernel, f.flash_attn);
  b.kv_repeated = parse_attention_kv_flag(f.attention_kv);
  b.end_units_own = parse_fsdp_end_units_flag(f.fsdp_end_units, b.framework);
  b.rope_cache_per_layer = parse_rope_cache_flag(f.rope_cache, b.framework);
  b.fp8 = parse_fp8_flag(f.fp8);
  b.fp8_all_gather = f.fp8_all_gather;
  b.cuda_graphs = parse_cuda_graphs_flag(f.cuda_graphs);
  b.moe_dispatcher = parse_moe_dispatcher_flag(f.moe_dispatcher);
  b.moe_probs = parse_moe_probs_flag(f.moe_probs);
  b.precision_aware_optimizer = f.precision_aware_optimizer;
  b.bf16_adam_moments = parse_adam_moments_flag(f.adam_moments);
  b.optimizer = parse_optimizer_flag(f.optimizer);
  b.muon_tp_mode = parse_muon_tp_mode_flag(f.muon_tp_mode);
  b.recompute_modules = parse_recompute_modules_flag(f.recompute_modules);
  b.offload_activation_layers = f.offload_activation_layers.value_or(0);
  if (const std::string why = precision_aware_optimizer_refusal(b); !why.empty()) throw InputError(why);
  b.moe_capacity_factor = f.moe_capacity_factor.value_or(0);
  if (const std::string why = moe_capacity_factor_refusal(b.moe_capacity_factor); !why.empty()) throw InputError(why);
  if (const auto why = fp8_gpu_refusal(b, c.gpu)) throw InputError(*why);
  if (const auto why = fp8_model_refusal(b, m)) throw InputError(*why);
  b.compile = f.compile;
  if (f.loss.empty()) b.loss = default_loss(b.framework, b.compile);
  if (f.etp && *f.etp < 1) throw InputError(fmt::format("--etp must be at least 1, got {}", *f.etp));
  b.etp = f.etp.value_or(0);  // 0: the runtime's default (planner/strategy.hpp expert_tensor_parallel)
  b.overlap_grad_reduce = f.overlap_grad_reduce;
  b.overlap_param_gather = f.overlap_param_gather;
  b.tp_comm_overlap = f.tp_comm_overlap;
  b.ep_comm_overlap = f.ep_comm_overlap;
  b.expandable_segments = f.expandable_segments;
  if (f.tp_comm_overlap.value_or(false) && !f.sp && !framework_support(b.framework).tp_always_sp)
    throw InputError("--tp-comm-overlap needs --sp (the overlapped collectives are sequence parallelism's all-gathers "
                     "and reduce-scatters); add --sp or drop --tp-comm-overlap");
  if (const auto why = tp_comm_overlap_refusal(b)) throw InputError(*why);
  b.gpus = f.gpus.value_or(c.gpus_per_node);
  b.seq = f.seq.value_or(m.seq);
  // Without --global-batch every layout gets the shared default for its own dp (planner/batch.hpp); base's batch
  // is then only the target, for the checks below.
  if (!f.global_batch) sp.batch_default = default_batch_target(b.seq, b.gpus);
  b.global_batch = f.global_batch.value_or(sp.batch_default ? sp.batch_default->sequences : 1);
  for (auto [flag, v] : {std::pair{"--gpus", b.gpus}, {"--seq", b.seq}, {"--global-batch", b.global_batch}})
    if (v < 1) throw InputError(fmt::format("{} must be at least 1, got {}", flag, v));
  if (const std::string why = seq_refusal(m, b.seq); !why.empty()) throw InputError(why);  // learned positions
  // As predict's bound (planner/strategy.cpp); found by fuzz/fuzz_cli: --gpus 2^63-1 overflowed the default batch.
  if (b.gpus > (int64_t{1} << 24))
    throw InputError(fmt::format("--gpus {} is implausibly large (at most {})", b.gpus, int64_t{1} << 24));
  auto positive = [](const char* flag, const std::optional<int64_t>& v) {
    if (v && *v < 1) throw InputError(fmt::format("{} must be at least 1, got {}", flag, *v));
    return v;
  };
  sp.tp = positive("--tp", f.tp);
  sp.pp = positive("--pp", f.pp);
  sp.cp = positive("--cp", f.cp);
  if (sp.cp) {
    Strategy probe = b;
    probe.cp = *sp.cp;
    if (const std::string why = context_parallel_refusal(probe); !why.empty()) throw InputError(why);
    if (b.gpus % *sp.cp != 0)
      throw InputError(fmt::format("--cp {} must divide --gpus {} (tp·pp·cp·dp ranks); choose a divisor of {}", *sp.cp,
                                   b.gpus, b.gpus));
  }
  sp.ep = positive("--ep", f.ep);
  sp.dp = positive("--dp", f.dp);
  sp.vpp = positive("--vpp", f.vpp);
  sp.micro_batch = positive("--micro-batch", f.micro_batch);
  sp.hsdp = positive("--hsdp", f.hsdp);
  if (f.zero && (*f.zero < 0 || *f.zero > 3)) throw InputError(fmt::format("--zero must be 0, 1, 2 or 3, got {}", *f.zero));
  sp.zero = f.zero;
  if (!f.recompute.empty()) sp.recompute = parse_recompute_flag(f.recompute);
  // --recompute-layers / --recompute-every fix full recomputation of those blocks (as predict reads them).
  if (f.recompute_layers || f.recompute_every) {
    b.recompute = sp.recompute.value_or(Recompute::none);
    apply_partial_recompute_flags(f, b);
    if (b.recompute != Recompute::full)
      throw InputError(fmt::format("{} with --recompute {}: it picks the blocks that full recomputation repeats; add "
                                   "--recompute full",
                                   f.recompute_layers ? "--recompute-layers" : "--recompute-every",
                                   to_string(b.recompute)));
    if (b.recompute_layers > 0 && b.recompute_every > 0)
      throw InputError(partial_recompute_refusal(m, b));
    sp.recompute = Recompute::full;
  }
  // A Megatron module list fixes selective recomputation (as predict reads it: config_flags.cpp).
  if (b.recompute_modules) {
    if (!sp.recompute) sp.recompute = Recompute::selective;
    Strategy probe = b;
    probe.recompute = *sp.recompute;
    if (const std::string why = recompute_modules_refusal(probe, m); !why.empty()) throw InputError(why);
  }
  if (!f.schedule.empty()) sp.schedule = parse_schedule_flag(f.schedule);
  sp.split = resolve_pipeline_split(f);
  // A layout fixes pp · vpp: with --pp given, its chunks per rank (the search refuses the rest: pipeline_layout.cpp).
  if (sp.split && sp.split->layout.stages > 0 && sp.pp && !sp.vpp && sp.split->layout.stages % *sp.pp == 0)
    sp.vpp = sp.split->layout.stages / *sp.pp;
  if (f.sp) sp.sp = true;
  sp.offload_optimizer = f.offload_optimizer;
  const auto objective = parse_objective(o.objective);
  if (!objective)
    throw InputError(fmt::format("--objective '{}' is not one of: throughput, memory, cost", o.objective));
  sp.objective = *objective;
  sp.max_hbm_fraction = resolve_max_hbm_fraction(f);
  return sp;
}

// Nothing fits under the safety line: one line naming the closest family and the changes that do fit, each found by
// searching again (planner/plan_advice.hpp); exit 3 (valid input, no feasible plan).
// One row per family and layout (tp, pp, sp): the vpp, schedule, HSDP group, micro-batch and recompute variants of
// one strategy fold into their best, which names its own vpp and group. Without it the top 5 was often one strategy
// at five vpp values, and the recommendation row 6. Returns how many candidates were folded away.
size_t fold_variants(std::vector<Candidate>& ranked, size_t top) {
  std::vector<Candidate> kept;
  size_t folded = 0;
  for (const Candidate& c : ranked) {
    const auto same = [&](const Candidate& k) {
      return family_of(k.strategy) == family_of(c.strategy) && k.strategy.tp == c.strategy.tp &&
             k.strategy.pp == c.strategy.pp && k.strategy.sp == c.strategy.sp;
    };
    if (std::any_of(kept.begin(), kept.end(), same)) {
      ++folded;
      continue;
    }
    if (kept.size() < top) kept.push_back(c);
  }
  ranked = std::move(kept);
  return folded;
}

[[noreturn]] void nothing_fits(const PlanReport& pr) {
  const SearchResult& r = pr.result;
  const SearchSpace& sp = pr.space;
  std::string closest;
  if (!r.families.empty()) closest = fmt::format("; closest: {} — {}", family_of(r.families.front().strategy),
                                                 why_not_fit(r.families.front()));
  std::string fixes = describe_fixes(fixes_that_fit(pr.model, pr.cluster, sp));
  if (!r.tight.empty())
    fixes += fmt::format("{}--max-hbm-fraction {:.2f} admits {} (it fits the capacity, above the planning line)",
                         fixes.empty() ? "" : "; ",
                         std::ceil(100 * r.tight.front().fit_total() /
                                   static_cast<double>(r.tight.front().capacity_bytes)) / 100,
                         family_of(r.tight.front().strategy));
  if (fixes.empty()) fixes = "no single change among precision, recompute, offload, TP and up to 64× the GPUs fits";
  throw NoFeasiblePlan(fmt::format("no configuration of {} GPUs fits under {:.0f} % of HBM ({} evaluated{}); {}",
                                   sp.base.gpus, sp.max_hbm_fraction * 100, r.evaluated, closest, fixes));
}

}  // namespace

void add_plan_command(CLI::App& app, const GlobalOptions& global) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Search every valid strategy and recommend one, with reasons");
  cmd->footer("Exit 3 when the input is valid but no configuration fits: the error line names the changes that do "
              "(--precision, --recompute, --offload-optimizer, --tp, --gpus), each found by searching again.");
  add_config_flags(*cmd, opts->config);
  cmd->add_option("--format", opts->format, "table | json | yaml | csv | markdown (default table)");
  cmd->add_option("--objective", opts->objective,
                  "throughput (default) | memory | cost (fewest GPU-hours for --tokens; the cheapest is recommended)");
  cmd->add_option("--emit", opts->emit_dir,
                  "Write launch files for the recommendation into DIR: torchrun + FSDP2, Accelerate, DeepSpeed, "
                  "Megatron-LM, torchtitan")
      ->check([](const std::string& v) { return v.empty() ? std::string("needs a folder, e.g. --emit launch/") : std::string(); });
  cmd->add_flag("--all", opts->all, "Show the best candidate of every strategy family, including those that do not fit");
  cmd->add_option("--top", opts->top, "How many ranked candidates to show (default 5)")->check(CLI::Range(1, 1000));
  cmd->add_option("--simulate-top", opts->simulate_top,
                  "Re-rank the best K candidates (at most --top) by the event-driven simulator (default 3; 0 = off)")
      ->check(CLI::Range(0, 1000));
  add_terminal_flags(*cmd, opts->terminal);
  add_report_option(*cmd, opts->report);
  cmd->callback([opts, &global] {
    const PresetStore store = load_presets(global);
    PlanReport r;
    std::vector<std::string> model_notes;
    r.model = resolve_model(opts->config, store, &model_notes);
    r.cluster = resolve_cluster(opts->config, store, r.cluster_defaulted);
    r.space = search_space(*opts, r.model, r.cluster);
    r.training = resolve_training_goal(opts->config);
    if (r.space.objective == Objective::cost && !r.training)
      throw InputError("--objective cost needs --tokens (the training budget to price, e.g. --tokens 2T)");
    r.show_all = opts->all;
    const auto start = std::chrono::steady_clock::now();
    // Kept deep enough that folding the variants of one family and layout still leaves --top rows.
    r.result = search_strategies(r.model, r.cluster, r.space, std::min<size_t>(opts->top * 16, 4000));
    r.search_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r.result.ranked.empty()) nothing_fits(r);
    r.folded = fold_variants(r.result.ranked, opts->top);
    for (const Candidate& c : r.result.ranked) r.top.push_back(predict(r.model, c.strategy, r.cluster));
    const Strategy& chosen = r.result.recommended->strategy;
    auto it = std::find_if(r.top.begin(), r.top.end(), [&](const Prediction& p) { return p.strategy == chosen; });
    if (it == r.top.end()) it = r.top.insert(r.top.end(), predict(r.model, chosen, r.cluster));
    r.recommended = static_cast<size_t>(it - r.top.begin());
    for (Prediction& p : r.top) p.memory.max_hbm_fraction = r.space.max_hbm_fraction;
    if (opts->simulate_top > 0) simulate_top(r, opts->simulate_top);
    const Terminal term = opts->format == "table" ? stdout_terminal(opts->terminal) : kPlainTerminal;
    const std::string text = render_plan(r, opts->format, term);  // a bad --format fails before anything is written
    write_report_option(opts->report, plan_json(r));
    std::string emitted;
    if (!opts->emit_dir.empty()) {
      LaunchPlan launch{r.top[r.recommended], std::nullopt, prediction_training(r.top[r.recommended], r.training), ".", ""};
      if (!opts->config.hf_config.empty()) launch.hf = load_hf_config(opts->config.hf_config);
      // Absolute: slurm.sbatch runs from Slurm's spool folder, and the README's commands from anywhere.
      std::filesystem::path dir = std::filesystem::absolute(opts->emit_dir).lexically_normal();
      if (!dir.has_filename()) dir = dir.parent_path();  // "launch/" → ".../launch"
      launch.emit_dir = dir.string();
      // The hardware as given, so the README's validate command resolves the same cluster from any folder.
      const ConfigFlags& f = opts->config;
      if (!f.cluster.empty())
        launch.cluster_args = "--cluster " + shell_quoted(std::filesystem::exists(f.cluster)
                                                              ? std::filesystem::absolute(f.cluster).lexically_normal().string()
                                                              : f.cluster);
      else if (!f.gpu.empty())
        launch.cluster_args = "--gpu " + shell_quoted(f.gpu);
      if (!launch.cluster_args.empty() && f.gpus_per_node) launch.cluster_args += fmt::format(" --gpus-per-node {}", *f.gpus_per_node);
      if (!launch.cluster_args.empty() && f.inter_node_gbps) launch.cluster_args += fmt::format(" --inter-node-gbps {}", *f.inter_node_gbps);
      const std::vector<EmittedFile> files = launch_files(launch);
      write_files_atomically(opts->emit_dir, files);
      emitted = fmt::format("wrote {} launch files for the recommendation to {}", files.size(), opts->emit_dir);
    }
    // Notes go to stderr, so that stdout stays the answer a script parses; only on success, so that a failure stays
    // the one error line.
    // With --format table and markdown only: a document says the cluster in its fields, and a script reading stderr
    // for the one error line is not handed notes.
    if (opts->format == "table" || opts->format == "markdown") {
      print_config_notes(opts->config, model_notes, r.cluster, opts->config.tp.value_or(1));
      if (r.cluster_defaulted) std::cerr << "note: no --cluster or --gpu given; using the " << kDefaultCluster << " preset\n";
    }
    std::cout << text;
    if (!emitted.empty()) (opts->format == "table" ? std::cout : std::cerr) << "\n" << emitted << "\n";
  });
}

}  // namespace shardplan::cli
