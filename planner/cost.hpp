#pragma once
// Time to train and what it costs: a training budget in tokens, turned into days, GPU-hours and money at a
// predicted throughput. Pure arithmetic, no I/O.
//
//   seconds   = tokens / tokens_per_s          (tokens_per_s: the whole job, all GPUs)
//   days      = seconds / 86400
//   gpu_hours = seconds · gpus / 3600
//   cost      = gpu_hours · price per GPU-hour (only when a price is given; the currency is the price's)
//
// The step count rounds up (a partial last step is still a step) but days use the exact quotient, so that
// days == tokens / tokens_per_s / 86400 to the last bit.
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardplan {

// What the user asked to be priced: --tokens and --gpu-hour-price.
struct TrainingGoal {
  double tokens = 0;                        // training tokens, > 0
  std::optional<double> gpu_hour_price;     // price of one GPU for one hour, > 0
};

struct TrainingEstimate {
  double tokens = 0;
  double tokens_per_s = 0;
  int64_t gpus = 0;
  double seconds = 0;
  double days = 0;
  double gpu_hours = 0;
  int64_t steps = 0;                        // optimizer steps: ceil(tokens / tokens per step); 0 if unknown
  std::optional<double> gpu_hour_price;
  std::optional<double> cost;               // gpu_hours · price
};

// nullopt when there is no throughput to divide by (tokens_per_s <= 0: time not modelled) or gpus < 1.
// `tokens_per_step` (global batch · seq) gives the step count; 0 leaves steps at 0.
std::optional<TrainingEstimate> estimate_training(const TrainingGoal& goal, double tokens_per_s, int64_t gpus,
                                                  int64_t tokens_per_step = 0);

// GPU-seconds spent per trained token: what --objective cost minimises (at a fixed GPU count it orders
// candidates exactly as throughput does). +infinity when tokens_per_s <= 0.
double gpu_seconds_per_token(double tokens_per_s, int64_t gpus);

// "2T" → 2e12: a positive finite number with an optional decimal suffix K (1e3), M (1e6), B or G (1e9), T (1e12),
// either case; plain numbers and exponents ("1.5e12", "300000000") too. nullopt for anything else.
std::optional<double> parse_token_count(std::string_view text);

}  // namespace shardplan
