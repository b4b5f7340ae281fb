#include "planner/plan_advice.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/framework_support.hpp"
#include "planner/memory.hpp"
#include "planner/precision.hpp"

namespace shardplan {

namespace {

// The best fitting candidate of a modified space, or nothing (no fit, or a space the flags make invalid: a given
// --global-batch that the new dp does not divide is the user's to change, not ours).
std::optional<Candidate> best_of(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& sp) {
  try {
    SearchResult r = search_strategies(m, c, sp, 1);
    if (r.recommended) return r.recommended;
  } catch (const InputError&) {
  }
  return std::nullopt;
}

// Whole nodes, growing by about a quarter each time (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 19, ...), then bisected: a few
// dozen searches at most for the fewest whole nodes that fit.
std::vector<int64_t> node_counts(int64_t from_nodes, int64_t to_nodes) {
  std::vector<int64_t> out;
  for (int64_t n = from_nodes; n <= to_nodes; n = std::max(n + 1, n + n / 4)) out.push_back(n);
  return out;
}

}  // namespace

std::vector<FixThatFits> fixes_that_fit(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& space) {
  std::vector<FixThatFits> out;
  auto offer = [&](const std::string& change, const SearchSpace& sp) {
    if (auto best = best_of(m, c, sp)) out.push_back({change, *best});
  };
  const Strategy& b = space.base;
  // pure-bf16 keeps no fp32 master copy: 12 B per parameter instead of amp-bf16's 16 (CONTRACT.md, Precision).
  if (b.precision != Precision::pure_bf16 && c.gpu.bf16_tflops > 0) {
    SearchSpace sp = space;
    sp.base.precision = Precision::pure_bf16;
    offer("--precision pure-bf16", sp);
  }
  if (space.recompute && *space.recompute != Recompute::full) {
    SearchSpace sp = space;
    sp.recompute = Recompute::full;
    offer("--recompute full", sp);
  }
  // Offload where the framework runs it; otherwise DeepSpeed's ZeRO-Offload, which offloads the optimizer alone
  // (framework_support.cpp). Not offered when the search already had it.
  const bool offloads = framework_support(b.framework).offload_optimizer;
  if (!(space.offload_optimizer && offloads)) {
    SearchSpace sp = space;
    sp.offload_optimizer = true;
    if (offloads) {
      offer("--offload-optimizer", sp);
    } else if (!space.zero || *space.zero > 0) {
      sp.base.framework = Framework::deepspeed;
      offer("--framework deepspeed --offload-optimizer", sp);
    }
  }
  // A long sequence on a runtime without context parallelism: the nearest one that splits the sequence
  // (framework_support.cpp cp_support): torchtitan for the PyTorch runtimes, Megatron-Core for DeepSpeed.
  if (!space.cp && b.seq >= kCpMinSeq && !cp_support(b.framework).runs && b.framework != Framework::reference) {
    SearchSpace sp = space;
    sp.base.framework = b.framework == Framework::deepspeed ? Framework::megatron : Framework::torchtitan;
    offer(fmt::format("--framework {} (context parallelism)", to_string(sp.base.framework)), sp);
  }
  if (space.tp) {
    for (int64_t tp = *space.tp * 2; tp <= nvlink_domain_size(c) && tp <= b.gpus; tp *= 2) {
      SearchSpace sp = space;
      sp.tp = tp;
      if (auto best = best_of(m, c, sp)) {
        out.push_back({fmt::format("--tp {}", tp), *best});
        break;
      }
    }
  }
  if (!space.dp) {
    const int64_t gpn = std::max<int64_t>(c.gpus_per_node, 1);
    const int64_t nodes = (b.gpus + gpn - 1) / gpn;
    auto on_nodes = [&](int64_t n) {
      SearchSpace sp = space;
      sp.base.gpus = n * gpn;
      if (sp.batch_default) sp.batch_default = default_batch_target(sp.base.seq, sp.base.gpus);
      return best_of(m, c, sp);
    };
    int64_t below = nodes - (b.gpus % gpn == 0 ? 0 : 1);  // the most nodes known not to fit (the GPUs given)
    for (int64_t n : node_counts(below + 1, nodes * 64)) {
      auto best = on_nodes(n);
      if (!best) {
        below = n;
        continue;
      }
      // Bisect between the last count that did not fit and this one: fitting grows with the nodes (more shards,
      // more TP/PP layouts), up to the divisibility of a given batch, which the bisection only makes coarser.
      int64_t hi = n;
      while (hi - below > 1) {
        const int64_t mid = below + (hi - below) / 2;
        if (auto fit = on_nodes(mid)) hi = mid, best = fit;
        else below = mid;
      }
      out.push_back({fmt::format("--gpus {}", hi * gpn), *best});
      break;
    }
  }
  return out;
}

std::string describe_fixes(const std::vector<FixThatFits>& fixes) {
  if (fixes.empty()) return "";
  std::string out = "changes that fit (each alone, found by searching again): ";
  for (size_t i = 0; i < fixes.size(); ++i) {
    const Candidate& best = fixes[i].best;
    out += fmt::format("{}{} ({}, peak {:.1f} GB, {:.0f} tokens/s per GPU)", i == 0 ? "" : "; ", fixes[i].change,
                       family_of(best.strategy), best.peak_total() / kGB,
                       best.tokens_per_s / static_cast<double>(best.strategy.gpus));
  }
  return out;
}

}  // namespace shardplan
