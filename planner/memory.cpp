#include "planner/memory.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "planner/activations.hpp"
#include "planner/context_parallel.hpp"
#include "planner/error.hpp"
#include "planner/fp8.hpp"
#include "planner/framework.hpp"
#include "planner/memory_ledger.hpp"
#include "planner/memory_moments.hpp"
#include "planner/moe.hpp"
#include "planner/moe_costs.hpp"
#include "planner/optimizer.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/partition.hpp"

namespace shardplan {

double MemoryComponents::total() const {
  return params + grads + master + optimizer + activations + logits + buffers + runtime + fragmentation;
}

const char* to_string(MemoryPhase p) {
  switch (p) {
    case MemoryPhase::forward_backward: return "forward/backward";
    case MemoryPhase::optimizer_step: return "optimizer step";
    case MemoryPhase::loss_backward: return "cross-entropy backward";
    case MemoryPhase::block_backward: return "block backward";
    case MemoryPhase::root_post_backward: return "root post-backward";
    case MemoryPhase::head_post_backward: return "head post-backward";
  }
  return "forward/backward";
}

double optimizer_grad_copy_bytes(const Strategy& s, const FrameworkTraits& fw, double local_params) {
  if (s.zero < 1 || s.offload_optimizer || strategy_state_bytes(s).grads >= 4) return 0;
  const double cap = s.zero >= 3 && fw.optimizer_sub_group_elements > 0 ? static_cast<double>(fw.optimizer_sub_group_elements)
                                                                          : local_params;
  return std::min(local_params, cap) * fw.optimizer_fp32_grad_copy_bytes;
}

MemoryComponents model_states(double params, Precision p, int zero, int64_t shard) {
  return model_states(params, precision_state_bytes(p), zero, shard);
}

MemoryComponents model_states(double params, const StateBytes& b, int zero, int64_t shard) {
  // ZeRO §5.1: stage 1 shards optimizer states (here master + Adam), stage 2 also gradients, stage 3 also
  // parameters: DDP (2 + 2 + K)Ψ; ZeRO-1 4Ψ + KΨ/N; ZeRO-2 2Ψ + (2 + K)Ψ/N; ZeRO-3 (4 + K)Ψ/N.
  const double n = static_cast<double>(shard);
  MemoryComponents c;
  c.params = params * b.params / (zero >= 3 ? n : 1);
  c.grads = params * b.grads / (zero >= 2 ? n : 1);
  c.master = params * b.master / (zero >= 1 ? n : 1);
  c.optimizer = params * b.optimizer / (zero >= 1 ? n : 1);
  return c;
}

MemoryComponents stage_model_states(const StageParams& st, const Strategy& s) {
  const double routed = static_cast<double>(st.routed_experts);
  const StateBytes b = strategy_state_bytes(s);
  const MemoryComponents d = model_states(static_cast<double>(st.total()) - routed, b, s.zero, shard_degree(s));
  const MemoryComponents e = model_states(routed, b, s.zero, std::max<int64_t>(expert_data_parallel(s), 1));
  MemoryComponents c;
  c.params = d.params + e.params;
  c.grads = d.grads + e.grads;
  c.master = d.master + e.master;
  c.optimizer = stage_optimizer_state_bytes(st, s, b);  // Adam's d + e, or Muon's (planner/optimizer.hpp)
  return c;
}

Fp8BlockWeights fp8_block_weights(const StageParams& st, const Strategy& s) {
  if (!fp8_params_only(s)) return {};
  const double params_b = strategy_state_bytes(s).params;
  const double blocks = static_cast<double>(st.blocks);
  // The distributed optimizer (ZeRO-1): every rank holds the blocks' FP8 weights whole, with their transpose or
  // column-wise copy. Megatron-FSDP (ZeRO-3): sharded like the rest, the routed experts over the expert-DP group.
  if (s.zero < 3) return {blocks * params_b, blocks * fp8_cached_weight_bytes_per_param(s)};
  const double routed = static_cast<double>(st.moe_layers * st.block_routed);
  const double shards = (blocks - routed) / static_cast<double>(shard_degree(s)) +
                        routed / static_cast<double>(std::max<int64_t>(expert_data_parallel(s), 1));
  return {shards * params_b, shards * fp8_sharded_weight_bytes_per_param(s)};
}

double fp8_cast_params(const StageParams& st, const Strategy& s, const FrameworkTraits& fw) {
  const double blocks = static_cast<double>(st.blocks);
  if (s.zero < 3 || shard_degree(s) <= 1) return blocks;
  const double gathered_units = 1.0 + static_cast<double>(fw.zero3_prefetch_units);
  return std::min(gathered_units * static_cast<double>(st.block_params), blocks);
}

std::string moment_name(MemoryPhase p, int64_t block) {
  if (p == MemoryPhase::block_backward && block >= 0) return fmt::format("block {} backward", block);
  return to_string(p);
}

double checked_max_hbm_fraction(double f) {
  if (!(f > 0 && f <= 1))
    throw InputError(fmt::format("--max-hbm-fraction must be in (0, 1], got {} (0.80 is the default)", f));
  return f;
}

std::string memory_fit_rule(double f, bool expandable_segments) {
  // The peak already holds the caching allocator's reserve and the runtime's own allocations (components
  // `fragmentation` and `runtime`); the planning line keeps a margin for the model's error. Under expandable
  // segments the reserve is unmapped before an allocation fails (fit_bytes).
  if (expandable_segments)
    return fmt::format("fit rule: a configuration fits when its peak less the allocator reserve (allocated + CUDA/NCCL "
                       "runtime: with expandable segments the allocator unmaps its free pages before an allocation "
                       "fails) is at most the HBM capacity; plan ranks only those at most {:.0f} % of it "
                       "(--max-hbm-fraction {:g}; --no-expandable-segments for the default allocator)",
                       f * 100, f);
  return fmt::format("fit rule: a configuration fits when its peak (allocated + allocator reserve + CUDA/NCCL runtime) "
                     "is at most the HBM capacity; plan ranks only those at most {:.0f} % of it (--max-hbm-fraction {:g})",
                     f * 100, f);
}

int64_t bytes_to_int(double bytes) {
  if (!(bytes > 0)) return 0;  // also NaN
  return static_cast<int64_t>(std::llround(std::min(bytes, kMaxPlausibleBytes)));
}

std::vector<NamedBytes> component_bytes(const MemoryComponents& c) {
  auto r = [](double v) { return bytes_to_int(v); };
  return {{"params", r(c.params)},       {"grads", r(c.grads)},   {"master", r(c.master)},
          {"optimizer", r(c.optimizer)}, {"activations", r(c.activations)}, {"logits", r(c.logits)},
          {"buffers", r(c.buffers)},     {"runtime", r(c.runtime)}, {"fragmentation", r(c.fragmentation)}};
}

double fit_bytes(const MemoryComponents& peak, bool expandable_segments) {
  return peak.total() - (expandable_segments ? peak.fragmentation : 0.0);
}

int64_t peak_bytes(const MemoryComponents& c) {
  int64_t sum = 0;
  for (const NamedBytes& nb : component_bytes(c)) sum += nb.bytes;
  return sum;
}

namespace {

using memory_detail::gathered_units_for_backward;
using memory_detail::Ledger;
using memory_detail::loss_or_backward;
using memory_detail::LossOrBackward;
using memory_detail::StageInputs;
using memory_detail::text;

void add_model_states(Ledger& l, const StageInputs& in, MemoryPhase phase) {
  const Strategy& s = in.strategy;
  const MemoryComponents ms = stage_model_states(in.stage, s);
  const char* sharded = s.zero >= 3 ? "sharded" : "replicated";
  if (fp8_params_only(s)) {
    // --fp8-param-gather (planner/fp8.hpp): the blocks' weights live only as FP8 (fp8_block_weights); the embedding,
    // LM head and whatever sits outside the blocks stay in the parameter dtype.
    const Fp8BlockWeights w = fp8_block_weights(in.stage, s);
    l.add(&MemoryComponents::params, "params", [&] { return fmt::format("weights outside the blocks ({} B/param, {})", in.state.params, sharded); },
          ms.params - w.replaced);
    l.add(&MemoryComponents::params, "params",
          text(s.zero >= 3 ? "the blocks' FP8 weight shards (Megatron-FSDP --fp8-param-gather; MXFP8: with a column-wise buffer)"
                           : "the blocks' weights in FP8 only, with their transpose or column-wise copy (--fp8-param-gather)"),
          w.fp8);
  } else {
    l.add(&MemoryComponents::params, "params", [&] { return fmt::format("weights ({} B/param, {})", in.state.params, sharded); },
          ms.params);
  }
  if (in.keeps_unsharded_grads && phase == MemoryPhase::forward_backward) {
    // PyTorch FSDP no_sync: gradients accumulate unsharded until the last micro-batch reduce-scatters them.
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("unsharded gradients kept across micro-batches (no_sync, {} B/param)", in.state.grads); },
          in.psi * in.state.grads);
  } else {
    l.add(&MemoryComponents::grads, "grads", [&] { return fmt::format("gradients ({} B/param, {})", in.state.grads, s.zero >= 2 ? "sharded" : "replicated"); },
          ms.grads);
  }
  if (s.offload_optimizer) return;  // master and Adam states live on the host (ZeRO-Offload)
  l.add(&MemoryComponents::master, "master",
        text(in.state.master < 4 ? "fp32 master weights as 16-bit remainders (precision-aware optimizer)" : "fp32 master weights"),
        ms.master);
  l.add(&MemoryComponents::optimizer, "optimizer",
        text(s.optimizer == OptimizerKind::muon ? "Muon momentum (fp32) of the matrices, Adam m and v of the embedding, "
                                                  "output layer, norms and biases"
             : s.bf16_adam_moments             ? "Adam m and v (bf16)"
                                               : "Adam m and v (fp32)"),
        ms.optimizer);
}

