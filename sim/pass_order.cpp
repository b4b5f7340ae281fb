// Each stage's order of forward and backward passes under the step's pipeline schedule (sim/step_plan.hpp
// pass_order): 1F1B, interleaved, GPipe and the zero-bubble schedules with B and W as passes of their own.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

std::vector<PassRef> pass_order(const StepPlan& plan, int64_t stage) {
  const int64_t p = plan.pp, v = plan.vpp, m = plan.micro_batches;
  std::vector<PassRef> order;
  order.reserve(static_cast<size_t>(2 * m * v));
  auto fwd = [&](int64_t mb, int64_t c) { order.push_back({true, static_cast<int32_t>(mb), static_cast<int32_t>(c)}); };
  auto bwd = [&](int64_t mb, int64_t c) { order.push_back({false, static_cast<int32_t>(mb), static_cast<int32_t>(c)}); };
  if (p > 1 && schedule_splits_backward(plan.schedule)) {
    // ZB-H1 (interleaved), ZB-V, DualPipeV: torch.distributed.pipelining's per-rank orders, B and W apart.
    for (const PipelinePass& x : split_backward_pass_order(plan.schedule, p, v, m, stage)) {
      const uint8_t part = x.kind == PassKind::backward_input ? 1 : x.kind == PassKind::backward_weight ? 2 : 0;
      order.push_back({x.kind == PassKind::forward, x.micro, x.chunk, part});
    }
    return order;
  }
  if (p == 1 || plan.schedule == Schedule::gpipe) {
    if (v != 1) throw InputError("--vpp > 1 needs --schedule interleaved");
    if (p == 1) {
      // Gradient accumulation: one micro-batch after another.
      for (int64_t mb = 0; mb < m; ++mb) fwd(mb, 0), bwd(mb, 0);
      return order;
    }
    // GPipe (Huang et al. 2019): every forward, then every backward.
    for (int64_t mb = 0; mb < m; ++mb) fwd(mb, 0);
    for (int64_t mb = 0; mb < m; ++mb) bwd(mb, 0);
    return order;
  }
  if (plan.schedule == Schedule::one_f_one_b) {
    if (v != 1) throw InputError("--vpp > 1 needs --schedule interleaved");
    // Narayanan et al. 2021 §2.2.1: stage i warms up with p − i − 1 forwards.
    const int64_t warmup = std::min(p - stage - 1, m);
    for (int64_t k = 0; k < warmup; ++k) fwd(k, 0);
    for (int64_t k = 0; k < m - warmup; ++k) fwd(warmup + k, 0), bwd(k, 0);
    for (int64_t k = m - warmup; k < m; ++k) bwd(k, 0);
    return order;
  }
  // Interleaved 1F1B (Narayanan et al. 2021 §2.2.2; Megatron schedules.py
  // forward_backward_pipelining_with_interleaving).
  if (v < 2) throw InputError("--schedule interleaved needs --vpp of at least 2");
  if (m % p != 0)
    throw InputError(fmt::format("--schedule interleaved needs the micro-batches per step ({}) to be a multiple of --pp {}; "
                                 "raise --global-batch or lower --micro-batch", m, p));
  const int64_t total = m * v;
  const InterleavedOrder o{p, v};
  const int64_t warmup = o.warmup(stage, total);
  for (int64_t k = 0; k < warmup; ++k) fwd(o.micro(k), o.forward_chunk(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    fwd(o.micro(warmup + k), o.forward_chunk(warmup + k));
    bwd(o.micro(k), o.backward_chunk(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) bwd(o.micro(k), o.backward_chunk(k));
  return order;
}

}  // namespace shardplan::sim
