#include "planner/strategy.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>

#include "planner/error.hpp"
#include "planner/fp8.hpp"
#include "planner/framework_support.hpp"
#include "planner/partial_recompute.hpp"
#include "planner/pipeline_layout.hpp"
#include "planner/pipeline_schedule.hpp"
#include "planner/precision.hpp"
#include "planner/recompute_modules.hpp"

namespace shardplan {

int64_t shard_degree(const Strategy& s) { return (s.hsdp > 0 ? s.hsdp : s.dp) * std::max<int64_t>(s.cp, 1); }

int64_t grad_reduce_degree(const Strategy& s) { return s.dp * std::max<int64_t>(s.cp, 1); }

int64_t seq_per_rank(const Strategy& s) { return s.seq / std::max<int64_t>(s.cp, 1); }

int64_t expert_tensor_parallel(const Strategy& s) {
  if (s.etp > 0) return s.etp;
  const bool folds = s.framework == Framework::megatron || s.framework == Framework::torchtitan;
  return s.ep > 1 && folds ? 1 : std::max<int64_t>(s.tp, 1);
}

int64_t expert_data_parallel(const Strategy& s) {
  const int64_t experts = expert_tensor_parallel(s) * std::max<int64_t>(s.ep, 1);
  return std::max<int64_t>(s.tp, 1) * grad_reduce_degree(s) / std::max<int64_t>(experts, 1);
}

int64_t grad_accum_steps(const Strategy& s) {
  const int64_t per_step = s.micro_batch * s.dp;
  return per_step > 0 ? s.global_batch / per_step : 0;
}

static void require_at_least(const char* flag, int64_t value, int64_t lo) {
  if (value < lo) throw InputError(fmt::format("{} must be at least {}, got {}", flag, lo, value));
}

// --ep / --etp: Megatron-Core asserts that the expert-parallel size divides num_moe_experts
// (megatron/core/transformer/moe/moe_layer.py BaseMoELayer: num_local_experts = num_moe_experts // ep_size, asserted
// exact) and that etp·ep divides the ranks of a pipeline stage (parallel_state.py initialize_model_parallel:
// expert_data_parallel_size = world / (expert_tensor_size · ep · pp), asserted integral); torchtitan that ep divides
// dp_shard·cp·tp (parallel_dims.py _validate). An expert split over more ranks than an attention layer (etp > tp) is
// not a layout either runtime's recipes use and is not modelled; DeepSpeed slices experts over its TP group only.
static void validate_expert_parallel(const Strategy& s, const ModelSpec& m) {
  if (s.etp < 0) throw InputError(fmt::format("--etp must be at least 1, got {}", s.etp));
  if (s.etp > 0 && s.tp % s.etp != 0)
    throw InputError(fmt::format("--etp {} must divide --tp {} (each expert is split over a part of the tensor-parallel "
                                 "group); choose a divisor of {}",
                                 s.etp, s.tp, s.tp));
  if (s.etp > 0 && s.etp != s.tp && s.framework == Framework::deepspeed)
    throw InputError(fmt::format("--etp {} with --framework deepspeed: DeepSpeed slices experts over its tensor-parallel "
                                 "group or not at all (deepspeed/moe/layer.py MoE enable_expert_tensor_parallelism); "
                                 "use --etp {} or drop --etp",
                                 s.etp, s.tp));
  if (const std::string why = moe_capacity_factor_refusal(s.moe_capacity_factor); !why.empty()) throw InputError(why);
  if (s.moe_capacity_factor > 0 && m.experts == 0)
    throw InputError(fmt::format("--moe-capacity-factor: model '{}' is dense (no 'experts'); drop the flag or choose an "
                                 "MoE model",
                                 m.name));
  if (s.ep_comm_overlap.value_or(false) && s.ep <= 1)
    throw InputError("--ep-comm-overlap hides the expert-parallel all-to-alls: it needs --ep of at least 2");
  if (s.moe_dispatcher != MoeDispatcher::alltoall && s.ep <= 1)
    throw InputError(fmt::format("--moe-dispatcher {} exchanges tokens between expert-parallel ranks: it needs --ep of at "
                                 "least 2 (or drop the flag)",
                                 to_string(s.moe_dispatcher)));
  // DeepEP sizes its buffers from the routing, so it cannot pad every expert to a capacity (Megatron-Core
  // transformer_config.py __post_init__: "Flex token dispatcher with deepep backend does not support
  // moe_pad_expert_input_to_capacity").
  if (s.moe_dispatcher == MoeDispatcher::deepep && s.moe_capacity_factor > 0)
    throw InputError("--moe-dispatcher deepep with --moe-capacity-factor: DeepEP does not pad experts to a capacity "
                     "(Megatron-Core transformer_config.py); use --moe-dispatcher hybridep or alltoall, or drop "
                     "--moe-capacity-factor");
  if (s.ep <= 1) return;
  if (m.experts == 0)
    throw InputError(fmt::format("--ep {}: model '{}' is dense (no 'experts'); expert parallelism needs a mixture of "
                                 "experts: drop --ep or choose an MoE model",
                                 s.ep, m.name));
  if (m.experts % s.ep != 0)
    throw InputError(fmt::format("--ep {} must divide the model's {} routed experts (each EP rank holds experts/ep of "
                                 "them); choose a divisor of {}",
                                 s.ep, m.experts, m.experts));
  // The expert layout re-cuts the tp·cp·dp ranks of a stage as etp × ep × expert-dp (strategy.hpp).
  const int64_t etp = expert_tensor_parallel(s), stage_ranks = s.tp * s.cp * s.dp;
  if (stage_ranks % (etp * s.ep) != 0) {
    if (etp == s.tp)
      throw InputError(fmt::format("--ep {} must divide the data-parallel × context-parallel degree dp·cp = {} when each "
                                   "expert is split over the {} tensor-parallel ranks (expert TP {}); choose a divisor "
                                   "of {}{}",
                                   s.ep, s.dp * s.cp, s.tp, etp, s.dp * s.cp,
                                   s.framework == Framework::deepspeed ? "" : ", or --etp 1 to fold EP over tp·cp·dp"));
    throw InputError(fmt::format("--ep {} × --etp {} must divide the ranks of a pipeline stage, tp·cp·dp = {} "
                                 "(expert-parallel groups are cut from those ranks); choose ep·etp dividing {}",
                                 s.ep, etp, stage_ranks, stage_ranks));
  }
  if (s.hsdp > 0 && s.hsdp < s.dp) throw InputError(hsdp_with_ep_refusal(s.hsdp, s.ep));
}

// Context parallelism splits each sequence into 2·cp chunks and gives rank i chunks i and 2·cp−1−i, so that every
// rank has the same causal work (Megatron-Core get_batch_on_this_cp_rank, megatron/core/utils.py; torch's
// _HeadTailLoadBalancer, torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py, torchtitan's
// default context_parallel_load_balancer "headtail"): the sequence must split into 2·cp equal chunks. Both runtimes
// run CP only inside a fused attention kernel: Megatron-Core asserts "Context parallelism is only supported by
// TEDotProductAttention!" (megatron/core/transformer/dot_product_attention.py DotProductAttention.__init__); torch's
// ring handles only the SDPA flash / efficient / cuDNN ops (_attention.py _sdpa_handler).
std::string hsdp_with_ep_refusal(int64_t hsdp, int64_t ep) {
  return fmt::format("--hsdp {} with --ep {}: hybrid sharding of the expert-data-parallel group is not modelled; drop "
                     "--hsdp",
                     hsdp, ep);
}

std::string activation_offload_refusal(const Strategy& s, const ModelSpec& m) {
  const int64_t n = s.offload_activation_layers;
  if (n == 0) return "";
  // transformer_config.py: "CPU offloading can be done only for layers less than num_layers".
  if (n < 0 || n >= m.layers)
    return fmt::format("--offload-activations {} must be 1 to {} (Megatron-Core offloads fewer layers than the model's "
                       "{}: transformer_config.py)",
                       n, m.layers - 1, m.layers);
  return "";
}

std::string precision_aware_optimizer_refusal(const Strategy& s) {
  if (s.bf16_adam_moments && !s.precision_aware_optimizer)
    return "--adam-moments bf16 needs the precision-aware optimizer (Megatron-Core asserts fp32 moments without "
           "--use-precision-aware-optimizer); add --precision-aware-optimizer";
  const bool has_master = s.precision == Precision::amp_bf16 || s.precision == Precision::megatron_bf16 ||
                          s.precision == Precision::amp_fp16 || s.precision == Precision::megatron_fp16;
  if (s.precision_aware_optimizer && !has_master)
    return fmt::format("--precision-aware-optimizer keeps the fp32 master weights of 16-bit weights; --precision {} has "
                       "none: use amp-bf16 or megatron-bf16, or drop the flag",
                       to_string(s.precision));
  return "";
}

std::string moe_capacity_factor_refusal(double factor) {
  if (factor >= 0 && factor <= 64) return "";
  return fmt::format("--moe-capacity-factor must be 0 (dropless) or a positive factor up to 64, got {}", factor);
}

std::string context_parallel_refusal(const Strategy& s) {
  if (s.cp <= 1) return "";
  if (s.seq % (2 * s.cp) != 0)
    return fmt::format("--cp {} must split --seq {} into 2·cp = {} equal chunks (load-balanced causal attention); "
                       "choose a --cp with seq divisible by 2·cp",
                       s.cp, s.seq, 2 * s.cp);
  if (!s.flash_attn)
    return "--cp needs a fused attention kernel (Megatron-Core: TEDotProductAttention; torch: SDPA flash/efficient); "
           "drop --no-flash-attn or use --cp 1";
  return "";
}

static void validate_context_parallel(const Strategy& s) {
  if (const std::string why = context_parallel_refusal(s); !why.empty()) throw InputError(why);
}

static void validate_layout(const Strategy& s, const ModelSpec& m) {
  require_at_least("--gpus", s.gpus, 1);
  require_at_least("--tp", s.tp, 1);
  require_at_least("--pp", s.pp, 1);
  require_at_least("--cp", s.cp, 1);
  require_at_least("--dp", s.dp, 1);
  require_at_least("--vpp", s.vpp, 1);
  require_at_least("--ep", s.ep, 1);
  require_at_least("--etp", s.etp, 0);
  // Before the pipeline split rule below, which asks which ZeRO stages the runtime pipelines.
  if (s.zero < 0 || s.zero > 3) throw InputError(fmt::format("--zero must be 0, 1, 2 or 3, got {}", s.zero));
  // Bounds before any product: tp·pp·dp of absurd degrees would overflow.
  constexpr int64_t kMaxRanks = int64_t{1} << 24;
  for (auto [flag, v] : {std::pair{"--gpus", s.gpus}, {"--tp", s.tp}, {"--pp", s.pp}, {"--cp", s.cp}, {"--dp", s.dp},
                        {"--vpp", s.vpp}, {"--ep", s.ep}, {"--etp", s.etp}})
    if (v > kMaxRanks) throw InputError(fmt::format("{} {} is implausibly large (at most {})", flag, v, kMaxRanks));
  int64_t ranks = 0;
  const bool overflow = __builtin_mul_overflow(s.tp, s.pp, &ranks) || __builtin_mul_overflow(ranks, s.cp, &ranks) ||
                        __builtin_mul_overflow(ranks, s.dp, &ranks);
  if (overflow || ranks != s.gpus) {
    if (s.cp > 1)
      throw InputError(fmt::format("--gpus ({}) must equal tp·pp·cp·dp = {}·{}·{}·{}{}; change --cp or --dp, or omit "
                                   "--dp to derive it",
                                   s.gpus, s.tp, s.pp, s.cp, s.dp, overflow ? "" : fmt::format(" = {}", ranks)));
    throw InputError(fmt::format("--gpus ({}) must equal tp·pp·dp = {}·{}·{}{}; change --dp or omit it to derive it",
                                 s.gpus, s.tp, s.pp, s.dp, overflow ? "" : fmt::format(" = {}", ranks)));
  }
  if (m.heads % s.tp != 0)
    throw InputError(fmt::format("--tp {} must divide the model's heads ({}); choose a divisor of {}", s.tp, m.heads,
                                 m.heads));
  // Megatron replicates K/V heads when tp > kv_heads; a tp that neither divides nor is a multiple of them is invalid.
  if (m.kv_heads % s.tp != 0 && s.tp % m.kv_heads != 0)
    throw InputError(fmt::format("--tp {} must divide kv_heads ({}) or be a multiple of it", s.tp, m.kv_heads));
  if (m.ffn_hidden % s.tp != 0)
    throw InputError(fmt::format("--tp {} must divide the model's ffn_hidden ({})", s.tp, m.ffn_hidden));
  validate_expert_parallel(s, m);
  // MoE: a routed expert is split over the expert-TP ranks, a shared expert over TP, each like a dense MLP.
  if (m.expert_ffn_hidden % s.tp != 0 && (m.shared_experts > 0 || m.expert_ffn_hidden % expert_tensor_parallel(s) != 0))
    throw InputError(fmt::format("--tp {} must divide the model's expert_ffn_hidden ({})", s.tp, m.expert_ffn_hidden));
  if (const auto why = tp_without_sp_refusal(s, m)) throw InputError(*why);
  if (const auto why = mtp_refusal(s, m)) throw InputError(*why);
  if (m.layers < s.pp)
    throw InputError(fmt::format("--pp {} exceeds the model's {} layers; use at most {} stages", s.pp, m.layers,
                                 m.layers));
  // Schedule, chunks and the blocks per stage, under the runtime's split rule (planner/pipeline_layout.cpp).
  if (const auto why = pipeline_layout_refusal(m, s)) throw InputError(*why);
  if (s.sp && s.tp < 2) throw InputError("--sp (sequence parallelism) needs --tp of at least 2");
  if (s.cp > 1) validate_context_parallel(s);
  if (const std::string why = seq_refusal(m, s.seq); !why.empty()) throw InputError(why);
}

static void validate_sharding(const Strategy& s) {
  if (s.hsdp < 0) throw InputError(fmt::format("--hsdp must be positive, got {}", s.hsdp));
  if (s.hsdp > 0) {
    if (s.zero < 2) throw InputError("--hsdp needs --zero 2 or 3 (hybrid sharding shards gradients or parameters)");
    if (s.dp % s.hsdp != 0)
      throw InputError(fmt::format("--hsdp {} must divide the data-parallel degree dp = {}", s.hsdp, s.dp));
  }
  if (const std::string why = precision_aware_optimizer_refusal(s); !why.empty()) throw InputError(why);
  if (s.offload_optimizer && s.zero == 0)
    throw InputError("--offload-optimizer needs --zero 1, 2 or 3 (ZeRO-Offload)");
}

// What the chosen runtime refuses (planner/framework_support.cpp, each reason with its source).
static void validate_framework(const Strategy& s) {
  if (const auto why = framework_refusal(s)) throw InputError(*why);
}

static void validate_batch(const Strategy& s) {
  require_at_least("--micro-batch", s.micro_batch, 1);
  require_at_least("--global-batch", s.global_batch, 1);
  require_at_least("--seq", s.seq, 1);
  // Tokens per step and per micro-batch stay far below 2^63 with these bounds.
  if (s.global_batch > (int64_t{1} << 32) || s.micro_batch > s.global_batch)
    throw InputError(fmt::format("--global-batch {} / --micro-batch {}: the global batch must be at most 2^32 sequences "
                                 "and at least one micro-batch",
                                 s.global_batch, s.micro_batch));
  if (s.seq > (int64_t{1} << 26)) throw InputError(fmt::format("--seq {} is implausibly large", s.seq));
  const int64_t per_replica = s.global_batch % s.dp == 0 ? s.global_batch / s.dp : 0;
  if (per_replica == 0)
    throw InputError(fmt::format("--global-batch {} must be a multiple of dp = {} (sequences per replica)",
                                 s.global_batch, s.dp));
  if (per_replica % s.micro_batch != 0)
    throw InputError(fmt::format("--micro-batch {} must divide the per-replica batch {} (= global-batch {} / dp {})",
                                 s.micro_batch, per_replica, s.global_batch, s.dp));
  // Megatron's interleaved schedule needs the micro-batches in groups of pp (its check in schedules.py); with
  // fewer, the interleaving cannot fill the pipeline.
  if (s.schedule == Schedule::interleaved && grad_accum_steps(s) % s.pp != 0)
    throw InputError(fmt::format("--schedule interleaved needs the micro-batches per step ({}) to be a multiple of "
                                 "--pp {}; raise --global-batch or lower --micro-batch",
                                 grad_accum_steps(s), s.pp));
  if (const auto why = pipeline_microbatch_refusal(s)) throw InputError(*why);
  if (s.sp && seq_per_rank(s) % s.tp != 0)
    throw InputError(fmt::format("--seq {} must be divisible by --tp {}{} with sequence parallelism", s.seq, s.tp,
                                 s.cp > 1 ? fmt::format(" × --cp {}", s.cp) : ""));
}

static void validate_hardware(const Strategy& s, const ClusterSpec& c) {
  const bool wants_bf16 = precision_compute_dtype(s.precision) == DType::bf16;
  if (wants_bf16 && c.gpu.bf16_tflops <= 0)
    throw InputError(fmt::format("--precision {} needs bf16, which {} does not support; use amp-fp16 or "
                                 "megatron-fp16",
                                 to_string(s.precision), c.gpu.name));
  if (const auto why = fp8_gpu_refusal(s, c.gpu)) throw InputError(*why);
  // A cluster of fixed size (one NVL72 rack) has no node to add.
  if (c.max_gpus > 0 && s.gpus > c.max_gpus)
    throw InputError(fmt::format("--gpus {} exceeds cluster '{}', which has {} GPUs (max_gpus); use at most {} or a "
                                 "larger cluster",
                                 s.gpus, c.name, c.max_gpus, c.max_gpus));
}

void validate_strategy(const Strategy& s, const ModelSpec& m, const ClusterSpec& c) {
  validate_layout(s, m);
  validate_sharding(s);
  validate_framework(s);
  validate_batch(s);
  validate_hardware(s, c);
  if (const auto why = fp8_model_refusal(s, m)) throw InputError(*why);
  if (const std::string why = recompute_modules_refusal(s, m); !why.empty()) throw InputError(why);
  if (const std::string why = activation_offload_refusal(s, m); !why.empty()) throw InputError(why);
  if (const std::string why = partial_recompute_refusal(m, s); !why.empty()) throw InputError(why);
}

// --- names -------------------------------------------------------------------------------------------------

template <typename E, size_t N>
static std::optional<E> lookup(const std::array<std::pair<const char*, E>, N>& table, const std::string& s) {
  for (const auto& [name, value] : table)
    if (s == name) return value;
  return std::nullopt;
}

template <typename E, size_t N>
static const char* name_of(const std::array<std::pair<const char*, E>, N>& table, E e) {
  for (const auto& [name, value] : table)
    if (value == e) return name;
  return "?";
}

static constexpr std::array<std::pair<const char*, Recompute>, 3> kRecompute{
    {{"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}}};
static constexpr std::array<std::pair<const char*, Schedule>, 6> kSchedule{
    {{"1f1b", Schedule::one_f_one_b}, {"interleaved", Schedule::interleaved}, {"gpipe", Schedule::gpipe},
     {"zb-h1", Schedule::zb_h1}, {"zbv", Schedule::zbv}, {"dualpipev", Schedule::dualpipev}}};
// "fsdp2" is a second name of fsdp (CONTRACT.md); names print as the first entry of their value.
static constexpr std::array<std::pair<const char*, Framework>, 7> kFramework{{{"fsdp", Framework::fsdp},
                                                                              {"fsdp2", Framework::fsdp},
                                                                              {"fsdp1", Framework::fsdp1},
                                                                              {"torchtitan", Framework::torchtitan},
                                                                              {"deepspeed", Framework::deepspeed},
                                                                              {"megatron", Framework::megatron},
                                                                              {"reference", Framework::reference}}};
static constexpr std::array<std::pair<const char*, Precision>, 7> kPrecision{
    {{"pure-bf16", Precision::pure_bf16},
     {"amp-bf16", Precision::amp_bf16},
     {"megatron-bf16", Precision::megatron_bf16},
     {"fp32", Precision::fp32},
     {"pure-fp16", Precision::pure_fp16},
     {"amp-fp16", Precision::amp_fp16},
     {"megatron-fp16", Precision::megatron_fp16}}};
static constexpr std::array<std::pair<const char*, LossKind>, 3> kLoss{
    {{"standard", LossKind::standard}, {"chunked", LossKind::chunked}, {"fused", LossKind::fused}}};
static constexpr std::array<std::pair<const char*, AttentionKernel>, 3> kAttentionKernel{
    {{"flash2", AttentionKernel::flash2}, {"cudnn", AttentionKernel::cudnn}, {"triton", AttentionKernel::triton}}};
static constexpr std::array<std::pair<const char*, Fp8Recipe>, 5> kFp8Recipe{{{"off", Fp8Recipe::off},
                                                                             {"tensorwise", Fp8Recipe::tensorwise},
                                                                             {"rowwise", Fp8Recipe::rowwise},
                                                                             {"blockwise", Fp8Recipe::blockwise},
                                                                             {"mxfp8", Fp8Recipe::mxfp8}}};
static constexpr std::array<std::pair<const char*, GradSync>, 2> kGradSync{
    {{"step", GradSync::per_step}, {"micro", GradSync::per_micro}}};
static constexpr std::array<std::pair<const char*, CudaGraphs>, 3> kCudaGraphs{
    {{"none", CudaGraphs::none}, {"partial", CudaGraphs::partial}, {"full", CudaGraphs::full}}};
static constexpr std::array<std::pair<const char*, MoeDispatcher>, 3> kMoeDispatcher{
    {{"alltoall", MoeDispatcher::alltoall}, {"deepep", MoeDispatcher::deepep}, {"hybridep", MoeDispatcher::hybridep}}};
static constexpr std::array<std::pair<const char*, MoeProbs>, 2> kMoeProbs{
    {{"activation", MoeProbs::activation}, {"combine", MoeProbs::combine}}};
static constexpr std::array<std::pair<const char*, OptimizerKind>, 2> kOptimizer{
    {{"adamw", OptimizerKind::adamw}, {"muon", OptimizerKind::muon}}};
static constexpr std::array<std::pair<const char*, MuonTpMode>, 3> kMuonTpMode{
    {{"duplicated", MuonTpMode::duplicated}, {"distributed", MuonTpMode::distributed},
     {"blockwise", MuonTpMode::blockwise}}};
static constexpr std::array<std::pair<const char*, MlpKind>, 3> kMlp{
    {{"gelu", MlpKind::gelu}, {"swiglu", MlpKind::swiglu}, {"squared-relu", MlpKind::squared_relu}}};
static constexpr std::array<std::pair<const char*, NormKind>, 2> kNorm{
    {{"layernorm", NormKind::layernorm}, {"rmsnorm", NormKind::rmsnorm}}};
static constexpr std::array<std::pair<const char*, PositionKind>, 4> kPosition{{{"rotary", PositionKind::rotary},
                                                                                {"learned", PositionKind::learned},
                                                                                {"alibi", PositionKind::alibi},
                                                                                {"none", PositionKind::none}}};
static constexpr std::array<std::pair<const char*, LinkKind>, 4> kLink{{{"nvswitch", LinkKind::nvswitch},
                                                                        {"nvlink", LinkKind::nvlink},
                                                                        {"xgmi", LinkKind::xgmi},
                                                                        {"pcie", LinkKind::pcie}}};

const char* to_string(Recompute r) { return name_of(kRecompute, r); }
const char* to_string(Schedule s) { return name_of(kSchedule, s); }
const char* to_string(Framework f) { return name_of(kFramework, f); }
const char* to_string(Precision p) { return name_of(kPrecision, p); }
const char* to_string(LossKind l) { return name_of(kLoss, l); }
const char* to_string(AttentionKernel k) { return name_of(kAttentionKernel, k); }
const char* to_string(Fp8Recipe r) { return name_of(kFp8Recipe, r); }
const char* to_string(GradSync g) { return name_of(kGradSync, g); }
const char* to_string(CudaGraphs g) { return name_of(kCudaGraphs, g); }
const char* to_string(MoeDispatcher d) { return name_of(kMoeDispatcher, d); }
const char* to_string(MoeProbs p) { return name_of(kMoeProbs, p); }
const char* to_string(OptimizerKind o) { return name_of(kOptimizer, o); }
const char* to_string(MuonTpMode m) { return name_of(kMuonTpMode, m); }

std::optional<Recompute> parse_recompute(const std::string& s) { return lookup(kRecompute, s); }
std::optional<Schedule> parse_schedule(const std::string& s) { return lookup(kSchedule, s); }
std::optional<Framework> parse_framework(const std::string& s) { return lookup(kFramework, s); }
std::optional<Precision> parse_precision(const std::string& s) { return lookup(kPrecision, s); }
std::optional<LossKind> parse_loss(const std::string& s) { return lookup(kLoss, s); }
std::optional<AttentionKernel> parse_attention_kernel(const std::string& s) { return lookup(kAttentionKernel, s); }
std::optional<Fp8Recipe> parse_fp8_recipe(const std::string& s) { return lookup(kFp8Recipe, s); }
std::optional<GradSync> parse_grad_sync(const std::string& s) { return lookup(kGradSync, s); }
std::optional<CudaGraphs> parse_cuda_graphs(const std::string& s) { return lookup(kCudaGraphs, s); }
std::optional<MoeDispatcher> parse_moe_dispatcher(const std::string& s) { return lookup(kMoeDispatcher, s); }
std::optional<MoeProbs> parse_moe_probs(const std::string& s) { return lookup(kMoeProbs, s); }
std::optional<OptimizerKind> parse_optimizer(const std::string& s) { return lookup(kOptimizer, s); }
std::optional<MuonTpMode> parse_muon_tp_mode(const std::string& s) { return lookup(kMuonTpMode, s); }
std::optional<MlpKind> parse_mlp(const std::string& s) { return lookup(kMlp, s); }
std::optional<NormKind> parse_norm(const std::string& s) { return lookup(kNorm, s); }
std::optional<PositionKind> parse_position(const std::string& s) { return lookup(kPosition, s); }
std::optional<LinkKind> parse_link(const std::string& s) { return lookup(kLink, s); }

}  // namespace shardplan
