// Blocks per pipeline stage under each runtime's split rule, read in the runtimes' source:
//   Megatron-Core   megatron/core/transformer/transformer_block.py get_num_layers_to_build and the checks in
//                   megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ ("Uneven PP",
//                   account_for_embedding/loss_in_pipeline_split);
//   torchtitan      torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part and
//                   _get_pipeline_metadata;
//   DeepSpeed       deepspeed/runtime/pipe/module.py PipelineModule._partition_layers with partition_method
//                   'type:transformer' (microsoft/Megatron-DeepSpeed megatron/model/gpt_model.py GPTModelPipe) or
//                   'type:transformer|embedding' (BLOOM-176B: bigscience train/tr11-176B-ml/README.md):
//                   deepspeed/runtime/utils.py partition_balanced over unit weights, which gives the same blocks as
//                   torchtitan's rule (the remainder to the first stages; checked for every L 8–59, pp 2–8).
#include "planner/pipeline_layout.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "planner/framework_support.hpp"
#include "planner/megatron_layout.hpp"

namespace shardplan {

bool schedule_is_v_shaped(Schedule s) { return s == Schedule::zbv || s == Schedule::dualpipev; }

bool schedule_splits_backward(Schedule s) {
  return s == Schedule::zb_h1 || s == Schedule::zbv || s == Schedule::dualpipev;
}

int64_t chunks_per_rank(const Strategy& s) { return schedule_is_v_shaped(s.schedule) && s.pp > 1 ? 2 : s.vpp; }

int64_t virtual_stage_count(const Strategy& s) { return s.pp * chunks_per_rank(s); }

int64_t virtual_stage_of(const Strategy& s, int64_t rank, int64_t chunk) {
  // torch.distributed.pipelining _get_pp_rank_to_stage_indices_mapping: "v" pairs rank r with stages r and
  // 2·pp − 1 − r; "loop" gives it r + c·pp (Megatron's interleaving likewise).
  if (schedule_is_v_shaped(s.schedule) && s.pp > 1) return chunk == 0 ? rank : 2 * s.pp - 1 - rank;
  return rank + chunk * s.pp;
}

bool has_stage_layout(const Strategy& s) { return s.split.layout.stages > 0; }

int64_t effective_embedding_layers(const Strategy& s) {
  if (has_stage_layout(s)) return 0;  // the layout places the embedding itself
  if (s.split.embedding_layers >= 0) return s.split.embedding_layers;
  // torchtitan/config/configs.py ParallelismConfig: pipeline_parallel_first_stage_less_layers = 1. With explicit
  // first/last counts the weights are not used (Megatron refuses both together).
  const bool uneven = s.split.first_layers > 0 || s.split.last_layers > 0;
  return s.framework == Framework::torchtitan && !uneven ? 1 : 0;
}

int64_t effective_loss_layers(const Strategy& s) {
  if (has_stage_layout(s)) return 0;
  if (s.split.loss_layers >= 0) return s.split.loss_layers;
  const bool uneven = s.split.first_layers > 0 || s.split.last_layers > 0;
  return s.framework == Framework::torchtitan && !uneven ? 1 : 0;  // pipeline_parallel_last_stage_less_layers = 1
}

namespace {

bool uneven_ends(const Strategy& s) { return s.split.first_layers > 0 || s.split.last_layers > 0; }

// Megatron's uneven pipeline (transformer_block.py get_num_layers_to_build): the first and last ranks hold the
// counts given, the middle ranks share the rest evenly; each rank's count is split evenly over its vp chunks.
int64_t uneven_rank_layers(const ModelSpec& m, const Strategy& s, int64_t rank) {
  const int64_t f = s.split.first_layers, l = s.split.last_layers;
  if (rank == 0 && f > 0) return f;
  if (rank == s.pp - 1 && l > 0) return l;
  const int64_t middle_ranks = s.pp - (f > 0) - (l > 0);
  return middle_ranks > 0 ? (m.layers - f - l) / middle_ranks : 0;
}

// Weighted split over the virtual stages (torchtitan _generate_llm_fqn_per_model_part): E = L + embedding + loss
// "effective layers", ⌊E/S⌋ per virtual stage, the remainder one each to the first virtual stages; the first virtual
// stage holds the embedding in place of `embedding` blocks, the last the loss in place of `loss` blocks. Megatron's
// account_for_*_in_pipeline_split and DeepSpeed's 'type:transformer|embedding' are this rule where S divides E.
int64_t weighted_stage_layers(const ModelSpec& m, const Strategy& s, int64_t k) {
  const int64_t S = virtual_stage_count(s);
  const int64_t ew = effective_embedding_layers(s), lw = effective_loss_layers(s);
  const int64_t e = m.layers + ew + lw;
  int64_t n = e / S + (k < e % S ? 1 : 0);
  if (k == 0) n -= ew;
  if (k == S - 1) n -= lw;
  return n;
}

// shardplan's default for the other runtimes (FSDP, the reference loop have no pipeline; Megatron-Core requires
// pp to divide L): L / pp each, the remainder one each to the last stages; interleaved needs S to divide L.
int64_t default_stage_layers(const ModelSpec& m, const Strategy& s, int64_t k) {
  const int64_t S = virtual_stage_count(s);
  if (chunks_per_rank(s) > 1) return m.layers / S;
  const int64_t extra = m.layers % s.pp;
  return m.layers / s.pp + (k >= s.pp - extra ? 1 : 0);
}

bool weighted(const Strategy& s) {
  return effective_embedding_layers(s) > 0 || effective_loss_layers(s) > 0 || s.framework == Framework::torchtitan ||
         s.framework == Framework::deepspeed;
}

}  // namespace

int64_t virtual_stage_layers(const ModelSpec& m, const Strategy& s, int64_t k) {
  if (s.pp <= 1) return k == 0 ? m.layers : 0;
  // Megatron's layout: get_num_layers_to_build counts the stage's 't' entries.
  if (has_stage_layout(s)) return k < s.split.layout.stages ? s.split.layout.blocks[static_cast<size_t>(k)] : 0;
  if (uneven_ends(s)) return uneven_rank_layers(m, s, k % s.pp) / chunks_per_rank(s);
  if (weighted(s)) return weighted_stage_layers(m, s, k);
  return default_stage_layers(m, s, k);
}

int64_t chunk_layers(const ModelSpec& m, const Strategy& s, int64_t rank, int64_t chunk) {
  return virtual_stage_layers(m, s, virtual_stage_of(s, rank, chunk));
}

int64_t rank_layers(const ModelSpec& m, const Strategy& s, int64_t rank) {
  int64_t n = 0;
  for (int64_t c = 0; c < chunks_per_rank(s); ++c) n += chunk_layers(m, s, rank, c);
  return n;
}

bool rank_holds_embedding(const Strategy&, int64_t rank) { return rank == 0; }

bool rank_holds_head(const Strategy& s, int64_t rank) {
  return s.pp <= 1 || (schedule_is_v_shaped(s.schedule) ? rank == 0 : rank == s.pp - 1);
}

namespace {

std::optional<std::string> schedule_refusal(const Strategy& s) {
  const char* name = to_string(s.schedule);
  if (schedule_is_v_shaped(s.schedule)) {
    // torch.distributed.pipelining ScheduleZBVZeroBubble / ScheduleDualPipeV: "requires exactly 2 stages per rank".
    if (s.pp < 2) return fmt::format("--schedule {} needs --pp of at least 2", name);
    if (s.vpp != 2)
      return fmt::format("--schedule {} runs exactly two model chunks per rank (a V); use --vpp 2 or omit --vpp", name);
    return std::nullopt;
  }
  if (s.schedule == Schedule::interleaved && s.vpp < 2)
    return "--schedule interleaved needs --vpp of at least 2 (virtual stages per rank)";
  if (s.vpp > 1) {
    if (s.schedule != Schedule::interleaved && s.schedule != Schedule::zb_h1)
      return "--vpp > 1 needs --schedule interleaved or zb-h1 (or drop --vpp)";
    if (s.pp < 2) return "--vpp > 1 needs --pp of at least 2";
  }
  return std::nullopt;
}

std::optional<std::string> uneven_refusal(const ModelSpec& m, const Strategy& s) {
  const int64_t f = s.split.first_layers, l = s.split.last_layers, v = chunks_per_rank(s), L = m.layers;
  const char* flags = f > 0 && l > 0 ? "--pp-first-layers/--pp-last-layers" : f > 0 ? "--pp-first-layers" : "--pp-last-layers";
  if (s.split.embedding_layers > 0 || s.split.loss_layers > 0)
    return fmt::format("{} cannot be combined with --pp-embedding-layers/--pp-loss-layers (Megatron-Core "
                       "transformer_config.py __post_init__ refuses both together); choose one way to balance the ends",
                       flags);
  if (schedule_is_v_shaped(s.schedule))
    return fmt::format("{} count whole ranks, but --schedule {} places two chunks per rank in a V; balance its ends with "
                       "--pp-embedding-layers/--pp-loss-layers (torchtitan's stage weights)",
                       flags, to_string(s.schedule));
  if (s.framework == Framework::deepspeed)
    return fmt::format("--framework deepspeed cannot set {}: PipelineModule partitions by 'uniform', 'parameters' or "
                       "'type:REGEX' only (deepspeed/runtime/pipe/module.py _partition_layers); use "
                       "--pp-embedding-layers 1 --pp-loss-layers 1 for 'type:transformer|embedding'",
                       flags);
  if (f > L || l > L || f + l > L)
    return fmt::format("{} ({} + {}) exceed the model's {} layers; give the first and last stages fewer blocks", flags, f,
                       l, L);
  const int64_t middle_ranks = s.pp - (f > 0) - (l > 0), rest = L - f - l;
  // transformer_config.py: "Mismatch: N middle layers remaining but M middle PP stages available".
  if (middle_ranks == 0 && rest != 0)
    return fmt::format("{} must add up to the model's {} layers with --pp {} (no middle stages), got {}", flags, L,
                       s.pp, f + l);
  if (middle_ranks > 0 && rest <= 0)
    return fmt::format("{} ({}) leave no blocks for the {} middle stages of {} layers; give the ends fewer", flags, f + l,
                       middle_ranks, L);
  if (middle_ranks > 0 && rest % middle_ranks != 0)
    return fmt::format("{} leave {} blocks for {} middle stages, which Megatron-Core requires to divide evenly "
                       "(transformer_config.py: \"number of layers at middle stage must be divisible\"); try first/last "
                       "counts that leave a multiple of {}",
                       flags, rest, middle_ranks, middle_ranks);
  if (v > 1) {
    const int64_t middle = middle_ranks > 0 ? rest / middle_ranks : 0;
    if (f % v != 0 || l % v != 0 || middle % v != 0)
      return fmt::format("with --vpp {} every rank's blocks must divide by {}: first {}, middle {}, last {} "
                         "(transformer_config.py, uneven PP with virtual pipeline)",
                         v, v, f > 0 ? f : middle, middle, l > 0 ? l : middle);
  }
  return std::nullopt;
}

// Megatron's layout against the model and the strategy: transformer_config.py refuses it beside the other split
// arguments, arguments.py derives vpp from its stage count, validate_layer_layout counts the blocks and MTP layers.
std::optional<std::string> stage_layout_refusal(const ModelSpec& m, const Strategy& s) {
  const StageLayout& l = s.split.layout;
  if (s.framework != Framework::megatron)
    return fmt::format("--pp-layout is Megatron-Core's --pipeline-model-parallel-layout; --framework {} splits its "
                       "pipeline by its own rule: use --framework megatron, or --pp-first-layers/--pp-last-layers or "
                       "--pp-embedding-layers/--pp-loss-layers",
                       to_string(s.framework));
  if (s.split.first_layers > 0 || s.split.last_layers > 0 || s.split.embedding_layers > 0 || s.split.loss_layers > 0)
    return "--pp-layout cannot be combined with --pp-first-layers, --pp-last-layers, --pp-embedding-layers or "
           "--pp-loss-layers (Megatron-Core transformer_config.py: \"pipeline_model_parallel_layout cannot be set with "
           "other pipeline layout arguments\"); keep one of them";
  if (schedule_is_v_shaped(s.schedule))
    return fmt::format("--pp-layout places stages in Megatron's loop order; --schedule {} is not Megatron's: use 1f1b or "
                       "interleaved",
                       to_string(s.schedule));
  if (l.stages % s.pp != 0)
    return fmt::format("--pp-layout has {} virtual stages, which --pp {} does not divide (Megatron-LM arguments.py: "
                       "\"The length of pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_"
                       "size\"); add or remove stages ('|') or change --pp",
                       l.stages, s.pp);
  if (l.stages / s.pp != s.vpp)
    return fmt::format("--pp-layout's {} virtual stages over --pp {} are {} chunks per rank, but --vpp is {}; drop --vpp "
                       "(the layout sets it) or make them agree",
                       l.stages, s.pp, l.stages / s.pp, s.vpp);
  int64_t blocks = 0;
  for (int64_t k = 0; k < l.stages; ++k) blocks += l.blocks[static_cast<size_t>(k)];
  if (blocks != m.layers)
    return fmt::format("--pp-layout places {} transformer blocks (t), but the model has {} layers; every block once "
                       "(validate_layer_layout)",
                       blocks, m.layers);
  if (l.mtp_layers != m.mtp_layers)
    return fmt::format("--pp-layout places {} MTP layers (m), but the model has {} (mtp_layers); Megatron-Core requires "
                       "them equal (validate_layer_layout)",
                       l.mtp_layers, m.mtp_layers);
  // shardplan prices the MTP layers with the LM head and loss (planner/moe_costs.cpp add_mtp_costs), as Megatron-
  // Bridge's DeepSeek layouts place them (mtp_standalone = False); a stage of its own is not modelled.
  if (l.mtp_layers > 0 && l.mtp_stage != l.stages - 1)
    return "--pp-layout puts the MTP layers (m) in a stage before the loss's; shardplan prices them beside the loss "
           "(Megatron-Bridge's DeepSeek layouts, '...tmL'): move the m's into the last stage, just before L";
  return std::nullopt;
}

std::optional<std::string> weighted_refusal(const ModelSpec& m, const Strategy& s) {
  const int64_t ew = effective_embedding_layers(s), lw = effective_loss_layers(s);
  const int64_t L = m.layers, S = virtual_stage_count(s), p = s.pp, v = chunks_per_rank(s), e = L + ew + lw;
  const bool binary = ew <= 1 && lw <= 1;
  if (s.framework == Framework::megatron) {
    if (!binary)
      return "Megatron-Core counts the embedding and the loss as one layer or none (--account-for-embedding-in-pipeline-"
             "split and --account-for-loss-in-pipeline-split are switches); use --pp-embedding-layers/--pp-loss-layers "
             "0 or 1";
    // transformer_config.py: "num_layers ... must be divisible by pipeline_model_parallel_size", then by vpp.
    if (e % p != 0 || (e / p) % v != 0)
      return fmt::format("Megatron-Core needs the {} layers (embedding and loss counted: {} + {}) divisible by pp = {} "
                         "and each rank's share by vpp = {} (transformer_config.py, account_for_*_in_pipeline_split); "
                         "try other --pp-embedding-layers/--pp-loss-layers, --pp-first-layers/--pp-last-layers or --vpp",
                         e, ew, lw, p, v);
    return std::nullopt;
  }
  if (s.framework == Framework::deepspeed && !binary)
    return "DeepSpeed's 'type:transformer|embedding' counts each embedding layer as one; use --pp-embedding-layers and "
           "--pp-loss-layers 0 or 1";
  // torchtitan _generate_llm_fqn_per_model_part: its "empty stages" and "input/output_weight exceeds minimum layers
  // per stage" checks.
  const int64_t per = e / S;
  if (per < 1)
    return fmt::format("{} virtual stages (pp {} × {} chunks) exceed the {} effective layers (torchtitan "
                       "pipeline_parallel.py: \"Configuration would result in empty stages\"); lower --pp or --vpp",
                       S, p, v, e);
  if (ew > per || lw > per)
    return fmt::format("--pp-embedding-layers {} / --pp-loss-layers {} exceed the {} blocks per virtual stage "
                       "(torchtitan pipeline_parallel.py: \"input_weight exceeds minimum layers per stage\"); lower them",
                       ew, lw, per);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> pipeline_layout_refusal(const ModelSpec& m, const Strategy& s) {
  if (s.split.first_layers < 0 || s.split.last_layers < 0 || s.split.embedding_layers < -1 || s.split.loss_layers < -1)
    return "--pp-first-layers, --pp-last-layers, --pp-embedding-layers and --pp-loss-layers must not be negative";
  // A schedule the runtime does not have is refused for that reason first (planner/framework_support.cpp), judged
  // with a ZeRO stage the runtime pipelines: the search sets the stage after the layout, so `s` may still carry the
  // default ZeRO-3, which Megatron never runs (that once refused every interleaved Megatron layout).
  if (s.pp > 1 && s.schedule != Schedule::one_f_one_b) {
    Strategy schedule_only = s;
    schedule_only.hsdp = 0;  // the sharding choices are judged after the layout
    schedule_only.offload_optimizer = false;
    const SmallSet stages = framework_support(s.framework).pipeline_zero_stages;
    if (!has(stages, schedule_only.zero)) schedule_only.zero = lowest_stage(stages, schedule_only.zero);
    if (!framework_runs(schedule_only))
      if (auto why = framework_refusal(schedule_only)) return why;
  }
  if (const auto why = schedule_refusal(s)) return why;
  if (has_stage_layout(s)) {
    if (s.pp < 2) return "--pp-layout needs --pp of at least 2";
    // Megatron allows empty stages ("E||t|L"): no check of blocks per stage beyond the counts.
    return stage_layout_refusal(m, s);
  }
  const bool set = uneven_ends(s) || s.split.embedding_layers > 0 || s.split.loss_layers > 0;
  if (s.pp < 2) {
    if (set) return "--pp-first-layers/--pp-last-layers/--pp-embedding-layers/--pp-loss-layers need --pp of at least 2";
    return std::nullopt;
  }
  if (uneven_ends(s)) {
    if (const auto why = uneven_refusal(m, s)) return why;
  } else if (weighted(s)) {
    if (const auto why = weighted_refusal(m, s)) return why;
  } else {
    const int64_t S = virtual_stage_count(s);
    if (chunks_per_rank(s) > 1 && m.layers % S != 0)
      return fmt::format("interleaved pipeline needs layers ({}) divisible by pp·vpp = {}, or an uneven split: "
                         "--pp-first-layers/--pp-last-layers, --pp-embedding-layers 1 --pp-loss-layers 1",
                         m.layers, S);
    // Megatron-Core asserts num_layers % pipeline_model_parallel_size == 0 without an uneven split.
    if (s.framework == Framework::megatron && m.layers % s.pp != 0)
      return fmt::format("Megatron-Core needs the {} layers divisible by --pp {} (transformer_block.py "
                         "get_num_layers_to_build); set --pp-first-layers/--pp-last-layers, or count the embedding and "
                         "the loss as layers (--pp-embedding-layers 1 --pp-loss-layers 1)",
                         m.layers, s.pp);
  }
  // A piece with no block that is neither end would pass activations through untouched: no runtime builds one.
  const int64_t S = virtual_stage_count(s);
  for (int64_t k = 0; k < S; ++k) {
    const int64_t n = virtual_stage_layers(m, s, k);
    if (n < 0 || (n == 0 && k != 0 && k != S - 1))
      return fmt::format("the split leaves virtual stage {} of {} with {} blocks; use fewer stages or chunks, or a "
                         "different --pp-first-layers/--pp-last-layers",
                         k, S, n);
  }
  return std::nullopt;
}

std::optional<StageLayout> recipe_style_layout(const ModelSpec& m, const Strategy& s) {
  const int64_t S = virtual_stage_count(s), L = m.layers;
  if (S < 2 || S > kMaxLayoutStages || L > 32767) return std::nullopt;
  const int64_t middle = (L + S - 1) / S, rest = L - (S - 2) * middle;
  if (rest < 0) return std::nullopt;
  StageLayout l;
  l.stages = static_cast<int16_t>(S);
  for (int64_t k = 1; k + 1 < S; ++k) l.blocks[static_cast<size_t>(k)] = static_cast<int16_t>(middle);
  l.blocks[0] = static_cast<int16_t>(std::min(middle, rest));
  l.blocks[static_cast<size_t>(S - 1)] = static_cast<int16_t>(rest - l.blocks[0]);
  l.mtp_layers = static_cast<int16_t>(m.mtp_layers);
  l.mtp_stage = m.mtp_layers > 0 ? static_cast<int16_t>(S - 1) : int16_t{-1};
  return l;
}

int pipeline_split_candidates(const ModelSpec& m, const Strategy& s, PipelineSplit out[kMaxSplitCandidates]) {
  int n = 0;
  Strategy probe = s;
  auto offer = [&](const PipelineSplit& split) {
    if (n == kMaxSplitCandidates) return;
    probe.split = split;
    if (pipeline_layout_refusal(m, probe)) return;
    for (int i = 0; i < n; ++i) {
      Strategy other = s;
      other.split = out[i];
      bool same = true;
      for (int64_t k = 0; k < virtual_stage_count(s) && same; ++k)
        same = virtual_stage_layers(m, other, k) == virtual_stage_layers(m, probe, k);
      if (same) return;
    }
    out[n++] = split;
  };
  offer(PipelineSplit{});
  if (s.pp < 2) return n;
  // Megatron's uneven ends: the middle ranks take ⌈L/pp⌉ (a multiple of the chunks), the first and last share the
  // rest, each a multiple of the chunks: 126 layers on 16 stages → 7, 8 × 14, 7 (Llama 3 405B).
  const int64_t v = chunks_per_rank(s);
  if (s.pp >= 3) {
    int64_t q = (m.layers + s.pp - 1) / s.pp;
    q = (q + v - 1) / v * v;
    const int64_t rest = m.layers - (s.pp - 2) * q;
    const int64_t f = rest / 2 / v * v, l = rest - f;
    if (f >= v && l >= v && (f != q || l != q)) offer(PipelineSplit{f, l, 0, 0, {}});
  }
  offer(PipelineSplit{0, 0, 1, 1, {}});
  // torchtitan's default counts the ends as a block each; an even split is its weights at 0.
  if (s.framework == Framework::torchtitan) offer(PipelineSplit{0, 0, 0, 0, {}});
  // Megatron's layout balances what no per-rank count can under interleaving (DeepSeek-V3's 61 blocks on 4 × 4).
  if (s.framework == Framework::megatron)
    if (const auto layout = recipe_style_layout(m, s)) offer(PipelineSplit{0, 0, -1, -1, *layout});
  return n;
}

std::optional<PipelineSplit> runnable_split_for_default(const ModelSpec& m, const Strategy& s) {
  if (s.pp < 2 || !(s.split == PipelineSplit{}) || !pipeline_layout_refusal(m, s)) return std::nullopt;
  PipelineSplit found[kMaxSplitCandidates];
  const int n = pipeline_split_candidates(m, s, found);
  for (const PipelineSplit& preferred : {PipelineSplit{0, 0, 1, 1, {}}})
    for (int i = 0; i < n; ++i)
      if (found[i] == preferred) return preferred;
  for (int i = 0; i < n; ++i)
    if (!(found[i] == PipelineSplit{})) return found[i];
  return std::nullopt;
}

std::string megatron_layout_of(const ModelSpec& m, const Strategy& s) {
  std::vector<int64_t> blocks;
  for (int64_t k = 0; k < virtual_stage_count(s); ++k) blocks.push_back(virtual_stage_layers(m, s, k));
  return format_megatron_layout(blocks, m.mtp_layers);
}

std::string describe_stage_layers(const ModelSpec& m, const Strategy& s) {
  if (s.pp <= 1) return "";
  std::string out;
  int64_t prev = -1, run = 0;
  auto flush = [&] {
    if (run == 0) return;
    if (!out.empty()) out += "/";
    out += run > 1 ? fmt::format("{}×{}", prev, run) : fmt::format("{}", prev);
  };
  for (int64_t r = 0; r < s.pp; ++r) {
    const int64_t n = rank_layers(m, s, r);
    if (n == prev) {
      ++run;
      continue;
    }
    flush();
    prev = n;
    run = 1;
  }
  flush();
  return out;
}

}  // namespace shardplan
