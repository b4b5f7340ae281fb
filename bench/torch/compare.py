#!/usr/bin/env python3
"""Runs a table of FSDP2 memory cases (fsdp2_mem.py, one process each) and `shardplan predict` for the same
configurations, and writes the Markdown comparison (reports/fsdp2-memory.md) and its data (JSON).

  .venv-torch/bin/python bench/torch/compare.py --shardplan build/shardplan --out reports/fsdp2-memory.md

Components are compared on common ground (README.md "Component mapping"): shardplan's buffers are split by their
items into gathered parameters, unsharded gradients and optimizer temporaries; the tracker's categories are summed
into the same groups. The shardplan figure compared is its moment of the most allocated (predict's
`memory.allocated`: the allocation less `runtime` and `fragmentation`, which the tracker cannot see: CUDA context,
NCCL, cuBLAS workspace, allocator reserve); its reported peak is the moment of the most reserved.
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GIB = 2**30
KEEP_MARK = "<!-- findings: compare.py keeps everything below this line when it rewrites the file -->"


# Model YAML paths are kept relative to the repository root (model_path resolves them), so the JSON names no machine.
GPT_YAML = "bench/torch/gpt3-1.3b.yaml"


def shape(name):
    """A model shape of bench/torch/shapes/, from its config.json."""
    return f"bench/torch/shapes/{name}.yaml"


def case(model, impl, ranks, zero, recompute, seq, mb=1, tp=1, hsdp=0, ga=1, wrap="blocks", cp=1, kv="grouped", mtp=0):
    c = {"model": model, "impl": impl, "ranks": ranks, "zero": zero, "recompute": recompute, "seq": seq,
         "micro_batch": mb}
    if wrap != "blocks":
        c["wrap"] = wrap  # fsdp2_mem.py --wrap titan: the embedding and [norm, lm_head] units of their own
    if tp > 1:
        c["tp"] = tp  # torchtitan's TP plan with SP and loss_parallel (tp_plan.py); FSDP over ranks / tp
    if hsdp:
        c["hsdp"] = hsdp  # shard within groups of hsdp ranks, replicate across them
    if ga > 1:
        c["grad_accum"] = ga  # micro-batches per optimizer step, each one's gradients reduced
    if cp > 1:
        c["cp"] = cp  # torch's ring attention under context_parallel (cp_plan.py); FSDP over dp_shard × cp
    if kv != "grouped":
        c["kv"] = kv  # K/V copied to every query head before SDPA (torchtitan until 2026-01)
    if mtp:
        c["mtp"] = mtp  # torchtitan's multi-token-prediction modules (models.py MTPBlock; --mtp-layers)
    return c


def default_cases():
    cases = []
    for model, ranks, impls in (("llama3-8b", 8, ("hf", "titan")), ("llama3-70b", 64, ("hf", "titan"))):
        for impl in impls:
            for seq in (2048, 8192):
                for zero in (3, 2):
                    for rc in ("none", "full"):
                        cases.append(case(model, impl, ranks, zero, rc, seq))
    for impl in ("hf", "titan"):
        cases.append(case("llama3-8b", impl, 8, 3, "selective", 8192))
        cases.append(case("llama3-8b", impl, 8, 3, "none", 2048, 2))
        cases.append(case("llama3-8b", impl, 8, 3, "full", 2048, 2))
    gpt = GPT_YAML
    for zero in (3, 2):
        for rc in ("none", "full"):
            cases.append(case(gpt, "titan", 8, zero, rc, 2048))
    cases.append(case(gpt, "titan", 8, 3, "none", 2048, 2))
    return cases


def tp_cases():
    """torchtitan-style model under FSDP2 × TP (sequence parallel, loss_parallel): reports/tp-memory.md."""
    return [case("llama3-8b", "titan", 16, 3, "full", 8192, tp=4), case("llama3-8b", "titan", 16, 3, "none", 8192, tp=4),
            case("llama3-8b", "titan", 8, 3, "selective", 4096, tp=2), case("llama3-8b", "titan", 16, 3, "full", 8192, tp=8),
            case("llama3-8b", "titan", 8, 2, "none", 2048, 2, tp=4), case("llama3-8b", "titan", 8, 3, "selective", 8192, tp=8),
            case("llama3-70b", "titan", 16, 3, "full", 4096, tp=8)]


def outside_cases():
    """Shapes outside the default table (bench/torch/shapes/): q/k/v biases (Qwen2.5 7B), tied embeddings (Llama 3.2
    1B), an attention wider than the model (head_dim 128 on a 2560-wide model, Qwen3-4B's shape), a small vocabulary
    (Mistral 7B); 16 and 32 ranks, 3-sequence micro-batches, seq 4096: the issue's check "shapes outside your own
    table" run here before anyone runs it elsewhere (reports/fsdp2-memory-outside.md)."""
    cases = []
    for impl in ("hf", "titan"):
        cases += [case(shape("qwen2.5-7b"), impl, 16, 3, "none", 4096), case(shape("qwen2.5-7b"), impl, 16, 2, "full", 4096),
                  case(shape("qwen2.5-7b"), impl, 16, 3, "selective", 4096),
                  case(shape("llama3.2-1b"), impl, 8, 3, "none", 4096, 3), case(shape("llama3.2-1b"), impl, 8, 2, "full", 4096, 3),
                  case(shape("wide-head-4b"), impl, 32, 3, "none", 4096), case(shape("wide-head-4b"), impl, 32, 3, "full", 4096, 2),
                  case(shape("mistral-7b"), impl, 16, 3, "selective", 4096, 2), case(shape("mistral-7b"), impl, 16, 2, "none", 4096)]
    # every projection biased (GPT-style), and torchtitan's TP plan over the new shapes
    cases += [case(GPT_YAML, "titan", 8, 3, "selective", 2048, 2),
              case(shape("qwen2.5-7b"), "titan", 16, 3, "selective", 4096, tp=4),
              case(shape("wide-head-4b"), "titan", 16, 3, "full", 8192, tp=2),
              case(shape("llama3.2-1b"), "titan", 8, 2, "none", 4096, 2, tp=2)]
    # hybrid sharding and gradient accumulation (torchtitan's train step reduces every micro-batch)
    cases += [case(shape("llama3.2-1b"), "titan", 16, 3, "full", 4096, 2, hsdp=8, ga=3),
              case(shape("qwen2.5-7b"), "hf", 16, 2, "none", 2048, ga=4),
              case(shape("mistral-7b"), "titan", 32, 3, "selective", 4096, hsdp=8, ga=2),
              case("llama3-8b", "titan", 8, 3, "selective", 4096, tp=2, ga=2)]
    return cases


def wrap_cases():
    """torchtitan's wrapping since 83e694105 (2025-07-28; torchtitan/distributed/fsdp.py apply_fsdp_to_decoder today):
    the embedding a unit of its own (resharded after forward as the blocks), the final norm with the LM head another
    (kept gathered after forward), the root empty; tied embeddings one unit of all three (reports/fsdp2-memory-wrap.md).
    The other tables wrap the blocks and the root, as torchtitan did before and `--fsdp-end-units root` predicts."""
    cases = []
    for seq in (2048, 8192):
        for zero in (3, 2):
            for rc in ("none", "full"):
                cases.append(case("llama3-8b", "titan", 8, zero, rc, seq, wrap="titan"))
    cases += [case("llama3-8b", "titan", 8, 3, "selective", 8192, wrap="titan"),
              case("llama3-8b", "titan", 8, 3, "none", 2048, 2, wrap="titan"),
              case("llama3-8b", "titan", 8, 3, "selective", 4096, ga=2, wrap="titan"),
              case("llama3-8b", "titan", 8, 3, "full", 4096, tp=2, wrap="titan"),
              case("llama3-70b", "titan", 64, 3, "full", 8192, wrap="titan"),
              case(shape("mistral-7b"), "titan", 16, 2, "selective", 4096, wrap="titan"),
              case(shape("llama3.2-1b"), "titan", 8, 3, "none", 4096, 3, wrap="titan")]
    # the same units around transformers' model, whose loss runs inside the root's forward: the root, empty now, has
    # no parameter group and prefetches nothing before the loss's backward
    cases += [case("llama3-8b", "hf", 8, 3, "none", 2048, wrap="titan"), case("llama3-8b", "hf", 8, 3, "full", 8192, wrap="titan"),
              case("llama3-8b", "hf", 8, 2, "selective", 4096, wrap="titan")]
    return cases


def cp_cases():
    """Context parallelism as torchtitan runs it (torch's context_parallel, K/V all-gathered, dK/dV rotated in fp32):
    torchtitan's Table 2 shape (Llama 3.1 8B on 8 GPUs, 32,768 tokens a rank, full checkpointing, K/V repeated as
    its 2024 Llama did, blocks and root wrapped) at CP 1–8, and grouped K/V, no checkpointing, ZeRO-2, torchtitan's
    wrapping and a 70B beside them (reports/cp-memory.md). Not selective checkpointing: the harness's ring runs inside
    an autograd.Function whose inner ops the policy would see, where on a GPU it sees the one flash op (cp_plan.py)."""
    cases = [case("llama3-8b", "titan", 8, 3, "full", 32768 * cp, cp=cp, kv="repeated") for cp in (1, 2, 4, 8)]
    cases += [case("llama3-8b", "titan", 8, 3, "full", 65536, cp=2), case("llama3-8b", "titan", 8, 3, "none", 16384, cp=2),
              case("llama3-8b", "titan", 8, 2, "none", 16384, cp=2, kv="repeated"),
              case("llama3-8b", "titan", 8, 2, "full", 65536, cp=4, wrap="titan"),
              case("llama3-70b", "titan", 64, 3, "full", 16384, cp=2, kv="repeated"),
              case("llama3-70b", "titan", 64, 3, "full", 32768, cp=4), case("llama3-8b", "titan", 16, 3, "full", 65536, cp=8)]
    return cases


def partial_cases():
    """Full recomputation of some blocks only (planner/partial_recompute.hpp): the first N blocks as Megatron-Core's
    block method picks them (transformers' model, --framework fsdp --recompute-layers N) and every K-th as torchtitan's
    layer SAC does (its model, --framework torchtitan --recompute-every K); ZeRO-2 and 3, seq 2048 to 8192, a
    micro-batch of 2, accumulation, TP and a 70B (reports/fsdp2-memory-partial.md)."""
    cases = []
    for n in ("layers8", "layers16", "layers31"):
        cases.append(case("llama3-8b", "hf", 8, 3, n, 8192))
    for k in ("every2", "every4", "every32"):
        cases.append(case("llama3-8b", "titan", 8, 3, k, 8192))
    cases += [case("llama3-8b", "hf", 8, 2, "layers16", 4096), case("llama3-8b", "titan", 8, 2, "every3", 4096),
              case("llama3-8b", "titan", 8, 3, "every2", 2048, 2), case("llama3-8b", "hf", 8, 3, "layers4", 4096, ga=2),
              case("llama3-8b", "titan", 8, 3, "every2", 4096, tp=2), case(shape("llama3.2-1b"), "hf", 8, 3, "layers8", 8192),
              case("llama3-70b", "titan", 64, 3, "every4", 8192), case("llama3-70b", "hf", 64, 3, "layers40", 4096)]
    return cases


def mtp_cases():
    """torchtitan's multi-token prediction (torchtitan/models/deepseek_v3/mtp.py since 2026-08-11: MTPDecoder, MTPLoss,
    each MTP layer an FSDP unit of its own in torchtitan's wrapping; no pipeline or CP), on a Llama 3 8B trunk with one
    or two modules: ZeRO-2 and 3, no, full and selective checkpointing (which torchtitan does not apply to the MTP
    layers), seq 2048 to 8192, a 70B (reports/fsdp2-memory-mtp.md)."""
    cases = []
    for seq in (2048, 8192):
        for zero in (3, 2):
            for rc in ("none", "full"):
                cases.append(case("llama3-8b", "titan", 8, zero, rc, seq, wrap="titan", mtp=1))
    cases += [case("llama3-8b", "titan", 8, 3, "selective", 4096, wrap="titan", mtp=1),
              case("llama3-8b", "titan", 8, 3, "full", 4096, wrap="titan", mtp=2),
              case("llama3-8b", "titan", 8, 3, "none", 2048, 2, wrap="titan", mtp=1),
              case("llama3-8b", "titan", 8, 3, "selective", 4096, ga=2, wrap="titan", mtp=1),
              case(shape("llama3.2-1b"), "titan", 8, 3, "none", 4096, 2, wrap="titan", mtp=1),
              case("llama3-70b", "titan", 64, 3, "full", 8192, wrap="titan", mtp=1)]
    return cases


def quick_cases():
    return [case("llama3-8b", "hf", 8, 3, "none", 2048), case("llama3-8b", "titan", 8, 2, "full", 2048)]


def case_id(c) -> str:
    m = os.path.splitext(os.path.basename(c["model"]))[0]
    tp = f'-tp{c["tp"]}' if c.get("tp", 1) > 1 else ""
    tp += f'-hsdp{c["hsdp"]}' if c.get("hsdp") else ""
    ga = f'-ga{c["grad_accum"]}' if c.get("grad_accum", 1) > 1 else ""
    ga += f'-w{c["wrap"]}' if c.get("wrap", "blocks") != "blocks" else ""
    tp += f'-cp{c["cp"]}' if c.get("cp", 1) > 1 else ""
    ga += f'-kv{c["kv"]}' if c.get("kv", "grouped") != "grouped" else ""
    ga += f'-mtp{c["mtp"]}' if c.get("mtp") else ""
    return f'{m}-{c["impl"]}-n{c["ranks"]}{tp}-z{c["zero"]}-{c["recompute"]}-s{c["seq"]}-b{c["micro_batch"]}{ga}'


def model_path(c) -> str:
    """A case's model YAML: a path relative to the repository root, or absolute."""
    return os.path.join(ROOT, c["model"])


def model_flags(c, resolve=True):
    if not c["model"].endswith(".yaml"):
        return ["--preset", c["model"]]
    return ["--model", model_path(c) if resolve else c["model"]]


def model_yaml(shardplan, c, tmp) -> str:
    if c["model"].endswith(".yaml"):
        return model_path(c)
    path = os.path.join(tmp, c["model"] + ".yaml")
    if not os.path.exists(path):
        text = subprocess.run([shardplan, "presets", "show", c["model"]], check=True, capture_output=True,
                              text=True).stdout
        with open(path, "w") as f:
            f.write(text)
    return path


def framework_of(c) -> str:
    """shardplan's framework for an implementation: `fsdp` runs transformers' LlamaForCausalLM, `torchtitan` its own
    model (planner/framework.cpp)."""
    return "torchtitan" if c["impl"] == "titan" else "fsdp"


def end_units(c):
    """--fsdp-end-units for a case where its wrapping is not its framework's default (torchtitan's: units of their
    own; fsdp's: the root)."""
    wrap = c.get("wrap", "blocks")
    if c["impl"] == "titan" and wrap == "blocks":
        return ["--fsdp-end-units", "root"]
    if c["impl"] != "titan" and wrap == "titan":
        return ["--fsdp-end-units", "own"]
    return []


def recompute_flags(c):
    """A case's recomputation as shardplan's flags: layersN is --recompute-layers N, everyK --recompute-every K."""
    rc = c["recompute"]
    for prefix, flag in (("layers", "--recompute-layers"), ("every", "--recompute-every")):
        if rc.startswith(prefix):
            return ["--recompute", "full", flag, rc[len(prefix):]]
    return ["--recompute", rc]


def predict_cmd(shardplan, c, resolve=True):
    return [shardplan, "predict", *model_flags(c, resolve), "--framework", framework_of(c), "--precision", "amp-bf16",
            "--zero", str(c["zero"]), *recompute_flags(c), "--gpus", str(c["ranks"]),
            "--seq", str(c["seq"]), "--micro-batch", str(c["micro_batch"]),
            "--global-batch", str(c["micro_batch"] * c["ranks"] // c.get("tp", 1) // c.get("cp", 1) *
                                  c.get("grad_accum", 1)),
            "--gpu", "h100-sxm", *(["--tp", str(c["tp"])] if c.get("tp", 1) > 1 else []),
            *(["--cp", str(c["cp"])] if c.get("cp", 1) > 1 else []),
            *(["--attention-kv", c["kv"]] if c.get("kv", "grouped") != "grouped" else []),
            *(["--hsdp", str(c["hsdp"])] if c.get("hsdp") else []),
            *(["--mtp-layers", str(c["mtp"])] if c.get("mtp") else []), *end_units(c), "--format", "json"]


def measure(shardplan, c, tmp, results_dir, reuse, timeout):
    out = os.path.join(results_dir, case_id(c) + ".json")
    if reuse and os.path.exists(out):
        with open(out) as f:
            return json.load(f)
    cmd = [sys.executable, os.path.join(HERE, "fsdp2_mem.py"), "--model-yaml", model_yaml(shardplan, c, tmp),
           "--impl", c["impl"], "--ranks", str(c["ranks"]), "--zero", str(c["zero"]), "--recompute", c["recompute"],
           "--seq", str(c["seq"]), "--micro-batch", str(c["micro_batch"]), "--tp", str(c.get("tp", 1)),
           "--hsdp", str(c.get("hsdp", 0)), "--grad-accum", str(c.get("grad_accum", 1)),
           "--wrap", c.get("wrap", "blocks"), "--cp", str(c.get("cp", 1)), "--kv", c.get("kv", "grouped"),
           "--mtp", str(c.get("mtp", 0)), "--out", out]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{case_id(c)}: fsdp2_mem.py exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    print(f"  measured {case_id(c)} in {time.time() - t0:.0f} s", file=sys.stderr)
    with open(out) as f:
        return json.load(f)


def predicted_groups(pred) -> dict:
    """shardplan's components at its moment of the most allocated (predict's memory.allocated: what the tracker
    measures; the reported peak is the moment of the most reserved), regrouped as the tracker sees them. The items
    that split `buffers` into gathered parameters, gradient buffers and optimizer temporaries are the reserved
    peak's: used when the two moments are one."""
    mem = pred["memory"]
    alloc = mem["allocated"]
    comp = alloc["components"]
    g = {"params": comp["params"], "grads": comp["grads"], "opt": comp["master"] + comp["optimizer"],
         "act": comp["activations"], "logits": comp["logits"], "buffers": comp["buffers"]}
    g["total"] = alloc["bytes"]
    if alloc["phase"] != mem["peak_phase"]:
        return g
    g["buffers"] = 0
    for item in mem.get("items", []):
        if item["component"] != "buffers":
            continue
        what = item["what"]
        if "gathered" in what:
            g["params"] += item["bytes"]
        elif "gradient" in what:
            g["grads"] += item["bytes"]
        elif "optimizer" in what:
            g["opt"] += item["bytes"]
        else:
            g["buffers"] += item["bytes"]
    return g


def measured_groups(breakdown, logits) -> dict:
    b = breakdown
    act = b.get("Activation", 0) + b.get("Temp", 0) + b.get("Inputs", 0) - logits
    return {"params": b.get("Unsharded Param", 0) + b.get("All Gather", 0),
            "grads": b.get("Sharded Grad", 0) + b.get("Unsharded Grad", 0) + b.get("Reduce Scatter", 0),
            "opt": b.get("Sharded Param", 0) + b.get("OptState", 0), "act": act, "logits": logits,
            "buffers": b.get("Buffer", 0), "total": b.get("Total", 0)}


def describe(m) -> str:
    """A moment in words: phase, the unit (block k / root) and what runs."""
    if m is None:
        return "-"
    unit = m["unit"].rsplit(".", 1)[-1]
    where = f"block {unit}" if unit.isdigit() else ("root" if m["unit"] != "-" else "-")
    op = m["op"].replace("aten.", "").split(".default")[0]
    if m["phase"] == "optimizer":
        return f"optimizer step ({op})"
    if m["logits"] > 0 and m["phase"] == "backward":
        return f"cross-entropy backward ({op})"
    if m["logits"] > 0:
        return f"forward: lm_head + cross-entropy ({op})"
    state = {"POST_BW": "post-backward", "PRE_BW": "pre-backward", "BW": "backward", "PRE_FW": "pre-forward",
             "FW": "forward", "POST_FW": "post-forward"}.get(m["fsdp_state"], m["fsdp_state"])
    rc = " (recompute)" if m.get("recompute") else ""
    return f"{m['phase']}: {where} {state}{rc} ({op})"


def predicted_moment(pred) -> str:
    """shardplan's moment of the most allocated (predict's memory.allocated.phase, and the block for a block's
    backward)."""
    a = pred["memory"]["allocated"]
    phase = a.get("phase", "-")
    return f"block {a['block']} backward" if phase == "block backward" and a.get("block", -1) >= 0 else phase


def summary(rows, key) -> str:
    """Mean and range of the peak error over the rows whose case has `key` (impl, zero, recompute) values."""
    out = []
    for name, pick in key:
        errs = [100 * (r["pg"]["total"] - r["mg"]["total"]) / r["mg"]["total"] for r in rows if pick(r["case"])]
        if errs:
            out.append(f"| {name} | {len(errs)} | {sum(errs) / len(errs):+.2f} | {min(errs):+.2f} … {max(errs):+.2f} |")
    return "\n".join(out)


def gib(x) -> str:
    return f"{x / GIB:.2f}"


def cell(m, p) -> str:
    """measured / predicted (difference in GiB, and in % where the measured part is at least 0.05 GiB)."""
    d = f"{(p - m) / GIB:+.2f}"
    if m >= 0.05 * GIB:
        d += f", {100 * (p - m) / m:+.0f} %"
    return f"{gib(m)} / {gib(p)} ({d})"


def shardplan_block_bytes(pred, tokens):
    """Saved activation bytes per token per block in shardplan's items ("L blocks × m micro-batches ...")."""
    for item in pred["memory"].get("items", []):
        what = item["what"]
        if item["component"] == "activations" and " blocks × " in what and what.split()[0].isdigit():
            in_flight = float(what.split(" × ")[1].split()[0])
            return item["bytes"] / (int(what.split()[0]) * in_flight * tokens)
    return 0.0


def shardplan_logit_bytes(pred):
    for item in pred["memory"].get("items", []):
        if item["component"] == "logits" and "B/element" in item["what"]:
            return float(item["what"].split("(")[1].split(" B/element")[0])
    return 0.0


def short(c) -> str:
    m = os.path.splitext(os.path.basename(c["model"]))[0]
    tp = f' TP{c["tp"]}' if c.get("tp", 1) > 1 else ""
    tp += f' HSDP{c["hsdp"]}' if c.get("hsdp") else ""
    ga = f' ×{c["grad_accum"]}' if c.get("grad_accum", 1) > 1 else ""
    ga += f' wrap {c["wrap"]}' if c.get("wrap", "blocks") != "blocks" else ""
    tp += f' CP{c["cp"]}' if c.get("cp", 1) > 1 else ""
    ga += f' K/V {c["kv"]}' if c.get("kv", "grouped") != "grouped" else ""
    ga += f' MTP {c["mtp"]}' if c.get("mtp") else ""
    return f'{m} {c["impl"]} N={c["ranks"]}{tp} Z{c["zero"]} {c["recompute"]} s{c["seq"]} b{c["micro_batch"]}{ga}'


def render(rows, argv, started, seconds, case_set="default") -> str:
    title = {"outside": "FSDP2 (and × TP) memory on shapes outside the default table",
             "tp": "FSDP2 × TP memory", "wrap": "torchtitan's FSDP2 wrapping since July 2025",
             "cp": "FSDP2 × context parallelism memory",
             "mtp": "torchtitan's multi-token prediction under FSDP2"}.get(case_set, "FSDP2 memory")
    lines = [f"# {title}: PyTorch's allocations against `shardplan predict`", "",
             "Generated by `bench/torch/compare.py` (issue 15, item 1). Command:", "",
             "```", " ".join(shlex.quote(a) for a in argv), "```", "",
             "(from the repository root, after `scripts/torch-venv.sh`; each case's own command is "
             "`bench/torch/fsdp2_mem.py` with the flags of its row, and `shardplan predict` as in the JSON beside "
             "this file).", "",
             f"Rendered {started} UTC; the cases took {seconds:.0f} s of harness time in all; torch {rows[0]['meas']['versions']['torch']}, transformers "
             f"{rows[0]['meas']['versions']['transformers']}; one H100-SXM rank (`--gpu h100-sxm`). "
             "Measured: step 2's peak of FSDPMemTracker over fake tensors (allocations rounded to 512 B as the "
             "CUDA caching allocator does). Predicted: `shardplan predict`'s moment of the most allocated "
             "(`memory.allocated`: its allocation less `runtime` and `fragmentation`). GiB = 2^30 bytes. `hf` = transformers LlamaForCausalLM (sdpa), `titan` = "
             "torchtitan-style model (bench/torch/models.py). Error = (predicted − measured) / measured.", "",
             "## Peaks", "",
             "| case | measured GiB | moment of the measured peak | shardplan GiB (less runtime, frag.) | shardplan's moment | error % |",
             "|---|---:|---|---:|---|---:|"]
    errs = []
    for r in rows:
        m, p = r["mg"], r["pg"]
        e = 100 * (p["total"] - m["total"]) / m["total"]
        errs.append(e)
        lines.append(f"| {short(r['case'])} | {gib(m['total'])} | {describe(r['meas']['peak']['moment'])} | "
                     f"{gib(p['total'])} | {predicted_moment(r['pred'])} | {e:+.1f} |")
    groups = [("transformers (`hf`, --framework fsdp)", lambda c: c["impl"] == "hf"),
              ("torchtitan-style (`titan`, --framework torchtitan)", lambda c: c["impl"] == "titan"),
              ("ZeRO-3", lambda c: c["zero"] == 3), ("ZeRO-2", lambda c: c["zero"] == 2),
              ("no recompute", lambda c: c["recompute"] == "none"), ("full recompute", lambda c: c["recompute"] == "full"),
              ("selective recompute", lambda c: c["recompute"] == "selective"),
              ("first N blocks recomputed", lambda c: c["recompute"].startswith("layers")),
              ("every K-th block recomputed", lambda c: c["recompute"].startswith("every")),
              ("GPT-style (LayerNorm, GELU)", lambda c: c["model"] == GPT_YAML)]
    lines += ["", f"Error over {len(errs)} cases: mean {sum(errs) / len(errs):+.1f} %, range {min(errs):+.1f} … "
              f"{max(errs):+.1f} %, mean |error| {sum(abs(e) for e in errs) / len(errs):.1f} %.", "",
              "| group | cases | mean error % | range % |", "|---|---:|---:|---:|", summary(rows, groups), "",
              "## Components at the measured peak (GiB, measured / predicted, error %)", "",
              "params = gathered bf16 weights (Unsharded Param + All Gather; shardplan params + gathered-parameter "
              "buffers); grads = Sharded + Unsharded Grad + Reduce Scatter (shardplan grads + gradient buffers); "
              "opt = fp32 shards + Adam states (Sharded Param + OptState; shardplan master + optimizer + "
              "optimizer temporaries); act = Activation + Temp + Inputs less logits; logits = tensors whose last "
              "dimension is the vocabulary; buffers = module buffers (RoPE tables; shardplan's other buffers).", "",
              "| case | params | grads | opt+master | act | logits | buffers |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        m, p = r["mg"], r["pg"]
        cells = [cell(m[k], p[k]) for k in ("params", "grads", "opt", "act", "logits", "buffers")]
        lines.append(f"| {short(r['case'])} | " + " | ".join(cells) + " |")
    lines += ["", "## The largest moments of each case (step 2, GiB)", "",
              "Each moment is the highest allocation while one FSDP unit's hook state lasts (README.md, "
              "\"Moments\"); the three largest distinct ones.", "",
              "act B/token/block: what one block keeps for backward (measured: median growth per block in "
              "forward; shardplan: its per-block activation item); logit B/element: the most bytes per logit held "
              "at once (measured) and shardplan's logits figure.", "",
              "| case | 1st | 2nd | 3rd | act B/token/block (meas. / shardplan) | logit B/element (meas. / shardplan) |",
              "|---|---|---|---|---:|---:|"]
    for r in rows:
        seen, top = set(), []
        for mo in r["meas"]["moments"]:
            d = describe(mo)
            key = d.split(" (")[0]
            if key in seen:
                continue
            seen.add(key)
            top.append(f"{gib(mo['bytes'])} {d}")
            if len(top) == 3:
                break
        dv = r["meas"]["derived"]
        act = dv["activation_bytes_per_token_per_block"]
        tokens = r["case"]["seq"] * r["case"]["micro_batch"] // r["case"].get("cp", 1)  # a rank's tokens
        lines.append(f"| {short(r['case'])} | " + " | ".join(top + [""] * (3 - len(top))) +
                     f" | {act:.0f} / {shardplan_block_bytes(r['pred'], tokens):.0f} | "
                     f"{dv['max_logit_bytes_per_element']:.1f} / {shardplan_logit_bytes(r['pred']):.1f} |")
    lines += ["", "## Time per case (s, on the 2-core development machine)", "",
              "| case | build | step 1 | step 2 | total |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        s = r["meas"]["seconds"]
        lines.append(f"| {short(r['case'])} | {s['build_s']} | {s['step1']} | {s['step2']} | {s['total_s']} |")
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def find_shardplan():
    for cand in ("build/shardplan", "build/cli/shardplan"):
        p = os.path.join(ROOT, cand)
        if os.access(p, os.X_OK):
            return p
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shardplan", default=find_shardplan(), help="the shardplan binary (default build/shardplan)")
    ap.add_argument("--cases", choices=["default", "quick", "tp", "outside", "wrap", "cp", "partial", "mtp"],
                    default="default")
    ap.add_argument("--only", default="", help="run only the cases whose id contains this text")
    ap.add_argument("--results", help="folder for each case's JSON (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="use a case's JSON from --results when it is there")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per case")
    ap.add_argument("--out", help="Markdown report to write (findings below the keep mark are kept)")
    ap.add_argument("--json", help="also write rows (case, measured, predicted) as JSON")
    args = ap.parse_args(argv)
    if not args.shardplan or not os.access(args.shardplan, os.X_OK):
        print("error: --shardplan: no shardplan binary found; build it and pass its path", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    cases = {"default": default_cases, "quick": quick_cases, "tp": tp_cases, "outside": outside_cases,
             "wrap": wrap_cases, "cp": cp_cases, "partial": partial_cases, "mtp": mtp_cases}[args.cases]()
    cases = [c for c in cases if args.only in case_id(c)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        results = args.results or tmp
        os.makedirs(results, exist_ok=True)
        for c in cases:
            meas = measure(args.shardplan, c, tmp, results, args.reuse, args.timeout)
            r = subprocess.run(predict_cmd(args.shardplan, c), capture_output=True, text=True, check=True)
            pred = json.loads(r.stdout)
            counted = pred["model"]["params"] + pred["model"].get("mtp_params", 0)  # the MTP modules built too
            if counted != meas["model"]["params"]:
                print(f"warning: {case_id(c)}: shardplan counts {counted} parameters, the built "
                      f"model {meas['model']['params']}", file=sys.stderr)
            peak = meas["peak"]
            logits = peak["moment"]["logits"] if peak["moment"] else 0
            rows.append({"case": c, "meas": meas, "pred": pred, "mg": measured_groups(peak["breakdown"], logits),
                         "pg": predicted_groups(pred), "predict_command": predict_cmd("shardplan", c, resolve=False)})
    if not rows:
        print("error: --only: no case matches", file=sys.stderr)
        return 2
    python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else sys.executable
    text = render(rows, [python, "bench/torch/compare.py"] + (argv if argv is not None else sys.argv[1:]), started,
                  sum(r["meas"]["seconds"]["total_s"] for r in rows), args.cases)
    if args.out:
        kept = ""
        if os.path.exists(args.out):
            with open(args.out) as f:
                old = f.read()
            if KEEP_MARK in old:
                kept = old[old.index(KEEP_MARK) + len(KEEP_MARK):]
        write_atomic(args.out, text + "\n" + KEEP_MARK + kept)
    if args.json:
        slim = [{"case": r["case"], "predict_command": r["predict_command"], "measured": r["mg"],
                 "predicted": r["pg"], "peak_moment": r["meas"]["peak"]["moment"],
                 "moments": r["meas"]["moments"][:8], "derived": r["meas"]["derived"],
                 "checks": r["meas"]["checks"], "predicted_components": r["pred"]["memory"]["components"]}
                for r in rows]
        write_atomic(args.json, json.dumps(slim, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
