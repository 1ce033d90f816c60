"""CuPy: a 64 MB batch copied each step from pageable host memory, then CuPy compute.

A CuPy-only program (no torch in the process): ``x_dev.set(host)`` from a NumPy array is a
synchronous copy staged through the driver's bounce buffer; the host waits and the GPU runs dry.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from timing import SkipScenario, Step

EXPECTED = "pageable_memcpy"
FRAMEWORK = "cupy"
FIX_REMEDIES = ("pinned_copies",)  # the remedies it applies (variants.py)
DESCRIPTION = ("CuPy: 64 MB float32 batch copied each step from a pageable NumPy array "
               "(x_dev.set(host)), then ~1 ms of CuPy elementwise + reduction kernels -> fixed: "
               "the same batch in pinned host memory (cupyx.empty_pinned), copied with "
               "x_dev.set(pinned, stream=...) (cudaMemcpyAsync)")

ROWS, COLS = 4096, 4096
ITERS = 2048  # dependent FMAs per element: 34 G FMA per step, ~1.1 ms on an H100

_SRC = r"""
float v = x;
for (int k = 0; k < iters; ++k) { v = v * 0.999f + 0.001f; }
y = v;
"""


def _cupy(device: str) -> Any:
    if not str(device).startswith("cuda"):
        raise SkipScenario("needs CUDA (CuPy)")
    try:
        import cupy
        import cupyx
    except Exception as exc:  # noqa: BLE001 - ImportError, or a CUDA mismatch at import
        raise SkipScenario(f"needs CuPy ({type(exc).__name__}: {exc})") from None
    return cupy, cupyx


def build(fixed: bool, device: str) -> Step:
    cp, cpx = _cupy(device)
    rng = np.random.default_rng(18)
    host = rng.standard_normal((ROWS, COLS), dtype=np.float32)  # pageable
    if fixed:
        pinned = cpx.empty_pinned(host.shape, dtype=host.dtype)
        pinned[...] = host
        host = pinned
    x = cp.empty((ROWS, COLS), dtype=cp.float32)
    y = cp.empty_like(x)
    stream = cp.cuda.get_current_stream()
    kernel = cp.ElementwiseKernel("float32 x, int32 iters", "float32 y", _SRC,
                                  "affine_loop_kernel")
    sums: list[Any] = [None]

    def step() -> None:
        if fixed:
            x.set(host, stream=stream)  # pinned source: cudaMemcpyAsync, the host goes on
        else:
            x.set(host)  # pageable source: staged by the driver, the host waits
        kernel(x, np.int32(ITERS), y)
        sums[0] = y.sum(axis=1)

    step()  # compiles the kernels
    stream.synchronize()

    def sync() -> None:
        stream.synchronize()

    return Step(step, sync=sync, info={"copy_mb": host.nbytes / 2**20, "pinned": fixed,
                                       "iters": ITERS, "cupy": cp.__version__})
