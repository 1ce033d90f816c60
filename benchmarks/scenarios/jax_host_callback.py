"""JAX jit with a host callback inside the step (issue 23): the jitted train step of a bf16 MLP
calls ``jax.debug.callback`` with a 4-MiB activation, whose host function reduces it with NumPy
(a metric for logging); the GPU waits for the copy to the host and for the callback.

Fixed: the same metric computed on the device inside the step and returned with the loss (read
by the host, as a logging loop would, outside the step's critical path).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jaxenv import jax_gpu
from timing import Step

EXPECTED = "sync_calls"
FRAMEWORK = "jax"
DESCRIPTION = ("JAX jit train step (bf16 MLP 4 x 4096, batch 4096) with jax.debug.callback of a "
               "4 MiB activation reduced on the host each step -> fixed: the metric computed on "
               "the device and returned with the loss")

BATCH, WIDTH, LAYERS = 4096, 4096, 4
LR = 1e-4


def build(fixed: bool, device: str) -> Step:
    jax, gpu = jax_gpu(device)
    jnp = jax.numpy
    rng = np.random.default_rng(23)
    scale = np.float32(1.0 / np.sqrt(WIDTH))
    params = [jax.device_put((rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale)
                             .astype(jnp.bfloat16), gpu) for _ in range(LAYERS)]
    x = jax.device_put(rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
                       .astype(jnp.bfloat16), gpu)
    seen: list[float] = []

    def host_metric(a: Any) -> None:
        arr = np.asarray(a, dtype=np.float32)
        seen.append(float(np.sqrt(np.mean(arr * arr))))  # an RMS for the log

    def loss_fn(ps: list[Any], xb: Any) -> tuple[Any, Any]:
        h = xb
        for i, w in enumerate(ps):
            h = jnp.tanh(h @ w)
            if i == 0 and not fixed:
                jax.debug.callback(host_metric, h[:512].astype(jnp.float32))  # planted
        metric = jnp.sqrt(jnp.mean(jnp.square(h[:512].astype(jnp.float32))))
        return jnp.mean(jnp.square(h.astype(jnp.float32))), metric

    def train_step(ps: list[Any], xb: Any) -> tuple[list[Any], Any, Any]:
        (loss, metric), grads = jax.value_and_grad(loss_fn, has_aux=True)(ps, xb)
        return [p - LR * g for p, g in zip(ps, grads)], loss, metric

    compiled = jax.jit(train_step, donate_argnums=0).lower(params, x).compile()
    state: dict[str, Any] = {"params": params}

    def step() -> None:
        state["params"], state["loss"], state["metric"] = compiled(state["params"], x)

    step()
    jax.block_until_ready(state["params"])

    def sync() -> None:
        jax.block_until_ready(state["params"])
        jax.effects_barrier()  # the callbacks too

    return Step(step, sync=sync, info={"batch": BATCH, "width": WIDTH, "layers": LAYERS,
                                       "host_callback": not fixed, "jax": jax.__version__})
