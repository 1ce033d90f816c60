"""Inference loop: a small-batch eval forward under no_grad, launch-bound; fixed: a CUDA graph.

No optimizer and no backward: ``stepscope record`` sees no step hook and uses its time window.
"""

from __future__ import annotations

import torch
from common import Step, capture_graph, pick, randn, require_cuda

EXPECTED = "launch_bound"
STEP_HOOK = False
FIX_REMEDIES = ("cuda_graphs",)  # the remedies it applies (variants.py)
DESCRIPTION = ("eval() + no_grad bf16 forward of 24 residual blocks (Linear 1024 -> LayerNorm "
               "-> GELU -> add) on a batch of 8 = ~100 small kernels per step, launched eagerly -> "
               "fixed: the same forward captured once in a CUDA graph and replayed")


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.norm(self.fc(x)))


def build(fixed: bool, device: str) -> Step:
    batch, width, depth = pick(device, (8, 1024, 24), (8, 64, 4))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(Block(width) for _ in range(depth)),
                                torch.nn.Linear(width, 16)).to(device, torch.bfloat16).eval()
    # bf16 weights, as inference usually runs (fp32 GEMMs would plant no_tensor_cores too)
    x = randn(batch, width, device=device, seed=19, dtype=torch.bfloat16)
    out: list[torch.Tensor] = []

    if not fixed:
        def step() -> None:
            with torch.no_grad():
                out[:] = [model(x)]  # predictions stay on the device

        return Step(step, info={"batch": batch, "width": width, "depth": depth,
                                "cuda_graph": False})

    require_cuda(device, "CUDA graphs")
    with torch.no_grad():
        graph, static_out = capture_graph(lambda: model(x))

    def replay() -> None:
        graph.replay()
        out[:] = [static_out]

    def close() -> None:
        nonlocal graph, static_out
        del graph, static_out

    return Step(replay, close=close, info={"batch": batch, "width": width, "depth": depth,
                                           "cuda_graph": True})
