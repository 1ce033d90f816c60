"""A CuPy loop (elementwise kernels, a raw kernel, matmuls, host copies) for checking
`stepscope record` on a GPU without any deep-learning framework.

    stepscope record -o RUN --delay 2 --duration 3 -- python benchmarks/capture/cupy_loop.py
"""

from __future__ import annotations

import argparse
import time

import cupy as cp
import numpy as np

SCALE = cp.RawKernel(r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
""", "scale")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=7.0)
    args = ap.parse_args()
    a = cp.random.standard_normal((2048, 2048), dtype=cp.float32)
    host = np.ones((1 << 20,), dtype=np.float32)
    n = 0
    t0 = time.time()
    while time.time() - t0 < args.seconds:
        b = a @ a
        b = cp.tanh(b) * 0.5 + 1.0
        SCALE(((b.size + 255) // 256,), (256,), (b, cp.float32(0.99), cp.int32(b.size)))
        d = cp.asarray(host)  # pageable host-to-device copy
        s = float(cp.sum(d) + b[0, 0])  # device-to-host copy and a sync
        n += 1
    print(f"cupy iterations: {n}, last {s:.3f}")


if __name__ == "__main__":
    main()
