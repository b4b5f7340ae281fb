#pragma once
// Activation memory from the architecture: the tensors each block saves for its backward pass
// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4),
// generalised to GQA, SwiGLU, flash attention and models without dropout.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/framework.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// How tensor/sequence parallelism divides a saved tensor.
enum class ActSplit {
  tensor,    // inside the TP region (after a column-parallel GEMM): divided by tp
  sequence,  // at the TP region's boundary (norm inputs, dropout masks): replicated under TP, divided by
             // tp under sequence parallelism
  replicated,  // whole on every TP rank, with or without SP (DTensor's all-gathered linear inputs: framework.hpp
               // tp_saves_gathered_inputs)
};

// One saved tensor of a block, per token of one micro-batch on one rank before the split.
struct ActTerm {
  const char* name = "";
  double bytes_per_token = 0;
  ActSplit split = ActSplit::tensor;
  bool dropped_by_selective = false;  // recomputed under selective recomputation (the s² attention terms)
  int tensors = 1;  // how many tensors of equal size the term stands for (the caching allocator's segments)
  uint32_t module = 0;  // the Megatron recompute module (recompute_modules.hpp RecomputeModule) that drops it, or 0
};

// The tensors one block saves, with the sequence length `seq` (the s² terms scale with it).
std::vector<ActTerm> block_activation_terms(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);

// Bytes one block keeps for one micro-batch on one rank, under the strategy's recomputation:
//   none: every term; selective: the terms not dropped (Megatron's --recompute-modules: the terms of the modules in
//   force, recompute_modules.hpp); full: only the block input (Korthikanti §4.2).
double block_activation_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);
// Under partial recomputation (planner/partial_recompute.hpp) the blocks differ: a recomputed one keeps its input
// (block_activation_bytes), the others their whole working set. The first `first` blocks of a chunk of
// `chunk_blocks` together, and every block of the rank's stage (its chunks), one micro-batch each. Without partial
// recomputation each is block_activation_bytes per block.
double saved_first_blocks_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t first,
                                int64_t chunk_blocks);
double stage_saved_block_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t rank);
// stage_saved_block_bytes per block of the stage: where a count of blocks stands for any of them (the interleaved
// schedule's chunks in flight).
double stage_mean_block_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t rank);
// How many of the tensors a block keeps (under the strategy's recomputation) are at least `bytes` each, for the
// caching allocator's segments (allocator_reserve.hpp); no allocation.
int64_t block_saved_tensors_of_at_least(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, double bytes);
// Bytes of a block's full working set (every term): what a block holds while it is being recomputed.
double block_working_set_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);

// Bytes of one block's backward temporaries for one micro-batch: the gradients of its intermediates alive while
// its backward runs (∂ residual stream, ∂ block scratch of width h, ∂ MLP input (2f SwiGLU, f GELU), ∂ activation
// output f, ∂ attention output, ∂ q/k/v). Counted for frameworks with FrameworkTraits::block_backward_scratch.
double block_backward_scratch_bytes(const ModelSpec& m, const Strategy& s);

// Micro-batches whose activations stage `stage` holds at its peak, in units of "all of the stage's layers":
//   no pipeline: 1 (gradient accumulation runs micro-batches one after another);
//   1F1B: min(p − i, m) (Narayanan et al. 2021, §2.2.1);
//   interleaved: rank 0 holds p·(1 + (p − 1)/(p·v)) (ibid. §2.2.2; Korthikanti §4.2.3), others fewer;
//   GPipe: m (Huang et al. 2019).
double in_flight_microbatches(const Strategy& s, int64_t stage);
// The same counted in the stage's own blocks: under the interleaved schedule the chunks of a rank can differ in
// size (uneven splits, the embedding and loss counted as layers), and the in-flight chunks are the schedule's,
// so the most blocks held at once over the steady state, divided by the stage's blocks. Otherwise as above.
double in_flight_stage_microbatches(const ModelSpec& m, const Strategy& s, int64_t stage);
// The saved block activations a stage holds at its worst backward's start, in bytes (partial recomputation: each
// chunk its own blocks'), and the block whose backward starts then (forward order; the first such in time). At the
// last stage's loss (`at_loss`), which starts a backward of the stage's last chunk: interleaved, the worst such start,
// fewer than the stage's worst; otherwise the two are the same moment's.
struct StageActivationHold {
  double bytes = 0;
  double in_flight = 0;  // bytes in micro-batches of the stage's blocks
  int64_t block = -1;    // interleaved: the last block of the chunk then in backward; otherwise the stage's last
};
StageActivationHold stage_activation_hold(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                                          int64_t stage, bool at_loss);

// Saved tensors outside the blocks on the first stage (embedding dropout mask) and the last stage (final norm
// input, LM head input), per micro-batch on one rank.
double first_stage_extra_bytes(const ModelSpec& m, const Strategy& s);

// One tensor passed between pipeline stages, per micro-batch on one rank: the stage's output [b, s/cp, h] in the
// compute dtype, sequence-scattered under SP (Korthikanti §4.2.2). Also SP's all-gather unit (× tp).
double stage_boundary_bytes(const ModelSpec& m, const Strategy& s);

// Sequence parallelism's all-gather output, one gathered layer input on one rank: the boundary tensor × tp, in FP8
// where the runtime gathers FP8 (fp8.hpp tp_gather_bytes_per_element).
double sp_gather_output_bytes(const ModelSpec& m, const Strategy& s);

// What a pipeline stage's rank holds for the transfers between stages, beyond the saved activations: under
// torch.distributed.pipelining (FrameworkTraits::pp_buffers_per_microbatch) a receive buffer per micro-batch and
// model chunk for the input and for the output's gradient, and the in-flight micro-batches' outputs; elsewhere one
// boundary tensor in and one out. 0 without a pipeline.
double pipeline_buffer_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw, int64_t stage,
                             bool first, bool last);
double last_stage_extra_bytes(const ModelSpec& m, const Strategy& s);
// The same as the framework's implementation saves them (FrameworkTraits::norm_impl).
double last_stage_extra_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);
// What one norm layer saves for backward per token, before any TP/SP split (FrameworkTraits::norm_impl); `a` is the
// activation dtype's bytes.
double norm_saved_bytes(const ModelSpec& m, const FrameworkTraits& fw, double a);

// Logits and cross-entropy at the loss on the last stage, for the one micro-batch at the loss.
double logits_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);
// What the multi-token-prediction modules' cross-entropies keep for their backward at the main loss's backward (one
// per module, each over the same tokens and vocabulary as the main one): beside logits_bytes at the loss's moment.
double mtp_loss_saved_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);
// Bytes per logit element one such cross-entropy keeps between its forward and backward.
double mtp_loss_saved_bytes_per_logit(const Strategy& s);
// FrameworkTraits::torchtitan_mtp: what the MTP depths hold beside the main loss's forward bytes when the last depth's
// cross-entropy runs its forward (every depth's logits, kept by `pred`, and the earlier losses' saved tensors); the
// loss's moment is the larger of that forward and the backward (mtp_loss_saved_bytes beside the main backward's).
double mtp_loss_forward_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);
// The loss's moment on the ledger path (predict and sim/ alike): logits_bytes and, beside it, mtp_loss_saved_bytes.
double loss_logits_bytes(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw);

}  // namespace shardplan
