#pragma once
// What each training runtime can run, as data: its ZeRO stages, hybrid sharding, tensor and sequence parallelism,
// pipeline parallelism (which schedules, with which ZeRO stages) and optimizer offload. A strategy outside it is
// refused with the runtime's own reason and where that reason is written (framework_support.cpp), so that `plan`
// never offers, and `predict` never prices, a layout the chosen runtime would refuse.
#include <cstdint>
#include <optional>
#include <string>

#include "planner/strategy.hpp"

namespace shardplan {

// A set of small integers (ZeRO stages 0..3, Schedule values) as bits.
using SmallSet = uint32_t;
constexpr SmallSet bit(int i) { return SmallSet{1} << i; }
constexpr SmallSet bit(Schedule s) { return bit(static_cast<int>(s)); }
// Out-of-range values (an unvalidated --zero -1) are in no set; bit() itself is only called with 0..31.
constexpr bool has(SmallSet set, int i) { return i >= 0 && i < 32 && (set & bit(i)) != 0; }
constexpr bool has(SmallSet set, Schedule s) { return has(set, static_cast<int>(s)); }
// The smallest ZeRO stage in `set`, or `otherwise` when it is empty.
constexpr int lowest_stage(SmallSet set, int otherwise) {
  for (int z = 0; z <= 3; ++z)
    if (has(set, z)) return z;
  return otherwise;
}

struct FrameworkSupport {
  SmallSet zero_stages = 0;          // --zero values it runs
  const char* zero_refusal = "";     // why a missing stage is missing, with its source
  SmallSet hsdp_zero_stages = 0;     // ZeRO stages that can shard within groups (--hsdp)
  const char* hsdp_refusal = "";
  bool tensor_parallel = false;     // with or without sequence parallelism
  const char* tp_refusal = "";
  bool pipeline = false;
  SmallSet pipeline_zero_stages = 0; // ZeRO stages it runs together with pp > 1
  SmallSet schedules = 0;            // pipeline schedules it has
  const char* pipeline_refusal = "";
  bool offload_optimizer = false;
  SmallSet offload_zero_stages = 0;
  const char* offload_refusal = "";
  SmallSet multi_stage_schedules = 0;  // schedules it runs only with two or more chunks per rank (--vpp ≥ 2)
  bool tp_always_sp = false;         // its tensor parallelism always shards the norms' activations (--sp)
  const char* tp_without_sp_refusal = "";
  const char* pipeline_zero_refusal = "";  // why a ZeRO stage it has is not pipelined (empty: pipeline_refusal)
};

const FrameworkSupport& framework_support(Framework f);

// Why the strategy's runtime cannot run it (one line naming the flag, the runtime's reason and a way out), or
// nothing when it can. Checks only what framework_support describes; validate_strategy checks the rest.
std::optional<std::string> framework_refusal(const Strategy& s);
// Why the runtime cannot overlap TP collectives as --tp-comm-overlap asks (no such overlap, or async TP without
// --compile), or nothing; framework_refusal includes it, plan checks it before searching.
std::optional<std::string> tp_comm_overlap_refusal(const Strategy& s);
// The same test without the message, allocation-free: for the search's inner loop.
bool framework_runs(const Strategy& s);
// Whether --fp8-all-gather means something the runtime runs: torchao's FSDP2 FP8 all-gather (fsdp, torchtitan:
// tensorwise, ZeRO-2/3) or Megatron-Core's --fp8-param-gather (megatron: any FP8 recipe, the distributed optimizer or
// Megatron-FSDP: ZeRO-1 or 3).
bool fp8_all_gather_runs(const Strategy& s);
// The FP8 recipes a runtime runs (bits of Fp8Recipe), and why the others are not: framework_support.cpp.
struct Fp8Support {
  SmallSet recipes = 0;
  const char* refusal = "";
};
constexpr SmallSet bit(Fp8Recipe r) { return bit(static_cast<int>(r)); }
Fp8Support fp8_support(Framework f);

// Expert parallelism (--ep > 1) per runtime: whether it has it, with which ZeRO stages, and why not
// (framework_support.cpp cites each).
struct EpSupport {
  bool expert_parallel = false;
  SmallSet zero_stages = 0;  // ZeRO stages it runs with EP
  const char* refusal = "";
};
EpSupport ep_support(Framework f);
// Whether a runtime runs context parallelism (--cp > 1), and why not: framework_support.cpp.
struct CpSupport {
  bool runs = false;
  const char* refusal = "";
};
CpSupport cp_support(Framework f);

// Whether the runtime trains this model under tensor parallelism only with sequence parallelism: torchtitan always
// (tp_always_sp), Megatron-Core for an MoE model (megatron/core/transformer/moe/moe_layer.py MoELayer.forward raises
// "performance may degrade if MoE and tensor parallelism are enabled without also enabling sequence parallelism"
// in training).
bool tp_needs_sp(Framework f, const ModelSpec& m);
// Why this model cannot run under the strategy's TP without --sp, or nothing.
std::optional<std::string> tp_without_sp_refusal(const Strategy& s, const ModelSpec& m);

// Whether the runtime trains the model's multi-token-prediction modules under this layout: torchtitan's MTP runs
// without pipeline and context parallelism and without the chunked loss (framework_support.cpp cites each); the others
// place no such limit. mtp_refusal says why not, naming the flag and a way out.
bool mtp_runs(const Strategy& s, const ModelSpec& m);
std::optional<std::string> mtp_refusal(const Strategy& s, const ModelSpec& m);
// The reason alone (what torchtitan's MTP does not support in `s`, its source, the way out), for plan's list.
std::string mtp_limit_reason(const Strategy& s);

// The strategy as the runtime would run it when the user left a choice to it: sequence parallelism on where its TP
// needs it (tp_needs_sp). The CLI and the published-run loader both apply it.
void apply_framework_defaults(Strategy& s, const ModelSpec& m);

}  // namespace shardplan
