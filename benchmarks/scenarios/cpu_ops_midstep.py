"""CPU-placed op mid-step: activations go to the host, get sorted there, and come back."""

from __future__ import annotations

import numpy as np
import torch
import variants
from common import Step, adamw, autocast, is_cuda, mlp, pick, randn

EXPECTED = "excess_transfers"
DESCRIPTION = ("mid-forward, 8 MB of activations go .cpu(), are sorted per row on the CPU "
               "(np.sort, single-threaded) and come back .to('cuda') as extra features -> fixed: "
               "the same sort on the GPU (torch.sort); variant pinned: the round trip and the "
               "host sort kept, through pinned buffers with non_blocking copies")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
# (the GPU sort moves the host op to the GPU: the report's ops_to_gpu, not remove_round_trip,
# which keeps the host compute)
VARIANTS = {"gpu_sort": ("ops_to_gpu",), "pinned": ("pinned_copies",), "pinned_inplace": ()}
# pinned_inplace (before 2026-11-27 16:30 UTC the variant called "pinned") also sorts the
# pinned input buffer in place: it drops np.sort's 8 MiB copy into a new array, which is not
# the remedy's change (the pinned_copies remedy keeps the host's work), so it applies no
# remedy id and is timed for the record only
# the GPU sort leaves no copy and no sync to fix: it also measures the plan of them all
PLAN_COVERS = {"gpu_sort": ("ops_to_gpu", "remove_round_trip", "pinned_copies",
                            "remove_syncs")}


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    batch, feat, mid, width = pick(device, (8192, 1024, 256, 4096), (64, 32, 16, 64))
    enc = mlp([feat, width, mid], device, seed=1)
    dec = mlp([mid, width, width, feat], device, seed=2)
    opt = adamw(torch.nn.ModuleList([enc, dec]), device)
    x = randn(batch, feat, device=device, seed=6)
    pin = variant in ("pinned", "pinned_inplace")
    pinned = torch.empty(batch, mid, pin_memory=is_cuda(device)) if pin else None
    sorted_out = torch.empty(batch, mid, pin_memory=is_cuda(device)) \
        if variant == "pinned" else None

    def round_trip(hd: torch.Tensor) -> torch.Tensor:
        if pinned is None:
            # planted round trip: D2H, numpy sort on the host, H2D (pageable both ways)
            return torch.from_numpy(np.sort(hd.cpu().numpy(), axis=1)).to(device)
        # the user's pinned fix: D2H into a pinned buffer, wait for it (the sort needs the
        # data), sort, H2D non_blocking (the next step's D2H queues behind it, so the buffers
        # are free again when the host writes them)
        pinned.copy_(hd, non_blocking=True)
        if is_cuda(device):
            torch.cuda.current_stream().synchronize()
        if sorted_out is None:  # pinned_inplace: sort the input buffer itself
            pinned.numpy().sort(axis=1)
            return pinned.to(device, non_blocking=True)
        # pinned: np.sort's work (a copy of the rows, sorted in place) into a pinned buffer
        out = sorted_out.numpy()
        np.copyto(out, pinned.numpy())
        out.sort(axis=1)
        return sorted_out.to(device, non_blocking=True)

    def step() -> None:
        with autocast(device, torch.bfloat16):
            h = enc(x)
        hd = h.detach().float()
        if variant == "gpu_sort":
            feats = torch.sort(hd, dim=1).values
        else:
            feats = round_trip(hd)
        with autocast(device, torch.bfloat16):
            out = dec(h + feats)
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Step(step, info={"roundtrip_mb": batch * mid * 4 / 2**20, "variant": variant})
