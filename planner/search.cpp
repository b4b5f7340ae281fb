#include "planner/search.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "planner/cost.hpp"
#include "planner/error.hpp"
#include "planner/error_band.hpp"
#include "planner/moe.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "planner/precision.hpp"
#include "planner/search_recompute.hpp"

namespace shardplan {

std::optional<Objective> parse_objective(const std::string& s) {
  if (s == "throughput") return Objective::throughput;
  if (s == "memory") return Objective::memory;
  if (s == "cost") return Objective::cost;
  return std::nullopt;
}
const char* to_string(Objective o) {
  switch (o) {
    case Objective::memory: return "memory";
    case Objective::cost: return "cost";
    case Objective::throughput: break;
  }
  return "throughput";
}

std::string family_of(const Strategy& s) {
  static const char* const zero[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
  std::string f = zero[std::clamp(s.zero, 0, 3)];
  if (s.hsdp > 0) f += " HSDP";
  if (s.tp > 1) f += " + TP";
  if (s.cp > 1) f += " + CP";
  // A schedule that splits the backward into B and W passes is a family of its own, so that plan weighs it against
  // the plain schedule with the simplicity allowance (kSimplicityTolerance).
  if (s.pp > 1) f += schedule_splits_backward(s.schedule) ? " + ZB-PP" : " + PP";
  if (s.ep > 1) f += " + EP";
  if (s.offload_optimizer) f += " + offload";
  return f;
}

int complexity(const Strategy& s) {
  int c = 0;
  if (s.pp > 1) c += 4 + (s.vpp > 1 ? 1 : 0) + (schedule_splits_backward(s.schedule) ? 1 : 0);
  if (s.tp > 1) c += 2 + (s.sp ? 1 : 0);
  if (s.cp > 1) c += 3;  // a ring per attention layer, a sequence sharded over ranks
  if (s.offload_optimizer) c += 3;
  if (s.hsdp > 0) c += 1;
  if (s.ep > 1) c += 2;  // an all-to-all dispatcher and a second (expert) data-parallel group
  return c;
}

std::string why_not_fit(const Candidate& c) {
  const MemoryComponents& p = c.memory.peak;
  const double cap = static_cast<double>(c.capacity_bytes);
  if (p.model_states() > cap)
    return fmt::format("model states alone need {:.1f} GB > {:.1f} GB of HBM", p.model_states() / kGB, cap / kGB);
  const std::pair<const char*, double> parts[] = {
      {"model states", p.model_states()}, {"activations", p.activations}, {"logits", p.logits},
      {"buffers", p.buffers},             {"runtime", p.runtime},         {"fragmentation", p.fragmentation}};
  const auto* largest = &parts[1];
  for (const auto* part = &parts[1]; part != std::end(parts); ++part)
    if (part->second > largest->second) largest = part;
  const double limit = c.fits() ? c.max_hbm_fraction * cap : cap;
  const std::string line = fmt::format("the {:.0f} % planning line", c.max_hbm_fraction * 100);
  // Under expandable segments the allocator's reserve is not what fails a run (memory.hpp fit_bytes).
  const std::string what = c.expandable_segments ? "peak less the allocator's reserve" : "peak";
  return fmt::format("{} {:.1f} GB > {:.1f} GB ({}) by {:.1f} GB; model states {:.1f} GB, largest other part {} "
                     "{:.1f} GB",
                     what, c.fit_total() / kGB, limit / kGB, c.fits() ? line : "HBM capacity",
                     (c.fit_total() - limit) / kGB, p.model_states() / kGB, largest->first, largest->second / kGB);
}

namespace {

std::vector<int64_t> divisors(int64_t n, int64_t max) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n && d <= max; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

template <typename T>
std::vector<T> fixed_or(const std::optional<T>& fixed, std::vector<T> all) {
  if (fixed) return {*fixed};
  return all;
}

// Better by the objective: throughput first (then memory), memory first (then throughput), or GPU-seconds per
// token first (then memory).
bool better(const Candidate& a, const Candidate& b, Objective o) {
  if (o == Objective::cost) {
    const double ca = gpu_seconds_per_token(a.tokens_per_s, a.strategy.gpus);
    const double cb = gpu_seconds_per_token(b.tokens_per_s, b.strategy.gpus);
    if (ca != cb) return ca < cb;
    return a.peak_total() < b.peak_total();
  }
  if (o == Objective::memory) {
    if (a.peak_total() != b.peak_total()) return a.peak_total() < b.peak_total();
    return a.tokens_per_s > b.tokens_per_s;
  }
  if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
  return a.peak_total() < b.peak_total();
}

// Keeps the best `cap` candidates, best first, in storage reserved up front.
class TopK {
 public:
  TopK(size_t cap, Objective o) : cap_(cap), objective_(o) { items_.reserve(cap + 1); }
  void offer(const Candidate& c) {
    if (cap_ == 0) return;
    if (items_.size() == cap_ && !better(c, items_.back(), objective_)) return;
    auto at = std::find_if(items_.begin(), items_.end(), [&](const Candidate& x) { return better(c, x, objective_); });
    items_.insert(at, c);
    if (items_.size() > cap_) items_.pop_back();
  }
  std::vector<Candidate> take() { return std::move(items_); }

 private:
  size_t cap_;
  Objective objective_;
  std::vector<Candidate> items_;
};

// Index of a family in a fixed table: cp × zero (4) × hsdp × tp × pp × zero-bubble × offload × ep.
constexpr size_t kFamilies = 2 * 4 * 2 * 2 * 2 * 2 * 2 * 2;
size_t family_index(const Strategy& s) {
  return (s.cp > 1 ? 256 : 0) + static_cast<size_t>(s.zero) * 64 + (s.ep > 1 ? 32 : 0) + (s.hsdp > 0 ? 16 : 0) + (s.tp > 1 ? 8 : 0) +
         (s.pp > 1 ? 4 : 0) + (s.pp > 1 && schedule_splits_backward(s.schedule) ? 2 : 0) + (s.offload_optimizer ? 1 : 0);
}

// Whether `ep` expert-parallel ranks, each expert split over the expert-TP size the strategy then has, fit the
// tp·cp·dp ranks of a stage (strategy.cpp validate_expert_parallel).
bool ep_fits(Strategy s, int64_t ep) {
  s.ep = ep;
  if (s.etp > 0 && s.tp % s.etp != 0) return false;
  return (s.tp * s.cp * s.dp) % (expert_tensor_parallel(s) * ep) == 0;
}

// Expert-parallel degrees worth pricing for a layout (issue 17): 1, and for an MoE model on a runtime with EP every
// divisor of the routed experts that fits the stage's ranks (ep_fits).
std::vector<int64_t> ep_options(const ModelSpec& m, const SearchSpace& sp, const Strategy& layout) {
  if (sp.ep) return ep_fits(layout, *sp.ep) ? std::vector<int64_t>{*sp.ep} : std::vector<int64_t>{};
  std::vector<int64_t> out;
  // --ep-comm-overlap hides all-to-alls and --moe-dispatcher picks how they run: EP only.
  if (!sp.base.ep_comm_overlap.value_or(false) && sp.base.moe_dispatcher == MoeDispatcher::alltoall) out.push_back(1);
  if (m.experts == 0 || !ep_support(sp.base.framework).expert_parallel) return out;
  const int64_t ranks = layout.tp * layout.cp * layout.dp;
  for (int64_t e = 2; e <= std::min(m.experts, ranks); ++e)
    if (m.experts % e == 0 && ep_fits(layout, e)) out.push_back(e);
  return out;
}

// The best of a family: fitting under the safety line beats not fitting; among non-fitting, the smallest peak.
bool better_for_family(const Candidate& a, const Candidate& b, Objective o) {
  if (a.within_safety() != b.within_safety()) return a.within_safety();
  if (!a.within_safety()) return a.fit_total() < b.fit_total();
  return better(a, b, o);
}

bool tp_is_valid(const ModelSpec& m, const ClusterSpec& c, int64_t tp) {
  return tp <= nvlink_domain_size(c) && m.heads % tp == 0 && (m.kv_heads % tp == 0 || tp % m.kv_heads == 0) &&
         m.ffn_hidden % tp == 0 && m.expert_ffn_hidden % tp == 0;  // MoE: experts split like the MLP
}

// The schedules worth pricing at this pp and chunk count that the framework runs (the fixed one if given): 1F1B and
// ZB-H1 with one chunk; interleaved and interleaved zero bubble with more; ZB-V and DualPipeV with two.
int schedule_options(const std::optional<Schedule>& fixed, Framework f, int64_t pp, int64_t vpp, Schedule out[4]) {
  if (fixed) {
    out[0] = *fixed;
    return 1;
  }
  if (pp < 2) {
    out[0] = Schedule::one_f_one_b;
    return vpp == 1 ? 1 : 0;
  }
  Schedule all[4];
  int n_all = 0;
  if (vpp == 1) all[n_all++] = Schedule::one_f_one_b;
  else all[n_all++] = Schedule::interleaved;
  all[n_all++] = Schedule::zb_h1;
  if (vpp == 2) all[n_all++] = Schedule::zbv, all[n_all++] = Schedule::dualpipev;
  const FrameworkSupport& fs = framework_support(f);
  int n = 0;
  for (int i = 0; i < n_all; ++i)
    if (has(fs.schedules, all[i]) && !(has(fs.multi_stage_schedules, all[i]) && vpp < 2)) out[n++] = all[i];
  return n;
}

Candidate choose_recommendation(const SearchResult& r, Objective o) {
  const Candidate& fastest = r.ranked.front();
  if (o != Objective::throughput) return fastest;
  const Candidate* pick = &fastest;
  for (const Candidate& f : r.families) {
    if (!f.within_safety() || f.tokens_per_s < (1 - r.tie_tolerance) * fastest.tokens_per_s) continue;
    const int cf = complexity(f.strategy), cp = complexity(pick->strategy);
    if (cf < cp || (cf == cp && better(f, *pick, o))) pick = &f;
  }
  return *pick;
}

struct Dimensions {
  std::vector<int64_t> tps, micro_batches_all;
  std::vector<int> zeros;
  std::vector<Recompute> recomputes;
  std::vector<bool> offloads;
  std::vector<int64_t> cps;
};

// Context-parallel degrees worth pricing: 1, and for long sequences (kCpMinSeq and beyond, search.hpp) on a runtime
// that runs CP, powers of two up to kMaxSearchedCp that split the sequence into 2·cp chunks.
constexpr int64_t kMaxSearchedCp = 32;
std::vector<int64_t> cp_options(const SearchSpace& sp) {
  if (sp.cp) return {*sp.cp};
  std::vector<int64_t> out{1};
  const Strategy& b = sp.base;
  if (b.seq < kCpMinSeq || !b.flash_attn || !cp_support(b.framework).runs) return out;
  for (int64_t cp = 2; cp <= kMaxSearchedCp && cp <= b.gpus; cp *= 2)
    if (b.seq % (2 * cp) == 0 && b.gpus % cp == 0) out.push_back(cp);
  return out;
}

Dimensions dimensions(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& sp) {
  Dimensions d;
  for (int64_t tp : fixed_or(sp.tp, divisors(sp.base.gpus, nvlink_domain_size(c))))  // TP stays in one NVLink domain
    if (sp.base.gpus % tp == 0 && tp_is_valid(m, c, tp)) d.tps.push_back(tp);
  const FrameworkSupport& fs = framework_support(sp.base.framework);
  std::vector<int> zeros;
  for (int z = 0; z <= 3; ++z)
    if (has(fs.zero_stages, z)) zeros.push_back(z);
  d.zeros = fixed_or(sp.zero, zeros);
  d.recomputes = fixed_or(sp.recompute, std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full});
  d.offloads = sp.offload_optimizer ? std::vector<bool>{false, true} : std::vector<bool>{false};
  d.cps = cp_options(sp);
  return d;
}

// The fixed dimensions alone, checked against the framework before any search: `plan --framework fsdp --zero 1`
// is refused with FSDP2's reason rather than answered with "nothing fits".
void check_fixed_dimensions(const SearchSpace& sp, const ModelSpec& m) {
  Strategy probe = sp.base;
  probe.zero = sp.zero.value_or(probe.framework == Framework::megatron ? 0 : 3);
  if (!sp.zero && !has(framework_support(probe.framework).zero_stages, probe.zero)) probe.zero = 0;
  probe.tp = sp.tp.value_or(1);
  probe.pp = sp.pp.value_or(1);
  probe.cp = sp.cp.value_or(1);
  probe.dp = std::max<int64_t>(sp.dp.value_or(2), 2);
  probe.hsdp = sp.hsdp.value_or(0);
  // A given --hsdp is hybrid sharding of ZeRO-2/3, as predict reads it (strategy.cpp validate_strategy): the search
  // then prices only those, so it is refused here, not dropped in silence.
  if (probe.hsdp > 0) {
    probe.dp = std::max<int64_t>(probe.dp, 2 * probe.hsdp);  // a shard group smaller than dp
    if (sp.zero && *sp.zero < 2)
      throw InputError(fmt::format("--hsdp needs --zero 2 or 3 (hybrid sharding shards gradients or parameters), got "
                                   "--zero {}; drop --hsdp or raise --zero",
                                   *sp.zero));
    if (sp.ep.value_or(1) > 1) throw InputError(hsdp_with_ep_refusal(probe.hsdp, *sp.ep));
  }
  probe.schedule = sp.schedule.value_or(Schedule::one_f_one_b);
  // A schedule or virtual stages imply a pipeline.
  if (probe.pp == 1 && (probe.schedule != Schedule::one_f_one_b || sp.vpp.value_or(1) > 1)) probe.pp = 2;
  // A schedule with several chunks per rank implies them (the search tries vpp ≥ 2 for it).
  probe.vpp = sp.vpp.value_or(schedule_is_v_shaped(probe.schedule) || probe.schedule == Schedule::interleaved ||
                                      has(framework_support(probe.framework).multi_stage_schedules, probe.schedule)
                                  ? 2
                                  : 1);
  // Megatron's batch-level EP overlap under PP runs only interleaved (framework_support.cpp): the search tries vpp ≥ 2.
  if (sp.base.ep_comm_overlap.value_or(false) && probe.pp > 1 && !sp.vpp && !sp.schedule) {
    probe.vpp = 2;
    probe.schedule = Schedule::interleaved;
  }
  probe.offload_optimizer = false;
  probe.ep = sp.ep.value_or(1);
  if (probe.ep > 1 && !has(ep_support(probe.framework).zero_stages, probe.zero)) {
    for (int z = 0; z <= 3; ++z)  // a ZeRO stage the runtime runs with EP, unless --zero fixes one
      if (!sp.zero && has(ep_support(probe.framework).zero_stages, z) &&
          has(framework_support(probe.framework).zero_stages, z)) {
        probe.zero = z;
        break;
      }
  }
  if (!sp.sp) apply_framework_defaults(probe, m);  // torchtitan's TP comes with SP (the search tries it)
  // Unless --zero fixes it, any stage the runtime runs with the fixed dimensions will do (DeepSpeed pipelines only
  // ZeRO-0/1: `plan --framework deepspeed --pp 4` is a question, not an error).
  // When none runs, the refusal names what else is wrong: a stage the runtime has (with a pipeline, one it pipelines).
  if (!sp.zero && !framework_runs(probe)) {
    const FrameworkSupport& fs = framework_support(probe.framework);
    const int fallback = lowest_stage(probe.pp > 1 ? fs.pipeline_zero_stages : fs.zero_stages, probe.zero);
    for (int z = 3; z >= 0 && !framework_runs(probe); --z) probe.zero = z;
    if (!framework_runs(probe)) probe.zero = fallback;
  }
  if (const auto why = framework_refusal(probe)) throw InputError(*why);
  if (const auto why = mtp_refusal(probe, m)) throw InputError(*why);  // torchtitan's MTP: no PP, CP or chunked loss
  // --vpp without --schedule: some schedule of the runtime must run several chunks per rank.
  const FrameworkSupport& fs = framework_support(probe.framework);
  if (sp.vpp.value_or(1) > 1 && !sp.schedule) {
    bool chunked = false;
    for (Schedule s : {Schedule::interleaved, Schedule::zb_h1, Schedule::zbv, Schedule::dualpipev})
      chunked |= has(fs.schedules, s);
    if (!chunked)
      throw InputError(fmt::format("--framework {} cannot run --vpp {}: {}", to_string(probe.framework), *sp.vpp,
                                   fs.pipeline_refusal));
  }
}

// What the framework leaves out of the space the user asked for, one line each (plan prints them).
std::vector<NotRun> not_run_by_framework(const SearchSpace& sp, const ModelSpec& m) {
  const FrameworkSupport& fs = framework_support(sp.base.framework);
  std::vector<NotRun> out;
  static const char* const kZeroNames[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
  if (!sp.zero)
    for (int z = 1; z <= 3; ++z)
      if (!has(fs.zero_stages, z)) out.push_back({kZeroNames[z], fs.zero_refusal});
  if (!sp.pp && m.layers > 1 && sp.base.gpus > 1 && !fs.pipeline) out.push_back({"pipeline parallelism", fs.pipeline_refusal});
  if (!sp.tp && sp.base.gpus > 1 && !fs.tensor_parallel) out.push_back({"tensor parallelism", fs.tp_refusal});
  if (sp.offload_optimizer && !fs.offload_optimizer) out.push_back({"optimizer offload", fs.offload_refusal});
  // The parallelisms an MoE model or a long sequence would search, where this runtime has none of them.
  if (!sp.ep && m.experts > 0 && sp.base.gpus > 1 && !ep_support(sp.base.framework).expert_parallel)
    out.push_back({"expert parallelism", ep_support(sp.base.framework).refusal});
  if (!sp.cp && sp.base.seq >= kCpMinSeq && sp.base.gpus > 1 && !cp_support(sp.base.framework).runs)
    out.push_back({"context parallelism", cp_support(sp.base.framework).refusal});
  // torchtitan's MTP modules run without a pipeline or context parallelism (framework_support.hpp mtp_runs).
  Strategy with_mtp = sp.base;
  with_mtp.cp = 1, with_mtp.pp = 2;
  if (!sp.pp && fs.pipeline && m.layers > 1 && sp.base.gpus > 1 && !mtp_runs(with_mtp, m))
    out.push_back({"pipeline parallelism", mtp_limit_reason(with_mtp)});
  with_mtp.pp = 1, with_mtp.cp = 2;
  if (!sp.cp && sp.base.seq >= kCpMinSeq && sp.base.gpus > 1 && cp_support(sp.base.framework).runs &&
      !mtp_runs(with_mtp, m))
    out.push_back({"context parallelism", mtp_limit_reason(with_mtp)});
  return out;
}

}  // namespace

SearchResult search_strategies(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& space, size_t keep_top) {
  validate_model(m);
  validate_cluster(c);
  const Strategy& base = space.base;
  if (precision_compute_dtype(base.precision) == DType::bf16 && c.gpu.bf16_tflops <= 0)
    throw InputError(fmt::format("--precision {} needs bf16, which {} does not support; use amp-fp16",
                                 to_string(base.precision), c.gpu.name));
  check_fixed_dimensions(space, m);
  if (space.ep && *space.ep > 1) {  // the model-side checks of strategy.cpp validate_expert_parallel
    if (m.experts == 0)
      throw InputError(fmt::format("--ep {}: model '{}' is dense (no 'experts'); expert parallelism needs a mixture of "
                                   "experts: drop --ep or choose an MoE model",
                                   *space.ep, m.name));
    if (m.experts % *space.ep != 0)
      throw InputError(fmt::format("--ep {} must divide the model's {} routed experts; choose a divisor of {}",
                                   *space.ep, m.experts, m.experts));
  }
  const FrameworkTraits fw = framework_traits(base.framework, c.gpu);
  const Dimensions dims = dimensions(m, c, space);
  const int64_t capacity = gpu_capacity_bytes(c.gpu);
  const auto capacity_d = static_cast<double>(capacity);
  TopK ranked(keep_top, space.objective), tight(3, space.objective);
  std::array<std::optional<Candidate>, kFamilies> families;
  SearchResult result;
  bool any_layout = false;
  std::string first_pipeline_refusal;  // why the first pipeline layout was left out (the answer when nothing is left)
  bool refusal_from_pipeline = false;   // ... and whether it came from a layout with pp > 1

  // The default batch (planner/batch.hpp) is a target: a layout with more replicas than the target has sequences would
  // train a larger batch than the rule asks for (8000 replicas of Llama 3 405B on 16 K GPUs against a 2000-sequence
  // target: 4 × the tokens per step), and win on throughput for that reason alone. Such layouts are left out while
  // another layout can meet the target.
  // torchtitan's MTP modules refuse a pipeline and context parallelism (framework_support.hpp mtp_runs).
  auto runs_mtp = [&](int64_t pp, int64_t cp) {
    Strategy probe = base;
    probe.pp = pp, probe.cp = cp;
    return mtp_runs(probe, m);
  };
  int64_t max_dp = INT64_MAX;
  if (space.batch_default) {
    bool any_within = false;
    for (int64_t cp : dims.cps)
      for (int64_t tp : dims.tps)
        for (int64_t pp : fixed_or(space.pp, divisors(base.gpus / tp, m.layers)))
          if ((base.gpus / tp) % pp == 0 && (base.gpus / (tp * pp)) % cp == 0 &&
              base.gpus / (tp * pp * cp) <= space.batch_default->sequences &&
              (!space.dp || *space.dp == base.gpus / (tp * pp * cp)) &&
              (pp == 1 || framework_support(base.framework).pipeline) && runs_mtp(pp, cp))
            any_within = true;
    if (any_within) max_dp = space.batch_default->sequences;
  }

  for (int64_t cp : dims.cps) {
  for (int64_t tp : dims.tps) {
    for (bool sp : fixed_or(space.sp, tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})) {
      if (sp && (tp < 2 || (base.seq / cp) % tp != 0)) continue;
      if (!sp && tp > 1 && tp_needs_sp(base.framework, m)) continue;  // framework_support.hpp
      for (int64_t pp : fixed_or(space.pp, divisors(base.gpus / tp, m.layers))) {
        if ((base.gpus / tp) % pp != 0 || pp > m.layers) continue;
        if (pp > 1 && !framework_support(base.framework).pipeline) continue;  // framework_runs would drop them all
        if ((base.gpus / (tp * pp)) % cp != 0) continue;
        if (!runs_mtp(pp, cp)) continue;
        const int64_t dp = base.gpus / (tp * pp * cp);
        if (space.dp && *space.dp != dp) continue;
        any_layout = true;
        if (dp > max_dp) continue;
        // A given batch must divide over dp; the default is made to (planner/batch.hpp): per replica, the target's
        // sequences rounded to whole micro-batches, so a fixed --micro-batch keeps its own rounding.
        if (!space.batch_default && base.global_batch % dp != 0) continue;
        const int64_t per_replica =
            !space.batch_default ? base.global_batch / dp
            : space.micro_batch  ? default_global_batch(*space.batch_default, dp, *space.micro_batch) / dp
                                 : default_global_batch(*space.batch_default, dp, 1) / dp;
        // Chunks per rank: up to 8, and beyond that where they divide the layers; which of them each runtime's split
        // rule accepts is decided per schedule and split below (planner/pipeline_layout.cpp).
        std::vector<int64_t> vpps{1};
        if (pp > 1)
          for (int64_t v = 2; v <= m.layers / pp; ++v)
            if (v <= 8 || m.layers % (pp * v) == 0) vpps.push_back(v);
        const std::vector<int64_t> vpp_options = fixed_or(space.vpp, vpps);
        std::vector<int64_t> hsdps{0};
        // HSDP shards within a group and replicates across groups so that the sharding collectives stay on the fast
        // links of a node (PyTorch FSDP ShardingStrategy.HYBRID_SHARD); inside one NVLink domain there is no slower
        // link to keep them off, so it is searched only beyond one (a given --hsdp is still priced).
        if (base.gpus > nvlink_domain_size(c))
          for (int64_t h = 2; h < dp; ++h)
            if (dp % h == 0) hsdps.push_back(h);
        const std::vector<int64_t> hsdp_options = fixed_or(space.hsdp, hsdps);
        const std::vector<int64_t> no_hsdp{0};
        for (int64_t mb : fixed_or(space.micro_batch, divisors(per_replica, per_replica))) {
          if (per_replica % mb != 0) continue;
          for (Recompute rc : dims.recomputes) {
            // Korthikanti's selective recomputation with flash attention: no s² tensor to drop, same as none.
            if (rc == Recompute::selective && base.flash_attn && !space.recompute &&
                fw.selective_recompute_gemm_share == 0 && !fw.selective_recomputes_elementwise)
              continue;
            Strategy layout = base;  // the degrees ep_options needs: EP is cut from tp·cp·dp (strategy.hpp)
            layout.tp = tp, layout.cp = cp, layout.dp = dp;
            for (int64_t ep : ep_options(m, space, layout)) {
              Strategy s = base;
              s.ep = ep;
              s.global_batch = dp * per_replica;
              s.tp = tp;
              s.sp = sp;
              s.pp = pp;
              s.cp = cp;
              s.dp = dp;
              s.micro_batch = mb;
              s.recompute = rc;
              const MicrobatchCosts costs = microbatch_costs(m, s, c);
              // Prices one strategy and offers it to the ranking, the tight list and its family's best.
              auto consider = [&](const Strategy& st, const MicrobatchCosts& st_costs) {
                Candidate cand{st, estimate_peak_memory(m, st, fw), step_time_from_costs(m, st, c, fw, st_costs), 0,
                               capacity};
                cand.tokens_per_s = static_cast<double>(st.global_batch * st.seq) / cand.time.step_s;
                cand.max_hbm_fraction = space.max_hbm_fraction;
                cand.expandable_segments = effective_expandable_segments(st, fw);
                ++result.evaluated;
                if (cand.within_safety()) {
                  ++result.fitting;
                  ranked.offer(cand);
                } else if (cand.fits()) {
                  tight.offer(cand);
                }
                auto& slot = families[family_index(st)];
                if (!slot || better_for_family(cand, *slot, space.objective)) slot = cand;
                return cand;
              };
              const bool searches_partial = rc == Recompute::full && !space.recompute && !partial_recompute(base) &&
                                            searches_partial_recompute(base.framework);
              // The layout's other sharding choices find about the same N, and a block costs the same for the same
              // recomputed share: the last N starts the next search, the costs are kept by share.
              int64_t partial_hint = 0;
              std::vector<std::pair<double, MicrobatchCosts>> partial_costs;
              auto costs_for = [&](const Strategy& st) -> const MicrobatchCosts& {
                const double share = recomputed_block_share(m, st);
                for (const auto& [sh, co] : partial_costs)
                  if (sh == share) return co;
                return partial_costs.emplace_back(share, microbatch_costs(m, st, c)).second;
              };
              // One strategy with its schedule and split: every sharding choice the framework runs.
              auto evaluate = [&](Strategy& s) {
                for (int zero : dims.zeros) {
                  // One data-parallel rank shards nothing: every ZeRO stage is DDP.
                  if (dp == 1 && zero > 0 && !space.zero) continue;
                  if (space.hsdp && zero < 2) continue;  // a given --hsdp shards ZeRO-2/3 (check_fixed_dimensions)
                  s.zero = zero;
                  for (int64_t hsdp : zero >= 2 ? hsdp_options : no_hsdp) {
                    if (hsdp > 0 && (zero < 2 || dp % hsdp != 0 || hsdp >= dp)) continue;
                    // Hybrid sharding of the expert-data-parallel group is not modelled (strategy.cpp refuses it).
                    if (hsdp > 0 && s.ep > 1) continue;
                    s.hsdp = hsdp;
                    for (bool offload : dims.offloads) {
                      if (offload && zero == 0) continue;
                      s.offload_optimizer = offload;
                      if (!framework_runs(s)) continue;
                      const Candidate cand = consider(s, costs);
                      // Recomputing every block fits: the fewest blocks that still do (search_recompute.hpp).
                      if (searches_partial && cand.within_safety())
                        if (const auto fewer = fewest_recomputed_blocks(m, s, fw, space.max_hbm_fraction * capacity_d,
                                                                        cand.expandable_segments, partial_hint)) {
                          partial_hint = fewer->recompute_layers;
                          consider(*fewer, costs_for(*fewer));
                        }
                    }
                  }
                }
              };
              for (int64_t vpp : vpp_options) {
                if (vpp > 1 && pp < 2) continue;
                s.vpp = vpp;
                Schedule schedules[4];
                const int n_schedules = schedule_options(space.schedule, base.framework, pp, vpp, schedules);
                for (int si = 0; si < n_schedules; ++si) {
                  s.schedule = schedules[si];
                  if (s.schedule == Schedule::interleaved && (per_replica / mb) % pp != 0) continue;
                  PipelineSplit splits[kMaxSplitCandidates];
                  int n_splits = 1;
                  if (space.split) splits[0] = *space.split;
                  else n_splits = pipeline_split_candidates(m, s, splits);
                  // No split fits: keep the runtime default's reason for the error when nothing is left at all.
                  if (n_splits == 0) splits[0] = PipelineSplit{}, n_splits = 1;
                  for (int k = 0; k < n_splits; ++k) {
                    s.split = splits[k];
                    // The previous layout's sharding choices (evaluate) are not this layout's.
                    s.zero = base.zero;
                    s.hsdp = 0;
                    s.offload_optimizer = false;
                    auto refused = pipeline_layout_refusal(m, s);
                    if (!refused) refused = pipeline_microbatch_refusal(s);
                    if (refused) {
                      // A pipeline's reason is the better answer than "needs --pp ≥ 2" from the layouts without one.
                      if (first_pipeline_refusal.empty() || (pp > 1 && !refusal_from_pipeline))
                        first_pipeline_refusal = *refused, refusal_from_pipeline = pp > 1;
                      continue;
                    }
                    evaluate(s);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  }  // cp
  if (!any_layout)
    throw InputError(fmt::format("no layout of {} GPUs suits {}: tp must divide the GPUs, the heads ({}) and ffn_hidden "
                                 "and be at most {} (GPUs per NVLink domain), pp at most {} (layers){}; try another --gpus",
                                 base.gpus, m.name, m.heads, nvlink_domain_size(c), m.layers,
                                 space.tp || space.pp || space.dp ? ", within the --tp/--pp/--dp given" : ""));
  // Every layout the user's pipeline flags allow was refused by the split or schedule rules: say which rule.
  if (result.evaluated == 0 && !first_pipeline_refusal.empty() && (space.split || space.schedule || space.vpp))
    throw InputError(first_pipeline_refusal);
  if (result.evaluated == 0)
    throw InputError(fmt::format("no layout of {} GPUs has a data-parallel degree gpus/(tp·pp) that divides the global "
                                 "batch of {} sequences (tp ≤ {}, pp ≤ {}): more GPUs than this batch can use, or a "
                                 "batch that does not split evenly; change --gpus or --global-batch, or leave "
                                 "--global-batch out (the default divides over every dp)",
                                 base.gpus, base.global_batch, nvlink_domain_size(c), m.layers));
  result.not_run = not_run_by_framework(space, m);
  // Gaps inside the error band of comparable published runs are not differences the model can claim.
  // A --cp the user fixed puts every candidate under context parallelism: its band.
  if (const auto band = error_band(base.framework, c.gpu, 1.0, model_is_moe(m), space.cp.value_or(1) > 1);
      band && band->half_width() > kSimplicityTolerance) {
    result.tie_tolerance = band->half_width();
    result.tie_basis = band->basis;
  }
  result.ranked = ranked.take();
  result.tight = tight.take();
  for (auto& f : families)
    if (f) result.families.push_back(*f);
  std::sort(result.families.begin(), result.families.end(),
            [&](const Candidate& a, const Candidate& b) { return better_for_family(a, b, space.objective); });
  if (!result.ranked.empty()) result.recommended = choose_recommendation(result, space.objective);
  return result;
}

}  // namespace shardplan
