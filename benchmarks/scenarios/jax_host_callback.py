"""JAX jit with a host callback inside the step (issue 23): the jitted train step of a bf16 MLP
calls ``jax.debug.callback`` with a small per-sample statistic of an activation (the mean
square of each of 512 rows, 2 KiB), and the host function turns it into a metric for the log
with a fixed amount of NumPy work; the GPU waits for the copy to the host and the callback.

Fixed: the callback removed; the same metric computed on the device inside the step (both
variants compute it there) and returned with the loss. One change, nothing else differs.

Why the callback is small and its work fixed (2026-11-26 night, docs/accuracy.md run 11): the
first plant passed an 8 MiB activation (512 x 4096 fp32) and reduced it with fresh NumPy
temporaries; its step ran 6.5 ms in some processes and 11.8-16.5 ms in others. That callback
touched fresh memory every step (``jax.debug.callback`` copies its operand onto JAX's CPU
device, then the temporaries: 2531 page faults per step on the H100 machine) and its host
phase was about as long as the GPU's, so the saving's share moved with the host's speed
(60-78%). Here the operand is 2 KiB and every buffer of the host work is allocated once
(``HOST_ELEMS`` float64, 256 KiB, stays in cache): no allocation, no page fault, a fixed
amount of work (``HOST_PASSES`` sin/cos passes). The host thread's own speed still varies on
the GPU machine (the same work measured 6.2 and 12.6 ms seconds apart), but the host phase is
now ~80% of the step, so the saving's share moves little with it (77-83%).

The loop, the same in both variants and in both the timing harness and ``program.py`` (the
step function owns it): each step reads the loss and metric of the step ``LAG`` steps back
(``float``), as a logging loop does, so at most ``LAG`` steps are queued on the GPU whatever
loop runs the step. ``sync`` (block boundaries only) is ``block_until_ready`` on the
parameters: on the GPU the callback runs inline in the step's thunk sequence, so the
parameters are ready only after it returned.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
from jaxenv import jax_gpu
from timing import Step

# The planted rule is host_bound: on the GPU the callback runs inline in the step's thunks, on
# the dispatching thread (XSpace, H100, 2026-11-26: the "debug_callback.1" thunk holds the
# D2H copy and then the Python callback, while the GPU has nothing queued); the time the fix
# gives back is that host work. The idle split charges the GPU idle inside the thunk to
# host_bound (analysis/callbacks.py), whose JAX fix names host callbacks.
EXPECTED = "host_bound"
FRAMEWORK = "jax"
# the fix takes the callback out of the step (variants.py): the report's remove_callback
FIX_REMEDIES = ("remove_callback",)
DESCRIPTION = ("JAX jit train step (bf16 MLP 4 x 4096, batch 4096) with jax.debug.callback of a "
               "2 KiB per-sample statistic turned into a log metric with fixed NumPy work on "
               "the host each step -> fixed: the same metric computed on the device and "
               "returned with the loss")

BATCH, WIDTH, LAYERS = 4096, 4096, 4
LR = 1e-4
LAG = 2  # the logging loop reads the loss of the step LAG steps back
SAMPLE = 512  # rows of the first activation whose mean square goes to the metric
HOST_ELEMS = 1 << 15  # the metric's working buffer: SAMPLE values tiled, float64 (256 KiB)
HOST_PASSES = 16  # sin/cos passes over it: 4 ms on the dev box, 6-13 ms on the H100 VM


def host_metric_fn(seen: list[float]) -> Any:
    """The host function of the callback: preallocated buffers, fixed work (module doc)."""
    work = np.zeros(HOST_ELEMS, dtype=np.float64)
    tmp = np.empty_like(work)
    rows = work.reshape(-1, SAMPLE)

    def host_metric(ms: Any) -> None:
        np.copyto(rows, np.asarray(ms, dtype=np.float64))  # (SAMPLE,) broadcast to every row
        for _ in range(HOST_PASSES):
            np.sin(work, out=tmp)
            np.cos(tmp, out=work)
        seen.append(float(work.mean()))

    return host_metric


def device_metric(jnp: Any, ms: Any) -> Any:
    """The same metric on the device (the fix): XLA fuses it into one small kernel."""
    x = jnp.tile(ms, HOST_ELEMS // SAMPLE)
    for _ in range(HOST_PASSES):
        x = jnp.cos(jnp.sin(x))
    return jnp.mean(x)


def host_metric_ms(fn: Any, repeats: int = 7) -> float:
    """The host function's own time (median of ``repeats`` calls), for the scenario's info."""
    ms = np.linspace(0.5, 1.5, SAMPLE, dtype=np.float32)
    fn(ms)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(ms)
        times.append(time.perf_counter() - t0)
    return round(1e3 * float(np.median(times)), 3)


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
    host_metric = host_metric_fn(seen)
    host_ms = host_metric_ms(host_metric)
    seen.clear()

    def loss_fn(ps: list[Any], xb: Any) -> tuple[Any, Any]:
        h = xb
        metric = None
        for i, w in enumerate(ps):
            h = jnp.tanh(h @ w)
            if i == 0:
                ms = jnp.mean(jnp.square(h[:SAMPLE].astype(jnp.float32)), axis=1)
                ms = jax.lax.stop_gradient(ms)
                if not fixed:
                    jax.debug.callback(host_metric, ms)  # planted
                metric = device_metric(jnp, ms)
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
                                       "callback_bytes": SAMPLE * 4,
                                       "host_work": f"{HOST_PASSES} sin/cos passes over "
                                                    f"{HOST_ELEMS} float64",
                                       "host_metric_ms": host_ms,
                                       "jax": jax.__version__})
