#pragma once
// Training data of the reference loop: byte-level tokens of the shipped corpus (reference/data/corpus.txt,
// vocab 256), or deterministic synthetic tokens. Sequences are numbered globally; each epoch visits every
// corpus window once in an order reshuffled from (seed, epoch); a rank reads only the indices of its slice.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan::reference {

class TokenSource {
 public:
  // kind "corpus" (path: the text file; "" = the shipped corpus) or "synthetic" (tokens below `vocab`). Throws std::runtime_error when
  // the corpus cannot be read or is shorter than two sequences.
  TokenSource(const std::string& kind, const std::string& path, int64_t seq, int64_t vocab, uint64_t seed);
  // Global sequence g: tokens[T] and the next-token targets[T].
  void sequence_read(int64_t g, int32_t* tokens, int32_t* targets);
  int64_t windows() const { return windows_; }  // sequences per epoch (corpus)

 private:
  void epoch_shuffle(int64_t epoch);
  std::string kind_;
  int64_t seq_, vocab_;
  uint64_t seed_;
  std::vector<uint8_t> text_;    // [bytes] the corpus
  int64_t windows_ = 0;          // (bytes − 1) / T windows of T + 1 bytes, starting every T bytes
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;   // [windows] this epoch's permutation
};

// The corpus shipped with the source tree (reference/data/corpus.txt), compiled in (cmake/embed_text.cmake).
std::string_view corpus_text();

}  // namespace shardplan::reference
