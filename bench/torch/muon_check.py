"""Muon against PyTorch's own (torch.optim.Muon): what planner/optimizer.hpp assumes of it.

Checks, on the CPU with small real matrices:
  - the Newton–Schulz FLOPs of one step: 5 steps × (4m²n + 2m³), m the shorter side (optimizer.hpp
    newton_schulz_flops), counted by torch.utils.flop_counter.FlopCounterMode for both orientations of a matrix;
  - the state: one momentum buffer per matrix parameter, of its shape and dtype (4 B a parameter for fp32 main
    parameters: kMuonMomentumBytes), where AdamW keeps two.
Megatron-Core's Muon (emerging_optimizers muon_utils.py newton_schulz) runs the same three products per step (X·Xᵀ,
B = bA + cA·A, aX + B·X); torch.optim.Muon is the implementation PyPI gives us to run.

    .venv-torch/bin/python bench/torch/muon_check.py     # prints one line per check, exit 1 on a mismatch
"""
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

STEPS = 5  # torch.optim.Muon's ns_steps default, as Megatron's --muon-num-ns-steps


def newton_schulz_flops(rows: int, cols: int, steps: int = STEPS) -> int:
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m * m * m)


def muon_step_flops(rows: int, cols: int) -> tuple[int, torch.optim.Optimizer, torch.nn.Parameter]:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(rows, cols))
    p.grad = torch.randn(rows, cols)
    opt = torch.optim.Muon([p], lr=0.02, ns_steps=STEPS)
    with FlopCounterMode(display=False) as counter:
        opt.step()
    return counter.get_total_flops(), opt, p


def main() -> int:
    failures = 0
    for rows, cols in [(256, 1024), (1024, 256), (384, 384), (96, 640)]:
        counted, opt, p = muon_step_flops(rows, cols)
        want = newton_schulz_flops(rows, cols)
        ok = counted == want
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'} Newton-Schulz FLOPs of [{rows}, {cols}]: torch counts {counted:,}, "
              f"5 x (4m^2n + 2m^3) = {want:,}")
        state = opt.state[p]
        buffers = {k: v for k, v in state.items() if torch.is_tensor(v) and v.shape == p.shape}
        ok = list(buffers) == ["momentum_buffer"] and buffers["momentum_buffer"].dtype == p.dtype
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'} state of [{rows}, {cols}]: {sorted(buffers)} "
              f"({sum(v.numel() * v.element_size() for v in buffers.values()) // p.numel()} B a parameter)")
    # AdamW keeps two (exp_avg, exp_avg_sq): what the 8 B of Adam's optimizer states are.
    p = torch.nn.Parameter(torch.randn(64, 64))
    p.grad = torch.randn(64, 64)
    adam = torch.optim.AdamW([p])
    adam.step()
    adam_buffers = sorted(k for k, v in adam.state[p].items() if torch.is_tensor(v) and v.shape == p.shape)
    ok = adam_buffers == ["exp_avg", "exp_avg_sq"]
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} AdamW's state: {adam_buffers}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
