#!/usr/bin/env python3
"""ctest `fsdp2_memory_selfcheck`: the harness runs, and its tracker figures agree with hand-computed facts.

Two small cases (Llama-3 8B's widths, 2 blocks, 8 fake ranks): torchtitan-style ZeRO-3 without recompute and
transformers' Llama ZeRO-2 with full recompute. Checked: the fp32 shards and Adam states against the parameter
shapes counted here by hand; attention through the flash kernel with native GQA and no mask; no allocation left
after a step; what one block saves per token, and what the cross-entropy holds per logit. And the caching
allocator's replay (allocator_replay.py) on hand-worked sequences, and on the first case's trace.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
H, HEADS, KV, F, V, LAYERS, RANKS, SEQ = 4096, 32, 8, 14336, 128256, 2, 8, 1024
HD = H // HEADS
SHAPE = f"""name: llama3-8b-2-blocks
layers: {LAYERS}
hidden: {H}
heads: {HEADS}
kv_heads: {KV}
ffn_hidden: {F}
vocab: {V}
mlp: swiglu
norm: rmsnorm
tied_embeddings: false
"""


def round512(n):
    return math.ceil(n / 512) * 512


def param_shapes(impl):
    """Every parameter's shape, from the architecture (not from the model the harness builds)."""
    if impl == "titan":  # fused wqkv: (kv heads × (q heads per kv + 2) × head_dim) rows
        attn = [((KV * (HEADS // KV + 2) * HD), H), (H, HEADS * HD)]
        mlp = [(F, H), (H, F), (F, H)]
        norms = [(H,), (H,)]
    else:  # q_proj, k_proj, v_proj, o_proj; gate, up, down
        attn = [(HEADS * HD, H), (KV * HD, H), (KV * HD, H), (H, HEADS * HD)]
        mlp = [(F, H), (F, H), (H, F)]
        norms = [(H,), (H,)]
    return LAYERS * (attn + mlp + norms) + [(V, H), (H,), (V, H)]


def shard_bytes(shapes):
    # FSDP2 Shard(0): rank 0 holds ceil(rows / N) rows of each parameter in fp32, one allocation each
    return sum(round512(math.ceil(s[0] / RANKS) * math.prod(s[1:]) * 4) for s in shapes)


# Saved per token per block, bf16 (2 B) unless noted, h = 4096, q = 4096, kv = 1024, f = 14336:
#  titan: attention_norm input 2h + fp32 rstd 4 (fused RMSNorm), wqkv input 2h, rotated q 2q, rotated k 2kv, v 2kv,
#         SDPA output 2q + fp32 logsumexp 4·32; ffn_norm input 2h + rstd 4, w1/w3 input 2h, silu input (w1 out) 2f,
#         silu output 2f, w3 output 2f, w2 input 2f
#         = 8196 + 8192 + 8192 + 2048 + 2048 + 8192 + 128 + 8196 + 8192 + 4·28672 = 168072
#  hf:    each LlamaRMSNorm saves its fp32 upcast 4h, its bf16 normalised output 2h and fp32 rsqrt 4 (6h + 4 = 24580,
#         twice), the rest as titan: 49160 + 8192 + 8192 + 2048 + 2048 + 8192 + 128 + 8192 + 114688 = 200840
ACT_PER_TOKEN_BLOCK = {"titan": 168072, "hf": 200840}
# Cross-entropy backward on the fp32 upcast: the log_softmax output, its gradient and the input gradient, 4 B each
# (the bf16 logits were freed after the upcast).
LOGIT_BYTES = 12.0


def run_case(impl, zero, recompute, tmp, cp=1):
    yaml_path = os.path.join(tmp, "shape.yaml")
    with open(yaml_path, "w") as f:
        f.write(SHAPE)
    out = os.path.join(tmp, f"{impl}-cp{cp}.json")
    cmd = [sys.executable, os.path.join(HERE, "fsdp2_mem.py"), "--model-yaml", yaml_path, "--impl", impl,
           "--ranks", str(RANKS), "--zero", str(zero), "--recompute", recompute, "--seq", str(SEQ * cp), "--out", out,
           "--cp", str(cp)] + ([] if cp > 1 else ["--alloc-replay"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"FAIL {impl}: fsdp2_mem.py exited {r.returncode}\n{r.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f)


def check(failures, what, got, want):
    ok = got == want
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {got} (expected {want})")
    if not ok:
        failures.append(what)


def check_allocator_replay(failures) -> None:
    """The caching allocator's rules on sequences worked by hand (MiB = 2**20 B)."""
    sys.path.insert(0, HERE)
    import allocator_replay as ar
    mib = 1 << 20
    a = ar.CachingAllocator()
    x = a.malloc(100 * mib)
    a.free(x)
    a.malloc(100 * mib)
    check(failures, "replay: a freed 100 MiB block serves the next 100 MiB request", a.reserved // mib, 100)
    a = ar.CachingAllocator()
    x = a.malloc(100 * mib)
    a.malloc(20 * mib)  # a segment of its own
    a.free(x)
    c = a.malloc(30 * mib)  # best fit: the freed 100 MiB block, split (70 MiB left)
    a.malloc(80 * mib)  # 70 MiB is too small: a new segment
    check(failures, "replay: a split block's remainder cannot serve a larger request", (a.reserved // mib,
          a.allocated // mib), (200, 130))
    a.free(c)  # coalesces with the 70 MiB remainder
    a.malloc(100 * mib)
    check(failures, "replay: freed neighbours coalesce", a.reserved // mib, 200)
    a = ar.CachingAllocator()
    a.malloc(600)
    a.malloc(3 * mib)
    a.malloc(3 * mib)
    a.malloc(11 * mib + 1)  # fits the 14 MiB left of the 20 MiB segment: the large pool serves it
    check(failures, "replay: 2 MiB small segment, one 20 MiB segment for 3 + 3 + 11 MiB", a.reserved // mib, 2 + 20)
    a = ar.CachingAllocator()
    a.malloc(11 * mib + 1)
    check(failures, "replay: 11 MiB + 1 B gets a segment of its own rounded up to 12 MiB", a.reserved // mib, 12)
    a = ar.CachingAllocator()
    x = a.malloc(50 * mib, "all_gather")
    a.free(x)
    a.malloc(50 * mib)
    check(failures, "replay: another stream's cached block is not reused", a.reserved // mib, 100)
    a = ar.CachingAllocator(capacity=150 * mib)
    x = a.malloc(100 * mib)
    a.free(x)
    a.malloc(120 * mib)
    check(failures, "replay: past capacity, wholly free segments are released first", (a.reserved // mib,
          a.max_reserved // mib, a.releases), (120, 120, 1))


def check_expandable_replay(failures) -> None:
    """The same allocator under expandable_segments:True (allocator_expandable.py), worked by hand."""
    sys.path.insert(0, HERE)
    import allocator_expandable as ae
    mib = 1 << 20
    a = ae.ExpandableAllocator()
    x = a.malloc(100 * mib)
    check(failures, "expandable: 100 MiB maps five 20 MiB pages", a.reserved // mib, 100)
    a.free(x)
    y = a.malloc(150 * mib)  # the freed block at the mapped end grows in place: no second segment
    check(failures, "expandable: a freed block at the end grows in place (150 MiB → 160 mapped)", a.reserved // mib, 160)
    a.malloc(5 * mib)  # from the 10 MiB left of the last page
    check(failures, "expandable: a request served from the last page's remainder", a.reserved // mib, 160)
    a.free(y)
    a.malloc(200 * mib)  # the freed 150 MiB is not at the end: 5 MiB free there + 200 mapped after it
    check(failures, "expandable: a hole inside stays mapped, the request extends the end", (a.reserved // mib,
          a.allocated // mib), (360, 205))
    a.release_cached_blocks()  # the 150 MiB hole gives back its seven whole pages
    check(failures, "expandable: release unmaps the whole pages inside free blocks", a.reserved // mib, 220)
    a = ae.ExpandableAllocator()
    x = a.malloc(50 * mib, "all_gather")
    a.free(x)
    a.malloc(50 * mib)
    check(failures, "expandable: each stream has its own range", a.reserved // mib, 120)


def main() -> int:
    failures = []
    check_allocator_replay(failures)
    check_expandable_replay(failures)
    with tempfile.TemporaryDirectory() as tmp:
        for impl, zero, recompute in (("titan", 3, "none"), ("hf", 2, "full")):
            d = run_case(impl, zero, recompute, tmp)
            c, shapes = d["checks"], param_shapes(impl)
            tag = f"{impl} Z{zero} {recompute}"
            check(failures, f"{tag} parameters", d["model"]["params"], sum(math.prod(s) for s in shapes))
            check(failures, f"{tag} fp32 shards (Sharded Param)", c["sharded_param_bytes"], shard_bytes(shapes))
            check(failures, f"{tag} Adam m, v and steps (OptState)", c["opt_state_bytes"],
                  2 * shard_bytes(shapes) + 512 * len(shapes))
            check(failures, f"{tag} token and label inputs", c["input_bytes"], 2 * round512(SEQ * 8))
            check(failures, f"{tag} unsharded params and grads before step 2", c["unsharded_at_step_start"], 0)
            check(failures, f"{tag} allocation after step 2 less before", c["end_minus_start"], 0)
            calls = LAYERS * (2 if recompute == "full" else 1)
            check(failures, f"{tag} flash attention calls", c["flash_attention_calls"], calls)
            check(failures, f"{tag} masked attention calls", c["flash_attention_masked_calls"], 0)
            check(failures, f"{tag} (query, key) heads at the kernel", c["flash_attention_q_kv_heads"], [[HEADS, KV]])
            check(failures, f"{tag} T×T softmax calls", c["softmax_calls"], 0)
            check(failures, f"{tag} logit bytes per element", d["derived"]["max_logit_bytes_per_element"], LOGIT_BYTES)
            if recompute == "none":
                check(failures, f"{tag} saved bytes per token per block",
                      d["derived"]["activation_bytes_per_token_per_block"], float(ACT_PER_TOKEN_BLOCK[impl]))
            r = d["allocator_replay"]
            # the replay also sees the moments inside an op (its output allocated before its inputs are freed)
            check(failures, f"{tag} replayed allocations peak where the tracker's do (0.1 %)",
                  abs(r["max_allocated"] - d["peak"]["bytes"]) <= 1e-3 * d["peak"]["bytes"], True)
            check(failures, f"{tag} the replay reserves at least what it allocates", r["max_reserved"] >=
                  r["max_allocated"], True)
            # the same requests; the default allocator hands out whole blocks where a remainder of 1 MiB or less is
            # not split off (should_split), expandable segments split every remainder of 512 B
            e = r["expandable_segments"]
            check(failures, f"{tag} the expandable replay allocates what the default one does (0.1 %, not more)",
                  r["max_allocated"] * 0.999 <= e["max_allocated"] <= r["max_allocated"], True)
            # FSDP2's all-gather buffers (copy-in stream) and new gradient shards (reduce-scatter stream), each unit's,
            # every step: StreamScope saw FSDP enter its two streams
            check(failures, f"{tag} allocations on FSDP's own streams", (len(r["streams"]),
                  r["side_stream_allocations"] >= 2 * (LAYERS + 1)), (2, True))
            peak, start = d["peak"]["bytes"], d["step2"]["start"]["Total"]
            check(failures, f"{tag} step-2 peak above its start and named", peak > start and
                  d["peak"]["moment"] is not None, True)
    # torch's ring (cp_plan.py) at CP 2, SEQ tokens a rank: two flash calls a block (the ring's steps), and one more
    # q-wide bf16 tensor saved a block (the ring's output, [B, H, S, D] in memory, and the out-projection's copy of it),
    # with the flash op's philox seed and offset (two 512-byte blocks a block, as its autograd node keeps them)
    with tempfile.TemporaryDirectory() as tmp:
        d = run_case("titan", 3, "none", tmp, cp=2)
        check(failures, "titan CP 2 flash calls (ring steps)", d["checks"]["flash_attention_calls"], 2 * LAYERS)
        check(failures, "titan CP 2 saved bytes per token per block", d["derived"]["activation_bytes_per_token_per_block"],
              ACT_PER_TOKEN_BLOCK["titan"] + 2 * HEADS * HD + 2 * 512 / SEQ)
    print("fsdp2 self-check: " + (f"{len(failures)} checks failed: {', '.join(failures)}" if failures else
                                  "every check holds"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