void add_unit_grads_awaiting_reduce(Ledger& l, const StageInputs& in) {
  const LossOrBackward peak = loss_or_backward(in);
  if (peak.loss_peaks()) return;  // not yet allocated while the loss holds its logits
  const int64_t units = peak.grad_units;
  l.add(&MemoryComponents::buffers, "buffers", [&] { return fmt::format("unsharded gradients of {} unit{} awaiting reduce-scatter", units, units == 1 ? "" : "s"); },
        peak.unit_grads);
}

void add_activations(Ledger& l, const StageInputs& in) {
  const ModelSpec& m = in.model;
  const Strategy& s = in.strategy;
  const double per_block = block_activation_bytes(m, s, in.fw);
  // Megatron's CPU activation offloading (strategy.hpp offload_activation_layers; no PP): Transformer Engine keeps the
  // other layers' saved tensors on the GPU, the window its offload and reload run ahead in (cpu_offload.py).
  const int64_t offloaded = std::min(s.offload_activation_layers, in.stage.layers);
  const int64_t resident = in.stage.layers - offloaded;
  const LossOrBackward peak = loss_or_backward(in);
  // The loss starts a backward of the last chunk: interleaved, not the stage's worst (LossOrBackward).
  const StageActivationHold& hold = peak.hold();
  const double in_flight = hold.in_flight;
  // At the backward that holds every awaiting unit gradient, the blocks after it have freed this micro-batch's sets.
  const int64_t done = peak.loss_peaks() ? 0 : peak.done_blocks;
  // Partial recomputation (partial_recompute.hpp): the stage's blocks differ, and the `done` last ones are freed.
  const double held = offloaded > 0 ? per_block * (static_cast<double>(resident) * in_flight - static_cast<double>(done))
                                    : hold.bytes - freed_last_blocks_bytes(in, done);
  l.add(&MemoryComponents::activations, "activations", [&] {
          const std::string freed = done > 0 ? fmt::format(", less {} block{} through its backward", done, done > 1 ? "s" : "") : "";
          return offloaded > 0 ? fmt::format("{} blocks × {:.3g} micro-batches in flight{}, recompute {} ({} more offloaded to "
                                             "the host)", resident, in_flight, freed, to_string(s.recompute), offloaded)
                 : partial_recompute(s)
                     ? fmt::format("{} blocks × {:.3g} micro-batches in flight{}, {} of the {} recomputed", resident,
                                   in_flight, freed, stage_recomputed_blocks(m, s, in.stage.stage), resident)
                     : fmt::format("{} blocks × {:.3g} micro-batches in flight{}, recompute {}", resident,
                                   in_flight, freed, to_string(s.recompute)); },
        held);
  if (peak.working_set > 0 && !peak.loss_peaks())
    l.add(&MemoryComponents::activations, "activations", text("one block's working set while it is recomputed"),
          peak.working_set);
  if (in.stage.first)
    l.add(&MemoryComponents::activations, "activations", text("embedding dropout mask"),
          first_stage_extra_bytes(m, s) * in_flight);
  const double logits = peak.logits;
  // Interleaved, the last rank runs each forward of its last chunk right before that micro-batch's backward
  // (sim/pass_order.cpp; Megatron schedules.py forward_backward_pipelining_with_interleaving): one micro-batch's head
  // inputs at a time, as under 1F1B.
  const double head_in_flight = s.schedule == Schedule::interleaved ? 1.0 : in_flight;
  // Past the loss, the micro-batch in backward has freed its own: autograd drops a node's saved tensors once its
  // backward has run, the head's before the blocks' (sim/stage_builder.cpp frees them at the head's backward).
  const double head_held = peak.loss_peaks() ? head_in_flight : std::max(0.0, head_in_flight - 1);
  if (in.stage.last && head_held > 0)
    l.add(&MemoryComponents::activations, "activations", memory_detail::head_inputs_text(m, in.fw, s),
          peak.head_inputs * head_held);
  if (!peak.loss_peaks()) {
    if (peak.scratch > 0)
      l.add(&MemoryComponents::activations, "activations",
            text("one block's backward temporaries (the logits are freed before the blocks' backward)"), peak.scratch);
  } else {
    const double mtp = mtp_loss_saved_bytes(m, s, in.fw);
    l.add(&MemoryComponents::logits, "logits", [&] { return fmt::format("logits and cross-entropy ({} B/element{})",
                      s.loss == LossKind::fused ? in.fw.fused_loss_copies * in.compute_bytes
                                                : in.fw.logits_bytes_per_element + in.fw.logits_compute_dtype_copies * in.compute_bytes,
                      s.loss == LossKind::chunked ? fmt::format(", 1/{} at a time", in.fw.loss_chunks) : ""); },
          logits - mtp);
    add_mtp_loss_saved(l, m, s, mtp);
  }
}

