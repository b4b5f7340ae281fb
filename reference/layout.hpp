#pragma once
// Where every parameter lives: the model is cut into FSDP units (embedding (+ positions), each block, final
// norm + LM head), each one contiguous flat buffer padded to a multiple of the world size, so that a unit is
// one all-gather and one reduce-scatter of equal shards. The same offsets index parameters and gradients.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/model.hpp"
#include "reference/backend.hpp"

namespace shardplan::reference {

// Sizes of one run. N = batch·seq tokens per micro-batch.
struct Dims {
  int64_t batch = 0, seq = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ffn = 0;          // F, per matrix
  int64_t fc1_width = 0;    // F (GELU) or 2F (SwiGLU: gate | up)
  int64_t vocab = 0, padded_vocab = 0;
  int64_t max_seq = 0;      // rows of the learned position table (model.seq)
  bool rms = false, swiglu = false, rope = false, learned_pos = false, tied = false;
  bool qkv_bias = false, out_bias = false, norm_bias = false;
  int64_t tokens() const { return batch * seq; }
  AttentionShape attention() const { return {batch, seq, heads, kv_heads, head_dim}; }
};
Dims dims_make(const ModelSpec& m, int64_t batch, int64_t seq);

enum class InitKind { normal, normal_residual, ones, zeros };

struct TensorSlot {
  std::string name;
  int64_t offset = 0;  // elements from the unit's start
  int64_t numel = 0;
  InitKind init = InitKind::zeros;
};

struct UnitLayout {
  std::string name;               // "embedding", "block.3", "head"
  std::vector<TensorSlot> tensors;
  int64_t numel = 0;              // Σ tensor sizes
  int64_t padded = 0;             // numel rounded up to a multiple of the world size
  int64_t shard() const { return padded / world; }
  int64_t world = 1;
  const TensorSlot* find(const std::string& name) const;
};

// Units in forward order: 0 embedding, 1..L blocks, L+1 head (final norm, and the LM head when untied).
std::vector<UnitLayout> layout_make(const Dims& d, int64_t layers, int world);
int64_t layout_params(const std::vector<UnitLayout>& units);  // Σ numel (unpadded)

// Pointers into one block unit's buffer (parameters or their gradients, elements of the backend's dtype `t`); null
// where the model has no such tensor. Shapes: norms [C]; qkv_w [(NH+2KVH)·HD, C]; qkv_b [(NH+2KVH)·HD]; out_w [C, NH·HD]; out_b [C];
// fc1_w [F1, C]; fc1_b [F1]; fc2_w [C, F]; fc2_b [C].
struct BlockView {
  floatX *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr, *out_w = nullptr,
         *out_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr, *fc1_w = nullptr, *fc1_b = nullptr,
         *fc2_w = nullptr, *fc2_b = nullptr;
};
BlockView block_view(const UnitLayout& u, floatX* base, DType t);
// Embedding unit: wte [Vp, C], wpe [max_seq, C] (learned positions) or null.
struct EmbeddingView {
  floatX *wte = nullptr, *wpe = nullptr;
};
EmbeddingView embedding_view(const UnitLayout& u, floatX* base, DType t);
// Head unit: lnf_w [C], lnf_b [C] or null, lm_head [Vp, C] or null when tied (the LM head is then wte).
struct HeadView {
  floatX *lnf_w = nullptr, *lnf_b = nullptr, *lm_head = nullptr;
};
HeadView head_view(const UnitLayout& u, floatX* base, DType t);

}  // namespace shardplan::reference
