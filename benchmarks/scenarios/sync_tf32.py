"""Two planted problems in one step: a sync after every step, and fp32 matmuls without TF32.

Each step does ~6 ms of host-side numpy work (bookkeeping the user's loop does between steps),
then trains an fp32 MLP with TF32 off, then calls ``torch.cuda.synchronize()`` (left in for
timing). The sync makes the host work and the GPU's compute take turns. Removing it
(``remove_syncs``) lets the next step's host work run beside this step's compute: the step is
the longer of the two. TF32 (``tf32``) shortens the compute and keeps the turns. Both (variant
``both``, the default fix): the host work is left, the TF32 compute hides under it. The pair
saves less than the sum of the two fixes alone (both act on the compute's time): the report's
``plan.subsets`` row of the two is scored against it.
"""

from __future__ import annotations

import numpy as np
import torch
import variants
from common import Step, adamw, calibrate, is_cuda, mlp, pick, randn, tf32_flags, train_step

EXPECTED = "no_tensor_cores"
DESCRIPTION = ("~6 ms of host numpy work per step, then an fp32 MLP (3 x Linear(4096, 4096), "
               "batch 2048) with TF32 off, then torch.cuda.synchronize() -> fixed (both): the "
               "sync removed and TF32 on; variants: only the sync removed (remove_syncs), only "
               "TF32 (tf32)")
# fix variants and the report's remedy ids they apply (variants.py); the first is --fixed
VARIANTS = {"both": ("remove_syncs", "tf32"), "remove_syncs": ("remove_syncs",),
            "tf32": ("tf32",)}


def _host_work(a: np.ndarray, rounds: int) -> float:
    """The loop's host-side bookkeeping: elementwise numpy work, the same every step."""
    x = a
    for _ in range(rounds):
        x = np.tanh(x * np.float32(1.0001) + np.float32(0.001))
    return float(x[0])


def build(fixed: bool | str, device: str) -> Step:
    variant = variants.pick(fixed, VARIANTS)
    sync = variant in (None, "tf32") and is_cuda(device)
    tf32 = variant in ("both", "tf32")
    batch, width, layers, host_ms = pick(device, (2048, 4096, 3, 6.0), (64, 64, 2, 1.0))
    host = np.random.default_rng(3).standard_normal(1 << 16, dtype=np.float32)
    rounds = calibrate("sync_tf32:host", lambda n: _host_work(host, n), host_ms)
    model = mlp([width] * (layers + 1), device)
    opt = adamw(model, device)
    x = randn(batch, width, device=device, seed=31)
    seen: list[float] = []

    def step() -> None:
        seen[:] = [_host_work(host, rounds)]
        tf32_flags(tf32)
        train_step(model, opt, x, device=device)
        if sync:
            torch.cuda.synchronize()  # planted

    return Step(step, info={"batch": batch, "width": width, "layers": layers,
                            "host_rounds": rounds, "host_ms": host_ms, "sync": sync,
                            "tf32": tf32, "variant": variant})