// The head unit's parameters: final norm and LM head, or the embedding it is tied to.
double head_unit_params(const StageParams& st) {
  return static_cast<double>(st.final_norm + (st.lm_head > 0 ? st.lm_head : st.embedding));
}

void add_head_grads_in_flight(Ledger& l, const StageInputs& in) {
  if (in.fw.head_grads_in_flight && in.stage.last)
    l.add(&MemoryComponents::buffers, "buffers", text("head unit gradients, reduce-scatter in flight"),
          head_unit_params(in.stage) * in.state.grads);
}

// FSDP/ZeRO-3: parameters gathered for computation, and unit gradients before their reduce-scatter.
void add_zero3_working_set(Ledger& l, const StageInputs& in) {
  const double root = static_cast<double>(in.stage.root_unit());
  const double grad_b = in.state.grads;
  if (in.strategy.pp > 1 && in.fw.pp_keeps_params_gathered) {
    // torchtitan under PP: every unit stays gathered from its first forward to its last backward (framework.cpp).
    l.add(&MemoryComponents::buffers, "buffers",
          text("gathered stage parameters, kept from the first forward to the last backward (no reshard under PP)"),
          in.psi * in.compute_bytes);
  } else if (in.fw.zero3_prefetch_elements > 0) {
    // DeepSpeed: the submodule computing plus what its prefetch fetched ahead (largest_block_linear_params): the
    // largest linear, or the LM head (or embedding) where it is larger (the loss's moment), and the prefetch
    // bucket or one more linear, whichever is larger.
    const double linear = static_cast<double>(largest_block_linear_params(in.model, in.strategy));
    const double ahead = std::min(deepspeed_prefetched_params(in.model, in.strategy, in.fw), in.psi);
    const double head = in.stage.last ? static_cast<double>(in.stage.lm_head + in.stage.final_norm) : 0.0;
    const double embedding = in.stage.first ? static_cast<double>(in.stage.embedding) : 0.0;
    l.add(&MemoryComponents::buffers, "buffers", text("gathered parameters (current submodule + prefetch bucket)"),
          std::min(std::max({linear, head, embedding}) + ahead, in.psi) * in.compute_bytes);
  } else {
    const double units = 1.0 + static_cast<double>(in.fw.zero3_prefetch_units);
    // Megatron-FSDP's FP8 parameters gather in FP8 and carry their transpose (tensorwise, made at use) or column-wise
    // data (MXFP8, gathered for the backward): 2 B per gathered parameter, no bf16 copy and no separate cast.
    const bool fp8 = fp8_params_only(in.strategy);
    if (!loss_or_backward(in).loss_peaks())
      l.add(&MemoryComponents::buffers, "buffers", [&] { return fmt::format("gathered block parameters ({} units: current + prefetch{})", units, fp8 ? "; FP8 with transpose or column-wise data" : ""); },
            gathered_units_for_backward(in));
    if (in.fw.zero3_root_stays_gathered)
      l.add(&MemoryComponents::buffers, "buffers", text("gathered root unit (embedding, final norm, LM head)"),
            root * in.compute_bytes);
  }
  if (!in.keeps_unsharded_grads) {
    add_unit_grads_awaiting_reduce(l, in);
    add_head_grads_in_flight(l, in);
    if (in.fw.zero3_root_stays_gathered)
      l.add(&MemoryComponents::buffers, "buffers", text("unsharded root-unit gradients (reduced last)"), root * grad_b);
  }
}

