#pragma once
// FLOPs of one training step by component: model FLOPs (forward + backward of every matmul, attention scores
// included, LM head included) and hardware FLOPs (plus the forward work that recomputation repeats).
#include <string>
#include <vector>

#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

struct FlopsPart {
  std::string name;
  double forward = 0;    // whole step, all ranks
  double backward = 0;   // input and weight gradients: 2× forward
  double recompute = 0;  // forward work repeated by activation recomputation
};

struct StepFlops {
  std::vector<FlopsPart> parts;
  double tokens = 0;          // tokens per step: global batch · seq
  double model_flops = 0;     // Σ forward + backward
  double hardware_flops = 0;  // model_flops + Σ recompute
  double model_flops_per_token() const { return tokens > 0 ? model_flops / tokens : 0; }
};

// Attention scores are counted for the full s×s product (not halved for causal masking), the convention of
// Narayanan et al. 2021 eq. 3 and Korthikanti et al. 2022 §6, so that MFU/HFU compare with published figures.
StepFlops step_flops(const ModelSpec& m, const Strategy& s);

}  // namespace shardplan
