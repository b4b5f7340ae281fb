#pragma once
// Mixture-of-experts layers, multi-head latent attention (MLA), multi-token prediction (MTP) and sliding-window
// attention: their parameters, what one token activates, and the attention context each layer sees.
//
// An MoE layer (Shazeer et al. 2017; GShard, Lepikhin et al. 2020) replaces the dense MLP by `experts` routed MLPs
// of width expert_ffn_hidden, a router (h×E linear, softmax or sigmoid, top-k) and optionally `shared_experts`
// always-active MLPs (DeepSeekMoE, Dai et al. 2024 §3.2). Which layers are MoE: the first dense_layers keep the dense
// MLP (DeepSeek-V3 first_k_dense_replace 3), the rest are MoE every moe_layer_freq-th layer (Megatron-Core
// --moe-layer-freq; Llama 4 Maverick interleave_moe_layer_step 2, Llama4TextConfig: moe_layers = step−1, 2·step−1, …).
//
// Active parameters: the whole model less, in each MoE layer, the E − k routed experts a token is not sent to. This
// is the convention of Mixtral ("12.9B active", Jiang et al. 2024 §2), Qwen3-30B-A3B ("3.3B activated") and
// DeepSeek-V3 ("37B activated", report §1: 37.55 B by this count); GPT-OSS's model card (arXiv 2508.10925 Table 1)
// also leaves out the input embedding: active_params_excluding_embedding.
#include <cstdint>

#include "planner/model.hpp"

namespace shardplan {

bool model_is_moe(const ModelSpec& m);
bool model_has_mla(const ModelSpec& m);
// Whether layer `layer` (0-based) is an MoE layer.
bool layer_is_moe(const ModelSpec& m, int64_t layer);
// MoE layers among layers [first, first + count).
int64_t moe_layers_in(const ModelSpec& m, int64_t first, int64_t count);
// The MoE layers' share of the model's layers (0 for a dense model): what per-block costs of an MoE layer are weighted
// by where every block is priced alike.
double moe_layer_share(const ModelSpec& m);

// One routed expert: its matrices (gate, up, down for SwiGLU) and, with out_bias, their biases (GPT-OSS).
int64_t expert_params(const ModelSpec& m);
// The router of one MoE layer: h×E, plus E with router_bias.
int64_t router_params(const ModelSpec& m);

// Fills the attention part of a block (MHA/GQA or MLA, Q/K norms, sinks) and, for an MoE block, its experts,
// shared experts and router. model.cpp's count_params calls them.
void count_attention(const ModelSpec& m, BlockParams& b);
void count_moe_mlp(const ModelSpec& m, BlockParams& b);

// Parameters of one block's attention / MoE MLP on one TP rank; with expert parallelism the rank holds experts/ep of
// the routed experts, each split by the expert tensor-parallel size etp (0: = tp; strategy.hpp
// expert_tensor_parallel), the shared experts split by tp and the router whole.
int64_t attention_params_per_tp_rank(const ModelSpec& m, int64_t tp);
int64_t moe_mlp_params_per_tp_rank(const ModelSpec& m, int64_t tp, int64_t ep = 1, int64_t etp = 0);
// The routed experts of one MoE block on one rank: experts/ep of them, each split by etp (part of the above).
int64_t routed_expert_params_per_rank(const ModelSpec& m, int64_t etp, int64_t ep);

// The multi-token prediction modules: each an h×2h projection of [norm(h_i); norm(emb(t_{i+k}))], the two norms, one
// transformer block (an MoE block for an MoE model) and a final norm; embedding and output head are shared with the
// main model (DeepSeek-V3 report §2.2; Megatron-Core multi_token_prediction.py MultiTokenPredictionLayer:
// enorm, hnorm, eh_proj, transformer_layer, final_layernorm). DeepSeek's checkpoint stores its own copies of the
// embedding and head with the module (layers.61.embed_tokens / shared_head.head): not counted here.
int64_t mtp_params(const ModelSpec& m, const ParamCounts& p);
// One token's parameters (see above), and the same without the input embedding (a table lookup, no FLOPs).
int64_t active_params(const ModelSpec& m, const ParamCounts& p);
int64_t active_params_excluding_embedding(const ModelSpec& m, const ParamCounts& p);

// Attention per head: the query/key width (MLA: qk_nope + qk_rope; else head_dim) and the value width.
int64_t attention_qk_head_dim(const ModelSpec& m);
int64_t attention_v_head_dim(const ModelSpec& m);
// Layers that attend within the sliding window / globally (sliding_window_pattern: the last of every N is global).
int64_t windowed_layers(const ModelSpec& m);
// Keys one query is scored against in a layer, in the full-s convention of planner/flops.hpp (Narayanan et al. 2021
// eq. 3 counts the whole s×s product): s for a global layer; min(window, s) for a windowed one, the band a local
// attention kernel computes (Mistral 7B, Jiang et al. 2023 §2: "each token attends to at most W tokens").
double attention_keys_per_query(const ModelSpec& m, int64_t seq, bool windowed);

// Causal attention work of the whole model relative to every layer attending to all earlier tokens: a windowed layer
// computes s·w − w²/2 of the s²/2 score blocks (FlashAttention-2 window_size skips the blocks outside the band;
// Mistral 7B §2), a global layer all of them. 1 without a window.
double attention_work_fraction(const ModelSpec& m, int64_t seq);
// One windowed layer's part of that: (s·w − w²/2) / (s²/2); 1 without a window.
double windowed_layer_work(const ModelSpec& m, int64_t seq);

// The first key of the architecture extensions above that the model uses ("experts", "kv_lora_rank",
// "mtp_layers", "sliding_window", "qk_norm", "attention_sinks", "block_norms"), or "": for the parts of shardplan that
// build a model of their own (the reference loop, the launch files) to refuse it by name instead of running a
// different model.
const char* first_extended_feature(const ModelSpec& m);

// Checks the optional MoE/MLA/MTP/window keys; throws InputError naming the key. validate_model calls it.
void validate_moe(const ModelSpec& m, const std::string& where);

}  // namespace shardplan
