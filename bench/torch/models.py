"""Model shapes and the implementations the FSDP2 memory cross-check builds (bench/torch/README.md).

Two implementations of one shape:
  hf     transformers' LlamaForCausalLM (attn_implementation="sdpa"), built from a LlamaConfig: no weights.
  titan  a torchtitan-style decoder written here after torchtitan/models/llama3/model.py and
         torchtitan/models/common/{attention,feed_forward,rope,nn_modules}.py (pytorch/torchtitan b5bcd76):
         fused wqkv split into contiguous q/k/v, complex RoPE with a per-layer cache of the training length,
         nn.RMSNorm (fused on CUDA), SDPA with enable_gqa, SwiGLU w2(silu(w1 x) * w3 x), separate lm_head.
         With mlp: gelu / norm: layernorm / position: learned the same code is a GPT-style model.

Every tensor lives on the fake `cpu` device; where CUDA and CPU dispatch differ in what autograd saves, the
CUDA behaviour is reproduced (FusedRMSNormFn) — see README "CPU fake tensors standing in for CUDA".
"""
import dataclasses
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._guards import active_fake_mode
from torch.distributed.tensor import DTensor


@dataclasses.dataclass
class Shape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    head_dim: int = 0  # 0: hidden / heads
    mlp: str = "swiglu"  # swiglu | gelu
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    position: str = "rotary"  # rotary | learned
    tied_embeddings: bool = False
    qkv_bias: bool = False
    out_bias: bool = False  # attention output and MLP projections
    norm_bias: bool = False
    max_positions: int = 0  # learned position table rows (0: the case's seq)
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    mtp_layers: int = 0  # multi-token-prediction modules (torchtitan's MTPDecoder; titan only)

    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads


def shape_from_yaml(path: str) -> Shape:
    """A shardplan model YAML (CONTRACT.md "Model YAML"); keys this harness does not need are ignored."""
    import yaml

    with open(path) as f:
        y = yaml.safe_load(f)
    return Shape(name=y.get("name", path), layers=int(y["layers"]), hidden=int(y["hidden"]), heads=int(y["heads"]),
                 kv_heads=int(y.get("kv_heads", y["heads"])), ffn_hidden=int(y["ffn_hidden"]), vocab=int(y["vocab"]),
                 head_dim=int(y.get("head_dim", 0)), mlp=y.get("mlp", "swiglu"), norm=y.get("norm", "rmsnorm"),
                 position=y.get("position", "rotary"), tied_embeddings=bool(y.get("tied_embeddings", False)),
                 qkv_bias=bool(y.get("qkv_bias", False)), out_bias=bool(y.get("out_bias", False)),
                 norm_bias=bool(y.get("norm_bias", False)), max_positions=int(y.get("seq", 0)) if
                 y.get("position") == "learned" else 0, mtp_layers=int(y.get("mtp_layers", 0)))


def shape_from_hf_config(path: str) -> Shape:
    """A Llama-family config.json (LlamaConfig keys) or a GPT-2 one (n_embd, n_layer, ...)."""
    with open(path) as f:
        c = json.load(f)
    if "n_embd" in c:  # GPT2Config
        h = int(c["n_embd"])
        return Shape(name=c.get("_name_or_path", path), layers=int(c["n_layer"]), hidden=h, heads=int(c["n_head"]),
                     kv_heads=int(c["n_head"]), ffn_hidden=int(c.get("n_inner") or 4 * h), vocab=int(c["vocab_size"]),
                     mlp="gelu", norm="layernorm", position="learned", tied_embeddings=True, qkv_bias=True,
                     out_bias=True, norm_bias=True, max_positions=int(c.get("n_positions", 1024)),
                     norm_eps=float(c.get("layer_norm_epsilon", 1e-5)))
    rope = c.get("rope_parameters") or {}
    return Shape(name=c.get("_name_or_path", path), layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]),
                 heads=int(c["num_attention_heads"]),
                 kv_heads=int(c.get("num_key_value_heads") or c["num_attention_heads"]),
                 ffn_hidden=int(c["intermediate_size"]), vocab=int(c["vocab_size"]), head_dim=int(c.get("head_dim") or 0),
                 tied_embeddings=bool(c.get("tie_word_embeddings", False)), qkv_bias=bool(c.get("attention_bias", False)),
                 out_bias=bool(c.get("mlp_bias", False)), norm_eps=float(c.get("rms_norm_eps", 1e-5)),
                 rope_theta=float(c.get("rope_theta", rope.get("rope_theta", 500000.0))))


