"""Sync: torch.cuda.synchronize() between forward and backward and after the optimizer step."""

from __future__ import annotations

import torch
from common import Step, front_body, is_cuda

EXPECTED = "sync_calls"
FIX_REMEDIES = ("remove_syncs",)  # the remedies it applies (variants.py)
DESCRIPTION = ("torch.cuda.synchronize() between forward and backward and after opt.step() "
               "(same front/body model as item_every_step) -> fixed: both removed")


def build(fixed: bool, device: str) -> Step:
    m = front_body(device)
    cuda = is_cuda(device)

    def step() -> None:
        loss = m.forward()
        if not fixed and cuda:
            torch.cuda.synchronize()  # planted
        m.backward_and_step(loss)
        if not fixed and cuda:
            torch.cuda.synchronize()  # planted

    return Step(step, info={"n_front": m.n_front})
