// One optimizer step assembled from micro-batch costs: pipeline schedule, data-parallel communication and how
// much of it compute hides, the optimizer.
#include "planner/step_time.hpp"

#include <algorithm>
#include <cmath>

#include "planner/activations.hpp"
#include "planner/comm_cost.hpp"
#include "planner/compute_cost.hpp"
#include "planner/fp8.hpp"
#include "planner/groups.hpp"
#include "planner/optimizer.hpp"
#include "planner/partition.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "planner/precision.hpp"

namespace shardplan {

namespace {

// U units computed one after another, each needing communication `comm` that can run while the previous unit
// computes (prefetch, or reduction of the previous unit's gradients): only the first transfer and whatever
// each later one takes beyond its unit's compute are exposed (a two-stage pipeline of equal stages).
double pipelined_exposure(double units, double comm, double compute) {
  if (units <= 0 || comm <= 0) return 0;
  return comm + (units - 1) * std::max(0.0, comm - compute);
}

struct StageCompute {
  StageParams params;
  double fwd = 0;       // compute of one micro-batch's forward on this stage
  double bwd = 0;       // backward incl. recomputation
  double tp = 0;        // TP collectives of one micro-batch (critical path)
  double cp = 0;        // context-parallel ring exposure of one micro-batch (critical path)
  double ep = 0;        // EP all-to-alls of one micro-batch (critical path)
  double waits_fwd = 0;  // of tp + cp + ep, the forward's (the rest in backward, recomputation included)
  double total() const { return fwd + bwd + tp + cp + ep; }
  double waits_bwd() const { return tp + cp + ep - waits_fwd; }
};

StageCompute stage_compute(const ModelSpec& m, const Strategy& s, const MicrobatchCosts& mb, int64_t stage) {
  StageCompute sc;
  sc.params = stage_params(m, s, stage);
  const auto layers = static_cast<double>(sc.params.layers);
  sc.fwd = layers * mb.block_fwd_s + (sc.params.first ? mb.embed_fwd_s : 0) + (sc.params.last ? mb.head_fwd_s : 0);
  sc.bwd = layers * (mb.block_bwd_s + mb.block_recompute_s) + (sc.params.first ? mb.embed_bwd_s : 0) +
           (sc.params.last ? mb.head_bwd_s : 0);
  sc.tp = layers * (mb.block_tp_fwd_s + mb.block_tp_bwd_s);
  sc.ep = layers * (mb.block_ep_fwd_s + mb.block_ep_bwd_s);
  sc.cp = layers * (mb.block_cp_fwd_s + mb.block_cp_bwd_s);
  sc.waits_fwd = layers * (mb.block_tp_fwd_s + mb.block_ep_fwd_s + mb.block_cp_fwd_s);
  return sc;
}

// Gradient bucket of the framework's reducer: PyTorch DDP 25 MiB; DeepSpeed reduce_bucket_size elements;
// Megatron-Core max(40 M, 1 M × the data-parallel-with-CP size) parameters, "larger DP sizes need larger buckets to
// ensure collectives do not become latency-bound", and one bucket per buffer when the reduction does not overlap
// backward (core/distributed/distributed_data_parallel.py DistributedDataParallel.__init__; training.py
// resolve of ddp_config.bucket_size; the expert buffers take the same size).
double gradient_bucket_bytes(const Strategy& s, const FrameworkTraits& fw, double grad_bytes) {
  if (fw.reduce_bucket_elements > 0) return static_cast<double>(fw.reduce_bucket_elements) * grad_bytes;
  if (fw.framework == Framework::megatron) {
    if (!effective_overlap_grad_reduce(s, fw)) return HUGE_VAL;
    return std::max(40e6, 1e6 * static_cast<double>(s.dp * s.cp)) * grad_bytes;
  }
  return kDdpBucketBytes;
}

}  // namespace

double split_dp_collective_s(const Strategy& s, const ClusterSpec& c, Collective op, double params, double routed,
                             double bytes_per_param) {
  const double r = s.ep > 1 ? std::clamp(routed, 0.0, params) : 0.0;
  double t = collective_time_s(c, op, (params - r) * bytes_per_param, shard_group(s, c));
  if (r > 0) t += collective_time_s(c, op, r * bytes_per_param, expert_dp_group(s, c));
  return t;
}

double optimizer_param_gather_s(const Strategy& s, const ClusterSpec& c, const StageParams& p) {
  const double param_b = strategy_state_bytes(s).params;
  const double psi = static_cast<double>(p.total()), routed = static_cast<double>(p.routed_experts);
  if (!fp8_params_only(s)) return split_dp_collective_s(s, c, Collective::all_gather, psi, routed, param_b);
  const double block_routed = static_cast<double>(p.moe_layers * p.block_routed);
  return split_dp_collective_s(s, c, Collective::all_gather, static_cast<double>(p.blocks), block_routed, 1.0) +
         split_dp_collective_s(s, c, Collective::all_gather, static_cast<double>(p.root_unit()), routed - block_routed,
                               param_b);
}

GradientBuckets gradient_buckets(const Strategy& s, const ClusterSpec& c, const FrameworkTraits& fw, double psi,
                                 double routed, double grad_bytes) {
  GradientBuckets out;
  const int64_t n = shard_degree(s);
  const GroupLayout repl = replicate_group(s, c);
  const bool reduce_scatter = s.zero >= 1 && n > 1;
  const double r = s.ep > 1 ? std::clamp(routed, 0.0, psi) : 0.0;
  double total = 0;
  // One buffer's buckets: psi·grad_bytes in buckets of at most the framework's size.
  auto add = [&](double params, const GroupLayout& g) {
    if (!(params > 0)) return;
    const double bucket = std::min(gradient_bucket_bytes(s, fw, grad_bytes), params * grad_bytes);
    const double count = std::ceil(params * grad_bytes / bucket);
    const double one =
        reduce_scatter ? collective_time_s(c, Collective::reduce_scatter, bucket, g) +
                             (repl.size > 1 ? collective_time_s(c, Collective::all_reduce, bucket / static_cast<double>(n), repl) : 0.0)
                       : collective_time_s(c, Collective::all_reduce, bucket, g);
    out.count += count;
    total += count * one;
  };
  add(psi - r, shard_group(s, c));
  add(r, expert_dp_group(s, c));
  out.per_bucket_s = out.count > 0 ? total / out.count : 0;
  return out;
}

namespace {

struct DpTraffic {
  double exposed = 0;  // whole step
  double total = 0;    // whole step, hidden or not
  double copies = 0;   // FSDP2's all-gather copy-out on the compute stream, whole step (FrameworkTraits)
};

// How often one step gathers and reduces FSDP-style units (framework.hpp documents each behaviour).
struct UnitSchedule {
  double fwd_gathers = 0;   // micro-batches whose forward gathers every unit
  double bwd_gathers = 0;   // ... whose backward gathers them again (ZeRO-3)
  double reductions = 0;    // micro-batches that reduce-scatter while their backward runs
  bool reduce_after = false;  // one reduction after the last backward instead, exposed whole
};

UnitSchedule unit_schedule(const Strategy& s, const FrameworkTraits& fw) {
  const double ga = static_cast<double>(grad_accum_steps(s));
  const bool per_step = effective_grad_sync(s, fw) == GradSync::per_step;
  UnitSchedule u;
  if (s.pp > 1 && fw.pp_keeps_params_gathered) {
    u.fwd_gathers = 1;  // gathered in the first forward, kept to the last backward
  } else if (s.zero == 2 && per_step && fw.zero2_keeps_params_under_no_sync) {
    u.fwd_gathers = 1;  // FSDP1 SHARD_GRAD_OP under no_sync: freed only after the syncing backward
  } else {
    u.fwd_gathers = ga;
    u.bwd_gathers = s.zero == 3 ? ga : 0;
  }
  if (s.pp > 1 && fw.pp_reduces_after_last_backward) u.reduce_after = true;
  else u.reductions = per_step ? 1 : ga;
  return u;
}

// Data-parallel traffic of the busiest stage over one step (Rajbhandari et al. 2020 §7: ZeRO-3 moves 1.5× DDP's
// volume — an all-gather in forward, one in backward, a reduce-scatter; ZeRO-1/2 the same as DDP).
DpTraffic dp_traffic(const Strategy& s, const ClusterSpec& c, const FrameworkTraits& fw, const StageCompute& sc) {
  DpTraffic out;
  const int64_t n = shard_degree(s);
  if (grad_reduce_degree(s) <= 1) return out;
  const GroupLayout repl = replicate_group(s, c);
  const double param_b = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  // Bytes per gradient on the wire: the framework's reduce dtype (precision.hpp precision_grad_reduce_dtype).
  const double grad_b =
      static_cast<double>(dtype_bytes(precision_grad_reduce_dtype(s.precision, fw.amp_grads_reduced_in_fp32)));
  const double units = static_cast<double>(sc.params.layers);
  const double block = static_cast<double>(sc.params.block_params);
  const double root = static_cast<double>(sc.params.root_unit());
  const double psi = static_cast<double>(sc.params.total());
  // Routed experts (issue 17): averaged over the stage's units like the block sizes (MoE and dense blocks priced
  // alike); the root holds the MTP block's.
  const double block_routed = static_cast<double>(sc.params.block_routed);
  const double root_routed =
      static_cast<double>(sc.params.routed_experts - sc.params.moe_layers * sc.params.block_routed);
  const double ga = static_cast<double>(grad_accum_steps(s));
  const double syncs = effective_grad_sync(s, fw) == GradSync::per_step ? 1.0 : ga;
  auto ar = [&](double bytes, const GroupLayout& g) { return collective_time_s(c, Collective::all_reduce, bytes, g); };
  // Gathers and reductions of a unit with `routed` expert parameters (split_dp_collective_s).
  auto ag_unit = [&](double params, double routed, double b) {
    return split_dp_collective_s(s, c, Collective::all_gather, params, routed, b);
  };
  auto rs_unit = [&](double params, double routed, double b) {
    return split_dp_collective_s(s, c, Collective::reduce_scatter, params, routed, b);
  };
  // HSDP: each unit's reduced shard is all-reduced across the replicas (Zhao et al. 2023, PyTorch FSDP §3.2.3).
  auto replica_ar = [&](double params) { return repl.size > 1 ? ar(params * grad_b / static_cast<double>(n), repl) : 0.0; };
  // What hides the traffic: compute, and the TP collectives, CP ring waits and EP all-to-alls on the critical path
  // (each pass its own: the backward's include its recomputation's), during which the data-parallel link is free
  // (sim/ gives each its own link). Compute overlapped by the traffic runs 1 + overlap_compute_slowdown times longer
  // (sim/engine.cpp's rate), and the traffic keeps flowing through that longer time: where it outlasts the compute,
  // the slowed compute hides that much more.
  const double stretch = 1 + overlap_compute_slowdown(c.gpu);
  const double c_fwd = units > 0 ? (stretch * sc.fwd + sc.waits_fwd) / units : 0;
  const double c_bwd = units > 0 ? (stretch * sc.bwd + sc.waits_bwd()) / units : 0;

  if (s.zero >= 2 && n > 1 && (fw.zero2_gathers_units || s.zero == 3)) {
    const UnitSchedule u = unit_schedule(s, fw);
    // FSDP2's copies: out of each all-gather on the compute stream; into each reduce-scatter on its own stream.
    auto copy = [&](double bytes, double passes) { return memory_bound_time_s(c.gpu, passes * bytes); };
    // A gathering forward: the root first (nothing to hide it behind), then every unit behind the previous one.
    // FSDP2's FP8 all-gather moves the blocks' weights in one byte (planner/fp8.hpp); the root stays in bf16.
    const double block_b = gathered_block_param_bytes(s);
    // The ends as units of their own (fsdp_end_units_split): the root's part is the embedding unit's; the [final norm,
    // LM head] unit is gathered behind the blocks in forward, and after the LM head's backward gathered again for the
    // norm's while its reduce-scatter runs, both waited for there (sim/stage_builder.cpp head_unit_backward); under
    // ZeRO-3 block 0's backward hides the embedding's second gather.
    const double head_unit = fsdp_end_units_split(s, fw, sc.params) ? root - static_cast<double>(sc.params.embedding) : 0;
    const double last = root - head_unit, last_routed = head_unit > 0 ? 0 : root_routed;
    const double head_ag = head_unit > 0 ? ag_unit(head_unit, root_routed, param_b) : 0;
    const double head_rs = head_unit > 0 ? rs_unit(head_unit, root_routed, grad_b) + replica_ar(head_unit) +
                                               copy(head_unit * grad_b, fw.reduce_copy_in_passes)
                                         : 0;
    const double fwd_ag = ag_unit(block, block_routed, block_b);
    const double root_ag = ag_unit(last, last_routed, param_b);
    const double fwd_exposed = root_ag + pipelined_exposure(units, fwd_ag, c_fwd);
    const double fwd_total = root_ag + units * fwd_ag + head_ag;
    const double bwd_ag = fwd_ag;
    const double embed_again = head_unit > 0 && s.zero >= 3 ? root_ag : 0;
    const double unit_rs = rs_unit(block, block_routed, grad_b) + replica_ar(block) + copy(block * grad_b, fw.reduce_copy_in_passes);
    const double tail_rs = rs_unit(last, last_routed, grad_b) + replica_ar(last) + copy(last * grad_b, fw.reduce_copy_in_passes);
    // A backward that gathers (ZeRO-3) and/or reduce-scatters each unit behind the previous unit's compute; the
    // root is reduced last, after all compute.
    auto backward = [&](bool gather, bool reduce) {
      const double per_unit = (gather ? bwd_ag : 0) + (reduce ? unit_rs : 0);
      const double head = head_ag + (reduce ? head_rs : 0);
      return DpTraffic{pipelined_exposure(units, per_unit, c_bwd) + (reduce ? tail_rs : 0) + head,
                       units * per_unit + (reduce ? tail_rs : 0) + head + (gather ? embed_again : 0), 0};
    };
    // Backward passes: the reducing ones first gather too where both happen; the rest gather only.
    const double both = std::min(u.bwd_gathers, u.reductions);
    const DpTraffic gather_reduce = backward(true, true), gather_only = backward(true, false),
                    reduce_only = backward(false, true);
    out.exposed = u.fwd_gathers * fwd_exposed + both * gather_reduce.exposed +
                  (u.bwd_gathers - both) * gather_only.exposed + (u.reductions - both) * reduce_only.exposed;
    out.total = u.fwd_gathers * fwd_total + both * gather_reduce.total + (u.bwd_gathers - both) * gather_only.total +
                (u.reductions - both) * reduce_only.total;
    // A runtime whose backward does not end waiting for its reductions (Megatron-FSDP: only finish_grad_sync before
    // the optimizer waits) hides each micro-batch's last reduce-scatter behind the next forward; the step's last
    // stays exposed (framework.hpp backward_end_waits_for_reduce).
    // That forward gathers on the same link, so only its slack hides the tail.
    if (!fw.backward_end_waits_for_reduce && u.reductions > 1) {
      const double slack = u.fwd_gathers > 0 ? std::max(0.0, units * c_fwd - fwd_total) : units * c_fwd;
      out.exposed -= (u.reductions - 1) * std::min(tail_rs, slack);
    }
    if (u.reduce_after) {
      const double after = units * unit_rs + tail_rs;
      out.exposed += after;
      out.total += after;
    }
    const double gathered = (u.fwd_gathers * units + u.bwd_gathers * units) * block * block_b + u.fwd_gathers * root * param_b +
                            u.bwd_gathers * (head_unit + (embed_again > 0 ? last : 0)) * param_b;
    out.copies = copy(gathered, fw.gather_copy_out_passes);
    return out;
  }
  // DDP, ZeRO-1 and DeepSpeed ZeRO-2: bucketed gradient reduction overlapping backward; ZeRO-1/2 then gather
  // the updated parameters once per step.
  const bool reduce_scatter = s.zero >= 1 && n > 1;
  const double routed = static_cast<double>(sc.params.routed_experts);
  const GradientBuckets gb = gradient_buckets(s, c, fw, psi, routed, grad_b);
  const double buckets = gb.count, per_bucket = gb.per_bucket_s;
  const double bwd_compute = stretch * sc.bwd + sc.waits_bwd();
  const double fwd_compute = stretch * sc.fwd + sc.waits_fwd;
  out.total = syncs * buckets * per_bucket;
  if (effective_overlap_grad_reduce(s, fw)) {
    // Buckets fill in backward order and each is reduced once full, behind the compute that follows; the first stage's
    // embedding gradients come last (its backward ends the pass: sim/stage_builder.cpp embed_bwd), so their buckets
    // are reduced after all compute, in the open.
    const double embedding = sc.params.first ? std::min(static_cast<double>(sc.params.embedding), psi) : 0.0;
    const double tail = psi > 0 ? buckets * embedding / psi : 0.0, body = buckets - tail;
    const double each = pipelined_exposure(body, per_bucket, body > 0 ? bwd_compute / body : 0.0) + tail * per_bucket;
    // Where the backward does not end waiting for its reductions (Megatron-FSDP's optim_grads reduces every
    // micro-batch), what outlasts one backward runs beside the next forward; the step's last stays exposed.
    const double hidden = fw.backward_end_waits_for_reduce ? 0.0 : fwd_compute;
    out.exposed = each + (syncs - 1) * std::max(0.0, each - hidden);
  } else {
    out.exposed = out.total;
  }
  if (reduce_scatter) {
    const double gather = optimizer_param_gather_s(s, c, sc.params);
    out.exposed += effective_overlap_param_gather(s, fw)
                       ? pipelined_exposure(buckets, gather / buckets, fwd_compute / buckets)
                       : gather;
    out.total += gather;
  }
  return out;
}

// Host memory bandwidth a node's CPUs give the offloaded Adam step (DDR4/DDR5 servers: ~100–200 GB/s per
// socket pair); shared by the node's ranks.
constexpr double kHostAdamBytesPerS = 100e9;

}  // namespace

double stage_optimizer_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const StageParams& p) {
  const StateBytes sb = strategy_state_bytes(s);
  // The local shard: the routed experts' over the expert-DP group (issue 17), the rest over shard_degree.
  const double psi = static_cast<double>(p.total()), routed = static_cast<double>(p.routed_experts);
  const double local = s.zero >= 1 ? (psi - routed) / static_cast<double>(shard_degree(s)) +
                                         routed / static_cast<double>(std::max<int64_t>(expert_data_parallel(s), 1))
                                   : psi;
  // AdamW reads gradients, reads and writes weights, master weights, m and v; the grad-norm reads gradients. Muon's
  // momentum update reads and writes its one state in place of m and v (optimizer.hpp stage_optimizer_state_bytes
  // gives the local states of both), and its Newton–Schulz work comes on top (muon_step_s).
  const double states = 2 * stage_optimizer_state_bytes(p, s, sb);
  const double bytes = local * (2 * sb.params + 2 * sb.grads + 2 * sb.master) + states;
  if (!s.offload_optimizer) return memory_bound_time_s(c.gpu, bytes) + muon_step_s(m, s, c, p);
  // ZeRO-Offload (Ren et al. 2021, §4): gradients go down and weights come back over PCIe; Adam runs on the CPU.
  const double ranks_per_node = static_cast<double>(std::min(c.gpus_per_node, s.gpus));
  const double host = local * (4 + 4 + 8) * 2 / (kHostAdamBytesPerS / ranks_per_node);
  const double pcie = local * (sb.grads + sb.params) / (c.gpu.pcie_gbps * 1e9);
  return host + pcie;
}

