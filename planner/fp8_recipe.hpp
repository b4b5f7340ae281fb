#pragma once
// Low-precision GEMM recipes (CONTRACT.md `--fp8`). Parameters, gradients and optimizer states follow --precision;
// the recipe says which GEMMs take FP8 inputs and how their scales are kept (planner/fp8.cpp):
//   tensorwise: one scale per tensor (torchao Float8LinearConfig "tensorwise"; Transformer Engine DelayedScaling /
//               Float8CurrentScaling);
//   rowwise:    one scale per row of each operand (torchao "rowwise");
//   blockwise:  1×128 activation tiles and 128×128 weight blocks (DeepSeek-V3 §3.3.1; TE Float8BlockScaling);
//   mxfp8:      OCP microscaling, one E8M0 scale per 32 elements, in hardware on Blackwell (TE MXFP8BlockScaling).
namespace shardplan {

enum class Fp8Recipe { off, tensorwise, rowwise, blockwise, mxfp8 };

}  // namespace shardplan
