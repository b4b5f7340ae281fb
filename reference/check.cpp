// check_config: what this loop can run (reference.hpp).
#include <fmt/format.h>

#include "planner/error.hpp"
#include "reference/backend.hpp"
#include "reference/reference.hpp"

namespace shardplan::reference {

DType run_dtype(Precision p) {
  return p == Precision::pure_bf16 || p == Precision::amp_bf16 ? DType::bf16 : DType::fp32;
}

bool run_keeps_master(Precision p) { return p == Precision::amp_bf16; }

std::string check_config(const RunConfig& c, int world_size) {
  const ModelSpec& m = c.model;
  try {
    validate_model(m);
  } catch (const InputError& e) {
    return e.what();
  }
  if (world_size < 1) return "the communicator has no ranks";
  if (c.zero < 0 || c.zero > 3) return fmt::format("--zero {}: the reference loop runs 0, 1, 2 or 3", c.zero);
  if (c.micro_batch < 1) return "--micro-batch must be at least 1";
  if (c.grad_accum < 1) return "grad_accum must be at least 1 (global batch = micro-batch · grad_accum · ranks)";
  const int64_t seq = c.seq ? c.seq : m.seq;
  if (seq < 1 || seq > m.seq)
    return fmt::format("--seq {}: must be between 1 and the model's seq {} (learned positions and the reference "
                       "corpus windows are sized by it)", seq, m.seq);
  if (c.backend != "cpu" && c.backend != "cuda")
    return fmt::format("--backend {}: the reference loop runs on 'cpu' (Eigen + MPI) or 'cuda' (cuBLASLt + NCCL)",
                       c.backend);
  if (c.backend == "cuda" && !cuda_backend_built())
    return "--backend cuda: this build has no CUDA backend (the CUDA toolkit was not found at configure time)";
  if (c.precision != Precision::fp32 && c.precision != Precision::pure_bf16 && c.precision != Precision::amp_bf16)
    return fmt::format("--precision {}: the reference loop runs fp32, pure-bf16 and amp-bf16", to_string(c.precision));
  if (c.recompute == Recompute::selective)
    return "--recompute selective: the reference loop implements none and full";
  if (c.data != "corpus" && c.data != "synthetic")
    return fmt::format("data '{}': use 'corpus' or 'synthetic'", c.data);
  if (c.data == "corpus" && m.vocab < 256)
    return fmt::format("model vocab {}: the corpus is byte-level and needs vocab ≥ 256 (or use synthetic data)",
                       m.vocab);
  if (m.position == PositionKind::alibi)
    return "model position 'alibi': the reference loop implements rotary, learned and none";
  if (m.position == PositionKind::rotary && model_head_dim(m) % 2 != 0)
    return fmt::format("model head_dim {}: rotary embedding needs an even head dimension", model_head_dim(m));
  if (m.dropout) return "model dropout: the reference loop has no dropout (set dropout: false)";
  if (c.steps < 1) return "--steps must be at least 1";
  if (c.warmup_steps < 0) return "--warmup-steps must not be negative";
  if (!(c.lr > 0)) return "lr must be positive";
  if (!(c.comm_timeout_s > 0)) return "comm_timeout_s must be positive";
  return "";
}

}  // namespace shardplan::reference
