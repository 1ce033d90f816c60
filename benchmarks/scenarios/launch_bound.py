"""Launch-bound: ~2000 tiny elementwise kernels per step; fixed replays them as one CUDA graph."""

from __future__ import annotations

import torch
from common import Step, capture_graph, is_cuda, pick, randn, require_cuda

EXPECTED = "launch_bound"
STEP_HOOK = False  # no optimizer: `stepscope record` falls back to its time window
FIX_REMEDIES = ("cuda_graphs",)  # the remedies it applies (variants.py)
DESCRIPTION = ("1000 x (x = x * 1.0001 + 0.1) on a 4096-element tensor = 2000 tiny kernels per "
               "step, launched eagerly -> fixed: the same step captured once in a CUDA graph and "
               "replayed")


def build(fixed: bool, device: str) -> Step:
    iters, numel = pick(device, (1000, 4096), (1000, 4096))
    x0 = randn(numel, device=device, seed=4)

    def body() -> torch.Tensor:
        x = x0
        for _ in range(iters):
            x = x * 1.0001 + 0.1
        return x

    if not fixed:
        out: list[torch.Tensor] = [x0]

        def step() -> None:
            out[0] = body()

        return Step(step, info={"kernels_per_step": 2 * iters, "numel": numel})

    require_cuda(device, "CUDA graphs")
    assert is_cuda(device)
    graph, static_out = capture_graph(body)

    def replay() -> None:
        graph.replay()

    def close() -> None:
        nonlocal graph, static_out
        del graph, static_out

    return Step(replay, close=close, info={"kernels_per_step": 2 * iters, "numel": numel,
                                            "cuda_graph": True})
