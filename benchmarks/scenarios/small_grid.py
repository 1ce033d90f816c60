"""Small grid: a custom kernel launched with 16 blocks x 128 threads (the seeds' example)."""

from __future__ import annotations

import numpy as np
import torch
from common import (
    Step,
    adamw,
    cupy_or_skip,
    cupy_stream_of_torch,
    cupy_view,
    mlp,
    num_sms,
    pick,
    randn,
    require_cuda,
    train_step,
)

EXPECTED = "small_grid"
TABLE = "CuPy/Triton"  # a torch step with a CuPy kernel (AdamW: the step hook fires)
DESCRIPTION = ("CuPy grid-stride kernel y = tanh(x)*a + b over 16M floats launched with 16 "
               "blocks x 128 threads (132 SMs: <1/8 of the GPU used), then a small bf16 MLP -> "
               "fixed: grid = 16 x SMs blocks of 128")

SRC = r"""
extern "C" __global__ void feature_map(const float* x, float* y, long long n, float a, float b) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = tanhf(x[i]) * a + b;
    }
}
"""


def build(fixed: bool, device: str) -> Step:
    require_cuda(device, "CuPy RawKernel")
    cp = cupy_or_skip()
    rows, cols = pick(device, (4096, 4096), (64, 64))
    n = rows * cols
    threads = 128
    blocks = 16 * num_sms(device) if fixed else 16
    kernel = cp.RawKernel(SRC, "feature_map")
    x = randn(rows, cols, device=device, seed=7)
    y = torch.empty_like(x)
    xc, yc = cupy_view(x), cupy_view(y)
    stream = cupy_stream_of_torch()
    model = mlp([cols, cols, cols], device)
    opt = adamw(model, device)
    args = (xc, yc, np.int64(n), np.float32(0.5), np.float32(0.1))

    def step() -> None:
        with stream:
            kernel((blocks,), (threads,), args)
        train_step(model, opt, y, device=device, amp=torch.bfloat16)

    return Step(step, info={"grid": blocks, "block": threads, "n": n})
