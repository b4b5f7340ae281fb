#!/usr/bin/env python3
"""simulate against predict over random layouts: how often the played step's memory peak (or step time) and the
analytic one differ by more than a tolerance (issue 15: "simulate's memory over time and predict's peak agree within
3 %"). Standard library only; runs the shardplan binary.

    python3 bench/sim_agreement.py build/shardplan --layouts 3000 --seeds 7 11 23            # memory peaks
    python3 bench/sim_agreement.py build/shardplan --layouts 3000 --seeds 7 --metric step_s  # step times
    python3 bench/sim_agreement.py build/shardplan --layouts 1000 --seeds 7 --muon            # Muon under megatron

Layouts are drawn per seed from a fixed menu (models, runtimes, ZeRO, recomputation, TP/SP, PP/VPP, CP, EP, FP8, the
fused loss, micro-batch, sequence); those a runtime refuses (exit 2) are skipped and counted apart. Prints each layout
beyond the tolerance and a summary line per seed, with how many name the peak's moment differently (simulate's op
against predict's moment: "block 78 backward", "cross-entropy backward", "optimizer step", "forward/backward");
--show-moments prints those layouts with both names.
"""
import argparse
import json
import random
import subprocess
import sys

MODELS = [  # preset, cluster, GPUs
    ("llama3-8b", "dgx-h100", 16), ("llama3-70b", "dgx-h100", 64), ("mixtral-8x7b", "dgx-h100", 64),
    ("qwen3-30b-a3b", "dgx-h100", 16), ("gpt-1.7b", "dgx-a100-80g", 32), ("llama3-70b", "gb200-nvl72", 64),
    ("deepseek-v3", "gb200-nvl72-superpod", 256), ("gpt-oss-120b", "dgx-b200", 64), ("llama3-405b", "dgx-h100", 512),
]
MOE = ("mixtral", "qwen3", "deepseek", "oss")
FRAMEWORKS = ["megatron", "fsdp", "torchtitan", "fsdp1", "deepspeed"]


def draw(rng, partial=False, muon=False):
    model, cluster, gpus = rng.choice(MODELS)
    tp, pp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 1, 2])
    if gpus % (tp * pp * cp):
        return None
    args = ["--preset", model, "--cluster", cluster, "--gpus", str(gpus), "--framework", rng.choice(FRAMEWORKS),
            "--zero", str(rng.choice([0, 1, 2, 3])), "--recompute", rng.choice(["none", "selective", "full"]),
            "--tp", str(tp), "--pp", str(pp), "--cp", str(cp), "--micro-batch", str(rng.choice([1, 2, 4])),
            "--seq", str(rng.choice([2048, 4096, 8192]))]
    if tp > 1 and rng.random() < 0.8:
        args.append("--sp")
    if pp > 1 and rng.random() < 0.5:
        args += ["--vpp", "2", "--schedule", "interleaved"]
    if any(k in model for k in MOE):
        args += ["--ep", str(rng.choice([4, 8]))]
    if rng.random() < 0.2:
        args += ["--fp8", "tensorwise"]
    if rng.random() < 0.3:
        args += ["--loss", "fused"]
    # --partial-recompute: full recomputation of some blocks only, as the runtime picks them (only drawn then, so the
    # other draws of a seed stay as they were)
    if partial:
        framework = args[args.index("--framework") + 1]
        args[args.index("--recompute") + 1] = "full"
        if framework == "torchtitan":
            args += ["--recompute-every", str(rng.choice([2, 3, 4]))]
        elif framework in ("megatron", "fsdp", "fsdp1"):
            args += ["--recompute-layers", str(rng.choice([1, 2, 3, 5]))]
        else:
            return None
    # --muon: Megatron-Core's Muon (planner/optimizer.hpp), which runs under megatron with ZeRO 0 or 1 only, in one of
    # its three TP modes
    if muon:
        args[args.index("--framework") + 1] = "megatron"
        args[args.index("--zero") + 1] = str(rng.choice([0, 1]))
        args += ["--optimizer", "muon", "--muon-tp-mode", rng.choice(["duplicated", "distributed", "blockwise"])]
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--layouts", type=int, default=3000, help="draws per seed (refused and unschedulable ones skipped)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 11, 23])
    ap.add_argument("--metric", choices=["peak_bytes", "step_s"], default="peak_bytes")
    ap.add_argument("--tolerance", type=float, default=3.0, help="percent")
    ap.add_argument("--partial-recompute", action="store_true",
                    help="every draw recomputes some blocks only (--recompute-layers / --recompute-every)")
    ap.add_argument("--muon", action="store_true",
                    help="every draw under megatron with --optimizer muon (ZeRO 0 or 1)")
    ap.add_argument("--show-moments", action="store_true",
                    help="print each layout whose peak's moment the two name differently, with both names")
    a = ap.parse_args()
    total_ran = total_beyond = 0
    for seed in a.seeds:
        rng = random.Random(seed)
        ran = beyond = refused = renamed = 0
        for _ in range(a.layouts):
            args = draw(rng, a.partial_recompute, a.muon)
            if args is None:
                continue
            r = subprocess.run([a.binary, "simulate", "--format", "json"] + args, capture_output=True, text=True)
            if r.returncode != 0:
                refused += 1
                continue
            out = json.loads(r.stdout)
            diff = out["difference_pct"][a.metric]
            memory = out["memory"]
            if memory["peak_moment"] != memory["analytic_peak_moment"]:
                renamed += 1
                if a.show_moments:
                    print(f"moment  {out['difference_pct']['peak_bytes']:+5.2f} %  simulate '{memory['peak_moment']}', "
                          f"predict '{memory['analytic_peak_moment']}'  {' '.join(args)}")
            ran += 1
            if abs(diff) > a.tolerance:
                beyond += 1
                print(f"{diff:+6.1f} %  {' '.join(args)}")
        print(f"seed {seed}: {ran} layouts simulated ({refused} refused), {beyond} beyond {a.tolerance:g} % on {a.metric}; "
              f"the peak's moment named differently in {renamed}")
        total_ran += ran
        total_beyond += beyond
    print(f"all seeds: {total_beyond} of {total_ran} beyond {a.tolerance:g} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
