#include "planner/recompute_modules.hpp"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "planner/moe.hpp"

namespace shardplan {

namespace {

constexpr std::array<std::pair<const char*, RecomputeModule>, 7> kModules{{
    {"core_attn", RecomputeModule::core_attn},
    {"layernorm", RecomputeModule::layernorm},
    {"mla_up_proj", RecomputeModule::mla_up_proj},
    {"mlp", RecomputeModule::mlp},
    {"moe", RecomputeModule::moe},
    {"moe_act", RecomputeModule::moe_act},
    {"shared_experts", RecomputeModule::shared_experts},
}};

uint32_t bit(RecomputeModule m) { return static_cast<uint32_t>(m); }

}  // namespace

uint32_t recompute_modules_in_force(const Strategy& s) {
  if (s.recompute != Recompute::selective) return 0;
  return s.recompute_modules ? s.recompute_modules : kDefaultRecomputeModules;
}

bool recomputes(const Strategy& s, RecomputeModule m) { return (recompute_modules_in_force(s) & bit(m)) != 0; }

std::optional<uint32_t> parse_recompute_modules(const std::string& list, std::string* bad) {
  uint32_t mask = 0;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = list.find_first_of(", ", start);
    const std::string name = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!name.empty()) {
      bool found = false;
      for (const auto& [n, m] : kModules)
        if (name == n) mask |= bit(m), found = true;
      if (!found) {
        if (bad) *bad = name;
        return std::nullopt;
      }
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (mask == 0) {
    if (bad) *bad = list;
    return std::nullopt;
  }
  return mask;
}

std::string recompute_modules_string(uint32_t mask) {
  std::string out;
  for (const auto& [n, m] : kModules)
    if (mask & bit(m)) out += (out.empty() ? "" : ",") + std::string(n);
  return out;
}

std::string recompute_modules_refusal(const Strategy& s, const ModelSpec& m) {
  if (s.recompute_modules == 0) return "";
  const std::string list = recompute_modules_string(s.recompute_modules);
  if (s.recompute != Recompute::selective)
    return fmt::format("--recompute-modules {} chooses what selective recomputation repeats: it needs --recompute "
                       "selective (Megatron-Core's --recompute-granularity selective)",
                       list);
  if (s.framework != Framework::megatron)
    return fmt::format("--recompute-modules is Megatron-Core's module list (transformer_config.py recompute_modules); "
                       "--framework {} has its own selective policy: use --framework megatron or drop the flag",
                       to_string(s.framework));
  const uint32_t moe_only = bit(RecomputeModule::moe) | bit(RecomputeModule::moe_act) |
                            bit(RecomputeModule::shared_experts);
  if ((s.recompute_modules & moe_only) && !model_is_moe(m))
    return fmt::format("--recompute-modules {}: moe, moe_act and shared_experts are an MoE layer's modules and model "
                       "'{}' is dense; drop them",
                       list, m.name);
  if ((s.recompute_modules & bit(RecomputeModule::shared_experts)) && m.shared_experts == 0)
    return fmt::format("--recompute-modules {}: model '{}' has no shared experts; drop shared_experts", list, m.name);
  // transformer_config.py: "mla_up_proj in recompute_modules is only supported with multi_latent_attention".
  if ((s.recompute_modules & bit(RecomputeModule::mla_up_proj)) && !model_has_mla(m))
    return fmt::format("--recompute-modules {}: mla_up_proj needs multi-head latent attention and model '{}' has none "
                       "(Megatron-Core transformer_config.py); drop it",
                       list, m.name);
  // transformer_config.py: "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm".
  if ((s.recompute_modules & bit(RecomputeModule::moe)) && s.ep_comm_overlap.value_or(false))
    return "--recompute-modules moe with --ep-comm-overlap: Megatron-Core refuses it (\"disable moe in recompute_modules "
           "when enabling overlap_moe_expert_parallel_comm\", transformer_config.py); drop one of them";
  return "";
}

}  // namespace shardplan