# ---- CUDA's fused RMSNorm autograd node, on fake CPU tensors ------------------------------------------------------
class FusedRMSNormFn(torch.autograd.Function):
    """What torch.nn.functional.rms_norm records on CUDA: aten::_fused_rms_norm (a CUDA kernel with its own autograd
    formula, derivatives.yaml) saves the bf16 input, the weight and the fp32 rstd per row. On CPU the same call runs
    the CompositeImplicit decomposition (torch/_decomp/decompositions.py _fused_rms_norm), whose autograd graph
    saves the fp32 upcast instead (2 B/element more). Under fake tensors only the allocations matter: the forward
    allocates what the CUDA kernel returns; the backward runs the real op's meta function."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        out = torch.empty_like(x)  # [*, d] in x's dtype
        rstd = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)  # [*, 1] fp32
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        gi, gw = torch.ops.aten._fused_rms_norm_backward(grad, x, [x.shape[-1]], rstd, weight, [True, True])
        return gi, gw, None


class RMSNorm(nn.RMSNorm):
    """torchtitan's RMSNorm is nn.RMSNorm (nn_modules.py); on CUDA it runs the fused kernel above."""

    def forward(self, x):
        if active_fake_mode() is None:
            return super().forward(x)  # real tensors: the real op
        if isinstance(x, DTensor):
            # Sequence parallelism (fsdp2_mem.py --tp): the kernel runs on this rank's rows; the (replicated) weight's
            # gradient is the local one, as the shapes FSDP reduce-scatters need.
            out = FusedRMSNormFn.apply(x.to_local(), self.weight.to_local(), self.eps)
            return DTensor.from_local(out, x.device_mesh, x.placements, run_check=False)
        return FusedRMSNormFn.apply(x, self.weight, self.eps)


