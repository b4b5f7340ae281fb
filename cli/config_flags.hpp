#pragma once
// The configuration flags shared by predict, plan, simulate and validate (CONTRACT.md), and their resolution
// into a model, a cluster and a strategy.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "io/preset_store.hpp"
#include "planner/cost.hpp"
#include "planner/hardware.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan::cli {

// The flags as typed; unset optionals take defaults from the model, the cluster or the framework.
struct ConfigFlags {
  std::string preset, model_file, cluster, gpu;
  std::string hf_config;  // --hf-config config.json
  std::optional<int64_t> mtp_layers;  // --mtp-layers: overrides the model's multi-token-prediction modules
  std::string tokens;     // --tokens 2T (parsed by resolve_training_goal)
  std::optional<double> gpu_hour_price;
  std::optional<int64_t> gpus_per_node;
  std::optional<double> inter_node_gbps;
  std::optional<int64_t> gpus, tp, pp, cp, ep, etp, dp, vpp, hsdp, micro_batch, global_batch, seq;
  std::optional<int> zero;
  // --pp-first-layers, --pp-last-layers, --pp-embedding-layers, --pp-loss-layers (planner/pipeline_split.hpp)
  std::optional<int64_t> pp_first_layers, pp_last_layers, pp_embedding_layers, pp_loss_layers;
  std::string pp_layout;  // Megatron's --pipeline-model-parallel-layout text
  std::string schedule, recompute, precision = "amp-bf16", framework = "fsdp", loss;  // loss: "" = the framework's (default_loss)
  std::string cuda_graphs;  // --cuda-graphs none|partial|full ("" = none)
  std::string moe_dispatcher;  // --moe-dispatcher alltoall|deepep|hybridep ("" = alltoall)
  std::string moe_probs;       // --moe-probs activation|combine ("" = the framework's)
  std::string adam_moments;    // --adam-moments fp32|bf16 ("" = fp32)
  std::string optimizer;       // --optimizer adamw|muon ("" = adamw)
  std::string muon_tp_mode;    // --muon-tp-mode duplicated|distributed|blockwise ("" = duplicated)
  std::string recompute_modules;  // --recompute-modules core_attn,moe_act,... ("" = Megatron's default)
  bool precision_aware_optimizer = false;  // --precision-aware-optimizer
  std::optional<int64_t> offload_activation_layers;  // --offload-activations N
  std::optional<int64_t> recompute_layers;  // --recompute-layers N (planner/partial_recompute.hpp)
  std::optional<int64_t> recompute_every;   // --recompute-every K
  std::optional<double> moe_capacity_factor;  // --moe-capacity-factor F (absent = dropless)
  std::string attention_kernel;  // --attention-kernel; empty: the framework's
  std::string attention_kv;      // --attention-kv: grouped | repeated; empty: grouped
  std::string fsdp_end_units;    // --fsdp-end-units: own | root; empty: the framework's
  std::string rope_cache;        // --rope-cache: per-layer | shared; empty: the framework's
  std::string fp8 = "off";       // --fp8 (planner/fp8_recipe.hpp)
  bool fp8_all_gather = false;   // --fp8-all-gather
  std::string grad_sync;
  std::optional<bool> overlap_grad_reduce, overlap_param_gather, tp_comm_overlap, ep_comm_overlap;
  std::optional<bool> expandable_segments;  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (planner/memory.hpp)
  bool sp = false, flash_attn = true, offload_optimizer = false, compile = false;
  // validate's live reference loop: an unset --global-batch means one micro-batch per rank (a measurement, not a
  // recipe), instead of the shared default (planner/batch.hpp), which would run hundreds of accumulation steps.
  bool one_micro_batch_default = false;
  std::optional<double> max_hbm_fraction;  // --max-hbm-fraction (planner/memory.hpp kSafeFractionOfCapacity)
};

struct ResolvedConfig {
  ModelSpec model;
  ClusterSpec cluster;
  Strategy strategy;
  bool cluster_defaulted = false;  // neither --cluster nor --gpu was given
  // --global-batch not given: what the default rule chose for this layout and why (planner/batch.hpp); "" otherwise.
  std::string batch_note;
  std::vector<std::string> model_notes;  // the Hugging Face reader's approximations and caps (io/hf_config.hpp)
  // What the layout took that the flags left open (the pipeline split a runtime needs: planner/pipeline_layout.hpp
  // runnable_split_for_default); "" when nothing.
  std::string layout_note;
};

