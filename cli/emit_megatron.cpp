// megatron_args.sh: the plan as Megatron-LM arguments (megatron/training/arguments.py; the TransformerConfig fields of
// megatron/core/transformer/transformer_config.py become flags of the same name, ArgumentGroupFactory), with the
// mixture-of-experts, latent-attention, multi-token-prediction and sliding-window arguments of the model.
#include <algorithm>

#include <fmt/format.h>

#include "cli/emit_launch.hpp"
#include "planner/framework.hpp"
#include "planner/moe.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/recompute_modules.hpp"

namespace shardplan::cli {

namespace {

// Which layers are MoE (1) or dense (0), as the Python list expression --moe-layer-freq evaluates
// (arguments.py moe_freq_type: "([0]*3+[1]*58)"; its length must be the layer count). The dense prefix, then the
// shortest period that repeats over the rest.
std::string moe_layer_pattern(const ModelSpec& m) {
  std::vector<int> layers;
  for (int64_t i = 0; i < m.layers; ++i) layers.push_back(layer_is_moe(m, i) ? 1 : 0);
  const size_t dense = static_cast<size_t>(std::min<int64_t>(m.dense_layers, m.layers));
  const size_t rest = layers.size() - dense;
  size_t period = rest;
  for (size_t p = 1; p <= rest; ++p) {
    if (rest % p != 0) continue;
    bool repeats = true;
    for (size_t i = dense + p; i < layers.size() && repeats; ++i) repeats = layers[i] == layers[i - p];
    if (repeats) { period = p; break; }
  }
  std::vector<std::string> parts;
  if (dense > 0) parts.push_back(fmt::format("[0]*{}", dense));
  if (rest > 0) {
    std::string block;
    for (size_t i = 0; i < period; ++i) block += (i ? "," : "") + std::to_string(layers[dense + i]);
    parts.push_back(period == 1 ? fmt::format("[{}]*{}", block, rest) : fmt::format("([{}])*{}", block, rest / period));
  }
  return fmt::format("({})", fmt::join(parts, "+"));
}

// The model's experts, latent attention, MTP modules, windows, Q/K norms and sinks as Megatron-Core spells them.
void add_extended_model_args(const ModelSpec& m, const LaunchFacts& f, std::vector<std::string>& args,
                             std::vector<std::string>& notes) {
  auto arg = [&](const std::string& a) { args.push_back(a); };
  auto arg2 = [&](const std::string& a, const std::string& v) { args.push_back(a + " " + v); };
  if (model_is_moe(m)) {
    arg2("--num-experts", std::to_string(m.experts));
    arg2("--moe-router-topk", std::to_string(m.experts_per_token));
    arg2("--moe-ffn-hidden-size", std::to_string(m.expert_ffn_hidden));
    // "num_shared_experts * ffn_size_of_each_shared_expert" (transformer_config.py moe_shared_expert_intermediate_size).
    if (m.shared_experts > 0)
      arg2("--moe-shared-expert-intermediate-size", std::to_string(m.shared_experts * m.expert_ffn_hidden));
    bool every_layer = true;
    for (int64_t i = 0; i < m.layers; ++i) every_layer = every_layer && layer_is_moe(m, i);
    if (!every_layer) arg2("--moe-layer-freq", shell_quoted(moe_layer_pattern(m)));
    // The expert tensor-parallel size shardplan priced, written out: Megatron's own default is the TP size
    // (arguments.py: expert_tensor_parallel_size None -> tensor_model_parallel_size), the plan's may be 1
    // (planner/strategy.hpp expert_tensor_parallel).
    if (f.ep > 1) arg2("--expert-model-parallel-size", std::to_string(f.ep));
    if (f.tp > 1) arg2("--expert-tensor-parallel-size", std::to_string(f.etp));
    if (f.ep_comm_overlap) {  // the batch-level EP overlap priced (moe/README.md: the two flags go together)
      arg("--overlap-moe-expert-parallel-comm");
      arg("--delay-wgrad-compute");
    }
    // Token dropping as priced: capacity F, every expert padded to it (static shapes).
    if (f.moe_capacity_factor > 0) {
      arg2("--moe-expert-capacity-factor", fmt::format("{}", f.moe_capacity_factor));
      arg("--moe-pad-expert-input-to-capacity");
    }
    // The dispatcher shardplan priced (planner/strategy.hpp MoeDispatcher); Megatron's default is "allgather". The
    // flex backends take fp32 routing probabilities (token_dispatcher.py: "HybridEP only supports float32 probs, please
    // set --moe-router-dtype=fp32", DeepEP likewise).
    if (f.moe_dispatcher == MoeDispatcher::alltoall) {
      arg2("--moe-token-dispatcher-type", "alltoall");
    } else {
      arg2("--moe-token-dispatcher-type", "flex");
      arg2("--moe-flex-dispatcher-backend", to_string(f.moe_dispatcher));
      arg2("--moe-router-dtype", "fp32");
    }
    arg("--moe-grouped-gemm");
    if (model_has_mla(m) && m.router_bias) {
      // DeepSeek-V3's auxiliary-loss-free balancing: sigmoid scores and a per-expert bias (report §2.1.2).
      arg2("--moe-router-score-function", "sigmoid");
      arg("--moe-router-enable-expert-bias");
    } else {
      // Megatron's defaults balance nothing (moe_aux_loss_coeff 0.0); 1e-2 is its help text's starting value. The
      // plan assumed balanced experts.
      arg2("--moe-router-load-balancing-type", "aux_loss");
      arg2("--moe-aux-loss-coeff", "1e-2");
    }
    notes.push_back("routing: set the score function, balancing loss and its coefficient your model needs; the "
                    "prediction assumed tokens spread evenly over the experts");
  }
  if (model_has_mla(m)) {
    arg("--multi-latent-attention");
    if (m.q_lora_rank > 0) arg2("--q-lora-rank", std::to_string(m.q_lora_rank));
    arg2("--kv-lora-rank", std::to_string(m.kv_lora_rank));
    arg2("--qk-head-dim", std::to_string(m.qk_nope_head_dim));
    arg2("--qk-pos-emb-head-dim", std::to_string(m.qk_rope_head_dim));
    arg2("--v-head-dim", std::to_string(m.v_head_dim));
  }
  if (m.mtp_layers > 0) arg2("--mtp-num-layers", std::to_string(m.mtp_layers));
  if (m.sliding_window > 0) {
    // (left, right) keys beside the query itself: a window of W tokens is "W-1,0" (examples/gptoss/02_train.sh
    // --window-size 127,0 for gpt-oss's 128); one full-attention layer in every N (--window-attn-skip-freq N).
    arg2("--window-size", fmt::format("{},0", m.sliding_window - 1));
    if (m.sliding_window_pattern > 1) arg2("--window-attn-skip-freq", std::to_string(m.sliding_window_pattern));
  }
  if (m.qk_norm) arg("--qk-layernorm");
  // Megatron's Q/K layernorm normalises each head (transformer/attention.py q_layernorm over the head dim).
  if (m.qk_norm_full_width)
    notes.push_back("the model's Q/K norms span the whole projections (OLMo 2); --qk-layernorm normalises each head: "
                    "the same parameter shapes up to a few thousand norm weights, not the same model");
  // One learned logit per head in the softmax's denominator (transformer_config.py softmax_type 'learnable';
  // examples/gptoss/02_train.sh).
  if (m.attention_sinks) arg2("--softmax-type", "learnable");
  if (m.attention_sinks && m.experts > 0)
    notes.push_back("gpt-oss's clamped gated activation is a detail shardplan does not price (same shapes): for the "
                    "same model replace --swiglu with --quick-geglu --glu-linear-offset 1.0 "
                    "--activation-func-clamp-value 7.0, as examples/gptoss/02_train.sh does");
  if (m.block_norms != 2)
    notes.push_back(fmt::format("{} norms per block (Gemma's post-norms) have no Megatron-LM argument: the block is "
                                "built with 2", m.block_norms));
}

}  // namespace

EmittedFile emit_megatron(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"megatron_args.sh", "", false, {}};
  const ModelSpec& m = plan.prediction.model;
  std::vector<std::string> args;
  auto arg = [&](const std::string& a) { args.push_back(a); };
  auto arg2 = [&](const std::string& a, const std::string& v) { args.push_back(a + " " + v); };
  // Parallelism and batch.
  arg2("--tensor-model-parallel-size", std::to_string(f.tp));
  arg2("--pipeline-model-parallel-size", std::to_string(f.pp));
  // Context parallelism: Transformer Engine's ring attention (the default --cp-comm-type p2p, megatron/training/
  // arguments.py), what shardplan priced (planner/context_parallel.hpp).
  if (f.cp > 1) arg2("--context-parallel-size", std::to_string(f.cp));
  // Uneven ends need --num-virtual-stages-per-pipeline-rank (megatron/training/arguments.py "Uneven virtual
  // pipeline parallelism"); the embedding and loss counted as layers are switches.
  // The split is the plan's only when it was planned for Megatron (another runtime's split rule may not be one
  // Megatron accepts: planner/pipeline_layout.cpp).
  const bool own = f.framework == Framework::megatron && f.pp > 1;
  const bool uneven = own && (f.pp_first_layers > 0 || f.pp_last_layers > 0);
  // Another runtime's split (DeepSpeed's partition, torchtitan's embedding and loss counted as layers) as it was
  // priced, stage by stage: --pipeline-model-parallel-layout (megatron/core/transformer/
  // pipeline_parallel_layer_layout.py: E embedding, t block, m MTP layer, L loss; | between virtual stages).
  // Megatron's own layout (--pp-layout) likewise; it sets the chunks per rank itself (arguments.py refuses it beside
  // --num-virtual-stages-per-pipeline-rank).
  if (f.pp > 1 && (!own || f.pp_stage_layout))
    arg2("--pipeline-model-parallel-layout", "'" + megatron_layout_of(m, plan.prediction.strategy) + "'");
  // The chunk count, not --num-layers-per-virtual-pipeline-stage: that one is checked against num_layers / pp
  // before the embedding and loss are counted out (validate_args), so it fails the accounted splits.
  else if (f.vpp > 1) arg2("--num-virtual-stages-per-pipeline-rank", std::to_string(f.vpp));
  if (uneven && f.pp_first_layers > 0) arg2("--decoder-first-pipeline-num-layers", std::to_string(f.pp_first_layers));
  if (uneven && f.pp_last_layers > 0) arg2("--decoder-last-pipeline-num-layers", std::to_string(f.pp_last_layers));
  if (own && f.pp_embedding_layers > 0) arg("--account-for-embedding-in-pipeline-split");
  if (own && f.pp_loss_layers > 0) arg("--account-for-loss-in-pipeline-split");
  if (f.sp) arg("--sequence-parallel");
  arg2("--micro-batch-size", std::to_string(f.micro_batch));
  arg2("--global-batch-size", std::to_string(f.global_batch));
  // ZeRO-1: the distributed optimizer (sharded within dp / instances ranks with hybrid sharding). ZeRO-2/3
  // (Megatron's own and other runtimes' plans): Megatron-FSDP, sharding strategy optim_grads / optim_grads_params.
  // Not --use-torch-fsdp2: validate_args (megatron/training/arguments.py) refuses it with PP, with EP and with tied
  // embeddings. Megatron-FSDP v1 (the default --megatron-fsdp-version) runs on the distributed optimizer and needs
  // --ckpt-format fsdp_dtensor; with hybrid sharding the optimizer instances are the outer (replicating) groups
  // (examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh; --outer-dp-sharding-strategy no_shard, the default).
  const bool megatron_fsdp = f.zero == 2 || f.zero == 3;
  const char* sharding = f.zero == 3 ? "optim_grads_params" : "optim_grads";
  if (f.zero >= 1) arg("--use-distributed-optimizer");
  if (f.zero >= 1 && f.replicate > 1) arg2("--num-distributed-optimizer-instances", std::to_string(f.replicate));
  if (megatron_fsdp) {
    arg("--use-megatron-fsdp");
    arg2("--data-parallel-sharding-strategy", sharding);
    arg("--no-gradient-accumulation-fusion");
    arg2("--ckpt-format", "fsdp_dtensor");
  }
  if (f.offload) {
    // validate_args: "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`".
    arg("--optimizer-cpu-offload");
    arg2("--optimizer-offload-fraction", "1.0");
  }
  // The precision-aware optimizer as priced (planner/precision.hpp strategy_state_bytes), or as offload needs it.
  if (f.offload || f.precision_aware_optimizer) arg("--use-precision-aware-optimizer");
  if (f.bf16_adam_moments) {
    arg2("--exp-avg-dtype", "bf16");
    arg2("--exp-avg-sq-dtype", "bf16");
  }
  // FP8 GEMMs through Transformer Engine, the recipe priced (transformer_config.py fp8_recipe; tensorwise is TE's
  // current scaling): E4M3 forward and E5M2 gradients ("hybrid") with per-tensor scales; the block-scaled recipes
  // keep E4M3 everywhere (TE recipe.py MXFP8BlockScaling / Float8BlockScaling defaults). FP8 weight gathers:
  // --fp8-param-gather (the distributed optimizer's and Megatron-FSDP's).
  const Strategy& priced = plan.prediction.strategy;
  // Muon (planner/optimizer.hpp): with --use-distributed-optimizer Megatron runs its LayerWiseDistributedOptimizer
  // (arguments.py validate_args: "Use --optimizer muon --use-distributed-optimizer"); it needs the
  // emerging-optimizers package (megatron/core/optimizer/__init__.py).
  if (priced.optimizer == OptimizerKind::muon) arg2("--optimizer", "muon");
  if (priced.optimizer == OptimizerKind::muon && priced.muon_tp_mode != MuonTpMode::duplicated)
    arg2("--muon-tp-mode", to_string(priced.muon_tp_mode));
  if (priced.fp8 != Fp8Recipe::off) {
    const bool per_tensor = priced.fp8 == Fp8Recipe::tensorwise;
    arg2("--fp8-format", per_tensor ? "hybrid" : "e4m3");
    arg2("--fp8-recipe", per_tensor ? "tensorwise" : priced.fp8 == Fp8Recipe::mxfp8 ? "mxfp8" : "blockwise");
    if (priced.fp8_all_gather) arg("--fp8-param-gather");
    // MXFP8 parameters borrow the gradient buffer for their all-gather under the distributed optimizer (Megatron-Bridge
    // bf16_with_mxfp8_mixed; the optimizer warns of "significant amount additional GPU memory" without it:
    // optimizer_config.py); Megatron-FSDP has no use for it (arguments.py validate_args turns it off there).
    if (priced.fp8_all_gather && priced.fp8 == Fp8Recipe::mxfp8 && priced.zero == 1)
      arg("--reuse-grad-buf-for-mxfp8-param-ag");
    if (priced.fp8 == Fp8Recipe::rowwise)
      file.notes.push_back("Transformer Engine has no rowwise FP8 recipe: --fp8-recipe blockwise (1x128 activation, "
                           "128x128 weight scales) is the nearest to the torchao rowwise GEMMs this plan priced");
  }
  // CUDA graphs as priced (planner/strategy.hpp CudaGraphs; megatron/training/arguments.py): Transformer Engine graphs of
  // the static-shape modules, or the whole iteration (which needs the NaN check off, validate_args).
  if (f.cuda_graphs == CudaGraphs::partial) {
    arg2("--cuda-graph-impl", "transformer_engine");
    arg2("--cuda-graph-modules", model_is_moe(plan.prediction.model) ? "attn moe_router moe_preprocess" : "attn");
  } else if (f.cuda_graphs == CudaGraphs::full) {
    arg2("--cuda-graph-impl", "full_iteration");
    arg("--no-check-for-nan-in-loss-and-grad");
    if (model_is_moe(plan.prediction.model))
      file.notes.push_back("full-iteration CUDA graphs of a dropless MoE need static expert buffers (Megatron-Bridge's "
                           "recipes set moe_expert_rank_capacity_factor and the paged stash: perf_recipes/*/common.py "
                           "_enable_hybridep_full_iteration_mxfp8); add them for your Megatron version");
  }
  // CPU activation offloading as priced (arguments.py: cpu_offloading follows from the layer count).
  if (f.offload_activation_layers > 0) arg2("--cpu-offloading-num-layers", std::to_string(f.offload_activation_layers));
  // The fused cross-entropy priced is Transformer Engine's (planner/framework.cpp fused_loss_copies), which
  // Megatron-LM's training arguments refuse since 2026-06 (arguments.py: "Transformer Engine cross entropy loss fusion
  // is disabled due to stability issues"); its native fusion runs, with the unfused loss's fp32 softmax.
  if (f.loss == LossKind::fused) {
    arg("--cross-entropy-loss-fusion");
    arg2("--cross-entropy-fusion-impl", "native");
    file.notes.push_back("the plan priced Transformer Engine's fused cross-entropy (the gradient overwrites the bf16 "
                         "logits: 2 B per logit, as Megatron-Bridge runs it); Megatron-LM's own training arguments "
                         "refuse --cross-entropy-fusion-impl te, so the native fusion is written, which keeps an fp32 "
                         "softmax (6 B per logit) on the last pipeline stage");
  }
  // Selective recomputation: Megatron's default module list (core_attn), or the list priced
  // (transformer_config.py recompute_modules; planner/recompute_modules.hpp).
  if (f.recompute == Recompute::selective && f.recompute_modules == 0) arg("--recompute-activations");
  if (f.recompute == Recompute::selective && f.recompute_modules != 0) {
    arg2("--recompute-granularity", "selective");
    std::string list = recompute_modules_string(f.recompute_modules);
    std::replace(list.begin(), list.end(), ',', ' ');
    arg2("--recompute-modules", list);
  }
  // Full recomputation: every block one by one (uniform, 1), or the first N of each chunk (block, N:
  // transformer_block.py _checkpointed_forward; planner/partial_recompute.hpp).
  if (f.recompute == Recompute::full) {
    arg2("--recompute-granularity", "full");
    arg2("--recompute-method", f.recompute_layers > 0 ? "block" : "uniform");
    arg2("--recompute-num-layers", std::to_string(f.recompute_layers > 0 ? f.recompute_layers : 1));
  }
  // The overlaps the prediction assumed, as Megatron-Core would run this layout (framework.cpp megatron_traits).
  Strategy s = plan.prediction.strategy;
  s.framework = Framework::megatron;
  const FrameworkTraits megatron = framework_traits(Framework::megatron);
  if (effective_overlap_grad_reduce(s, megatron)) arg("--overlap-grad-reduce");
  if (f.zero == 1 && effective_overlap_param_gather(s, megatron)) arg("--overlap-param-gather");
  if (effective_tp_comm_overlap(s, megatron)) arg("--tp-comm-overlap");
  // The model.
  arg2("--num-layers", std::to_string(m.layers));
  arg2("--hidden-size", std::to_string(m.hidden));
  arg2("--ffn-hidden-size", std::to_string(m.ffn_hidden));
  arg2("--num-attention-heads", std::to_string(m.heads));
  if (m.kv_heads != m.heads) {
    arg("--group-query-attention");
    arg2("--num-query-groups", std::to_string(m.kv_heads));
  }
  if (m.head_dim > 0) arg2("--kv-channels", std::to_string(m.head_dim));
  arg2("--seq-length", std::to_string(f.seq));
  arg2("--max-position-embeddings", std::to_string(std::max(f.seq, m.seq)));
  if (m.mlp == MlpKind::swiglu) arg("--swiglu");
  if (m.mlp == MlpKind::squared_relu) arg("--squared-relu");
  arg2("--normalization", m.norm == NormKind::rmsnorm ? "RMSNorm" : "LayerNorm");
  arg2("--position-embedding-type", m.position == PositionKind::learned ? "learned_absolute"
                                    : m.position == PositionKind::rotary  ? "rope"
                                                                          : "none");
  // Megatron's defaults are 10000 and 1e-5 (megatron/training/arguments.py); Llama 3 needs 500000.
  if (m.position == PositionKind::rotary) arg2("--rotary-base", fmt::format("{:g}", m.rotary_base));
  arg2("--norm-epsilon", fmt::format("{:g}", m.norm_eps));
  if (!m.tied_embeddings) arg("--untie-embeddings-and-output-weights");
  if (!m.qkv_bias && !m.out_bias) arg("--disable-bias-linear");
  if (m.qkv_bias && !m.out_bias) {
    arg("--disable-bias-linear");
    arg("--add-qkv-bias");
  }
  if (!m.dropout) {
    arg2("--attention-dropout", "0.0");
    arg2("--hidden-dropout", "0.0");
  }
  arg2("--tokenizer-type", "NullTokenizer");
  arg2("--vocab-size", std::to_string(m.vocab));
  if (f.bf16) arg("--bf16");
  if (f.fp16) arg("--fp16");
  if (f.flash) arg2("--attention-backend", "flash");
  if (f.steps) arg2("--train-iters", std::to_string(*f.steps));
  add_extended_model_args(m, f, args, file.notes);

