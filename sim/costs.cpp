// A configuration's step as the simulator plays it, costed by the planner: the same micro-batch costs
// (planner/microbatch_costs.cpp), the same collectives on the same process groups as planner/step_time.cpp's
// dp_traffic, the same activation and model-state bytes as planner/memory.cpp.
#include <algorithm>
#include <cmath>

#include "planner/activations.hpp"
#include "planner/comm_cost.hpp"
#include "planner/compute_cost.hpp"
#include "planner/fp8.hpp"
#include "planner/framework.hpp"
#include "planner/groups.hpp"
#include "planner/memory.hpp"
#include "planner/memory_ledger.hpp"
#include "planner/memory_moments.hpp"
#include "planner/moe_costs.hpp"
#include "planner/optimizer.hpp"
#include "planner/partition.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/precision.hpp"
#include "planner/step_time.hpp"
#include "sim/step_plan.hpp"

namespace shardplan::sim {

namespace {

void add_static(StageCosts& sc, MemKind k, double bytes) {
  if (bytes > 0) sc.static_bytes.emplace_back(k, bytes);
}

// The FSDP family: the parts of planner/memory_moments.cpp, which sim/schedule.cpp allocates where the runtime does
// (shards and Adam states all step; gathered units, gradients, reduce-scatter inputs and logits at their ops).
void use_moment_parts(StageCosts& sc, const MomentParts& mp, const FrameworkTraits& /*fw*/) {
  add_static(sc, MemKind::params, mp.shard_params);
  add_static(sc, MemKind::master, mp.shard_master);
  add_static(sc, MemKind::optimizer, mp.optimizer);
  add_static(sc, MemKind::model_buffers, mp.model_buffers);
  sc.optimizer_temps = mp.optimizer_temps;
  sc.moments = true;
  sc.reshard_after_forward = mp.reshard_after_forward;
  sc.logits_bwd_extra = std::max(0.0, mp.logits_backward - mp.logits_forward);
  sc.logits_cached = mp.logits_cached;
  sc.gathered_block = mp.gathered_block;
  sc.gathered_root = mp.gathered_root;
  sc.backward_grads = mp.backward_grads;
  sc.backward_temps = mp.backward_temps;
  sc.backward_grads_kept = mp.backward_grads_kept;
  sc.backward_temps_kept = mp.backward_temps_kept;
  sc.head_grads = mp.head_grads;
  sc.embed_grads = mp.embed_grads;
  sc.block_reduce_input = mp.block_reduce_input;
  sc.root_reduce_input = mp.root_reduce_input;
  sc.block_sharded_grads = mp.block_sharded_grads;
  sc.root_sharded_grads = mp.root_sharded_grads;
  sc.end_units = mp.end_units;
  sc.gathered_head_unit = mp.gathered_head_unit;
  sc.head_unit_reduce_input = mp.head_unit_reduce_input;
  sc.head_unit_sharded_grads = mp.head_unit_sharded_grads;
  sc.mtp_embed_grad = mp.mtp_embed_grad;
  sc.mtp_embed_gathered = mp.mtp_embed_gathered;
  sc.gathered_mtp_unit = mp.gathered_mtp_unit;
  sc.unit_grads = mp.accumulated_block;  // no_sync only (0 otherwise)
  sc.root_grads = mp.accumulated_root;
  sc.allocator_reserve = mp.allocator_reserve;
  add_static(sc, MemKind::cached_free, mp.reduce_stream_reserve);
  sc.shards_replace_reserve = mp.reduce_stream_reserve > 0;
}

}  // namespace

StepPlan plan_step(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  validate_model(m);
  validate_cluster(c);
  validate_strategy(s, m, c);
  const FrameworkTraits fw = framework_traits(s.framework, c.gpu);
  const MicrobatchCosts mb = microbatch_costs(m, s, c);
  const MemoryEstimate mem = estimate_memory(m, s, c);

  StepPlan plan;
  plan.pp = s.pp;
  plan.vpp = s.vpp;
  plan.micro_batches = grad_accum_steps(s);
  plan.schedule = s.schedule;
  plan.send = pipeline_send_s(m, s, c);
  plan.overlap_slowdown = overlap_compute_slowdown(c.gpu);
  const int64_t n = shard_degree(s);
  const bool per_step = effective_grad_sync(s, fw) == GradSync::per_step;
  plan.sync_every_micro = !per_step;
  // FSDP2 over one rank still works unit by unit (planner/memory_moments.hpp moments_apply; FSDP1 is NO_SHARD there).
  const bool fsdp_on_one_rank = n == 1 && memory_detail::moments_apply(s, fw, n);
  if (grad_reduce_degree(s) > 1 || fsdp_on_one_rank)
    plan.dp_mode = s.zero >= 2 && (n > 1 || fsdp_on_one_rank) && (fw.zero2_gathers_units || s.zero == 3)
                       ? DpMode::units
                       : DpMode::buckets;
  plan.keeps_unsharded_grads = memory_detail::keeps_unsharded_grads(s, fw, n);
  plan.overlap_buckets = effective_overlap_grad_reduce(s, fw);
  plan.overlap_param_gather = effective_overlap_param_gather(s, fw);
  // The same rules as step_time.cpp's unit_schedule.
  plan.gathers_once = (s.pp > 1 && fw.pp_keeps_params_gathered) || (s.zero == 2 && per_step && fw.zero2_keeps_params_under_no_sync);
  plan.reduce_after_last_backward = s.pp > 1 && fw.pp_reduces_after_last_backward;
  plan.prefetch_before_loss = fw.loss_inside_root_forward;
  plan.waits_for_root_reduce = fw.backward_end_waits_for_reduce;

  const GroupLayout repl = replicate_group(s, c);
  const StateBytes sb = strategy_state_bytes(s);
  const double param_b = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  const double grad_b = sb.grads;
  // Bytes per gradient on the wire (step_time.cpp dp_traffic): the framework's reduce dtype.
  const double comm_grad_b =
      static_cast<double>(dtype_bytes(precision_grad_reduce_dtype(s.precision, fw.amp_grads_reduced_in_fp32)));
  auto ar = [&](double bytes, const GroupLayout& g) { return collective_time_s(c, Collective::all_reduce, bytes, g); };
  auto replica_ar = [&](double params) { return repl.size > 1 ? ar(params * comm_grad_b / static_cast<double>(n), repl) : 0.0; };
  // DeepSpeed's prefetch runs one submodule ahead at least (memory.hpp largest_block_linear_params): one unit here,
  // each unit's gathered bytes standing for its submodules' (below).
  plan.prefetch_units = std::max<int64_t>(1, fw.zero3_prefetch_units);

  // The gradient norm: one fp32 all-reduce across every rank (Megatron clip_grad_norm; FSDP clip_grad_norm_).
  const GroupLayout world = world_group(s, c);
  const double grad_norm = ar(4, world);

  for (int64_t i = 0; i < s.pp; ++i) {
    const StageParams sp = stage_params(m, s, i);
    StageCosts sc;
    // Blocks of each chunk under the split (planner/pipeline_layout.cpp): uneven ends, embedding and loss as layers,
    // V-shaped chunks.
    for (int64_t k = 0; k < s.vpp; ++k) sc.chunk_layers.push_back(chunk_layers(m, s, i, k));
    sc.first = sp.first;
    sc.last = sp.last;
    sc.block_fwd = mb.block_fwd_s;
    sc.block_bwd = mb.block_bwd_s + mb.block_recompute_s;
    // The W pass of the zero-bubble schedules: the block's weight-gradient GEMMs, as step_time.cpp prices it.
    if (schedule_splits_backward(s.schedule)) sc.block_wgrad = std::min(mb.block_wgrad_s, sc.block_bwd);
    sc.tp_fwd = mb.block_tp_fwd_s;
    sc.tp_bwd = mb.block_tp_bwd_s;
    sc.ep_fwd = mb.block_ep_fwd_s;  // the all-to-alls on their own stream (planner/moe_costs.hpp)
    sc.ep_bwd = mb.block_ep_bwd_s;
    sc.cp_fwd = mb.cp.fwd;
    sc.cp_bwd = mb.cp.bwd;
    if (sp.first) sc.embed_fwd = mb.embed_fwd_s, sc.embed_bwd = mb.embed_bwd_s;
    if (sp.last) sc.head_fwd = mb.head_fwd_s, sc.head_bwd = mb.head_bwd_s;
    const double psi = static_cast<double>(sp.total());
    sc.optimizer = stage_optimizer_s(m, s, c, sp);  // AdamW's memory-bound pass, or Muon's (step_time.hpp)
    sc.grad_norm = grad_norm;
    const double block = static_cast<double>(sp.block_params), root = static_cast<double>(sp.root_unit());
    sc.block_params = block;
    sc.root_params = root;
    sc.embed_params = static_cast<double>(sp.embedding);
    sc.head_params = static_cast<double>(sp.lm_head + sp.final_norm);

    // Data-parallel traffic (step_time.cpp dp_traffic; Rajbhandari et al. 2020 §7); with EP the routed experts over
    // the expert-DP group (step_time.hpp split_dp_collective_s).
    const double block_routed = static_cast<double>(sp.block_routed);
    const double root_routed = static_cast<double>(sp.routed_experts - sp.moe_layers * sp.block_routed);
    auto ag_unit = [&](double params, double routed, double b) {
      return split_dp_collective_s(s, c, Collective::all_gather, params, routed, b);
    };
    auto rs_unit = [&](double params, double routed, double b) {
      return split_dp_collective_s(s, c, Collective::reduce_scatter, params, routed, b);
    };
    if (plan.dp_mode == DpMode::units) {
      // The ends as units of their own (fsdp_end_units_split): the root's collectives are the embedding unit's, the
      // [final norm, LM head] unit (with any routed experts outside the blocks) has its own.
      const double head_unit = fsdp_end_units_split(s, fw, sp) ? root - sc.embed_params : 0, last = root - head_unit;
      const double last_routed = head_unit > 0 ? 0 : root_routed;
      sc.gather_block = ag_unit(block, block_routed, gathered_block_param_bytes(s));  // FP8 all-gather: 1 B (fp8.hpp)
      sc.gather_root = ag_unit(last, last_routed, param_b);
      sc.gather_block_bwd = s.zero == 3 && !plan.gathers_once ? sc.gather_block : 0;
      // FSDP2's copies (framework.hpp): out of a gather on the compute stream, into a reduce-scatter on its stream.
      auto copy = [&](double bytes, double passes) { return memory_bound_time_s(c.gpu, passes * bytes); };
      sc.copy_block = copy(block * gathered_block_param_bytes(s), fw.gather_copy_out_passes);
      sc.copy_root = copy(last * param_b, fw.gather_copy_out_passes);
      sc.reduce_block = rs_unit(block, block_routed, comm_grad_b) + replica_ar(block) + copy(block * comm_grad_b, fw.reduce_copy_in_passes);
      sc.reduce_root = rs_unit(last, last_routed, comm_grad_b) + replica_ar(last) + copy(last * comm_grad_b, fw.reduce_copy_in_passes);
      if (head_unit > 0) {
        sc.gather_head_unit = ag_unit(head_unit, root_routed, param_b);
        sc.copy_head_unit = copy(head_unit * param_b, fw.gather_copy_out_passes);
        sc.reduce_head_unit = rs_unit(head_unit, root_routed, comm_grad_b) + replica_ar(head_unit) +
                              copy(head_unit * comm_grad_b, fw.reduce_copy_in_passes);
      }
    } else if (plan.dp_mode == DpMode::buckets) {
      const bool reduce_scatter = s.zero >= 1 && n > 1;
      const double routed = static_cast<double>(sp.routed_experts);
      const GradientBuckets gb = gradient_buckets(s, c, fw, psi, routed, comm_grad_b);
      sc.buckets = static_cast<int64_t>(gb.count);
      sc.reduce_bucket = gb.per_bucket_s;
      if (reduce_scatter) sc.param_gather = optimizer_param_gather_s(s, c, sp);
    }

    // Memory (planner/memory.cpp): model states, runtime and fixed buffers live all step; the rest comes and goes.
    // The FSDP family's moments (planner/memory_moments.hpp) allocate their own parts (use_moment_parts).
    const MomentParts mp = moment_parts(m, s, fw, sp);
    const bool moments = mp.applies && plan.dp_mode == DpMode::units;
    const MemoryComponents ms = stage_model_states(sp, s);  // routed experts over expert-DP (issue 17)
    if (moments) {
      use_moment_parts(sc, mp, fw);
      add_static(sc, MemKind::runtime, mem.stages[static_cast<size_t>(i)].peak.runtime);
    } else {
      // Megatron's FP8 parameters (fp8.hpp fp8_params_only): the blocks' only copy is the FP8 one (fp8_weights below).
      add_static(sc, MemKind::params, ms.params - fp8_block_weights(sp, s).replaced);
      if (!plan.keeps_unsharded_grads) add_static(sc, MemKind::grads, ms.grads);
      else if (plan.dp_mode == DpMode::units) sc.sharded_grads = ms.grads;
      else add_static(sc, MemKind::unsharded_grads, psi * grad_b);
      if (!s.offload_optimizer) {
        add_static(sc, MemKind::master, ms.master);
        add_static(sc, MemKind::optimizer, ms.optimizer);
        const double local = s.zero >= 1 ? memory_detail::stage_inputs(m, s, fw, sp).local_psi : psi;
        sc.optimizer_temps = local * fw.optimizer_temp_bytes_per_param + optimizer_grad_copy_bytes(s, fw, local) +
                             muon_workspace_bytes(m, s, sp);
      }
      add_static(sc, MemKind::runtime, mem.stages[static_cast<size_t>(i)].peak.runtime);
      if (n > 1 || grad_reduce_degree(s) > 1) {
        if (fw.reduce_bucket_elements > 0)  // DeepSpeed's IPG bucket: made in backward, freed by its epilogue
          sc.backward_bucket = std::min(static_cast<double>(fw.reduce_bucket_elements), psi) * grad_b;
        else if (s.zero <= 1 && fw.ddp_bucket_copy && grad_reduce_degree(s) > 1)
          add_static(sc, MemKind::reduce_buffers, psi * grad_b);  // DDP buckets: a second copy of the gradients
        if (s.zero == 2 && plan.dp_mode == DpMode::buckets && fw.reduce_bucket_elements == 0 && !plan.keeps_unsharded_grads) {
          sc.transient_unit_grads = static_cast<double>(sp.block_params) * grad_b;  // memory_backward.cpp unit_grads_awaiting_reduce
          if (fw.zero3_root_stays_gathered) sc.transient_root_grads = static_cast<double>(sp.root_unit()) * grad_b;
        }
        if (fw.reduce_bucket_elements == 0 && s.zero == 2 && fw.zero2_keeps_shard_copy)
          add_static(sc, MemKind::reduce_buffers, memory_detail::stage_inputs(m, s, fw, sp).local_psi * sb.params);
      }
    }
    add_static(sc, MemKind::pipeline_buffers, pipeline_buffer_bytes(m, s, fw, sp.stage, sp.first, sp.last));
    if (s.sp) add_static(sc, MemKind::sp_buffer, sp_gather_output_bytes(m, s));
    if (s.ep > 1 && sp.moe_layers > 0) add_static(sc, MemKind::ep_buffers, moe_all_to_all_bytes(m, s));  // memory.cpp
    // The FSDP family's moments hold them inside the attention's backward only (MomentParts::backward_temps).
    if (s.cp > 1 && !moments) add_static(sc, MemKind::cp_buffers, cp_kv_buffer_bytes(m, s));
    // The blocks' FP8 weight copies (memory.cpp fp8_cast_params), or under FP8 parameters the weights themselves.
    add_static(sc, MemKind::fp8_weights, fp8_params_only(s) ? fp8_block_weights(sp, s).fp8
                                                            : fp8_cached_weight_bytes_per_param(s) * fp8_cast_params(sp, s, fw));
    sc.activations_per_block = block_activation_bytes(m, s, fw);
    sc.offloaded_blocks = std::min(s.offload_activation_layers, sp.layers);  // memory.cpp add_activations
    if (s.recompute == Recompute::full) sc.recompute_working_set = block_working_set_bytes(m, s, fw);
    if (partial_recompute(s)) {  // the blocks of each chunk, in the stage's forward order (planner/partial_recompute.hpp)
      sc.activations_kept_block = block_working_set_bytes(m, s, fw);
      for (int64_t n : sc.chunk_layers)
        for (int64_t k = 0; k < n; ++k) sc.recomputed_blocks.push_back(recomputes_block(s, k, n) ? 1 : 0);
    }
    if (sp.first) sc.first_extra = first_stage_extra_bytes(m, s);
    if (sp.last) sc.last_extra = last_stage_extra_bytes(m, s), sc.logits = loss_logits_bytes(m, s, fw);
    if (moments) {
      // The moments' own sizes, set by use_moment_parts; the block's recomputed working set is in backward_temps.
      sc.recompute_working_set = 0;
      if (sp.last) sc.last_extra = mp.last_extra, sc.logits = mp.logits_forward;
    } else if (plan.dp_mode == DpMode::units) {
      if (s.zero == 3) {
        // Megatron-FSDP's FP8 parameters: gathered in FP8 with their transpose or column-wise data (memory.cpp).
        sc.gathered_block = block * (fp8_params_only(s) ? fp8_cached_weight_bytes_per_param(s) : param_b);
        if (fw.zero3_root_stays_gathered) sc.gathered_root = root * param_b;
        // DeepSpeed fetches each module's partitions for its forward and again for its backward and releases them
        // after (runtime/zero/partitioned_param_coordinator.py fetch_sub_module / release_sub_module): the
        // embedding and the LM head are such modules (memory.cpp add_zero3_working_set).
        if (fw.zero3_prefetch_elements > 0) {
          sc.gathered_embed = sc.embed_params * param_b, sc.gathered_head = sc.head_params * param_b;
          // ... and a block's linears one at a time: the computing one and the prefetched ones, split over the two
          // units the schedule holds (current + prefetch) so that together they are memory.cpp's.
          const double linear = static_cast<double>(largest_block_linear_params(m, s));
          sc.gathered_block = std::min(linear + deepspeed_prefetched_params(m, s, fw), 2 * block) / 2 * param_b;
        }
      }
      // DeepSpeed copies each gradient into its reduce bucket as it is produced (the bucket lives through each
      // backward, memory.cpp add_reduction_buffers), so no unit's or root's unsharded gradients wait for their
      // reduce-scatter.
      const bool through_bucket = fw.reduce_bucket_elements > 0;
      sc.unit_grads = through_bucket ? 0 : block * grad_b;
      sc.root_grads = through_bucket ? 0 : root * grad_b;
    }
    // An MoE model's dense blocks are smaller than its MoE blocks, and block_params is the largest unit: where every
    // unit of the stage stays gathered, or keeps its gradients across micro-batches, the per-unit bytes are the
    // stage's mean, so that what is kept totals the stage's own parameters (as predict's).
    const double mean_scale = sp.layers > 0 && sp.block_params > 0
                                  ? static_cast<double>(sp.blocks) / (static_cast<double>(sp.layers) * static_cast<double>(sp.block_params))
                                  : 1.0;
    if (plan.gathers_once) sc.gathered_block *= mean_scale;
    if (plan.keeps_unsharded_grads) sc.unit_grads *= mean_scale;
    plan.stages.push_back(std::move(sc));
  }
  return plan;
}

}  // namespace shardplan::sim
