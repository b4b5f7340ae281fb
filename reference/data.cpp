// Token sources (data.hpp).
#include "reference/data.hpp"

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace shardplan::reference {

namespace {

// SplitMix64 (Steele, Lea & Flood 2014): a portable deterministic generator (std distributions are not).
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

TokenSource::TokenSource(const std::string& kind, const std::string& path, int64_t seq, int64_t vocab,
                         uint64_t seed)
    : kind_(kind), seq_(seq), vocab_(vocab), seed_(seed) {
  if (kind_ != "corpus") return;
  if (path.empty()) {
    const std::string_view shipped = corpus_text();
    text_.assign(shipped.begin(), shipped.end());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read the corpus '" + path + "'");
    text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string name = path.empty() ? std::string("shipped corpus") : "corpus '" + path + "'";
  windows_ = text_.empty() ? 0 : (static_cast<int64_t>(text_.size()) - 1) / seq_;
  if (windows_ < 2) throw std::runtime_error("the " + name + " is shorter than two sequences");
}

void TokenSource::epoch_shuffle(int64_t epoch) {
  // Fisher–Yates with SplitMix64 draws: the same order on every rank and every platform.
  order_.resize(static_cast<std::size_t>(windows_));
  for (int64_t i = 0; i < windows_; ++i) order_[static_cast<std::size_t>(i)] = i;
  uint64_t state = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch) + 1));
  for (int64_t i = windows_ - 1; i > 0; --i) {
    state = splitmix64(state);
    const int64_t j = static_cast<int64_t>(state % static_cast<uint64_t>(i + 1));
    std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
  }
  epoch_ = epoch;
}

void TokenSource::sequence_read(int64_t g, int32_t* tokens, int32_t* targets) {
  if (kind_ == "corpus") {
    const int64_t epoch = g / windows_;
    if (epoch != epoch_) epoch_shuffle(epoch);
    const int64_t start = order_[static_cast<std::size_t>(g % windows_)] * seq_;
    for (int64_t t = 0; t < seq_; ++t) {
      tokens[t] = text_[static_cast<std::size_t>(start + t)];
      targets[t] = text_[static_cast<std::size_t>(start + t + 1)];
    }
    return;
  }
  // Synthetic: a noisy affine recurrence x' = (5x + 3 + noise) mod V, noise ∈ {0..3}, so the next token is
  // partly predictable and the loss can fall below log V.
  std::vector<int32_t> x(static_cast<std::size_t>(seq_ + 1));  // [T+1]
  uint64_t state = splitmix64(seed_ ^ (static_cast<uint64_t>(g) * 0x100000001B3ull));
  x[0] = static_cast<int32_t>(state % static_cast<uint64_t>(vocab_));
  for (int64_t t = 1; t <= seq_; ++t) {
    state = splitmix64(state);
    x[static_cast<std::size_t>(t)] =
        static_cast<int32_t>((5 * static_cast<int64_t>(x[static_cast<std::size_t>(t - 1)]) + 3 +
                              static_cast<int64_t>(state % 4)) % vocab_);
  }
  for (int64_t t = 0; t < seq_; ++t) {
    tokens[t] = x[static_cast<std::size_t>(t)];
    targets[t] = x[static_cast<std::size_t>(t + 1)];
  }
}

}  // namespace shardplan::reference
