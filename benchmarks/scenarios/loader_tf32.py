"""Two planted problems in one step: the input loaded in the training process, fp32 matmuls.

A ``DataLoader(num_workers=0)`` whose per-sample numpy transform runs in the training process
feeds an fp32 MLP trained with TF32 off, and the loop reads the loss each step
(``loss.item()``, for its progress line): the host waits for the step's GPU work before it
loads the next batch, so loading and computing take turns and each fix saves on its own.
(Without the read, the GPU's compute runs while the next batch loads, and TF32 alone saves
nothing: the first H100 run, 2026-11-26 20:35 UTC, showed it.) More loader workers
(``dataloader_workers``) hide the loading and leave the fp32 compute; TF32 (``tf32``) shortens
the compute and leaves the loading. Both (variant
``both``, the default fix) leave the TF32 compute: the report's ``plan.subsets`` row for the
two remedies together is scored against it.
"""

from __future__ import annotations

import numpy as np
import variants
from common import Step, adamw, calibrate, cycle, is_cuda, mlp, pick, tf32_flags, train_step
from dataloader_bound import Tokens, _transform, close_loader
from torch.utils.data import DataLoader

EXPECTED = "input_bound"
DESCRIPTION = ("DataLoader(num_workers=0) with a numpy transform calibrated to ~0.25 ms/sample "
               "(32 samples of 64 x 1024 per batch) feeding an fp32 MLP (1024 -> 4096 -> 4096 "
               "-> 4096 -> 1024, 2048 rows) with TF32 off, loss.item() each step -> fixed "
               "(both): num_workers=6, persistent_workers, pin_memory, prefetch_factor=2, and "
               "TF32 on; variants: only "
               "the loader (loader), only TF32 (tf32)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"both": ("dataloader_workers", "tf32"), "loader": ("dataloader_workers",),
            "tf32": ("tf32",)}
WORKERS = 6


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    workers = variant in ("both", "loader")
    tf32 = variant in ("both", "tf32")
    seq, feat, batch, width, sample_ms = pick(device, (64, 1024, 32, 4096, 0.25),
                                              (8, 32, 4, 64, 0.5))
    base = np.random.default_rng(0).standard_normal((seq, feat), dtype=np.float32)
    rounds = calibrate(f"loader_tf32:{seq}x{feat}", lambda n: _transform(base, n), sample_ms)
    ds = Tokens(seq, feat, rounds)
    if workers:
        loader = DataLoader(ds, batch_size=batch, num_workers=WORKERS, persistent_workers=True,
                            pin_memory=is_cuda(device), prefetch_factor=2)
    else:
        loader = DataLoader(ds, batch_size=batch, num_workers=0)
    it = cycle(lambda: iter(loader))
    model = mlp([feat, width, width, width, feat], device)
    opt = adamw(model, device)
    losses: list[float] = []

    def step() -> None:
        tf32_flags(tf32)
        xb = next(it).to(device, non_blocking=True)
        loss = train_step(model, opt, xb.view(-1, feat), device=device)
        losses.append(loss.item())  # the progress line's loss: waits for the step's GPU work
        del losses[:-100]

    return Step(step, close=lambda: close_loader(it, loader), info={"batch": batch, "sample": [seq, feat],
                                         "transform_rounds": rounds, "sample_ms": sample_ms,
                                         "num_workers": WORKERS if workers else 0,
                                         "tf32": tf32, "variant": variant})