void add_reduction_buffers(Ledger& l, const StageInputs& in) {
  const Strategy& s = in.strategy;
  const double grad_b = in.state.grads;
  if (in.fw.reduce_bucket_elements > 0) {
    l.add(&MemoryComponents::buffers, "buffers", text("gradient reduce bucket"),
          std::min(static_cast<double>(in.fw.reduce_bucket_elements), in.psi) * grad_b);
    return;
  }
  if (s.zero <= 1 && in.fw.ddp_bucket_copy && grad_reduce_degree(s) > 1)
    l.add(&MemoryComponents::buffers, "buffers", text("DDP gradient buckets (a second copy of the gradients)"),
          in.psi * grad_b);
  if (s.zero == 2 && in.fw.zero2_keeps_shard_copy)
    l.add(&MemoryComponents::buffers, "buffers", text("sharded parameters beside the unsharded ones (SHARD_GRAD_OP)"),
          in.local_psi * in.state.params);
  if (s.zero == 2 && !in.keeps_unsharded_grads) {
    add_unit_grads_awaiting_reduce(l, in);
    add_head_grads_in_flight(l, in);
    // Megatron-FSDP's non-unit gradient bucket (framework.cpp zero3_root_stays_gathered), on the last stage from the
    // output layer's backward to the pass's end.
    if (in.fw.zero3_root_stays_gathered && in.stage.last)
      l.add(&MemoryComponents::buffers, "buffers", text("unsharded root-unit gradients (reduced last)"),
            static_cast<double>(in.stage.root_unit()) * in.state.grads);
  }
}

}  // namespace