double pipeline_send_s(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  if (s.pp <= 1) return 0;
  // Megatron sends the sequence-scattered activation under SP (Korthikanti §4.2.2).
  return collective_time_s(c, Collective::send_recv, stage_boundary_bytes(m, s), pp_link(s, c));
}

StepTime step_time_from_costs(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, const FrameworkTraits& fw,
                              const MicrobatchCosts& mb) {
  // The slowest stage sets the pace of the pipeline: its micro-batches' compute, then its optimizer step (Muon's can
  // differ between stages more than their compute: optimizer.hpp muon_step_s; the simulator's critical stage alike).
  const double ga = static_cast<double>(grad_accum_steps(s));
  int64_t candidates[3];
  const int n = candidate_peak_stages(m, s, candidates);
  StageCompute slowest = stage_compute(m, s, mb, candidates[0]);
  double slowest_optimizer = stage_optimizer_s(m, s, c, slowest.params);
  for (int i = 1; i < n; ++i) {
    const StageCompute sc = stage_compute(m, s, mb, candidates[i]);
    const double optimizer = stage_optimizer_s(m, s, c, sc.params);
    if (ga * sc.total() + optimizer > ga * slowest.total() + slowest_optimizer) slowest = sc, slowest_optimizer = optimizer;
  }
  const double send = pipeline_send_s(m, s, c);
  StepTime t;
  t.modelled = true;
  t.exposed_tp_s = ga * slowest.tp;
  t.exposed_ep_s = ga * slowest.ep;
  t.exposed_cp_s = ga * slowest.cp;
  // Bubble and pipeline transfers of the schedule (planner/pipeline_schedule.hpp gives each formula and its source);
  // the zero-bubble schedules fill part of the bubble with the W passes (weight-gradient GEMMs) of the stage.
  const double block_wgrad = schedule_splits_backward(s.schedule) ? mb.block_wgrad_s : 0;
  const double wgrad = static_cast<double>(slowest.params.layers) * block_wgrad;
  const PipelineTimes pipe =
      pipeline_times(m, s, mb, block_wgrad, {slowest.fwd, slowest.bwd, wgrad, slowest.tp + slowest.cp + slowest.ep, send});
  t.exposed_pp_s = pipe.exposed_pp_s;
  t.bubble_s = pipe.bubble_s;
  const DpTraffic dp = dp_traffic(s, c, fw, slowest);
  t.exposed_dp_s = dp.exposed;
  t.dp_comm_total_s = dp.total;
  const double busy = ga * (slowest.fwd + slowest.bwd) + dp.copies;
  // Traffic hidden for a time H ran beside the slowed compute and the TP/CP/EP waits that hid it, in proportion to
  // their shares of the hiding time; beside compute for a time Hc it ran with Hc / (1 + k) of compute work, which took
  // Hc: k / (1 + k) · Hc longer (sim/engine.cpp slows compute by 1 + k while a data-parallel transfer runs, and only
  // compute); at most k · busy.
  const double k = overlap_compute_slowdown(c.gpu);
  const double waits = ga * (slowest.tp + slowest.cp + slowest.ep);
  const double beside_compute = busy > 0 ? (1 + k) * busy / ((1 + k) * busy + waits) : 0.0;
  t.overlap_slowdown_s = k / (1 + k) * std::min((dp.total - dp.exposed) * beside_compute, (1 + k) * busy);
  t.compute_s = busy + t.overlap_slowdown_s;
  t.optimizer_s = slowest_optimizer;
  t.exposed_comm_s = t.exposed_tp_s + t.exposed_cp_s + t.exposed_pp_s + t.exposed_dp_s + t.exposed_ep_s;
  t.step_s = t.compute_s + t.exposed_comm_s + t.bubble_s + t.optimizer_s;
  return t;
}

StepTime estimate_step_time(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  return step_time_from_costs(m, s, c, framework_traits(s.framework), microbatch_costs(m, s, c));
}

}  // namespace shardplan
