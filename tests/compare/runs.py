"""A planted step loop for the diff tests (builder times in µs)."""

from __future__ import annotations

from builder import TraceBuilder

JITTER = (0, 4, 8, 2, 6, 10, 1, 5)  # µs, added to each step's idle tail; mean 4.5


def planted(b: TraceBuilder, *, wait: float, triton: float, tail: float, rank: int = 0,
            jitter: tuple[int, ...] = JITTER, triton_name: str = "triton_poi_fused_add_0",
            forward: float = 500, with_to: bool = True, offset: float = 0.0) -> TraceBuilder:
    """Per step: wait for the batch [0, wait) | gemm 500 | a Triton kernel | idle tail+jitter."""
    t = offset
    for i, j in enumerate(jitter):
        dur = wait + 500 + triton + tail + j
        b.step(t, dur, rank=rank, step=i)
        if wait:
            b.input_wait(t, wait, rank=rank)
        if with_to:
            b.cpu_op("aten::to", t + 1, 30, rank=rank)
        b.annotation("forward", t + wait, forward, rank=rank)
        b.kernel("gemm", t + wait, 500, rank=rank, grid=(1024, 1, 1))
        b.kernel(triton_name, t + wait + 500, triton, rank=rank, grid=(64, 1, 1))
        t += dur
    return b
