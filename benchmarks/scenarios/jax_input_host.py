"""JAX jit with its input pipeline on the host, in the training loop (issue 23): each step makes
its batch with NumPy (random crops, flips and normalisation of uint8 images, several ms of one
core) and ``jax.device_put``s it, then runs the jitted bf16 step (an MLP of 24 layers of 8192,
~15 ms on an H100); the GPU waits for the host between steps.

Fixed: the same batches made by a background thread two steps ahead (a prefetch queue of
device arrays, as ``flax.jax_utils.prefetch_to_device`` or a ``tf.data`` pipeline with
``prefetch`` would), so the host work overlaps the GPU's.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
from jaxenv import jax_gpu
from timing import Step

EXPECTED = "host_bound"
FRAMEWORK = "jax"
DESCRIPTION = ("JAX jit train step (bf16 MLP 24 x 8192 on 32x32x3 crops, batch 512) fed by a "
               "NumPy augmentation pipeline in the loop -> fixed: the same pipeline in a "
               "background thread, 2 batches ahead")

BATCH, WIDTH, LAYERS, CROP, SIDE = 512, 8192, 24, 32, 40
LR = 1e-4


def make_batch(rng: np.random.Generator, images: np.ndarray) -> np.ndarray:
    """Random crops, flips and per-image normalisation: float32 [BATCH, CROP*CROP*3]."""
    idx = rng.integers(0, images.shape[0], BATCH)
    ys = rng.integers(0, images.shape[1] - CROP, BATCH)
    xs = rng.integers(0, images.shape[2] - CROP, BATCH)
    out = np.empty((BATCH, CROP, CROP, 3), dtype=np.float32)
    for k in range(BATCH):
        crop = images[idx[k], ys[k]:ys[k] + CROP, xs[k]:xs[k] + CROP]
        out[k] = crop[:, ::-1] if rng.random() < 0.5 else crop
    flat = out.reshape(BATCH, -1)
    flat -= flat.mean(axis=1, keepdims=True)
    flat /= flat.std(axis=1, keepdims=True) + 1e-3
    return flat


def build(fixed: bool, device: str) -> Step:
    jax, gpu = jax_gpu(device)
    jnp = jax.numpy
    rng = np.random.default_rng(29)
    images = rng.integers(0, 255, (256, SIDE, SIDE, 3), dtype=np.uint8)
    d_in = CROP * CROP * 3
    # weights made on the device, as a JAX program makes them (24 x 8192^2 normals drawn with
    # NumPy took ~30 s of host time after the first GPU use: longer than record's warm-up)
    keys = jax.random.split(jax.random.PRNGKey(29), LAYERS + 1)
    with jax.default_device(gpu):
        w0 = (jax.random.normal(keys[0], (d_in, WIDTH), jnp.float32) /
              np.sqrt(d_in)).astype(jnp.bfloat16)
        ws = [(jax.random.normal(k, (WIDTH, WIDTH), jnp.float32) /
               np.sqrt(WIDTH)).astype(jnp.bfloat16) for k in keys[1:]]
    params = [w0, *ws]

    def loss_fn(ps: list[Any], xb: Any) -> Any:
        h = xb.astype(jnp.bfloat16)
        for w in ps:
            h = jnp.tanh(h @ w)
        return jnp.mean(jnp.square(h.astype(jnp.float32)))

    def train_step(ps: list[Any], xb: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(ps, xb)
        return [p - LR * g for p, g in zip(ps, grads)], loss

    compiled = jax.jit(train_step, donate_argnums=0).lower(
        params, jax.device_put(make_batch(rng, images), gpu)).compile()
    state: dict[str, Any] = {"params": params}
    stop = threading.Event()
    q: queue.Queue[Any] = queue.Queue(maxsize=2)
    worker: threading.Thread | None = None
    if fixed:
        wrng = np.random.default_rng(31)

        def produce() -> None:
            while not stop.is_set():
                b = jax.device_put(make_batch(wrng, images), gpu)
                while not stop.is_set():
                    try:
                        q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue

        worker = threading.Thread(target=produce, name="input-prefetch", daemon=True)
        worker.start()

    def next_batch() -> Any:
        if fixed:
            return q.get()
        return jax.device_put(make_batch(rng, images), gpu)

    def step() -> None:
        state["params"], state["loss"] = compiled(state["params"], next_batch())

    step()
    jax.block_until_ready(state["params"])

    def sync() -> None:
        jax.block_until_ready(state["params"])

    def close() -> None:
        stop.set()
        if worker is not None:
            worker.join(timeout=5)

    return Step(step, sync=sync, close=close, info={
        "batch": BATCH, "crop": CROP, "width": WIDTH, "layers": LAYERS,
        "prefetch_thread": fixed, "jax": jax.__version__})
