#pragma once
// A decoder-only transformer as the planner sees it, and its exact parameter count by component.
#include <cstdint>
#include <string>

namespace shardplan {

enum class MlpKind { gelu, swiglu };
enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { rotary, learned, alibi, none };

struct ModelSpec {
  std::string name;
  std::string description;  // free text (preset files say what the model is)
  std::string source;       // where the configuration comes from
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;     // = heads for multi-head attention; fewer for GQA/MQA
  int64_t head_dim = 0;     // 0 = hidden / heads
  int64_t ffn_hidden = 0;   // width of the MLP's intermediate (per matrix for SwiGLU)
  int64_t vocab = 0;
  int64_t vocab_pad_to = 1; // the embedding has round_up(vocab, vocab_pad_to) rows (Megatron pads to 128·tp)
  int64_t seq = 0;          // default sequence length
  MlpKind mlp = MlpKind::gelu;
  NormKind norm = NormKind::layernorm;
  PositionKind position = PositionKind::rotary;
  bool tied_embeddings = false;
  bool qkv_bias = false;    // biases on the Q/K/V projections (GPT-2/Megatron GPT: yes; Llama: no)
  bool out_bias = false;    // biases on attention output and MLP matrices
  bool norm_bias = true;    // LayerNorm's beta (RMSNorm has none, whatever this says)
  bool dropout = false;     // dropout layers that store 1-byte masks (Megatron GPT: yes; Llama: no)
  // Not priced (no effect on memory or time), but a launch file needs them to build the same model (cli/emit_*):
  double rotary_base = 10000;  // RoPE θ: 10000 (Su et al. 2021 §3.4.2; Llama 2), 500000 for Llama 3 (HF rope_theta)
  double norm_eps = 1e-5;      // epsilon of every norm (HF rms_norm_eps / layer_norm_eps; Llama 2 and 3: 1e-5)
};

// Head dimension actually used (head_dim or hidden/heads).
int64_t model_head_dim(const ModelSpec& m);
// Width of the query projection output: heads · head_dim.
int64_t model_q_width(const ModelSpec& m);
// Width of each of the key and value projection outputs: kv_heads · head_dim.
int64_t model_kv_width(const ModelSpec& m);
// Embedding rows after padding.
int64_t model_padded_vocab(const ModelSpec& m);
// Number of weight matrices in the MLP: GELU 2 (up, down), SwiGLU 3 (gate, up, down).
int64_t model_mlp_matrices(const ModelSpec& m);

// Parameters of one transformer block, split the way tensor parallelism splits them.
struct BlockParams {
  int64_t attn_weights = 0;  // Q, K, V and output projections
  int64_t attn_biases_split = 0;  // biases of column-parallel Q/K/V (split by TP)
  int64_t attn_biases_replicated = 0;  // bias of the row-parallel output projection (replicated by TP)
  int64_t mlp_weights = 0;
  int64_t mlp_biases_split = 0;       // biases of column-parallel up/gate
  int64_t mlp_biases_replicated = 0;  // bias of the row-parallel down projection
  int64_t norms = 0;         // the two norms of the block (replicated by TP)
  int64_t total() const;
};

// Parameters of the whole model by component.
struct ParamCounts {
  BlockParams block;            // one block
  int64_t blocks = 0;           // all blocks: layers · block.total()
  int64_t embedding = 0;        // token embedding (padded vocab · hidden)
  int64_t position_embedding = 0;  // learned positions only: seq · hidden
  int64_t final_norm = 0;
  int64_t lm_head = 0;          // 0 when tied to the embedding
  int64_t total = 0;
};

ParamCounts count_params(const ModelSpec& m);

// Checks sizes and divisibility; throws InputError naming the field.
void validate_model(const ModelSpec& m);

// Why `seq` tokens cannot run on `m`, or "": learned positions have exactly m.seq rows (GPT-2's wpe), so a longer
// sequence has no position to look up (the reference loop refuses it too; issue 19, item 11).
std::string seq_refusal(const ModelSpec& m, int64_t seq);

// A parameter count readable from a tiny test model to a trillion: "8.03 B", "803.97 K" (not "0.00 B").
std::string format_param_count(double n);

const char* to_string(MlpKind k);
const char* to_string(NormKind k);
const char* to_string(PositionKind k);

}  // namespace shardplan
