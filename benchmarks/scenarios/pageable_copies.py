"""Pageable H2D: a 64 MB batch copied each step from pageable host memory."""

from __future__ import annotations

import torch
from common import Step, adamw, is_cuda, mlp, pick, train_step

EXPECTED = "pageable_memcpy"
FIX_REMEDIES = ("pinned_copies",)  # the remedies it applies (variants.py)
DESCRIPTION = ("64 MB fp32 batch copied each step from a pageable CPU tensor with .to('cuda'), "
               "then a modest bf16 MLP (~2 ms) -> fixed: pinned source + non_blocking=True")


def build(fixed: bool, device: str) -> Step:
    batch, feat, width = pick(device, (4096, 4096, 4096), (64, 64, 64))
    src = torch.randn(batch, feat, generator=torch.Generator().manual_seed(5))
    if fixed and is_cuda(device):
        src = src.pin_memory()
    model = mlp([feat, width, feat], device)
    opt = adamw(model, device)

    def step() -> None:
        if fixed:
            x = src.to(device, non_blocking=True)
        else:
            x = src.to(device)  # pageable source: staged, blocks the host
        train_step(model, opt, x, device=device, amp=torch.bfloat16)

    return Step(step, info={"copy_mb": src.numel() * 4 / 2**20, "pinned": src.is_pinned()})
