"""A Triton kernel loop with a small grid: 16 programs over 16M floats.

A plain loop of Triton launches on torch tensors, no optimizer (``stepscope record`` uses its
time window). The kernel is a grid-stride loop, so any grid computes the same result.
"""

from __future__ import annotations

from typing import Any

import torch
from common import SkipScenario, Step, num_sms, randn, require_cuda

EXPECTED = "small_grid"
STEP_HOOK = False
TABLE = "CuPy/Triton"
DESCRIPTION = ("Triton grid-stride kernel y = sigmoid(x) * a + b over 16M floats, 2 launches per "
               "step, grid of 16 programs x 128 threads (BLOCK 256, 4 warps) on 132 SMs -> fixed: "
               "grid = 16 x SMs programs")

ROWS, COLS = 4096, 4096
BLOCK = 256
NUM_WARPS = 4
SMALL_GRID = 16


def _kernel() -> Any:
    try:
        import triton
        import triton.language as tl
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        raise SkipScenario(f"needs Triton ({type(exc).__name__}: {exc})") from None

    @triton.jit  # type: ignore[misc]
    def sigmoid_affine(x_ptr, y_ptr, n, a, b, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        for start in range(pid * BLOCK, n, nprog * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n
            v = tl.load(x_ptr + offs, mask=mask)
            tl.store(y_ptr + offs, tl.sigmoid(v) * a + b, mask=mask)

    return sigmoid_affine


def build(fixed: bool, device: str) -> Step:
    require_cuda(device, "Triton")
    kernel = _kernel()
    x = randn(ROWS, COLS, device=device, seed=15)
    y = torch.empty_like(x)
    n = x.numel()
    grid = (SMALL_GRID * num_sms(device) if fixed else SMALL_GRID,)

    def step() -> None:
        kernel[grid](x, y, n, 0.5, 0.1, BLOCK=BLOCK, num_warps=NUM_WARPS)
        kernel[grid](y, x, n, 2.0, -0.2, BLOCK=BLOCK, num_warps=NUM_WARPS)  # x stays bounded

    step()  # compile outside the timed and recorded steps
    torch.cuda.synchronize()
    return Step(step, info={"grid": grid[0], "block_elems": BLOCK, "num_warps": NUM_WARPS,
                            "n": n, "launches_per_step": 2})
