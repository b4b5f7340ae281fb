#include "planner/partial_recompute.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "planner/pipeline_layout.hpp"

namespace shardplan {

bool partial_recompute(const Strategy& s) {
  return s.recompute == Recompute::full && (s.recompute_layers > 0 || s.recompute_every > 0);
}

bool recomputes_block(const Strategy& s, int64_t index, int64_t chunk_blocks) {
  if (s.recompute != Recompute::full || index < 0 || index >= chunk_blocks) return false;
  if (s.recompute_every > 0) return (index + 1) % s.recompute_every == 0;  // _apply_layer_sac counts from 1
  if (s.recompute_layers > 0) return index < s.recompute_layers;          // _checkpointed_forward, method "block"
  return true;
}

int64_t recomputed_among_first(const Strategy& s, int64_t first, int64_t chunk_blocks) {
  first = std::clamp<int64_t>(first, 0, chunk_blocks);
  if (s.recompute != Recompute::full) return 0;
  if (s.recompute_every > 0) return first / s.recompute_every;
  if (s.recompute_layers > 0) return std::min(first, s.recompute_layers);
  return first;
}

int64_t recomputed_blocks(const Strategy& s, int64_t chunk_blocks) {
  return recomputed_among_first(s, chunk_blocks, chunk_blocks);
}

bool stage_block_recomputes(const ModelSpec& m, const Strategy& s, int64_t rank, int64_t k) {
  if (!partial_recompute(s)) return s.recompute == Recompute::full;
  for (int64_t c = 0; c < std::max<int64_t>(s.vpp, 1) && k >= 0; ++c) {
    const int64_t n = chunk_layers(m, s, rank, c);
    if (k < n) return recomputes_block(s, k, n);
    k -= n;
  }
  return false;
}

int64_t stage_recomputed_blocks(const ModelSpec& m, const Strategy& s, int64_t rank) {
  int64_t n = 0;
  for (int64_t c = 0; c < std::max<int64_t>(s.vpp, 1); ++c) n += recomputed_blocks(s, chunk_layers(m, s, rank, c));
  return n;
}

double recomputed_block_share(const ModelSpec& m, const Strategy& s) {
  if (s.recompute != Recompute::full) return 0;
  if (!partial_recompute(s) || m.layers <= 0) return 1;
  int64_t n = 0;
  for (int64_t r = 0; r < std::max<int64_t>(s.pp, 1); ++r) n += stage_recomputed_blocks(m, s, r);
  return static_cast<double>(n) / static_cast<double>(m.layers);
}

std::string recompute_label(const Strategy& s) {
  if (!partial_recompute(s)) return to_string(s.recompute);
  if (s.recompute_layers > 0) return fmt::format("first {}", s.recompute_layers);
  const int64_t k = s.recompute_every;
  const int64_t last = k % 10, teens = k % 100;
  const char* suffix = teens >= 11 && teens <= 13 ? "th" : last == 1 ? "st" : last == 2 ? "nd" : last == 3 ? "rd" : "th";
  return fmt::format("every {}{}", k, suffix);
}

std::string partial_recompute_refusal(const ModelSpec& m, const Strategy& s) {
  if (s.recompute_layers == 0 && s.recompute_every == 0) return "";
  if (s.recompute_layers < 0) return fmt::format("--recompute-layers {} must be 1 or more", s.recompute_layers);
  if (s.recompute_every < 0) return fmt::format("--recompute-every {} must be 2 or more", s.recompute_every);
  if (s.recompute_layers > 0 && s.recompute_every > 0)
    return "--recompute-layers with --recompute-every: name the recomputed blocks one way (the first N of each "
           "chunk, Megatron-Core's block method, or every K-th, torchtitan's layer SAC); drop one";
  const char* flag = s.recompute_layers > 0 ? "--recompute-layers" : "--recompute-every";
  const int64_t value = s.recompute_layers > 0 ? s.recompute_layers : s.recompute_every;
  if (s.recompute != Recompute::full)
    return fmt::format("{} {} with --recompute {}: it picks the blocks that full recomputation repeats; add "
                       "--recompute full",
                       flag, value, to_string(s.recompute));
  if (s.recompute_every == 1)
    return "--recompute-every 1 recomputes every block: use --recompute full alone, or --recompute-every 2 or more";
  // The largest chunk of the layout (every chunk has at most this many blocks; the split may be uneven).
  int64_t largest = 0;
  for (int64_t r = 0; r < std::max<int64_t>(s.pp, 1); ++r)
    for (int64_t c = 0; c < std::max<int64_t>(s.vpp, 1); ++c) largest = std::max(largest, chunk_layers(m, s, r, c));
  if (value > largest)
    return fmt::format("{} {}: the largest model chunk here holds {} block{} ({} layers over pp {}{}); use 1 to {}{}",
                       flag, value, largest, largest == 1 ? "" : "s", m.layers, s.pp,
                       s.vpp > 1 ? fmt::format(" × vpp {}", s.vpp) : "", largest,
                       s.recompute_layers > 0 ? " (that many is plain --recompute full)" : "");
  return "";
}

}  // namespace shardplan
