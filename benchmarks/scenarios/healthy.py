"""Healthy: large bf16 GEMMs on GPU-resident data, fused AdamW. Fixed == baseline."""

from __future__ import annotations

import torch
from common import Step, adamw, mlp, pick, randn, train_step

EXPECTED = ""
DESCRIPTION = ("bf16-autocast MLP, 6 x Linear(4096, 4096) on a GPU-resident batch of 8192, "
               "fused AdamW; nothing planted (fixed == baseline)")


def build(fixed: bool, device: str) -> Step:
    batch, width, layers = pick(device, (8192, 4096, 6), (64, 64, 2))
    model = mlp([width] * (layers + 1), device)
    opt = adamw(model, device)
    x = randn(batch, width, device=device, seed=1)

    def step() -> None:
        train_step(model, opt, x, device=device, amp=torch.bfloat16)

    return Step(step, info={"batch": batch, "width": width, "layers": layers})
