"""JAX jit with a host callback inside the step (issue 23): the jitted train step of a bf16 MLP
calls ``jax.debug.callback`` with a 4-MiB activation, whose host function reduces it with NumPy
(a metric for logging); the GPU waits for the copy to the host and for the callback.

Fixed: the callback removed; the metric is computed on the device inside the step (both
variants compute it) and returned with the loss.

The loop, the same in both variants and in both the timing harness and ``program.py`` (the
step function owns it): each step reads the loss and metric of the step ``LAG`` steps back
(``float``), as a logging loop does, so at most ``LAG`` steps are queued on the GPU whatever
loop runs the step. Last session the timing harness (blocks of ~10 steps, each ended by
``block_until_ready`` + ``jax.effects_barrier()``) measured 14.2 ms/step where program.py's
free-running loop ran 8.2 ms: they were not the same loop. ``sync`` (block boundaries only) is
``block_until_ready`` on the parameters: on the GPU the callback runs inline in the step's
thunk sequence, so the parameters are ready only after it returned, and no effects barrier is
needed.
"""

from __future__ import annotations

from collections import deque
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
LAG = 2  # the logging loop reads the loss of the step LAG steps back


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
    state: dict[str, Any] = {"params": params, "logged": 0, "last": None}
    pending: deque[tuple[Any, Any]] = deque()

    def step() -> None:
        state["params"], loss, metric = compiled(state["params"], x)
        pending.append((loss, metric))
        if len(pending) > LAG:  # the logging loop's read, LAG steps behind
            old_loss, old_metric = pending.popleft()
            state["last"] = (float(old_loss), float(old_metric))
            state["logged"] += 1

    step()
    jax.block_until_ready(state["params"])

    def sync() -> None:
        jax.block_until_ready(state["params"])  # the callback ran before the update (inline)

    return Step(step, sync=sync, info={"batch": BATCH, "width": WIDTH, "layers": LAYERS,
                                       "host_callback": not fixed, "loss_read_lag": LAG,
                                       "jax": jax.__version__})
