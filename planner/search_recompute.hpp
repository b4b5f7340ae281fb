#pragma once
// The search's partial recomputation (planner/partial_recompute.hpp): where a layout fits with every block
// recomputed, the fewest blocks it needs to recompute to fit, which is faster by the forward of the others.
#include <optional>

#include "planner/framework.hpp"
#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// Whether the search looks for fewer recomputed blocks under --framework: the first N of each chunk as Megatron-Core
// (--recompute-method block) and FSDP2/FSDP1 (checkpoint_wrapper on the blocks a check_fn picks) run it. Not
// torchtitan (layer-level selective AC left it on 2026-03-23, 114151ad4), DeepSpeed or the reference loop.
bool searches_partial_recompute(Framework f);

// Under full recomputation, the fewest blocks of each chunk (the first N) that still keep the peak within
// `limit_bytes` (fit_bytes: under expandable segments less the allocator reserve). The peak falls as N grows (a
// recomputed block keeps its input instead of its working set), so a search over 1 … the largest chunk's blocks − 1
// (memory estimates only, no step time): from `hint` (the N found for a neighbouring strategy, e.g. another ZeRO
// stage of the layout; 0 for none) outwards by doubling steps, then a bisection. nullopt where no N short of every
// block fits.
std::optional<Strategy> fewest_recomputed_blocks(const ModelSpec& m, const Strategy& full, const FrameworkTraits& fw,
                                                 double limit_bytes, bool expandable_segments, int64_t hint = 0);

}  // namespace shardplan
