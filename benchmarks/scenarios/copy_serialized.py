"""Copies serialised with compute: each step's H2D batch copy runs on the compute stream."""

from __future__ import annotations

import torch
from common import Step, adamw, is_cuda, mlp, pick, require_cuda, train_step

EXPECTED = "no_copy_overlap"
DESCRIPTION = ("96 MB pinned H2D batch copy (non_blocking) on the compute stream right before a "
               "~4 ms bf16 MLP step, serialised -> fixed: the next batch is prefetched on a side "
               "stream during this step's compute (wait_stream + record_stream)")


def build(fixed: bool, device: str) -> Step:
    batch, feat, width = pick(device, (6144, 4096, 4096), (64, 64, 64))
    gen = torch.Generator().manual_seed(11)
    host = [torch.randn(batch, feat, generator=gen) for _ in range(2)]  # two batches, alternating
    if is_cuda(device):
        host = [h.pin_memory() for h in host]
    model = mlp([feat, width, width, width, feat], device)
    opt = adamw(model, device)
    i = [0]

    if not fixed:
        def serial_step() -> None:
            x = host[i[0] % 2].to(device, non_blocking=True)  # on the compute stream
            i[0] += 1
            train_step(model, opt, x, device=device, amp=torch.bfloat16)

        return Step(serial_step, info={"copy_mb": batch * feat * 4 / 2**20, "prefetch": False})

    require_cuda(device, "side-stream prefetch")
    copy_stream = torch.cuda.Stream()
    nxt: list[torch.Tensor | None] = [None]

    def prefetch() -> None:
        with torch.cuda.stream(copy_stream):
            nxt[0] = host[i[0] % 2].to(device, non_blocking=True)
        i[0] += 1

    def step() -> None:
        if nxt[0] is None:
            prefetch()
        compute = torch.cuda.current_stream()
        compute.wait_stream(copy_stream)
        x = nxt[0]
        assert x is not None
        x.record_stream(compute)
        prefetch()  # batch k+1 copies while batch k computes
        train_step(model, opt, x, device=device, amp=torch.bfloat16)

    return Step(step, info={"copy_mb": batch * feat * 4 / 2**20, "prefetch": True})
