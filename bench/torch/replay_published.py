#!/usr/bin/env python3
"""torchtitan's six published reserves (reports/allocator-replay.md), replayed: each row's harness run with
--alloc-replay, its allocated and replayed peaks written to a JSON that tests/test_published_runs.cpp compares
shardplan's predicted reserve with.

  .venv-torch/bin/python bench/torch/replay_published.py --shardplan build/shardplan \\
      --out reports/allocator-replay.json          # ~5 min on 2 cores

Each case names the bench/data row it stands for (source, model, micro-batch, sequence, CP 1); the 405B cases are
stage 0 under Float8, as pp_mem.py runs it.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 2**30

FSDP = ["--impl", "titan", "--zero", "3"]
PP405 = ["--pp", "8", "--pp-rank", "0", "--dp", "8", "--tp", "8", "--layers-per-stage", "15", "--n-microbatches", "8",
         "--ac-early-stop", "--float8"]
CASES = [  # (source, preset, harness, arguments)
    ("TT-2412-T1", "llama3-8b", "fsdp2_mem.py", FSDP + ["--ranks", "8", "--recompute", "selective", "--seq", "8192",
                                                        "--micro-batch", "2"]),
    ("TT-2412-T2", "llama3-8b", "fsdp2_mem.py", FSDP + ["--ranks", "8", "--recompute", "full", "--seq", "32768",
                                                        "--micro-batch", "1"]),
    ("TT-2412-T3", "llama3-8b", "fsdp2_mem.py", FSDP + ["--ranks", "128", "--recompute", "selective", "--seq", "8192",
                                                        "--micro-batch", "2"]),
    ("TT-2412-T4", "llama3-70b", "fsdp2_mem.py", FSDP + ["--ranks", "256", "--tp", "8", "--recompute", "full",
                                                         "--seq", "8192", "--micro-batch", "16"]),
    ("TT-2412-T5", "llama3-405b", "pp_mem.py", PP405 + ["--seq", "8192", "--micro-batch", "4"]),
    ("TT-2412-T6", "llama3-405b", "pp_mem.py", PP405 + ["--seq", "32768", "--micro-batch", "1"]),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shardplan", default="build/shardplan", help="for the presets' model YAML")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for source, preset, harness, extra in CASES:
            yaml_path = os.path.join(tmp, preset + ".yaml")
            if not os.path.exists(yaml_path):
                with open(yaml_path, "w") as f:
                    f.write(subprocess.run([args.shardplan, "presets", "show", preset], capture_output=True, text=True,
                                           check=True).stdout)
            out = os.path.join(tmp, source + ".json")
            cmd = [sys.executable, os.path.join(HERE, harness), "--model-yaml", yaml_path, *extra, "--alloc-replay",
                   "--out", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"error: {source}: {harness} exited {r.returncode}: {r.stderr[-500:]}", file=sys.stderr)
                return 2
            with open(out) as f:
                d = json.load(f)
            c = d["case"]
            row = {"source": source, "model": preset, "seq": c["seq"], "micro_batch": c["micro_batch"],
                   "allocated_bytes": d["peak"]["bytes"], "replayed_reserved_bytes": d["allocator_replay"]["max_reserved"],
                   "replayed_expandable_reserved_bytes":
                       d["allocator_replay"]["expandable_segments"]["max_reserved"],
                   "command": " ".join([harness, "--model-yaml", preset + ".yaml", *extra, "--alloc-replay"])}
            rows.append(row)
            print(f"{source:12s} allocated {row['allocated_bytes'] / GiB:6.2f} GiB, replayed reserve "
                  f"{row['replayed_reserved_bytes'] / GiB:6.2f} GiB, with expandable segments "
                  f"{row['replayed_expandable_reserved_bytes'] / GiB:6.2f} GiB", flush=True)
    import torch
    result = {"torch": torch.__version__, "rows": rows}
    tmp_out = args.out + ".tmp"
    with open(tmp_out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp_out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