  std::string& out = file.text;
  out += "#!/usr/bin/env bash\n";
  out += fmt::format("# shardplan: Megatron-LM arguments for {} on {} GPUs (tp {} pp {}{} dp {}{}).\n",
                     f.model_name, f.gpus, f.tp, f.pp, f.cp > 1 ? fmt::format(" cp {}", f.cp) : "", f.dp,
                     f.ep > 1 ? fmt::format(" ep {}", f.ep) : "");
  out += "# source megatron_args.sh; torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" --data-path ... --lr ...\n";
  out += "MEGATRON_ARGS=(\n";
  for (const std::string& a : args) out += "  " + a + "\n";
  out += ")\n";
  // TP/CP comm overlap needs one hardware queue on Hopper and before; both FSDPs refuse it (arguments.py
  // validate_args: "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset").
  out += megatron_fsdp ? "unset CUDA_DEVICE_MAX_CONNECTIONS\n" : "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  // The allocator the plan's fit test assumed (planner/memory.hpp fit_bytes; Megatron-Bridge's performance launcher
  // sets it for every run since v0.5.0, scripts/performance/utils/executors.py PERF_ENV_VARS).
  if (f.expandable_segments) out += "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n";
  if (megatron_fsdp && f.framework != Framework::megatron)
    file.notes.push_back(fmt::format("ZeRO-{} maps to Megatron-FSDP ({}): shardplan priced this plan as {}, not as "
                                     "Megatron-FSDP",
                                     f.zero, sharding, to_string(f.framework)));
  if (m.position == PositionKind::alibi) file.notes.push_back("Megatron-LM has no ALiBi: position embedding 'none'");
  if (m.out_bias && !m.qkv_bias) file.notes.push_back("biases on the projections but not on Q/K/V are not expressible");
  if (!f.fp32_master) file.notes.push_back("Megatron keeps fp32 main parameters (the plan assumed pure low precision)");
  if (!f.steps) file.notes.push_back("no --train-iters: give --tokens to set it from the training budget");
  return file;
}


}  // namespace shardplan::cli
