#pragma once
// What PyTorch's caching allocator reserves beyond what is allocated, from what is allocated: the FSDP family's
// `fragmentation` component (planner/memory_moments.hpp). The rules (c10/cuda/CUDACachingAllocator.cpp):
//   - every request is rounded up to kMinBlockSize = 512 B (round_size);
//   - requests up to kSmallSize = 1 MiB come from 2 MiB segments (kSmallBuffer), requests below kMinLargeAlloc =
//     10 MiB from 20 MiB segments (kLargeBuffer), larger ones get a segment of their own rounded up to kRoundLarge =
//     2 MiB (get_allocation_size): on average 1 MiB of each such segment is never used;
//   - a cached free block serves the smallest request it fits and is split when more than kSmallSize would be left
//     (should_split); freed blocks coalesce with free neighbours, and an allocation that finds no cached block frees
//     every wholly unused segment and retries before failing (release_cached_blocks), so what can make a run fail is
//     the free space inside segments that still hold live blocks.
// Hence the reserve is
//   rounding = 1 MiB × the live tensors of at least 10 MiB (FSDP2: one per parameter and state; FSDP1: one flat
//              tensor per unit and state; the saved activations; the per-unit gather and reduce buffers, which
//              reuse each other's blocks exactly since every block unit has the same size), and
//   holes    = one block's working set: its temporaries are freed while the tensors it keeps (saved activations, or
//              under full recompute just its output) stay inside the same segments, and every later block reuses
//              those holes for the same shapes, so at most one block's worth stays cached in split segments.
#include <cstdint>

#include "planner/framework.hpp"
#include "planner/model.hpp"
#include "planner/partition.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

struct AllocatorReserve {
  int64_t own_segments = 0;  // live tensors of at least kMinLargeAlloc, each in its own segment
  double rounding = 0;       // bytes: 1 MiB per such segment
  double holes = 0;          // bytes: one block's working set
  double total() const { return rounding + holes; }
};

constexpr double kAllocatorMinLargeAlloc = 10.0 * 1024 * 1024;  // kMinLargeAlloc
constexpr double kAllocatorRoundLarge = 2.0 * 1024 * 1024;      // kRoundLarge

// The reserve of one stage's rank (the same at every moment of the step: the counts take the most that is alive).
AllocatorReserve caching_allocator_reserve(const ModelSpec& m, const Strategy& s, const FrameworkTraits& fw,
                                           const StageParams& st);

}  // namespace shardplan
