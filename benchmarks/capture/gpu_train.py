"""A small GPU training loop for checking `stepscope record` on a real GPU (host-side capture:
steps from the optimizer hook, DataLoader waits, psutil/NVML/GPM samples) and its GPU capture
(kernels, copies, runtime calls, NVTX ranges with ``--nvtx``).

    stepscope record -o RUN -- python benchmarks/capture/gpu_train.py --steps 300

Runs on CPU too (slowly) when CUDA is absent.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Tokens(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.0002)  # a little CPU work per sample
        return torch.randn(1024)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--nvtx", action="store_true", help="wrap forward/backward in NVTX ranges")
    ap.add_argument("--kill-after-s", type=float, default=0.0,
                    help="SIGKILL this process after that many seconds (a crash no hook sees)")
    args = ap.parse_args()
    if args.kill_after_s > 0:
        threading.Timer(args.kill_after_s, os.kill, (os.getpid(), signal.SIGKILL)).start()
    nvtx = torch.cuda.nvtx if args.nvtx and torch.cuda.is_available() else None
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(Tokens(), batch_size=64, num_workers=args.workers, pin_memory=dev == "cuda")
    it = iter(loader)
    for _ in range(args.steps):
        x = next(it).to(dev, non_blocking=True)
        if nvtx:
            nvtx.range_push("forward")
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            loss = model(x).float().pow(2).mean()
        if nvtx:
            nvtx.range_pop()
            nvtx.range_push("backward")
        loss.backward()
        if nvtx:
            nvtx.range_pop()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if dev == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
