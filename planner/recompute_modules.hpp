#pragma once
// Megatron-Core's fine-grained selective recomputation: `--recompute-granularity selective --recompute-modules ...`
// (megatron/core/transformer/transformer_config.py recompute_modules, default ["core_attn"]). Each module's outputs are
// not kept for backward but recomputed from inputs that are (tensor_parallel.CheckpointWithoutOutput in
// transformer_layer.py, moe/experts.py, multi_latent_attention.py): memory in planner/activations.cpp (each saved
// tensor names the module that drops it), time in planner/microbatch_costs.cpp (the modules' forward, repeated).
#include <cstdint>
#include <optional>
#include <string>

#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// One bit each, so a list is a mask (Strategy::recompute_modules).
enum class RecomputeModule : uint32_t {
  core_attn = 1u << 0,       // the attention core: its s² softmax tensors (a fused kernel keeps none: nothing to drop)
  layernorm = 1u << 1,       // input_layernorm and pre_mlp_layernorm where they are modules of their own (not fused
                             // into the next linear: the MoE layer's pre-MLP norm, MLA's input norm)
  mla_up_proj = 1u << 2,     // MLA's q/kv up-projections and RoPE: q, k, v dropped, the latents kept
  mlp = 1u << 3,             // a dense layer's whole MLP
  moe = 1u << 4,             // an MoE layer's whole routed part: router, dispatch, experts, combine
  moe_act = 1u << 5,         // the routed experts' activation function (the down-projection's input)
  shared_experts = 1u << 6,  // the shared experts' MLP
};

// Megatron's default list: ["core_attn"].
constexpr uint32_t kDefaultRecomputeModules = static_cast<uint32_t>(RecomputeModule::core_attn);

// The modules in force: the strategy's list under selective recomputation (0 = the default), none otherwise.
uint32_t recompute_modules_in_force(const Strategy& s);
bool recomputes(const Strategy& s, RecomputeModule m);

// "core_attn,moe_act" ↔ mask; names as Megatron spells them. parse: nullopt on an unknown name (`bad` gets it).
std::optional<uint32_t> parse_recompute_modules(const std::string& list, std::string* bad = nullptr);
std::string recompute_modules_string(uint32_t mask);

// Why the strategy's --recompute-modules cannot run, or "": Megatron-Core's own checks (transformer_config.py
// __post_init__: moe_act needs grouped GEMM — shardplan's MoE is grouped —, mla_up_proj needs MLA; "moe" not with the
// batch-level EP overlap) and shardplan's (a list needs --recompute selective and --framework megatron; the MoE
// modules need an MoE model).
std::string recompute_modules_refusal(const Strategy& s, const ModelSpec& m);

}  // namespace shardplan
