"""CPU-placed op mid-step: activations go to the host, get sorted there, and come back."""

from __future__ import annotations

import numpy as np
import torch
from common import Step, adamw, autocast, mlp, pick, randn

EXPECTED = "excess_transfers"
DESCRIPTION = ("mid-forward, 8 MB of activations go .cpu(), are sorted per row on the CPU "
               "(np.sort, single-threaded) and come back .to('cuda') as extra features -> fixed: "
               "the same sort on the GPU (torch.sort)")


def build(fixed: bool, device: str) -> Step:
    batch, feat, mid, width = pick(device, (8192, 1024, 256, 4096), (64, 32, 16, 64))
    enc = mlp([feat, width, mid], device, seed=1)
    dec = mlp([mid, width, width, feat], device, seed=2)
    opt = adamw(torch.nn.ModuleList([enc, dec]), device)
    x = randn(batch, feat, device=device, seed=6)

    def step() -> None:
        with autocast(device, torch.bfloat16):
            h = enc(x)
        hd = h.detach().float()
        if fixed:
            feats = torch.sort(hd, dim=1).values
        else:
            # planted round trip: D2H, numpy sort on the host, H2D
            feats = torch.from_numpy(np.sort(hd.cpu().numpy(), axis=1)).to(device)
        with autocast(device, torch.bfloat16):
            out = dec(h + feats)
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(step, info={"roundtrip_mb": batch * mid * 4 / 2**20})