namespace memory_detail {

void add_step_buffers(Ledger& l, const StageInputs& in, bool cp_buffers) {
  const Strategy& s = in.strategy;
  if (s.pp > 1)
    l.add(&MemoryComponents::buffers, "buffers",
          text(in.fw.pp_buffers_per_microbatch
                   ? "pipeline receive buffers (one per micro-batch: inputs, output gradients) and in-flight outputs"
                   : "pipeline send/receive activations"),
          pipeline_buffer_bytes(in.model, s, in.fw, in.stage.stage, in.stage.first, in.stage.last));
  if (s.sp) l.add(&MemoryComponents::buffers, "buffers", text("sequence-parallel all-gather output"),
                  sp_gather_output_bytes(in.model, s));
  // Expert parallelism (issue 17): the all-to-all's receive buffer of one MoE layer, T·k·h activations
  // (moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: global_input_tokens, the all-to-all output, beside the
  // permuted send buffer that the activations count as the experts' input; freed once sorted by local expert).
  if (s.ep > 1 && in.stage.moe_layers > 0)
    l.add(&MemoryComponents::buffers, "buffers", text("EP all-to-all receive buffer (one MoE layer's T·k·h tokens)"),
          moe_all_to_all_bytes(in.model, s));
  if (s.cp > 1 && cp_buffers)
    l.add(&MemoryComponents::buffers, "buffers", [&] { return fmt::format("context-parallel K/V buffers of one layer's attention ({})", to_string(cp_comm(s.framework))); },
          cp_kv_buffer_bytes(in.model, s));
}

void add_parallel_buffers(Ledger& l, const StageInputs& in, bool attention_running) {
  const Strategy& s = in.strategy;
  add_step_buffers(l, in, attention_running);
  if (in.fw.attention_score_matrices > 0)
    l.add(&MemoryComponents::buffers, "buffers", text("attention workspace (T×T fp32 scores, one head at a time)"),
          static_cast<double>(in.fw.attention_score_matrices) * static_cast<double>(seq_per_rank(s) * s.seq) * 4);
}

int64_t communicators(const ModelSpec& m, const Strategy& s, const StageParams& st) {
  int64_t n = 0;
  if (grad_reduce_degree(s) > 1) n += (s.hsdp > 0 && s.hsdp < s.dp) ? 2 : 1;  // HSDP: shard group + replicate group
  if (s.cp > 1) n += 1;  // the context-parallel ring's group
  if (s.tp > 1) n += 1;
  if (s.pp > 1) n += 1;
  if (s.pp > 1 && m.tied_embeddings && (st.first || st.last)) n += 1;  // Megatron's embedding group
  return n;
}

void add_runtime(Ledger& l, const StageInputs& in) {
  l.add(&MemoryComponents::runtime, "runtime", text("CUDA context and kernels"), static_cast<double>(in.fw.cuda_context_bytes));
  l.add(&MemoryComponents::runtime, "runtime", text("cuBLAS workspace"), static_cast<double>(in.fw.cublas_workspace_bytes));
  const int64_t comms = communicators(in.model, in.strategy, in.stage);
  l.add(&MemoryComponents::runtime, "runtime", [&] { return fmt::format("NCCL buffers ({} communicators)", comms); },
        static_cast<double>(comms * in.fw.nccl_bytes_per_communicator));
}

void add_fragmentation(Ledger& l, const StageInputs& in) {
  const double allocated = l.parts_.total() - l.parts_.runtime - l.parts_.fragmentation;
  l.add(&MemoryComponents::fragmentation, "fragmentation", [&] { return fmt::format("caching allocator reserve beyond allocated ({:.0f} %)", in.fw.fragmentation * 100); },
        allocated * in.fw.fragmentation);
}

}  // namespace memory_detail

