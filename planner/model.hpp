#pragma once
// A decoder-only transformer as the planner sees it, and its exact parameter count by component.
#include <cstdint>
#include <string>

namespace shardplan {

// gelu and squared_relu are two-matrix MLPs (up, down) whose activation keeps one ffn-wide tensor for its backward;
// swiglu has three matrices.
// squared_relu: relu(x)² (So et al. 2021, "Primer", arXiv 2109.08668), Nemotron's; Megatron-LM --squared-relu.
enum class MlpKind { gelu, swiglu, squared_relu };
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

  // ---- mixture of experts, MLA, MTP, sliding windows (CONTRACT.md optional keys; planner/moe.hpp counts them) ----
  int64_t experts = 0;             // routed experts per MoE layer; 0 = dense model
  int64_t experts_per_token = 0;   // top-k routing
  int64_t shared_experts = 0;      // always-active experts per MoE layer (DeepSeekMoE, Llama 4)
  int64_t expert_ffn_hidden = 0;   // intermediate width of one expert's MLP (per matrix for SwiGLU)
  int64_t dense_layers = 0;        // the first N layers keep the dense MLP of ffn_hidden
  int64_t moe_layer_freq = 1;      // extra key: after dense_layers, every N-th layer is MoE, the rest dense
                                   // (Megatron-Core --moe-layer-freq; Llama 4 Maverick interleave_moe_layer_step 2)
  bool router_bias = false;        // extra key: a per-expert bias on the router (GPT-OSS router.bias; DeepSeek-V3
                                   // e_score_correction_bias, §2.1.2)
  int64_t q_lora_rank = 0;         // MLA (DeepSeek-V2 §2.1): 0 = queries projected directly (V2-Lite)
  int64_t kv_lora_rank = 0;        // > 0 = multi-head latent attention
  int64_t qk_rope_head_dim = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t mtp_layers = 0;          // multi-token prediction modules (DeepSeek-V3 §2.2)
  int64_t sliding_window = 0;      // attention window in tokens; 0 = full causal attention
  int64_t sliding_window_pattern = 1;  // extra key: of every N layers the last attends globally, the others use the
                                       // window (HF Gemma 3 sliding_window_pattern; 2 = alternating, GPT-OSS and
                                       // Gemma 2); 1 = every layer windowed
  bool qk_norm = false;            // extra key: RMSNorm of head_dim on queries and keys (Qwen3 q_norm/k_norm)
  bool qk_norm_full_width = false; // extra key: the Q/K norms span the whole projections instead (OLMo 2:
                                   // olmo_core/nn/attention.py Attention q_norm over d_model, k_norm over
                                   // n_kv_heads·head_dim); implies qk_norm
  bool attention_sinks = false;    // extra key: one learned logit per head per layer (GPT-OSS self_attn.sinks)
  int64_t block_norms = 2;         // extra key: norms per block; Gemma 2/3 have 4 (pre- and post-norms around
                                   // attention and MLP: Gemma2DecoderLayer)
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
  // MoE layer (planner/moe.cpp): the routed experts replace the dense MLP (mlp_* above stay 0 then).
  int64_t experts = 0;        // all routed experts' weights and biases (split by TP like an MLP when EP = 1)
  int64_t shared_experts = 0; // always-active experts' weights and biases (split by TP)
  int64_t router = 0;         // router weight h×E and its bias (replicated by TP)
  // MLA latent norms, Q/K norms, attention sinks (planner/moe.cpp says which TP splits)
  int64_t attn_extra = 0;
  int64_t total() const;
};

// Parameters of the whole model by component.
struct ParamCounts {
  BlockParams block;            // one block (an MoE model's MoE block, its most common and largest)
  BlockParams dense_block;      // an MoE model's dense block (= block for a dense model)
  int64_t moe_layers = 0;       // MoE blocks among the layers (0 for a dense model)
  int64_t blocks = 0;           // all blocks: dense and MoE ones, each at its own size
  int64_t embedding = 0;        // token embedding (padded vocab · hidden)
  int64_t position_embedding = 0;  // learned positions only: seq · hidden
  int64_t final_norm = 0;
  int64_t lm_head = 0;          // 0 when tied to the embedding
  int64_t total = 0;            // the main model (MTP modules not included)
  int64_t mtp = 0;              // multi-token prediction modules, sharing the main embedding and head (moe.hpp)
  int64_t active = 0;           // parameters one token uses: total less the routed experts it is not sent to
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
