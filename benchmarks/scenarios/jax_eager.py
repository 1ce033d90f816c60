"""JAX eager: a step of many small ops dispatched one by one (no jit), launch/host-bound."""

from __future__ import annotations

import numpy as np
from jaxenv import jax_gpu
from timing import Step

EXPECTED = "launch_bound"
FRAMEWORK = "jax"
DESCRIPTION = ("JAX eager: 500 x (x = x * a + b) on 4096 float32 elements, op by op = 1000 "
               "dispatches of tiny kernels per step -> fixed: the same function under jax.jit "
               "(one fused kernel)")

ITERS = 500
NUMEL = 4096


def build(fixed: bool, device: str) -> Step:
    jax, gpu = jax_gpu(device)
    rng = np.random.default_rng(16)
    x0 = jax.device_put(rng.standard_normal(NUMEL, dtype=np.float32), gpu)
    # scalars as device arrays: a Python float would be a host-to-device copy per op
    a = jax.device_put(np.float32(1.0001), gpu)
    b = jax.device_put(np.float32(0.0001), gpu)

    def body(x: object) -> object:
        for _ in range(ITERS):
            x = x * a + b  # type: ignore[operator]
        return x

    fn = jax.jit(body) if fixed else body
    out: list[object] = [fn(x0)]  # compiles (jit) or caches every primitive (eager)
    jax.block_until_ready(out[0])

    def step() -> None:
        out[0] = fn(x0)

    def sync() -> None:
        jax.block_until_ready(out[0])

    return Step(step, sync=sync, info={"ops_per_step": 2 * ITERS, "numel": NUMEL,
                                       "jit": fixed, "jax": jax.__version__})
