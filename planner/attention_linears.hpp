// The attention's linear layers on one tensor-parallel rank, at their GEMM shapes: what the step time prices and
// FP8 casts, and what the TP collectives around them carry.
#pragma once

#include <array>
#include <cstdint>

#include "planner/model.hpp"
#include "planner/strategy.hpp"

namespace shardplan {

// One linear layer's GEMM: Y[tokens × n] = X[tokens × k] · W[k × n].
struct LinearShape {
  int64_t tokens = 0, n = 0, k = 0;
};

// Up to four input projections (multi-head attention: one; MLA: down- and up-projections of q and of K/V), then the
// output projection.
struct AttentionLinears {
  std::array<LinearShape, 4> in{};
  int count = 0;
  LinearShape out;
};

// `tokens`: the micro-batch's tokens on this rank (micro_batch · seq / cp), before sequence parallelism's split.
AttentionLinears attention_linears(const ModelSpec& m, const Strategy& s, int64_t tokens);

// K/V heads one TP rank hands to the attention kernel: its own (at least one: Megatron replicates them where tp exceeds
// kv_heads), or with Strategy::kv_repeated one per query head. What the kernel's inputs — saved for backward, their
// gradients, context parallelism's K/V exchange — are made of; the K/V projections stay at kv_heads.
double attention_kv_heads_per_rank(const ModelSpec& m, const Strategy& s);

// Width of the attention input a TP rank all-gathers under sequence parallelism (and whose gradient it reduces): the
// hidden size, or under Megatron's MLA the latents its up-projections read.
double attention_gathered_width(const ModelSpec& m, const Strategy& s);

}  // namespace shardplan
