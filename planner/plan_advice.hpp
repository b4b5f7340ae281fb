#pragma once
// When nothing fits: the smallest changes that do, each found by running the search again on the modified space
// (not guessed from the shortfall), with the number it takes ("--gpus 16", "--tp 4").
#include <string>
#include <vector>

#include "planner/search.hpp"

namespace shardplan {

struct FixThatFits {
  std::string change;       // the flags to add or change, as typed: "--precision pure-bf16", "--gpus 16"
  Candidate best;           // the search's best candidate once changed
};

// Tries, in this order and each alone: --precision pure-bf16 (drops the fp32 master copy), --recompute full,
// --offload-optimizer (where the framework runs it and it was not given), the next larger --tp when tp was fixed,
// and the fewest GPUs (whole nodes, up to 64 × the GPUs given; bisected) at which the unchanged flags fit. Only changes that
// fit under the planning line are returned. `space` is the one that found nothing.
std::vector<FixThatFits> fixes_that_fit(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& space);

// The error line's tail: "smallest changes that fit: --precision pure-bf16 (peak 61.2 GB, 3150 tokens/s per GPU); ...".
std::string describe_fixes(const std::vector<FixThatFits>& fixes);

}  // namespace shardplan