// Name of the cluster used when neither --cluster nor --gpu is given.
inline constexpr const char* kDefaultCluster = "a800x8";  // the seed case's cluster

void add_config_flags(CLI::App& cmd, ConfigFlags& flags);

// Throws InputError naming the flag for anything missing, unknown or inconsistent.
ResolvedConfig resolve_config(const ConfigFlags& flags, const PresetStore& store);
// --cuda-graphs: none when not given; InputError naming the flag for anything else.
CudaGraphs parse_cuda_graphs_flag(const std::string& v);
MoeDispatcher parse_moe_dispatcher_flag(const std::string& v);
// --moe-probs: unset for "" (the framework's).
std::optional<MoeProbs> parse_moe_probs_flag(const std::string& v);
bool parse_adam_moments_flag(const std::string& v);  // true for bf16
OptimizerKind parse_optimizer_flag(const std::string& v);
MuonTpMode parse_muon_tp_mode_flag(const std::string& v);
// --recompute-modules: the mask (planner/recompute_modules.hpp), 0 when absent; an unknown name is one error line.
uint32_t parse_recompute_modules_flag(const std::string& v);
// --recompute-layers / --recompute-every into the strategy (0 when absent; each at least 1 when given), and the
// recomputation they imply when --recompute is absent: full.
void apply_partial_recompute_flags(const ConfigFlags& f, Strategy& s);

// The model and the cluster only (plan resolves the strategy itself); `cluster_defaulted` as in ResolvedConfig.
ModelSpec resolve_model(const ConfigFlags& flags, const PresetStore& store, std::vector<std::string>* notes = nullptr);
ClusterSpec resolve_cluster(const ConfigFlags& flags, const PresetStore& store, bool& cluster_defaulted);
// --tokens and --gpu-hour-price; nullopt without --tokens (a price alone is an InputError).
std::optional<TrainingGoal> resolve_training_goal(const ConfigFlags& flags);

// What the defaults decided that the flags did not say, one line each for stderr as "note: ...": the Hugging Face
// reader's approximations and caps (a capped default --seq), and a --tp wider than a node.
// `model_notes` as resolve_model gave them (an --hf-config pipe can be read once only).
std::vector<std::string> config_notes(const ConfigFlags& flags, const std::vector<std::string>& model_notes,
                                      const ClusterSpec& cluster, int64_t tp);
// Prints them on stderr (stdout stays the answer a script parses).
void print_config_notes(const ConfigFlags& flags, const std::vector<std::string>& model_notes,
                        const ClusterSpec& cluster, int64_t tp);

// --max-hbm-fraction, checked (InputError naming it), or the default 0.80.
double resolve_max_hbm_fraction(const ConfigFlags& flags);

// The pipeline split flags, checked for range (the runtime's rules come with the strategy); nullopt when none is given.
std::optional<PipelineSplit> resolve_pipeline_split(const ConfigFlags& flags);

// Choice flags, parsed or InputError naming the flag and the choices.
Precision parse_precision_flag(const std::string& value);
Framework parse_framework_flag(const std::string& value);
Recompute parse_recompute_flag(const std::string& value);
Schedule parse_schedule_flag(const std::string& value);
LossKind parse_loss_flag(const std::string& value);
Fp8Recipe parse_fp8_flag(const std::string& value);
// --attention-kernel: empty → unset (the framework's kernel); refused with --no-flash-attn.
std::optional<AttentionKernel> parse_attention_kernel_flag(const std::string& value, bool flash_attn);
// --attention-kv: true for "repeated", false for "grouped" or empty.
bool parse_attention_kv_flag(const std::string& value);
// --fsdp-end-units under --framework: true for "own", false for "root", unset when empty; refused outside FSDP2.
std::optional<bool> parse_fsdp_end_units_flag(const std::string& value, Framework framework);
// --rope-cache under --framework: true for "per-layer", false for "shared", unset when empty; torchtitan only.
std::optional<bool> parse_rope_cache_flag(const std::string& value, Framework framework);
GradSync parse_grad_sync_flag(const std::string& value);

}  // namespace shardplan::cli
