#include "planner/batch.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace shardplan {

namespace {
constexpr int64_t kLlama2Tokens = int64_t{1} << 22;       // 4 Mi tokens per step (Touvron et al. 2023 §2.2)
constexpr int64_t kLlama3TokensPerGpu = int64_t{1} << 10;  // 16 Mi tokens / 16 Ki GPUs (Dubey et al. 2024 §3.4.1)
constexpr int64_t kMaxTokensPerGpu = int64_t{1} << 15;     // shardplan's cap (batch.hpp)
}  // namespace

BatchTarget default_batch_target(int64_t seq, int64_t gpus) {
  BatchTarget t;
  t.seq = std::max<int64_t>(seq, 1);  // seq < 1 is refused by the caller, after the default is taken
  t.gpus = std::clamp<int64_t>(gpus, 1, int64_t{1} << 40);
  const int64_t llama3 = t.gpus * kLlama3TokensPerGpu, cap = t.gpus * kMaxTokensPerGpu;
  if (cap < kLlama2Tokens) {
    t.tokens = cap;
    t.basis = "32 Ki tokens per GPU (shardplan's cap below 128 GPUs, to keep accumulation short)";
  } else if (llama3 > kLlama2Tokens) {
    t.tokens = llama3;
    t.basis = "1 Ki tokens per GPU (Llama 3 405B: 16 M tokens on 16 K GPUs)";
  } else {
    t.tokens = kLlama2Tokens;
    t.basis = "4 Mi tokens (Llama 2's batch)";
  }
  t.sequences = std::max<int64_t>(1, (t.tokens + t.seq / 2) / t.seq);
  return t;
}

int64_t default_accumulation(const BatchTarget& t, int64_t dp, int64_t micro_batch) {
  const int64_t per_step = std::max<int64_t>(dp, 1) * std::max<int64_t>(micro_batch, 1);
  return std::max<int64_t>(1, (t.sequences + per_step / 2) / per_step);
}

int64_t default_global_batch(const BatchTarget& t, int64_t dp, int64_t micro_batch) {
  return std::max<int64_t>(dp, 1) * std::max<int64_t>(micro_batch, 1) * default_accumulation(t, dp, micro_batch);
}

std::string describe_default_batch(const BatchTarget& t, int64_t dp, int64_t micro_batch) {
  const int64_t global = default_global_batch(t, dp, micro_batch);
  return fmt::format("global batch {} sequences ({:.2f} M tokens) = dp {} × micro-batch {} × {} accumulation steps; "
                     "--global-batch not given, so the default aims at {:.2f} M tokens per step: {}",
                     global, static_cast<double>(global * t.seq) / 1e6, dp, micro_batch,
                     default_accumulation(t, dp, micro_batch), static_cast<double>(t.tokens) / 1e6, t.basis);
}

}  // namespace shardplan