namespace {

using memory_detail::add_fragmentation;
using memory_detail::add_parallel_buffers;
using memory_detail::add_runtime;

// Transformer Engine keeps each linear weight's FP8 cast (and its transpose) from the first micro-batch of a step
// (planner/fp8.cpp) to the next step's, the optimizer's included; under ZeRO-3 (Megatron-FSDP) only the gathered
// units' (fp8_cast_params).
void add_fp8_weight_copies(Ledger& l, const StageInputs& in) {
  if (fp8_params_only(in.strategy)) return;  // they are the parameters (add_model_states)
  const bool sharded_params = in.strategy.zero >= 3 && in.shard > 1;
  l.add(&MemoryComponents::buffers, "buffers",
        text(sharded_params ? "FP8 weight copies of the gathered units (Transformer Engine: cast and transposed)"
                            : "FP8 weight copies (Transformer Engine: each linear weight cast and transposed, kept for "
                              "the step)"),
        fp8_cached_weight_bytes_per_param(in.strategy) * fp8_cast_params(in.stage, in.strategy, in.fw));
}

Ledger forward_backward_phase(const StageInputs& in, bool record) {
  Ledger l(record);
  add_model_states(l, in, MemoryPhase::forward_backward);
  add_activations(l, in);
  if (in.strategy.zero == 3 && in.shard > 1) add_zero3_working_set(l, in);
  if (in.shard > 1 || grad_reduce_degree(in.strategy) > 1) add_reduction_buffers(l, in);
  add_fp8_weight_copies(l, in);
  add_parallel_buffers(l, in);
  add_runtime(l, in);
  add_fragmentation(l, in);
  return l;
}

Ledger optimizer_step_phase(const StageInputs& in, bool record) {
  Ledger l(record);
  add_model_states(l, in, MemoryPhase::optimizer_step);
  const Strategy& s = in.strategy;
  if (!s.offload_optimizer) {
    const double local = s.zero >= 1 ? in.local_psi : in.psi;
    l.add(&MemoryComponents::buffers, "buffers", text("optimizer-step temporaries"),
          local * in.fw.optimizer_temp_bytes_per_param);
    l.add(&MemoryComponents::buffers, "buffers", text("optimizer-step temporaries: the gradient partition cast to fp32"),
          optimizer_grad_copy_bytes(s, in.fw, local));
    l.add(&MemoryComponents::buffers, "buffers",
          text("optimizer-step temporaries: Muon's Newton-Schulz workspace for its largest matrix"),
          muon_workspace_bytes(in.model, s, in.stage));
  }
  if (s.zero <= 1 && in.fw.ddp_bucket_copy && grad_reduce_degree(s) > 1)
    l.add(&MemoryComponents::buffers, "buffers", text("DDP gradient buckets (a second copy of the gradients)"),
          in.psi * in.state.grads);
  // What stays allocated through the step, as sim/costs.cpp holds it: torch.distributed.pipelining's per-micro-batch
  // receive buffers (stage.py) and DeepSpeed's pipe_buffers (runtime/pipe/engine.py _allocate_buffers) live from one
  // step to the next, Megatron's sequence-parallel gather buffer too (core/utils.py GlobalMemoryBuffer); the
  // per-transfer and per-layer buffers of the others were freed, but their blocks stay cached at their sizes, which
  // the optimizer's differently sized temporaries cannot reuse. The FP8 weight copies live to the next step's.
  add_step_buffers(l, in, true);
  add_fp8_weight_copies(l, in);
  add_runtime(l, in);
  add_fragmentation(l, in);
  return l;
}

}  // namespace

