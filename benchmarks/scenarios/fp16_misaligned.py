"""Tensor cores misaligned: fp16 GEMMs whose dimensions are not multiples of 8."""

from __future__ import annotations

import torch
from common import Step, adamw, mlp, pick, randn, train_step

EXPECTED = "tc_misaligned"
DESCRIPTION = ("fp16-autocast MLP, 3 x Linear(4095, 4095) on 8192 rows (K and N odd: no "
               "16-byte aligned rows) -> fixed: 4096 (same FLOPs within 0.1%)")


def build(fixed: bool, device: str) -> Step:
    rows, layers = pick(device, (8192, 3), (64, 2))
    width = pick(device, 4096, 64) if fixed else pick(device, 4095, 63)
    model = mlp([width] * (layers + 1), device)
    opt = adamw(model, device)
    x = randn(rows, width, device=device, seed=10)

    def step() -> None:
        train_step(model, opt, x, device=device, amp=torch.float16)

    return Step(step, info={"rows": rows, "width": width, "layers": layers})
