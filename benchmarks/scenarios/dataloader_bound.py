"""Input-bound: a DataLoader whose per-sample CPU transform runs in the training process."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from common import Step, adamw, calibrate, cycle, is_cuda, mlp, pick, train_step
from torch.utils.data import DataLoader, Dataset

EXPECTED = "input_bound"
FIX_REMEDIES = ("dataloader_workers",)  # the remedies it applies (variants.py)
DESCRIPTION = ("DataLoader(num_workers=0) with a numpy transform calibrated to ~0.2 ms/sample "
               "(32 samples/batch) feeding a ~6 ms bf16 MLP -> fixed: num_workers=8, "
               "persistent_workers, pin_memory, prefetch_factor=4")


def _transform(x: np.ndarray, rounds: int) -> np.ndarray:
    """A CPU-heavy augmentation: repeated elementwise numpy work (same cost every sample)."""
    for _ in range(rounds):
        x = np.tanh(x * np.float32(1.0001) + np.float32(0.001))
    return x


class Tokens(Dataset):
    """Endless synthetic samples of [seq, feat] float32, made from a base array + the index."""

    def __init__(self, seq: int, feat: int, rounds: int) -> None:
        self.base = np.random.default_rng(0).standard_normal((seq, feat), dtype=np.float32)
        self.rounds = rounds

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        x = self.base + np.float32((i % 97) * 1e-3)
        return torch.from_numpy(_transform(x, self.rounds))


def close_loader(it: Any, loader: DataLoader[Any]) -> None:
    """Stop a loader's iterator and its workers (persistent workers live on the loader)."""
    it.close()
    inner = getattr(loader, "_iterator", None)
    if inner is not None and hasattr(inner, "_shutdown_workers"):
        inner._shutdown_workers()
    loader._iterator = None


def build(fixed: bool, device: str) -> Step:
    seq, feat, batch, width, sample_ms = pick(device, (256, 256, 32, 4096, 0.2),
                                              (16, 32, 4, 64, 0.5))
    base = np.random.default_rng(0).standard_normal((seq, feat), dtype=np.float32)
    rounds = calibrate(f"dataloader_bound:{seq}x{feat}", lambda n: _transform(base, n),
                       sample_ms)
    ds = Tokens(seq, feat, rounds)
    if fixed:
        loader = DataLoader(ds, batch_size=batch, num_workers=8, persistent_workers=True,
                            pin_memory=is_cuda(device), prefetch_factor=4)
    else:
        loader = DataLoader(ds, batch_size=batch, num_workers=0)
    it = cycle(lambda: iter(loader))
    model = mlp([feat, width, width, width, width, width, feat], device)
    opt = adamw(model, device)

    def step() -> None:
        xb = next(it).to(device, non_blocking=True)
        train_step(model, opt, xb.view(-1, feat), device=device, amp=torch.bfloat16)

    return Step(step, close=lambda: close_loader(it, loader), info={"batch": batch, "sample": [seq, feat],
                                         "transform_rounds": rounds, "sample_ms": sample_ms,
                                         "num_workers": 8 if fixed else 0})
