// The step as ops on streams: every pipeline stage's passes in its schedule's order (sim/stage_builder.hpp), the
// cross-stage edges of Megatron's pipeline schedules and torch.distributed.pipelining's zero-bubble ones (B and W
// passes apart; V-shaped chunk placement), the grad-norm all-reduce and the optimizer.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "sim/stage_builder.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

// Virtual stage (model piece) of chunk c on rank i, and the (rank, chunk) of a piece: Megatron's loop (rank i runs
// i, i + p, ...) or the V of ZB-V and DualPipeV (rank i runs i and 2p − 1 − i).
static int64_t virtual_piece(const StepPlan& plan, int64_t i, int64_t c) {
  if (schedule_is_v_shaped(plan.schedule) && plan.pp > 1) return c == 0 ? i : 2 * plan.pp - 1 - i;
  return i + c * plan.pp;
}
static std::pair<int64_t, int64_t> piece_owner(const StepPlan& plan, int64_t k) {
  if (schedule_is_v_shaped(plan.schedule) && plan.pp > 1)
    return k < plan.pp ? std::pair{k, int64_t{0}} : std::pair{2 * plan.pp - 1 - k, int64_t{1}};
  return {k % plan.pp, k / plan.pp};
}

BuiltStep build_step(const StepPlan& plan, Engine& e) {
  const int64_t p = plan.pp, v = plan.vpp;
  if (p < 1 || v < 1 || plan.micro_batches < 1 || static_cast<int64_t>(plan.stages.size()) != p)
    throw InputError("the step needs pp ≥ 1 stages, vpp ≥ 1 and at least one micro-batch");
  for (const StageCosts& c : plan.stages)
    if (static_cast<int64_t>(c.chunk_layers.size()) != v)
      throw InputError("every stage needs one layer count per model chunk (vpp)");
  std::vector<std::vector<PassRef>> orders;
  for (int64_t i = 0; i < p; ++i) orders.push_back(pass_order(plan, i));

  BuiltStep out;
  std::vector<StageStreams> streams(static_cast<size_t>(p));
  std::vector<StageBuilder> builders;
  builders.reserve(static_cast<size_t>(p));
  for (int64_t i = 0; i < p; ++i) {
    const auto rank = static_cast<int32_t>(i);
    const StageCosts& c = plan.stages[static_cast<size_t>(i)];
    StageStreams& st = streams[static_cast<size_t>(i)];
    st.compute = e.add_stream(rank, StreamKind::compute);
    if (c.tp_fwd > 0 || c.tp_bwd > 0) st.tp = e.add_stream(rank, StreamKind::tp);
    if (c.ep_fwd > 0 || c.ep_bwd > 0) st.ep = e.add_stream(rank, StreamKind::ep);
    if (c.cp_fwd.steps > 1) st.cp = e.add_stream(rank, StreamKind::cp);
    if (p > 1) st.pp = e.add_stream(rank, StreamKind::pp);
    if (plan.dp_mode == DpMode::units) {
      st.gather = e.add_stream(rank, StreamKind::dp_gather);
      st.reduce = e.add_stream(rank, StreamKind::dp_reduce);
    }
    st.bucket = e.add_stream(rank, StreamKind::dp_bucket);
    for (const auto& [kind, bytes] : c.static_bytes) e.alloc_static(rank, kind, bytes);
    out.compute_stream.push_back(st.compute);
    builders.emplace_back(plan, i, e, st);
    for (const PassRef& pass : orders[static_cast<size_t>(i)]) builders.back().add_pass(pass);
  }
  // Cross-stage edges: a forward waits for the activation from the previous stage (or, interleaved, from the last
  // stage's previous chunk); a backward for the gradient from the next stage (or the first stage's next chunk).
  for (int64_t i = 0; i < p; ++i) {
    StageOps& ops = builders[static_cast<size_t>(i)].ops();
    for (int64_t mb = 0; mb < plan.micro_batches; ++mb)
      for (int64_t c = 0; c < v; ++c) {
        const auto k = static_cast<size_t>(mb * v + c);
        // The neighbouring virtual stages of this chunk, and who runs them (looped or V-shaped).
        const int64_t piece = virtual_piece(plan, i, c), pieces = p * v;
        int32_t act = kNone;
        if (piece > 0) {
          const auto [r, rc] = piece_owner(plan, piece - 1);
          act = builders[static_cast<size_t>(r)].ops().send_act[static_cast<size_t>(mb * v + rc)];
        }
        e.add_dep(ops.fwd_entry[k], act);
        int32_t grad = kNone;
        if (piece < pieces - 1) {
          const auto [r, rc] = piece_owner(plan, piece + 1);
          grad = builders[static_cast<size_t>(r)].ops().send_grad[static_cast<size_t>(mb * v + rc)];
        }
        e.add_dep(ops.bwd_entry[k], grad);

        e.add_dep(ops.bwd_entry_gather[k], grad);
        // The last chunk's backward on the last stage starts from its own loss: its first gather waits for it.
        if (grad == kNone) e.add_dep(ops.bwd_entry_gather[k], ops.fwd_entry[k]);
      }
  }
  // The gradient norm needs every stage's reduced gradients (clip_grad_norm across model-parallel ranks); each
  // stage's optimizer waits for it.
  std::vector<int32_t> norms;
  for (int64_t i = 0; i < p; ++i) norms.push_back(builders[static_cast<size_t>(i)].add_grad_norm());
  for (int64_t i = 0; i < p; ++i)
    for (int64_t j = 0; j < p; ++j)
      for (int32_t dep : builders[static_cast<size_t>(j)].tail()) e.add_dep(norms[static_cast<size_t>(i)], dep);
  for (int64_t i = 0; i < p; ++i)
    out.last_op.push_back(builders[static_cast<size_t>(i)].add_optimizer(norms[static_cast<size_t>(i)]));
  return out;
}

}  // namespace shardplan::sim
