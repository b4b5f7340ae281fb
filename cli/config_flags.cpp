#include "cli/config_flags.hpp"

#include <cmath>
#include <iostream>
#include <tuple>

#include <fmt/format.h>

#include "io/hf_config.hpp"
#include "planner/batch.hpp"
#include "planner/error.hpp"
#include "planner/framework.hpp"
#include "planner/framework_support.hpp"
#include "planner/megatron_layout.hpp"
#include "planner/memory.hpp"
#include "planner/recompute_modules.hpp"
#include "planner/pipeline_layout.hpp"

namespace shardplan::cli {

void add_config_flags(CLI::App& cmd, ConfigFlags& f) {
  cmd.add_option("--preset", f.preset, "Model preset name (see `shardplan presets models`)");
  cmd.add_option("--model", f.model_file, "Model YAML file (schema: presets/README.md)");
  cmd.add_option("--hf-config", f.hf_config,
                 "Hugging Face config.json (model_type llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, phi3, "
                 "gpt_neox, gpt2, falcon, nemotron, olmo2; MoE: mixtral, qwen3_moe, deepseek_v2, deepseek_v3, "
                 "kimi_k2, kimi_k25, gpt_oss, llama4)");
  cmd.add_option("--mtp-layers", f.mtp_layers,
                 "Multi-token-prediction modules to train, overriding the model's mtp_layers (Megatron-Core "
                 "--mtp-num-layers, torchtitan num_mtp_layers): 0 trains the main model alone, as torchtitan's "
                 "DeepSeek-V3 configs do by default");
  cmd.add_option("--cluster", f.cluster, "Cluster preset name or cluster YAML file");
  cmd.add_option("--gpu", f.gpu, "GPU preset, when no --cluster is given (8 per node, its usual interconnect)");
  cmd.add_option("--gpus-per-node", f.gpus_per_node, "Override the cluster's GPUs per node");
  cmd.add_option("--inter-node-gbps", f.inter_node_gbps,
                 "Override the network: total one-direction bandwidth per node in Gb/s (8 x HDR 200 = 1600)");
  cmd.add_option("--gpus", f.gpus, "Total GPUs (ranks); default: one node of the cluster");
  cmd.add_option("--tp", f.tp, "Tensor-parallel degree (default 1)");
  cmd.add_option("--pp", f.pp, "Pipeline-parallel degree (default 1)");
  cmd.add_option("--cp", f.cp,
                 "Context-parallel degree: each sequence split over N ranks, ring attention (torchtitan, megatron; "
                 "default 1)");
  cmd.add_option("--ep", f.ep,
                 "Expert parallelism for MoE layers: routed experts split over N ranks, cut with --etp from the "
                 "tp x cp x dp ranks of a stage, tokens sent to them by all-to-all (Megatron "
                 "--expert-model-parallel-size; default 1)");
  cmd.add_option("--etp", f.etp,
                 "Expert tensor parallelism: each routed expert split over N ranks, a divisor of --tp (Megatron "
                 "--expert-tensor-parallel-size; default with --ep: 1 under megatron and torchtitan, as their MoE "
                 "recipes run, --tp otherwise)");
  cmd.add_option("--dp", f.dp, "Data-parallel degree (default gpus/(tp*pp*cp))");
  cmd.add_option("--vpp", f.vpp,
                 "Virtual pipeline stages (model chunks) per rank for the interleaved and zb-h1 schedules (default 1; "
                 "2 for zbv and dualpipev)");
  cmd.add_option("--schedule", f.schedule,
                 "Pipeline schedule: 1f1b | interleaved | gpipe | zb-h1 | zbv | dualpipev (default 1f1b; zbv and "
                 "dualpipev run two chunks per rank, zb-h1 with --vpp > 1 is interleaved zero bubble)");
  cmd.add_option("--pp-first-layers", f.pp_first_layers,
                 "Blocks on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers); the middle "
                 "stages share the rest evenly");
  cmd.add_option("--pp-last-layers", f.pp_last_layers,
                 "Blocks on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers)");
  cmd.add_option("--pp-embedding-layers", f.pp_embedding_layers,
                 "Count the embedding as N blocks when splitting the layers (Megatron "
                 "--account-for-embedding-in-pipeline-split = 1; torchtitan pipeline_parallel_first_stage_less_layers, "
                 "default 1 there, 0 elsewhere)");
  cmd.add_option("--pp-loss-layers", f.pp_loss_layers,
                 "Count the final norm, LM head and loss as N blocks (Megatron --account-for-loss-in-pipeline-split; "
                 "torchtitan pipeline_parallel_last_stage_less_layers)");
  cmd.add_option("--pp-layout", f.pp_layout,
                 "Megatron's per-stage layout (--pipeline-model-parallel-layout), e.g. 'Et*4|(t*4|)*14,tmL': E "
                 "embedding, t block, m MTP layer, L loss, '|' between virtual stages; sets --vpp to stages / --pp "
                 "(megatron)");
  cmd.add_flag("--sp", f.sp, "Sequence parallelism (with --tp)");
  cmd.add_option("--zero", f.zero,
                 "0 = DDP, 1 = optimizer states, 2 = + gradients (SHARD_GRAD_OP), 3 = + parameters (FULL_SHARD); "
                 "default 3 (1 for megatron: its distributed optimizer)");
  cmd.add_option("--hsdp", f.hsdp, "Hybrid sharding: shard within groups of N data-parallel ranks");
  cmd.add_option("--recompute", f.recompute, "Activation recomputation: none | selective | full");
  cmd.add_option("--recompute-modules", f.recompute_modules,
                 "Megatron's selective recomputation modules, comma-separated: core_attn (default) | layernorm | "
                 "mla_up_proj | mlp | moe | moe_act | shared_experts (megatron; implies --recompute selective)");
  cmd.add_option("--recompute-layers", f.recompute_layers,
                 "Full recomputation of the first N blocks of each pipeline chunk only, the others keeping their "
                 "activations (Megatron's --recompute-method block --recompute-num-layers N; megatron, fsdp; implies "
                 "--recompute full)");
  cmd.add_option("--recompute-every", f.recompute_every,
                 "Full recomputation of every K-th block of each pipeline chunk only (torchtitan's "
                 "selective_ac_option \"K\"; torchtitan, fsdp; implies --recompute full)");
  // Two flags rather than CLI11's "--flash-attn,!--no-flash-attn", which help prints as
  // "--flash-attn,--no-flash-attn{false}".
  cmd.add_flag_callback("--flash-attn", [&f] { f.flash_attn = true; }, "Flash attention (the default)");
  cmd.add_flag_callback("--no-flash-attn", [&f] { f.flash_attn = false; }, "Unfused attention (materialised scores)");
  cmd.add_option("--micro-batch", f.micro_batch, "Sequences per micro-batch per replica (default 1)");
  cmd.add_option("--global-batch", f.global_batch,
                 "Sequences per optimizer step (default: dp x micro-batch x the accumulation nearest to 4 M tokens, "
                 "1 K tokens per GPU past 4 K GPUs, at most 32 K tokens per GPU)");
  cmd.add_option("--seq", f.seq, "Sequence length in tokens (default: the model's)");
  cmd.add_option("--max-hbm-fraction", f.max_hbm_fraction,
                 "Share of HBM a planned peak may take, in (0, 1] (default 0.80): the margin for what the memory model "
                 "cannot see; a peak above it still fits, up to the capacity");
  cmd.add_option("--precision", f.precision,
                 "pure-bf16 | amp-bf16 | megatron-bf16 | fp32 | pure-fp16 | amp-fp16 | megatron-fp16");
  cmd.add_option("--framework", f.framework,
                 "fsdp (= fsdp2) | fsdp1 | torchtitan | deepspeed | megatron | reference (default fsdp)");
  cmd.add_flag("--offload-optimizer", f.offload_optimizer, "ZeRO-Offload: optimizer states and step on the host");
  cmd.add_option("--offload-activations", f.offload_activation_layers,
                 "Megatron's CPU activation offloading: the saved activations of N layers go to host memory "
                 "(--cpu-offloading-num-layers; megatron, no PP, no recompute)");
  cmd.add_flag("--precision-aware-optimizer", f.precision_aware_optimizer,
               "Megatron-Core's precision-aware optimizer (Transformer Engine FusedAdam): in bf16 without FP8 the fp32 "
               "master weights are kept as 16-bit remainders, 2 B/param (megatron)");
  cmd.add_option("--adam-moments", f.adam_moments,
                 "Dtype of Adam's m and v: fp32 (default) | bf16 (Megatron --exp-avg-dtype/--exp-avg-sq-dtype bf16; needs "
                 "--precision-aware-optimizer)");
  cmd.add_option("--optimizer", f.optimizer,
                 "adamw (default) | muon (Megatron-Core's --optimizer muon: one fp32 momentum per weight matrix, "
                 "orthogonalized by 5 Newton-Schulz steps, Adam for embeddings, output layer, norms and biases; with "
                 "--zero 1 its layer-wise distributed optimizer; megatron)");
  cmd.add_option("--muon-tp-mode", f.muon_tp_mode,
                 "How Muon orthogonalizes a TP-split matrix (Megatron --muon-tp-mode): duplicated (default: shards "
                 "all-gathered in fp32, the whole matrix on every TP rank) | distributed (shards kept, the Gram matrix "
                 "all-reduced each step) | blockwise (each shard on its own: a different update)");
  cmd.add_flag("--compile", f.compile,
               "torch.compile of the model (fsdp, fsdp1, torchtitan): fused elementwise kernels (time only)");
  cmd.add_option("--loss", f.loss, "Cross-entropy: standard | chunked (logits materialised in chunks) | fused (one kernel, gradient in the compute dtype: flash-attn's, llm-foundry's default; under megatron Transformer Engine's, which writes the gradient over the logits; torchtitan's with --compile, which compiles the loss too); default: fused for torchtitan with --compile, else standard");
  cmd.add_option("--fp8", f.fp8,
                 "FP8 GEMMs of the blocks' linear layers: off | tensorwise | rowwise | blockwise | mxfp8 (torchao under "
                 "fsdp/torchtitan, Transformer Engine under megatron); parameters and optimizer follow --precision");
  cmd.add_option("--cuda-graphs", f.cuda_graphs,
                 "CUDA graphs (megatron): none (eager, Megatron-Core's default) | partial (Transformer Engine graphs of "
                 "attn, moe_router, moe_preprocess) | full (full_iteration); prices an MoE layer's host launch gaps");
  cmd.add_option("--moe-dispatcher", f.moe_dispatcher,
                 "MoE token dispatcher (megatron): alltoall (default) | deepep | hybridep (Megatron-Core "
                 "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend); prices an MoE layer's host launch gaps");
  cmd.add_option("--moe-probs", f.moe_probs,
                 "Where an MoE layer scales its experts' outputs by the router's probabilities: activation (inside "
                 "the experts' activation, the combine saves nothing: Megatron-Core 0.13 and later) | combine (at the "
                 "combine, which saves the k expert outputs: Megatron-Core 0.12 and earlier, torchtitan in fp32, "
                 "DeepSpeed-MoE, transformers); default: the framework's (memory only)");
  cmd.add_option("--moe-capacity-factor", f.moe_capacity_factor,
                 "MoE token dropping: each expert takes at most ceil(T*k/E*F) tokens per rank, padded to it (Megatron "
                 "--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity; DeepSpeed-MoE capacity_factor); "
                 "default: dropless");
  cmd.add_flag("--fp8-all-gather", f.fp8_all_gather,
               "The linear weights are all-gathered in FP8: FSDP2's (torchao enable_fsdp_float8_all_gather; --fp8 "
               "tensorwise); under megatron Megatron-Core's --fp8-param-gather, where they are kept only in FP8 "
               "(no bf16 copy) and the distributed optimizer (--zero 1) or Megatron-FSDP (--zero 3) gathers them in "
               "one byte (Megatron-Bridge's FP8 recipes)");
  cmd.add_option("--attention-kernel", f.attention_kernel,
                 "Fused attention kernel: flash2 | cudnn | triton (llm-foundry's attn_impl triton); default: the "
                 "framework's (cudnn for megatron, flash2 otherwise)");
  cmd.add_option("--attention-kv", f.attention_kv,
                 "How the model hands K and V to the attention kernel: grouped (each K/V head shared by its query "
                 "group inside the kernel: Megatron/TE, SDPA enable_gqa, torchtitan since 2026-01-27) | repeated "
                 "(copied to every query head first: torchtitan before 2026-01-27, transformers' repeat_kv); default "
                 "grouped");
  cmd.add_option("--fsdp-end-units", f.fsdp_end_units,
                 "FSDP2's units for the model's ends: own (the embedding one unit, the final norm with the LM head "
                 "another: torchtitan since 2025-07-28) | root (both in the root unit with the rest: torchtitan "
                 "before, per-block wrapping of transformers models); default own for torchtitan, root for fsdp");
  cmd.add_option("--rope-cache", f.rope_cache,
                 "torchtitan's RoPE tables (complex64, the training length): per-layer (one in each attention layer: "
                 "torchtitan since 2026-06-05) | shared (one for the model: torchtitan before); default per-layer");
  cmd.add_option("--grad-sync", f.grad_sync,
                 "Gradient reduction under accumulation: step (no_sync) | micro (every micro-batch); "
                 "default: the framework's");
  // Each on/off pair as two flags: CLI11's "--x,!--no-x" prints as "--x,--no-x{false}" in help.
  auto on_off = [&cmd](const std::string& name, std::optional<bool>& target, const std::string& help) {
    cmd.add_flag_callback("--" + name, [&target] { target = true; }, help);
    cmd.add_flag_callback("--no-" + name, [&target] { target = false; }, "Turn off --" + name);
  };
  on_off("overlap-grad-reduce", f.overlap_grad_reduce,
         "DDP/ZeRO-1/2 gradient reduction during backward (default: the framework's; Megatron-Core on, DeepSpeed off)");
  on_off("overlap-param-gather", f.overlap_param_gather,
         "ZeRO-1/2 all-gather of the updated parameters during the next forward (default: the framework's; "
         "Megatron-Core on)");
  on_off("tp-comm-overlap", f.tp_comm_overlap,
         "TP collectives pipelined with their GEMMs, with --sp (default: the framework's; Megatron-Core on; "
         "fsdp/torchtitan: PyTorch's async TP, needs --compile)");
  on_off("ep-comm-overlap", f.ep_comm_overlap,
         "MoE: one micro-batch's EP all-to-alls hidden behind another's compute (Megatron-Core "
         "--overlap-moe-expert-parallel-comm --delay-wgrad-compute; needs --ep; default off)");
  on_off("expandable-segments", f.expandable_segments,
         "PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: its free pages are unmapped "
         "before an allocation fails, so its reserve cannot fail the run (default: the launcher's; on for fsdp, whose "
         "emitted torchrun.sh sets it, and torchtitan, whose run_train.sh does; off for fsdp1, deepspeed, megatron)");
  cmd.add_option("--tokens", f.tokens, "Training tokens to price: adds days, GPU-hours (and cost) (e.g. 2T, 300B)");
  cmd.add_option("--gpu-hour-price", f.gpu_hour_price, "Price of one GPU-hour, for the cost of --tokens");
}

namespace {

template <typename T>
T parse_choice(const std::string& flag, const std::string& value, std::optional<T> (*parse)(const std::string&),
               const char* choices) {
  if (auto v = parse(value)) return *v;
  throw InputError(fmt::format("{} '{}' is not one of: {}", flag, value, choices));
}

}  // namespace

Precision parse_precision_flag(const std::string& v) {
  return parse_choice<Precision>("--precision", v, parse_precision,
                                 "pure-bf16, amp-bf16, megatron-bf16, fp32, pure-fp16, amp-fp16, megatron-fp16");
}
Framework parse_framework_flag(const std::string& v) {
  return parse_choice<Framework>("--framework", v, parse_framework,
                                 "fsdp, fsdp2, fsdp1, torchtitan, deepspeed, megatron, reference");
}
Recompute parse_recompute_flag(const std::string& v) {
  return parse_choice<Recompute>("--recompute", v, parse_recompute, "none, selective, full");
}
Schedule parse_schedule_flag(const std::string& v) {
  return parse_choice<Schedule>("--schedule", v, parse_schedule, "1f1b, interleaved, gpipe, zb-h1, zbv, dualpipev");
}
std::optional<AttentionKernel> parse_attention_kernel_flag(const std::string& v, bool flash_attn) {
  if (v.empty()) return std::nullopt;
  if (!flash_attn)
    throw InputError("--attention-kernel names a fused attention kernel, but --no-flash-attn asks for unfused "
                     "attention; drop one of them");
  return parse_choice<AttentionKernel>("--attention-kernel", v, parse_attention_kernel, "flash2, cudnn, triton");
}

bool parse_attention_kv_flag(const std::string& v) {
  if (v.empty() || v == "grouped") return false;
  if (v == "repeated") return true;
  throw InputError(fmt::format("--attention-kv '{}' is not one of: grouped, repeated", v));
}

std::optional<bool> parse_fsdp_end_units_flag(const std::string& v, Framework framework) {
  if (v.empty()) return std::nullopt;
  if (v != "own" && v != "root") throw InputError(fmt::format("--fsdp-end-units '{}' is not one of: own, root", v));
  if (framework != Framework::fsdp && framework != Framework::torchtitan)
    throw InputError(fmt::format("--fsdp-end-units describes FSDP2's wrapping, not --framework {}; use --framework "
                                 "fsdp or torchtitan, or drop --fsdp-end-units", to_string(framework)));
  return v == "own";
}

std::optional<bool> parse_rope_cache_flag(const std::string& v, Framework framework) {
  if (v.empty()) return std::nullopt;
  if (v != "per-layer" && v != "shared")
    throw InputError(fmt::format("--rope-cache '{}' is not one of: per-layer, shared", v));
  if (framework_traits(framework).rope_tables == RopeTables::none)
    throw InputError(fmt::format("--rope-cache describes the RoPE tables torchtitan keeps, not --framework {}; use "
                                 "--framework torchtitan, or drop --rope-cache", to_string(framework)));
  return v == "per-layer";
}

Fp8Recipe parse_fp8_flag(const std::string& v) {
  return parse_choice<Fp8Recipe>("--fp8", v, parse_fp8_recipe, "off, tensorwise, rowwise, blockwise, mxfp8");
}

LossKind parse_loss_flag(const std::string& v) { return parse_choice<LossKind>("--loss", v, parse_loss, "standard, chunked, fused"); }
GradSync parse_grad_sync_flag(const std::string& v) {
  return parse_choice<GradSync>("--grad-sync", v, parse_grad_sync, "step, micro");
}

namespace {

ModelSpec load_model(const ConfigFlags& f, const PresetStore& store, std::vector<std::string>* notes) {
  if (!f.preset.empty() + !f.model_file.empty() + !f.hf_config.empty() > 1)
    throw InputError("give only one of --preset, --model and --hf-config");
  if (!f.preset.empty()) return store.model(f.preset);
  if (!f.model_file.empty()) return store.model_file(f.model_file);
  if (!f.hf_config.empty()) {
    HfModel hf = load_hf_config(f.hf_config);
    if (notes != nullptr) *notes = hf.notes;
    return hf.spec;
  }
  throw InputError("no model given: pass --preset NAME (see `shardplan presets models`), --model FILE.yaml or "
                   "--hf-config config.json");
}

}  // namespace

ModelSpec resolve_model(const ConfigFlags& f, const PresetStore& store, std::vector<std::string>* notes) {
  ModelSpec m = load_model(f, store, notes);
  if (f.mtp_layers) {
    // DeepSeek-V3 trains one module (§2.2); Megatron-Core stacks any number, each a block deeper.
    if (*f.mtp_layers < 0 || *f.mtp_layers > 64)
      throw InputError(fmt::format("--mtp-layers must be between 0 and 64, got {}", *f.mtp_layers));
    m.mtp_layers = *f.mtp_layers;
  }
  return m;
}

std::optional<TrainingGoal> resolve_training_goal(const ConfigFlags& f) {
  if (f.gpu_hour_price && !(*f.gpu_hour_price > 0 && std::isfinite(*f.gpu_hour_price)))
    throw InputError(fmt::format("--gpu-hour-price must be a positive number, got {}", *f.gpu_hour_price));
  if (f.tokens.empty()) {
    if (f.gpu_hour_price) throw InputError("--gpu-hour-price needs --tokens (the cost is GPU-hours for those tokens × price)");
    return std::nullopt;
  }
  const auto tokens = parse_token_count(f.tokens);
  if (!tokens)
    throw InputError(fmt::format("--tokens '{}' is not a token count: write a positive number with an optional "
                                 "suffix K, M, B or T (2T = 2e12)",
                                 f.tokens));
  return TrainingGoal{*tokens, f.gpu_hour_price};
}

ClusterSpec resolve_cluster(const ConfigFlags& f, const PresetStore& store, bool& defaulted) {
  if (!f.cluster.empty() && !f.gpu.empty())
    throw InputError("give either --cluster or --gpu, not both (a cluster names its GPU)");
  ClusterSpec c;
  defaulted = false;
  if (!f.cluster.empty()) {
    c = store.cluster(f.cluster);
  } else if (!f.gpu.empty()) {
    c = cluster_from_gpu(store.gpu(f.gpu));
  } else {
    c = store.cluster(kDefaultCluster);
    defaulted = true;
  }
  if (f.gpus_per_node) {
    if (*f.gpus_per_node < 1) throw InputError(fmt::format("--gpus-per-node must be at least 1, got {}", *f.gpus_per_node));
    c.gpus_per_node = *f.gpus_per_node;
    // The cluster's NVLink domain and leaf groups hold whole hosts: say which flag broke that.
    try {
      validate_cluster(c);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--gpus-per-node {}: {}", *f.gpus_per_node, e.what()));
    }
  }
  if (f.inter_node_gbps) {
    if (!(*f.inter_node_gbps > 0))
      throw InputError(fmt::format("--inter-node-gbps must be positive, got {}", *f.inter_node_gbps));
    // The override is per node; keep the NIC count and spread the bandwidth over it.
    if (c.inter.nics_per_node <= 0) c.inter.nics_per_node = 1;
    c.inter.nic_gbps = *f.inter_node_gbps / static_cast<double>(c.inter.nics_per_node);
  }
  return c;
}

namespace {

int64_t positive(const char* flag, std::optional<int64_t> v, int64_t fallback) {
  if (!v) return fallback;
  if (*v < 1) throw InputError(fmt::format("{} must be at least 1, got {}", flag, *v));
  return *v;
}

}  // namespace

std::optional<PipelineSplit> resolve_pipeline_split(const ConfigFlags& f) {
  if (!f.pp_first_layers && !f.pp_last_layers && !f.pp_embedding_layers && !f.pp_loss_layers && f.pp_layout.empty())
    return std::nullopt;
  PipelineSplit split;
  if (!f.pp_layout.empty()) {
    if (f.pp_first_layers || f.pp_last_layers || f.pp_embedding_layers || f.pp_loss_layers)
      throw InputError("--pp-layout cannot be combined with --pp-first-layers, --pp-last-layers, --pp-embedding-layers "
                       "or --pp-loss-layers (Megatron-Core refuses the layout beside the other split arguments); keep "
                       "one of them");
    const LayoutParse parsed = parse_megatron_layout(f.pp_layout);
    if (!parsed.error.empty()) throw InputError(fmt::format("--pp-layout '{}': {}", f.pp_layout, parsed.error));
    split.layout = parsed.layout;
    return split;
  }
  for (auto [flag, v, out] : {std::tuple{"--pp-first-layers", f.pp_first_layers, &split.first_layers},
                              std::tuple{"--pp-last-layers", f.pp_last_layers, &split.last_layers}}) {
    if (!v) continue;
    if (*v < 1) throw InputError(fmt::format("{} must be at least 1, got {}", flag, *v));
    *out = *v;
  }
  for (auto [flag, v, out] : {std::tuple{"--pp-embedding-layers", f.pp_embedding_layers, &split.embedding_layers},
                              std::tuple{"--pp-loss-layers", f.pp_loss_layers, &split.loss_layers}}) {
    if (!v) continue;
    if (*v < 0 || *v > (int64_t{1} << 20)) throw InputError(fmt::format("{} must be 0 or more, got {}", flag, *v));
    *out = *v;
  }
  return split;
}

CudaGraphs parse_cuda_graphs_flag(const std::string& v) {
  if (v.empty()) return CudaGraphs::none;
  if (const auto g = parse_cuda_graphs(v)) return *g;
  throw InputError(fmt::format("--cuda-graphs '{}' is not one of: none, partial, full", v));
}

std::optional<MoeProbs> parse_moe_probs_flag(const std::string& v) {
  if (v.empty()) return std::nullopt;
  if (const auto p = parse_moe_probs(v)) return *p;
  throw InputError(fmt::format("--moe-probs '{}' is not one of: activation, combine", v));
}

MoeDispatcher parse_moe_dispatcher_flag(const std::string& v) {
  if (v.empty()) return MoeDispatcher::alltoall;
  if (const auto d = parse_moe_dispatcher(v)) return *d;
  throw InputError(fmt::format("--moe-dispatcher '{}' is not one of: alltoall, deepep, hybridep", v));
}

OptimizerKind parse_optimizer_flag(const std::string& v) {
  if (v.empty()) return OptimizerKind::adamw;
  return parse_choice<OptimizerKind>("--optimizer", v, parse_optimizer, "adamw, muon");
}

MuonTpMode parse_muon_tp_mode_flag(const std::string& v) {
  if (v.empty()) return MuonTpMode::duplicated;
  return parse_choice<MuonTpMode>("--muon-tp-mode", v, parse_muon_tp_mode, "duplicated, distributed, blockwise");
}

bool parse_adam_moments_flag(const std::string& v) {
  if (v.empty() || v == "fp32") return false;
  if (v == "bf16") return true;
  throw InputError(fmt::format("--adam-moments '{}' is not one of: fp32, bf16", v));
}

void apply_partial_recompute_flags(const ConfigFlags& f, Strategy& s) {
  for (auto [flag, v] : {std::pair{"--recompute-layers", f.recompute_layers}, {"--recompute-every", f.recompute_every}})
    if (v && *v < 1) throw InputError(fmt::format("{} must be at least 1, got {}", flag, *v));
  s.recompute_layers = f.recompute_layers.value_or(0);
  s.recompute_every = f.recompute_every.value_or(0);
  if ((f.recompute_layers || f.recompute_every) && f.recompute.empty() && !s.recompute_modules) s.recompute = Recompute::full;
}

uint32_t parse_recompute_modules_flag(const std::string& v) {
  if (v.empty()) return 0;
  std::string bad;
  if (const auto mask = parse_recompute_modules(v, &bad)) return *mask;
  throw InputError(fmt::format("--recompute-modules: '{}' is not one of core_attn, layernorm, mla_up_proj, mlp, moe, "
                               "moe_act, shared_experts (comma-separated)",
                               bad));
}

ResolvedConfig resolve_config(const ConfigFlags& f, const PresetStore& store) {
  ResolvedConfig r;
  r.model = resolve_model(f, store, &r.model_notes);
  r.cluster = resolve_cluster(f, store, r.cluster_defaulted);
  Strategy& s = r.strategy;
  s.framework = parse_framework_flag(f.framework);
  s.precision = parse_precision_flag(f.precision);
  s.recompute_modules = parse_recompute_modules_flag(f.recompute_modules);
  // A module list is Megatron's --recompute-granularity selective: it implies --recompute selective.
  s.recompute = f.recompute.empty() ? (s.recompute_modules ? Recompute::selective : Recompute::none)
                                    : parse_recompute_flag(f.recompute);
  apply_partial_recompute_flags(f, s);
  if (!f.loss.empty()) s.loss = parse_loss_flag(f.loss);
  if (!f.grad_sync.empty()) s.grad_sync = parse_grad_sync_flag(f.grad_sync);
  s.gpus = positive("--gpus", f.gpus, r.cluster.gpus_per_node);
  s.tp = positive("--tp", f.tp, 1);
  s.pp = positive("--pp", f.pp, 1);
  s.cp = positive("--cp", f.cp, 1);
  s.ep = positive("--ep", f.ep, 1);
  s.etp = f.etp ? positive("--etp", f.etp, 1) : 0;  // 0: the runtime's default (planner/strategy.hpp)
  s.vpp = positive("--vpp", f.vpp, 1);
  const std::optional<PipelineSplit> given_split = resolve_pipeline_split(f);
  // A layout's stage count sets the chunks per rank (Megatron-LM arguments.py: vpp = stages / pp); a --vpp that
  // disagrees is refused by pipeline_layout_refusal.
  const bool layout_given = given_split && given_split->layout.stages > 0;
  if (layout_given && !f.vpp && given_split->layout.stages % s.pp == 0) s.vpp = given_split->layout.stages / s.pp;
  if (f.schedule.empty()) {
    s.schedule = s.vpp > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  } else {
    s.schedule = parse_schedule_flag(f.schedule);
    if (layout_given && !f.vpp && s.vpp > 1 && s.schedule != Schedule::interleaved)
      throw InputError(fmt::format("--pp-layout's {} stages over --pp {} are {} chunks per rank, which Megatron-Core "
                                   "runs interleaved; drop --schedule {} (or give a layout of --pp stages)",
                                   given_split->layout.stages, s.pp, s.vpp, f.schedule));
  }
  // ZB-V and DualPipeV run two chunks per rank: --vpp defaults to 2 for them.
  if (!f.vpp && (s.schedule == Schedule::zbv || s.schedule == Schedule::dualpipev)) s.vpp = 2;
  if (given_split) s.split = *given_split;
  if (s.tp > s.gpus || s.pp > s.gpus || s.cp > s.gpus)
    throw InputError(s.cp > 1 ? fmt::format("--tp {} · --pp {} · --cp {} exceeds --gpus {}", s.tp, s.pp, s.cp, s.gpus)
                              : fmt::format("--tp {} · --pp {} exceeds --gpus {}", s.tp, s.pp, s.gpus));
  if (f.dp) {
    s.dp = positive("--dp", f.dp, 1);
  } else {
    const int64_t model_ranks = s.tp * s.pp * s.cp;  // each at most --gpus: no overflow below 2^63
    if (model_ranks > s.gpus || s.gpus % model_ranks != 0)
      throw InputError(s.cp > 1 ? fmt::format("--gpus {} is not divisible by tp·pp·cp = {}; change --gpus, --tp, --pp or "
                                              "--cp", s.gpus, model_ranks)
                                : fmt::format("--gpus {} is not divisible by tp·pp = {}; change --gpus, --tp or --pp",
                                              s.gpus, model_ranks));
    s.dp = s.gpus / model_ranks;
  }
  s.sp = f.sp;
  apply_framework_defaults(s, r.model);  // torchtitan's TP, Megatron's MoE under TP: always with SP
  s.overlap_grad_reduce = f.overlap_grad_reduce;
  s.overlap_param_gather = f.overlap_param_gather;
  s.tp_comm_overlap = f.tp_comm_overlap;
  s.ep_comm_overlap = f.ep_comm_overlap;
  s.expandable_segments = f.expandable_segments;
  // Both overlaps pipeline all-gathers and reduce-scatters, the collectives of sequence parallelism (Megatron-LM
  // requires --sequence-parallel for --tp-comm-overlap; Inductor's micro-pipeline pass matches only those).
  if (s.tp_comm_overlap.value_or(false) && !(s.sp && s.tp > 1))
    throw InputError("--tp-comm-overlap needs --sp and --tp of at least 2 (the overlapped collectives are sequence "
                     "parallelism's all-gathers and reduce-scatters); add --sp or drop --tp-comm-overlap");
  // Megatron-Core runs the distributed optimizer (ZeRO-1) in its recipes (Megatron-Bridge recipes/common.py
  // use_distributed_optimizer=True); everything else defaults to FULL_SHARD.
  s.zero = f.zero.value_or(s.framework == Framework::megatron ? 1 : 3);
  s.hsdp = f.hsdp.value_or(0);
  if (f.hsdp && *f.hsdp < 1) throw InputError(fmt::format("--hsdp must be at least 1, got {}", *f.hsdp));
  s.flash_attn = f.flash_attn;
  s.attention_kernel = parse_attention_kernel_flag(f.attention_kernel, f.flash_attn);
  s.kv_repeated = parse_attention_kv_flag(f.attention_kv);
  s.end_units_own = parse_fsdp_end_units_flag(f.fsdp_end_units, s.framework);
  s.rope_cache_per_layer = parse_rope_cache_flag(f.rope_cache, s.framework);
  s.fp8 = parse_fp8_flag(f.fp8);
  s.fp8_all_gather = f.fp8_all_gather;
  s.cuda_graphs = parse_cuda_graphs_flag(f.cuda_graphs);
  s.moe_dispatcher = parse_moe_dispatcher_flag(f.moe_dispatcher);
  s.moe_probs = parse_moe_probs_flag(f.moe_probs);
  s.moe_capacity_factor = f.moe_capacity_factor.value_or(0);
  s.compile = f.compile;
  if (f.loss.empty()) s.loss = default_loss(s.framework, s.compile);
  s.offload_optimizer = f.offload_optimizer;
  s.precision_aware_optimizer = f.precision_aware_optimizer;
  s.offload_activation_layers = f.offload_activation_layers.value_or(0);
  s.bf16_adam_moments = parse_adam_moments_flag(f.adam_moments);
  s.optimizer = parse_optimizer_flag(f.optimizer);
  s.muon_tp_mode = parse_muon_tp_mode_flag(f.muon_tp_mode);
  s.micro_batch = positive("--micro-batch", f.micro_batch, 1);
  s.seq = positive("--seq", f.seq, r.model.seq);
  if (f.global_batch) {
    s.global_batch = positive("--global-batch", f.global_batch, 1);
  } else if (f.one_micro_batch_default) {
    s.global_batch = s.micro_batch * s.dp;
    r.batch_note = fmt::format("global batch {} sequences = {} ranks × micro-batch {}, one accumulation step: the "
                               "reference loop's default (give --global-batch to accumulate)",
                               s.global_batch, s.dp, s.micro_batch);
  } else {
    const BatchTarget t = default_batch_target(s.seq, s.gpus);
    s.global_batch = default_global_batch(t, s.dp, s.micro_batch);
    r.batch_note = describe_default_batch(t, s.dp, s.micro_batch);
  }
  // No split given and the runtime's default cannot lay the blocks out: the split its recipes use (or none: then
  // validation names the rule and the flags).
  if (!given_split)
    if (const auto split = runnable_split_for_default(r.model, s)) {
      s.split = *split;
      const std::string how =
          split->layout.stages > 0
              ? fmt::format("the per-stage layout '{}' (--pp-layout: Megatron's --pipeline-model-parallel-layout, "
                            "middle stages of ⌈L/S⌉ blocks as Megatron-Bridge's DeepSeek-V3 recipes write it)",
                            megatron_layout_of(r.model, s))
          : split->embedding_layers == 1 && split->loss_layers == 1
              ? "the embedding and the loss counted as a block each (--pp-embedding-layers 1 --pp-loss-layers 1: "
                "Megatron-LM's --account-for-embedding/loss-in-pipeline-split, as Megatron-Bridge's recipes set them)"
              : fmt::format("{} blocks on the first stage and {} on the last (--pp-first-layers {} --pp-last-layers {})",
                            split->first_layers, split->last_layers, split->first_layers, split->last_layers);
      r.layout_note = fmt::format("the {} blocks do not split over pp {} × {} chunks as {} splits them by default; "
                                  "priced with {}; give --pp-* flags for another split",
                                  r.model.layers, s.pp, s.vpp, to_string(s.framework), how);
    }
  return r;
}

std::vector<std::string> config_notes(const ConfigFlags& f, const std::vector<std::string>& model_notes,
                                      const ClusterSpec& c, int64_t tp) {
  std::vector<std::string> out;
  if (!f.hf_config.empty())
    for (const std::string& n : model_notes)
      if (!(f.seq && n.find("--seq is capped") != std::string::npos)) out.push_back(f.hf_config + ": " + n);
  // TP all-reduces twice per layer forward and backward (Megatron-LM, Shoeybi et al. 2019 §3): over the network
  // instead of NVLink that is usually the step's largest cost.
  // The limit is the NVLink domain (hardware.hpp nvlink_domain_size): one host, or an NVL72 rack.
  const int64_t domain = std::max<int64_t>(nvlink_domain_size(c), 1);
  if (tp > domain)
    out.push_back(fmt::format("--tp {} spans {} {} ({} GPUs {}): its collectives, several per layer, cross the network; "
                              "keep tp at most {}",
                              tp, (tp + domain - 1) / domain, domain == c.gpus_per_node ? "nodes" : "NVLink domains",
                              domain, domain == c.gpus_per_node ? "per node" : "each", domain));
  return out;
}

void print_config_notes(const ConfigFlags& f, const std::vector<std::string>& model_notes, const ClusterSpec& c,
                        int64_t tp) {
  for (const std::string& n : config_notes(f, model_notes, c, tp)) std::cerr << "note: " << n << "\n";
}

double resolve_max_hbm_fraction(const ConfigFlags& f) {
  return checked_max_hbm_fraction(f.max_hbm_fraction.value_or(kSafeFractionOfCapacity));
}

}  // namespace shardplan::cli