# ---- torchtitan-style decoder ---------------------------------------------------------------------------------------
def complex_rope_cache(head_dim: int, seq: int, theta: float) -> torch.Tensor:
    """ComplexRoPE._precompute_cache without llama scaling: [seq, head_dim / 2] complex64."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)


class Attention(nn.Module):
    def __init__(self, s: Shape, seq: int, kv_repeated: bool = False):
        super().__init__()
        self.s, hd = s, s.hd()
        self.kv_repeated = kv_repeated and s.heads != s.kv_heads
        self.r = s.heads // s.kv_heads + 2  # FusedQKVLinear: q heads per kv group + k + v
        self.wqkv = nn.Linear(s.hidden, s.kv_heads * self.r * hd, bias=s.qkv_bias)
        self.wo = nn.Linear(s.heads * hd, s.hidden, bias=s.out_bias)
        if s.position == "rotary":
            # torchtitan resizes each layer's RoPE cache to training.max_context_length (decoder.py update_from_config)
            self.register_buffer("rope_cache", complex_rope_cache(hd, seq, s.rope_theta), persistent=False)

    def rope(self, x):  # x: [B, S, N, hd] -> same, ComplexRoPE.apply_rotary_emb
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        cache = self.rope_cache[: x.shape[1]].view(1, x.shape[1], 1, -1)
        return torch.view_as_real(xc * cache).flatten(-2).type_as(x)

    def forward(self, x):  # x: [B, S, D]
        b, t, hd = x.shape[0], x.shape[1], self.s.hd()
        qkv = self.wqkv(x).view(b, t, -1, self.r, hd)  # -1: the kv heads on this TP rank
        q, k, v = torch.split(qkv, [self.r - 2, 1, 1], dim=-2)
        q = q.reshape(b, t, -1, hd).contiguous()  # FusedQKVLinear._split materialises all three
        k = k.reshape(b, t, -1, hd).contiguous()
        v = v.reshape(b, t, -1, hd).contiguous()
        if self.s.position == "rotary":
            q, k = self.rope(q), self.rope(k)
        if self.kv_repeated:  # torchtitan's Llama until ff0829c (2026-01-27): repeat_kv, a copy per query head
            rep = self.s.heads // self.s.kv_heads
            k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        # ScaledDotProductAttention.forward: [B, S, N, hd] -> [B, N, S, hd], causal, enable_gqa when heads differ
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=k.shape[2] != q.shape[2])
        o = o.transpose(1, 2).contiguous()  # GQAttention.forward: .contiguous() then view [T, N·hd]
        return self.wo(o.view(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.swiglu = s.mlp == "swiglu"
        self.w1 = nn.Linear(s.hidden, s.ffn_hidden, bias=s.out_bias)
        self.w2 = nn.Linear(s.ffn_hidden, s.hidden, bias=s.out_bias)
        if self.swiglu:
            self.w3 = nn.Linear(s.hidden, s.ffn_hidden, bias=s.out_bias)

    def forward(self, x):
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))  # feed_forward.py FeedForward.forward
        return self.w2(F.gelu(self.w1(x)))


def make_norm(s: Shape) -> nn.Module:
    if s.norm == "rmsnorm":
        return RMSNorm(s.hidden, eps=s.norm_eps)
    return nn.LayerNorm(s.hidden, eps=s.norm_eps, bias=s.norm_bias)


class Block(nn.Module):
    def __init__(self, s: Shape, seq: int, kv_repeated: bool = False):
        super().__init__()
        self.attention_norm, self.attention = make_norm(s), Attention(s, seq, kv_repeated)
        self.ffn_norm, self.feed_forward = make_norm(s), FeedForward(s)

    def forward(self, x):  # Llama3TransformerBlock.forward
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class MTPBlock(Block):
    """torchtitan/models/deepseek_v3/mtp.py MTPTransformerBlock: eh_proj(cat(enorm(shifted embedding),
    hnorm(previous hidden))), one transformer block, mtp_norm."""

    def __init__(self, s: Shape, seq: int, kv_repeated: bool = False):
        super().__init__(s, seq, kv_repeated)
        self.enorm, self.hnorm, self.mtp_norm = make_norm(s), make_norm(s), make_norm(s)
        self.eh_proj = nn.Linear(2 * s.hidden, s.hidden, bias=False)

    def forward(self, embed, prev, valid):  # valid: [B, S] 1 where the shifted token exists
        prev = prev * valid.unsqueeze(-1).to(prev.dtype)
        h = self.eh_proj(torch.cat([self.enorm(embed), self.hnorm(prev)], dim=-1))
        return self.mtp_norm(super().forward(h))


class TitanDecoder(nn.Module):
    def __init__(self, s: Shape, seq: int, kv_repeated: bool = False):
        super().__init__()
        self.tok_embeddings = nn.Embedding(s.vocab, s.hidden)
        if s.position == "learned":
            self.pos_embeddings = nn.Embedding(s.max_positions or seq, s.hidden)
        self.layers = nn.ModuleDict({str(i): Block(s, seq, kv_repeated) for i in range(s.layers)})
        self.norm = make_norm(s)
        if s.mtp_layers:
            self.mtp_layers = nn.ModuleList([MTPBlock(s, seq, kv_repeated) for _ in range(s.mtp_layers)])
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)
        if s.tied_embeddings:
            self.lm_head.weight = self.tok_embeddings.weight

    def forward(self, tokens):  # decoder.py Decoder.forward: logits out, the loss outside
        h = self.tok_embeddings(tokens)
        if hasattr(self, "pos_embeddings"):
            h = h + self.pos_embeddings(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers.values():
            h = layer(h)
        if not hasattr(self, "mtp_layers"):
            return self.lm_head(self.norm(h))
        # MTPDecoder.forward: the main output, then each depth from the previous depth's pre-norm hidden states and
        # the embedding of the tokens `depth` ahead (roll_mtp_sequence); the head applied to every output.
        prev, outputs = h, [self.norm(h)]
        for depth, layer in enumerate(self.mtp_layers, 1):
            shifted = torch.roll(tokens, -depth, dims=1)
            valid = torch.ones_like(tokens)
            valid[:, -depth:] = 0
            prev = layer(self.tok_embeddings(shifted), prev, valid)
            outputs.append(prev)
        return [self.lm_head(out) for out in outputs]


def share_rope_tables(model: nn.Module) -> None:
    """torchtitan before 02d24f017 (2026-06-05) kept one RoPE table for the model (the Transformer's freqs_cis), not
    one per attention layer: every layer's cache becomes the first one's (after to_empty, which makes one per module)."""
    attns = [m for m in model.modules() if isinstance(m, Attention) and hasattr(m, "rope_cache")]
    for m in attns[1:]:
        m.rope_cache = attns[0].rope_cache


def titan_loss(logits, labels):
    # torchtitan/components/loss.py cross_entropy_loss: the fp32 upcast of the logits, reduction "sum"
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum", ignore_index=-100)


# ---- transformers ------------------------------------------------------------------------------------------------
def hf_unpacked_positions() -> None:
    """transformers.masking_utils._preprocess_mask_arguments calls find_packed_sequence_indices, which reads the
    position ids' values to see whether a row packs several sequences; on fake tensors it cannot (is_tracing) and
    answers "packed", so create_causal_mask builds a [B, 1, S, S] mask and sdpa_attention_forward takes repeat_kv
    with that mask instead of is_causal + enable_gqa. Our position ids are 0..S-1 (LlamaModel.forward's default),
    for which a real run returns None: answer that."""
    import transformers.masking_utils as mu
    from torch._subclasses.fake_tensor import is_fake

    if getattr(mu.find_packed_sequence_indices, "_unpacked", False):
        return
    orig = mu.find_packed_sequence_indices

    def unpacked(position_ids, *args, **kwargs):
        return None if is_fake(position_ids) else orig(position_ids, *args, **kwargs)

    unpacked._unpacked = True
    mu.find_packed_sequence_indices = unpacked


def hf_llama(s: Shape, seq: int) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_unpacked_positions()

    if s.mlp != "swiglu" or s.norm != "rmsnorm" or s.position != "rotary":
        raise ValueError(f"--impl hf builds LlamaForCausalLM: needs swiglu/rmsnorm/rotary, got {s.mlp}/{s.norm}/"
                         f"{s.position}")
    cfg = LlamaConfig(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.ffn_hidden,
                      num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                      head_dim=s.hd(), max_position_embeddings=max(seq, 8192), rms_norm_eps=s.norm_eps,
                      tie_word_embeddings=s.tied_embeddings, attention_bias=s.qkv_bias, mlp_bias=s.out_bias,
                      use_cache=False, rope_parameters={"rope_type": "default", "rope_theta": s.rope_theta})
    cfg._attn_implementation = "sdpa"
    if s.qkv_bias and not s.out_bias:
        # LlamaConfig's attention_bias puts a bias on o_proj too; Qwen2's attention has one on q/k/v only
        # (transformers models/qwen2/modeling_qwen2.py Qwen2Attention) and is otherwise Llama's block.
        from transformers import Qwen2Config, Qwen2ForCausalLM

        q = Qwen2Config(**{k: v for k, v in cfg.to_dict().items() if k not in ("attention_bias", "mlp_bias",
                                                                              "model_type", "architectures")})
        q._attn_implementation = "sdpa"
        return Qwen2ForCausalLM(q)
    return LlamaForCausalLM(cfg)


class Impl:
    """How to build, find the blocks of, and take a loss from one implementation."""

    def __init__(self, name: str, shape: Shape, seq: int, kv_repeated: bool = False):
        self.name, self.shape, self.seq, self.kv_repeated = name, shape, seq, kv_repeated

    def build(self) -> nn.Module:
        if self.name == "hf":
            return hf_llama(self.shape, self.seq)
        return TitanDecoder(self.shape, self.seq, self.kv_repeated)

    def block_container(self, model):
        return model.model.layers if self.name == "hf" else model.layers

    def head_modules(self, model):
        """(embedding, final norm, lm_head): torchtitan's apply_fsdp_to_decoder wraps these separately."""
        if self.name == "hf":
            return model.model.embed_tokens, model.model.norm, model.lm_head
        return model.tok_embeddings, model.norm, model.lm_head

    def loss(self, model, tokens, labels):
        if self.name == "hf":
            # LlamaForCausalLM.forward: lm_head then ForCausalLMLoss (logits.float(), shift, cross_entropy);
            # the output object (holding the bf16 logits) is dropped as a training loop's `.loss` does.
            return model(input_ids=tokens, labels=labels, use_cache=False).loss
        logits = model(tokens)
        if isinstance(logits, list):  # mtp.py MTPLoss: the main loss plus mtp_scale × the depths' mean
            loss = titan_loss(logits[0], labels)
            depths = sum(titan_loss(out, torch.roll(labels, -d, dims=1)) for d, out in enumerate(logits[1:], 1))
            loss = loss + 0.3 * depths / (len(logits) - 1)
        else:
            loss = titan_loss(logits, labels)
        del logits  # torchtitan's train step: `del pred` before backward
        return loss


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def check_shape(s: Shape) -> None:
    if s.heads % s.kv_heads:
        raise ValueError(f"heads ({s.heads}) must be a multiple of kv_heads ({s.kv_heads})")
    if s.hd() % 2 and s.position == "rotary":
        raise ValueError(f"rotary needs an even head_dim, got {s.hd()}")
    if math.prod([s.layers, s.hidden, s.vocab]) <= 0:
        raise ValueError("layers, hidden and vocab must be positive")
