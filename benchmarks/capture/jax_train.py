"""A small JAX training loop (jit, bf16 matmuls) for checking `stepscope record` on a GPU.

    stepscope record -o RUN --delay 3 --duration 3 -- python benchmarks/capture/jax_train.py

Steps are wrapped in ``jax.profiler.StepTraceAnnotation`` as JAX users commonly do.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jax
import jax.numpy as jnp

Params = list[jax.Array]


def make_train(width: int = 2048, batch: int = 1024, layers: int = 6) -> tuple[Any, Params, jax.Array]:
    """A jitted bf16 MLP training step, its weights and a batch."""
    key = jax.random.PRNGKey(0)
    ws = [jax.random.normal(jax.random.fold_in(key, i), (width, width), jnp.bfloat16) * 0.02
          for i in range(layers)]
    x = jax.random.normal(key, (batch, width), jnp.bfloat16)

    def loss(ws: Params, x: jax.Array) -> jax.Array:
        for w in ws:
            x = jax.nn.gelu(x @ w)
        return jnp.mean(x.astype(jnp.float32) ** 2)

    @jax.jit
    def step(ws: Params, x: jax.Array) -> tuple[Params, jax.Array]:
        val, grads = jax.value_and_grad(loss)(ws, x)
        return [w - 1e-3 * g for w, g in zip(ws, grads)], val

    return step, ws, x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    step, ws, x = make_train()
    t0 = time.time()
    n = 0
    while time.time() - t0 < args.seconds:
        with jax.profiler.StepTraceAnnotation("train", step_num=n):
            ws, val = step(ws, x)
            if n % 10 == 0:
                val.block_until_ready()
        n += 1
    print(f"jax steps: {n}, loss {float(val):.5f}")


if __name__ == "__main__":
    main()
