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
  const bool splits = p > 1 && schedule_splits_backward(plan.schedule);
  if (!splits && v != 1 && (p == 1 || plan.schedule != Schedule::interleaved))
    throw InputError("--vpp > 1 needs --schedule interleaved");
  if (!splits && p > 1 && plan.schedule == Schedule::interleaved) {
    if (v < 2) throw InputError("--schedule interleaved needs --vpp of at least 2");
    if (m % p != 0)
      throw InputError(fmt::format("--schedule interleaved needs the micro-batches per step ({}) to be a multiple of --pp {}; "
                                   "raise --global-batch or lower --micro-batch", m, p));
  }
  // The rank's passes (planner/pipeline_schedule.hpp pipeline_pass_order), B and W apart where the schedule splits them.
  std::vector<PassRef> order;
  for (const PipelinePass& x : pipeline_pass_order(plan.schedule, p, v, m, stage)) {
    const uint8_t part = x.kind == PassKind::backward_input ? 1 : x.kind == PassKind::backward_weight ? 2 : 0;
    order.push_back({x.kind == PassKind::forward, x.micro, x.chunk, part});
  }
  return order;
}

}  // namespace shardplan::sim