StageInputs memory_detail::stage_inputs(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                                        const StageParams& st) {
  StageInputs in{m, s, fw, st, 0.0, 1.0, StateBytes{}, 2.0, false};
  in.psi = static_cast<double>(st.total());
  in.shard = static_cast<double>(shard_degree(s));
  in.state = strategy_state_bytes(s);
  in.compute_bytes = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  in.expert_shard = static_cast<double>(std::max<int64_t>(expert_data_parallel(s), 1));
  const double routed = static_cast<double>(st.routed_experts), block_routed = static_cast<double>(st.block_routed);
  in.local_psi = (in.psi - routed) / in.shard + routed / in.expert_shard;
  in.block_local = (static_cast<double>(st.block_params) - block_routed) / in.shard + block_routed / in.expert_shard;
  in.keeps_unsharded_grads = memory_detail::keeps_unsharded_grads(s, fw, shard_degree(s));
  return in;
}

namespace {

using memory_detail::stage_inputs;

StageMemory estimate_stage(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, const StageParams& st) {
  const StageInputs in = stage_inputs(m, s, fw, st);
  if (memory_detail::uses_moments(in)) {
    memory_detail::MomentLedger peak = memory_detail::peak_moment(in, true);
    StageMemory out;
    out.stage = st.stage;
    out.params_per_rank = st.total();
    out.peak_phase = peak.phase;
    out.peak_block = peak.block;
    out.peak = peak.ledger.parts_;
    out.items = std::move(peak.ledger.items_);
    const memory_detail::MomentLedger most = memory_detail::peak_moment(in, false, true);
    out.allocated_phase = most.phase;
    out.allocated_block = most.block;
    out.allocated = most.ledger.parts_;
    return out;
  }
  Ledger fb = forward_backward_phase(in, true);
  Ledger step = optimizer_step_phase(in, true);
  const bool step_wins = step.parts_.total() > fb.parts_.total();
  StageMemory out;
  out.stage = st.stage;
  out.params_per_rank = st.total();
  out.peak_phase = step_wins ? MemoryPhase::optimizer_step : MemoryPhase::forward_backward;
  if (!step_wins) {
    // The moment the ledger describes: the loss's backward where its logits outweigh the blocks' backward-only
    // buffers, else the stage's first backward (its last block in forward order), where they appear with every
    // in-flight activation still saved (the simulator names the same ops); DeepSpeed's IPG bucket appears there too.
    // With unit gradients awaiting their reduce-scatter, it is the backward that holds all of them (the
    // unsharded_grad_units-th).
    const LossOrBackward lb = loss_or_backward(in);
    const bool bucket = in.fw.reduce_bucket_elements > 0 && (in.shard > 1 || grad_reduce_degree(s) > 1);
    if (lb.loss_peaks()) {
      out.peak_phase = MemoryPhase::loss_backward;
    } else if ((lb.backward_extra() + lb.freed_activations > 0 || bucket) && st.layers > 0) {
      out.peak_phase = MemoryPhase::block_backward;
      // Interleaved, the first backward that starts with the stage's most activations held (the simulator's too).
      out.peak_block = std::max<int64_t>(lb.backward_hold.block - lb.done_blocks, 0);
    }
  }
  out.peak = step_wins ? step.parts_ : fb.parts_;
  out.items = std::move(step_wins ? step.items_ : fb.items_);
  out.allocated_phase = out.peak_phase;  // the reserve here is proportional: the same moment
  out.allocated_block = out.peak_block;
  out.allocated = out.peak;
  return out;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelSpec& m, const Strategy& s, const ClusterSpec& c) {
  const FrameworkTraits fw = framework_traits(s.framework, c.gpu);
  MemoryEstimate est;
  for (const StageParams& st : partition_stages(m, s)) est.stages.push_back(estimate_stage(m, s, fw, st));
  for (size_t i = 1; i < est.stages.size(); ++i)
    if (est.stages[i].peak.total() > est.stages[est.busiest].peak.total()) est.busiest = i;
  est.capacity_bytes = gpu_capacity_bytes(c.gpu);
  est.expandable_segments = effective_expandable_segments(s, fw);
  if (s.offload_optimizer) {
    // ZeRO-Offload (Ren et al. 2021, §4): fp32 master, Adam m and v and an fp32 gradient copy on the host.
    const StateBytes b = strategy_state_bytes(s);
    // The local shard (routed experts over the expert-DP group: stage_inputs).
    const StageParams st = stage_params(m, s, est.peak_stage().stage);
    const double local = stage_inputs(m, s, fw, st).local_psi;
    est.host_bytes_per_rank = local * (b.master + b.optimizer + 4.0);
    est.host_bytes_per_node = est.host_bytes_per_rank * static_cast<double>(std::min(c.gpus_per_node, s.gpus));
  }
  if (s.offload_activation_layers > 0) {
    // The offloaded layers' saved activations, in host memory until their backward (pinned buffers per rank).
    const double per_block = block_activation_bytes(m, s, fw);
    est.host_activation_bytes_per_rank = per_block * static_cast<double>(s.offload_activation_layers);
    est.host_bytes_per_rank += est.host_activation_bytes_per_rank;
    est.host_bytes_per_node = est.host_bytes_per_rank * static_cast<double>(std::min(c.gpus_per_node, s.gpus));
  }
  est.host_capacity_bytes = c.host_memory_gib * kGiB;
  return est;
}

MemoryPeak estimate_peak_memory(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  MemoryPeak best;
  int64_t stages[3];
  const int n = candidate_peak_stages(m, s, stages);
  for (int i = 0; i < n; ++i) {
    const StageParams st = stage_params(m, s, stages[i]);
    const StageInputs in = stage_inputs(m, s, fw, st);
    if (memory_detail::uses_moments(in)) {
      const memory_detail::MomentLedger peak = memory_detail::peak_moment(in, false);
      if (i == 0 || peak.ledger.parts_.total() > best.peak.total()) {
        best.peak = peak.ledger.parts_;
        best.stage = st.stage;
        best.params_per_rank = st.total();
        best.phase = peak.phase;
        best.block = peak.block;
      }
      continue;
    }
    const MemoryComponents fb = forward_backward_phase(in, false).parts_;
    const MemoryComponents step = optimizer_step_phase(in, false).parts_;
    const bool step_wins = step.total() > fb.total();
    const MemoryComponents& peak = step_wins ? step : fb;
    if (i == 0 || peak.total() > best.peak.total()) {
      best.peak = peak;
      best.stage = st.stage;
      best.params_per_rank = st.total();
      best.phase = step_wins ? MemoryPhase::optimizer_step : MemoryPhase::forward_backward;
    }
  }
  return best;
}

int64_t largest_block_linear_params(const ModelSpec& m, const Strategy& s) {
  const int64_t h = m.hidden, t = std::max<int64_t>(s.tp, 1);
  int64_t widest = model_q_width(m) / t;  // the query projection (column-parallel)
  if (!model_is_moe(m) || m.dense_layers > 0 || m.moe_layer_freq > 1)
    widest = std::max(widest, m.ffn_hidden / t);  // a dense MLP's gate, up or down
  if (model_is_moe(m)) {
    widest = std::max(widest, m.expert_ffn_hidden / expert_tensor_parallel(s));  // one expert's w1, w2 or w3
    if (m.shared_experts > 0) widest = std::max(widest, m.shared_experts * m.expert_ffn_hidden / t);
  }
  return h * widest;
}

double deepspeed_prefetched_params(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw) {
  return std::max(static_cast<double>(fw.zero3_prefetch_elements),
                  static_cast<double>(largest_block_linear_params(m, s)));
}

}  // namespace shardplan
