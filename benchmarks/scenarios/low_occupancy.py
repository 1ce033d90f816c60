"""Low occupancy: a latency-bound custom kernel that asks for 200 KB of dynamic shared memory
per block, so one 256-thread block fits per SM (8 of 64 warps: 12.5% theoretical occupancy)."""

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

EXPECTED = "low_occupancy"
TABLE = "CuPy/Triton"  # a torch step with a CuPy kernel (AdamW: the step hook fires)
DESCRIPTION = ("CuPy grid-stride streaming kernel (8 x SMs blocks of 256) launched 24x per step "
               "with a 200 KB dynamic shared-memory request it never uses -> 1 block/SM, 12.5% "
               "occupancy; fixed: the same kernel with no shared-memory request")

SMEM_BYTES = 200 * 1024
PASSES = 24

SRC = r"""
extern "C" __global__ void NAME(const float* x, float* y, long long n, float a, float b) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = x[i] * a + b;
    }
}
"""


def build(fixed: bool, device: str) -> Step:
    require_cuda(device, "CuPy RawKernel with dynamic shared memory")
    cp = cupy_or_skip()
    rows, cols = pick(device, (4096, 4096), (64, 64))
    n = rows * cols
    threads = 256
    blocks = 8 * num_sms(device)  # >= SMs: small_grid must not fire
    name = "stream_affine_nosmem" if fixed else "stream_affine_smem"
    kernel = cp.RawKernel(SRC.replace("NAME", name), name)
    smem = 0
    if not fixed:
        smem = SMEM_BYTES
        kernel.max_dynamic_shared_size_bytes = SMEM_BYTES  # opt-in above 48 KB
    x = randn(rows, cols, device=device, seed=8)
    y = torch.empty_like(x)
    xc, yc = cupy_view(x), cupy_view(y)
    stream = cupy_stream_of_torch()
    model = mlp([cols, cols, cols], device)
    opt = adamw(model, device)
    fwd = (xc, yc, np.int64(n), np.float32(0.5), np.float32(0.1))
    bwd = (yc, xc, np.int64(n), np.float32(2.0), np.float32(-0.2))  # undoes fwd: x stays bounded

    def step() -> None:
        with stream:
            for i in range(PASSES):
                kernel((blocks,), (threads,), fwd if i % 2 == 0 else bwd, shared_mem=smem)
        train_step(model, opt, y, device=device, amp=torch.bfloat16)

    return Step(step, info={"grid": blocks, "block": threads, "dynamic_smem": smem,
                            "passes": PASSES, "n": n})
