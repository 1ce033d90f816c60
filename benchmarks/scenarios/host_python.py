"""Host-bound: pure-Python bookkeeping between forward and backward."""

from __future__ import annotations

import math

import torch
from common import Step, adamw, autocast, calibrate, mlp, pick, randn

EXPECTED = "host_bound"
DESCRIPTION = ("~8 ms pure-Python loop (per-sample stats over a list) between forward and "
               "backward of a ~5 ms bf16 MLP -> fixed: the loop removed")


def _python_work(vals: list[float], repeats: int) -> float:
    acc = 0.0
    for _ in range(repeats):
        for v in vals:
            acc += math.sqrt(v * v + 1.0)
    return acc


def build(fixed: bool, device: str) -> Step:
    batch, width, layers, py_ms = pick(device, (8192, 4096, 4, 8.0), (64, 64, 2, 2.0))
    vals = [float(i % 113) * 0.01 for i in range(2000)]
    repeats = calibrate("host_python:loop", lambda n: _python_work(vals, n), py_ms)
    model = mlp([width] * (layers + 1), device)
    opt = adamw(model, device)
    x = randn(batch, width, device=device, seed=2)
    sink: list[float] = []

    def step() -> None:
        with autocast(device, torch.bfloat16):
            out = model(x)
        loss = out.float().square().mean()
        if not fixed:
            sink.append(_python_work(vals, repeats))  # the planted host work
            del sink[:-1]
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(step, info={"python_repeats": repeats, "python_target_ms": py_ms})
