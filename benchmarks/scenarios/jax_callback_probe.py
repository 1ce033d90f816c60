#!/usr/bin/env python3
"""Probe: why the first ``jax_host_callback`` plant was not steady (not a scenario).

    python3 benchmarks/scenarios/jax_callback_probe.py [--operand 8mib|2kib] [--seconds S]

Runs the jitted bf16 MLP step of ``jax_host_callback`` with ``jax.debug.callback`` of either
the first plant's operand (``8mib``: 512 x 4096 fp32, reduced with fresh NumPy temporaries, as
committed before 2026-11-26 night) or the current one (``2kib``: the scenario's own host
function), in the scenario's loop (loss and metric read ``LAG`` steps behind), and prints one
line per second: ms/step and the process's minor page faults per step (``getrusage``), then a
closing line. The first plant ran 6.5 or 11.8 ms/step from process to process; its callback
touches fresh memory every step (2531 faults/step on the H100 VM, 2026-11-26), the current
one none, and both run as fast as the host thread does (docs/accuracy.md, run 11).
Needs JAX with a GPU.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import jax_host_callback as plant
import numpy as np  # after the sys.path setup
from jaxenv import jax_gpu


def build(operand: str) -> Any:
    jax, gpu = jax_gpu("cuda")
    jnp = jax.numpy
    rng = np.random.default_rng(23)
    scale = np.float32(1.0 / np.sqrt(plant.WIDTH))
    params = [jax.device_put((rng.standard_normal((plant.WIDTH, plant.WIDTH), dtype=np.float32)
                              * scale).astype(jnp.bfloat16), gpu) for _ in range(plant.LAYERS)]
    x = jax.device_put(rng.standard_normal((plant.BATCH, plant.WIDTH), dtype=np.float32)
                       .astype(jnp.bfloat16), gpu)
    seen: list[float] = []

    def reduce_8mib(a: Any) -> None:  # the first plant's host function
        arr = np.asarray(a, dtype=np.float32)
        seen.append(float(np.sqrt(np.mean(arr * arr))))

    small = plant.host_metric_fn(seen)

    def loss_fn(ps: list[Any], xb: Any) -> tuple[Any, Any]:
        h = xb
        for i, w in enumerate(ps):
            h = jnp.tanh(h @ w)
            if i == 0:
                rows = h[:plant.SAMPLE].astype(jnp.float32)
                if operand == "8mib":
                    jax.debug.callback(reduce_8mib, rows)
                else:
                    jax.debug.callback(small, jax.lax.stop_gradient(
                        jnp.mean(jnp.square(rows), axis=1)))
        return jnp.mean(jnp.square(h.astype(jnp.float32))), jnp.float32(0.0)

    def train_step(ps: list[Any], xb: Any) -> tuple[list[Any], Any, Any]:
        (loss, metric), grads = jax.value_and_grad(loss_fn, has_aux=True)(ps, xb)
        return [p - plant.LR * g for p, g in zip(ps, grads)], loss, metric

    compiled = jax.jit(train_step, donate_argnums=0).lower(params, x).compile()
    state: dict[str, Any] = {"params": params}
    pending: deque[Any] = deque()

    def step() -> None:
        state["params"], loss, _ = compiled(state["params"], x)
        pending.append(loss)
        if len(pending) > plant.LAG:
            float(pending.popleft())

    return step, lambda: jax.block_until_ready(state["params"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--operand", choices=("8mib", "2kib"), default="8mib")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    step, sync = build(args.operand)
    for _ in range(3):
        step()
    sync()
    total_n, t_start = 0, time.perf_counter()
    f_start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    while time.perf_counter() - t_start < args.seconds:
        n, t0 = 0, time.perf_counter()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        while time.perf_counter() - t0 < 1.0:
            step()
            n += 1
        sync()
        dt = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        print(f"  {args.operand}: {1e3 * dt / n:.2f} ms/step, {faults / n:.0f} faults/step",
              flush=True)
        total_n += n
    wall = time.perf_counter() - t_start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f_start
    print(f"probe {args.operand}: {total_n} steps, {1e3 * wall / total_n:.2f} ms/step, "
          f"{faults / total_n:.0f} minor page faults/step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
