"""Allocation churn: torch.cuda.empty_cache() at the end of every step."""

from __future__ import annotations

import torch
from common import Step, adamw, is_cuda, mlp, pick, randn, train_step

EXPECTED = "memory_pressure"
DESCRIPTION = ("torch.cuda.empty_cache() after every step of a bf16 MLP with ~64 MB activations "
               "(8192 x 4096) -> every block is cudaFree'd and cudaMalloc'd again each step; "
               "fixed: the call removed")


def build(fixed: bool, device: str) -> Step:
    batch, width, layers = pick(device, (8192, 4096, 4), (64, 64, 2))
    model = mlp([width] * (layers + 1), device)
    opt = adamw(model, device)
    x = randn(batch, width, device=device, seed=12)
    cuda = is_cuda(device)

    def step() -> None:
        train_step(model, opt, x, device=device, amp=torch.bfloat16)
        if not fixed and cuda:
            torch.cuda.empty_cache()  # planted

    return Step(step, info={"batch": batch, "width": width, "layers": layers})
