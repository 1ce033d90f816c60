"""JAX jit with its input pipeline on the host, in the training loop (issue 23): each step makes
its batch with NumPy (random crops, flips and per-image normalisation of uint8 images, a Python
loop over the samples: several ms of one core) and ``jax.device_put``s it, then runs the jitted
bf16 step (an MLP of 6 layers of 4096, about a millisecond on an H100); the GPU waits for the
host every step.

Fixed: the same augmentation (same distributions: uniform image, crop corner and flip per
sample, then per-image normalisation) done on the device inside the jitted step, from the images
kept on the GPU and a ``jax.random`` key carried in the loop. No thread: a prefetch thread
running the NumPy pipeline would hold the GIL against the dispatching thread (last session's
fix measured 5% slower than the plant), and async dispatch already overlaps the host's next
batch with the GPU's step, so only moving the work off the host removes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jaxenv import jax_gpu
from timing import Step

EXPECTED = "host_bound"
FRAMEWORK = "jax"
DESCRIPTION = ("JAX jit train step (bf16 MLP 6 x 4096 on 32x32x3 crops, batch 512) fed by a "
               "NumPy augmentation pipeline (crops, flips, normalisation) in the loop -> fixed: "
               "the same augmentation on the device inside the jitted step")

BATCH, WIDTH, LAYERS, CROP, SIDE, IMAGES = 512, 4096, 6, 32, 40, 256
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


def device_batch(jax: Any, key: Any, images: Any) -> Any:
    """``make_batch`` on the device (traced inside the jitted step): the same draws per sample
    (image, crop corner, flip with probability 1/2), the same normalisation."""
    jnp, lax = jax.numpy, jax.lax
    k_idx, k_y, k_x, k_flip = jax.random.split(key, 4)
    idx = jax.random.randint(k_idx, (BATCH,), 0, images.shape[0])
    ys = jax.random.randint(k_y, (BATCH,), 0, images.shape[1] - CROP)
    xs = jax.random.randint(k_x, (BATCH,), 0, images.shape[2] - CROP)
    flip = jax.random.bernoulli(k_flip, 0.5, (BATCH,))

    def crop_one(i: Any, y: Any, x: Any, f: Any) -> Any:
        c = lax.dynamic_slice(images[i], (y, x, 0), (CROP, CROP, 3))
        return jnp.where(f, c[:, ::-1], c)

    flat = jax.vmap(crop_one)(idx, ys, xs, flip).astype(jnp.float32).reshape(BATCH, -1)
    flat = flat - flat.mean(axis=1, keepdims=True)
    return flat / (flat.std(axis=1, keepdims=True) + 1e-3)


def build(fixed: bool, device: str) -> Step:
    jax, gpu = jax_gpu(device)
    jnp = jax.numpy
    rng = np.random.default_rng(29)
    images = rng.integers(0, 255, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
    d_in = CROP * CROP * 3
    keys = jax.random.split(jax.random.PRNGKey(29), LAYERS + 2)
    with jax.default_device(gpu):  # weights made on the device, as a JAX program makes them
        w0 = (jax.random.normal(keys[0], (d_in, WIDTH), jnp.float32) /
              np.sqrt(d_in)).astype(jnp.bfloat16)
        ws = [(jax.random.normal(k, (WIDTH, WIDTH), jnp.float32) /
               np.sqrt(WIDTH)).astype(jnp.bfloat16) for k in keys[1:LAYERS]]
    params = [w0, *ws]

    def loss_fn(ps: list[Any], xb: Any) -> Any:
        h = xb.astype(jnp.bfloat16)
        for w in ps:
            h = jnp.tanh(h @ w)
        return jnp.mean(jnp.square(h.astype(jnp.float32)))

    def sgd(ps: list[Any], xb: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(ps, xb)
        return [p - LR * g for p, g in zip(ps, grads)], loss

    state: dict[str, Any] = {"params": params}
    if fixed:
        images_dev = jax.device_put(images, gpu)

        def train_step_dev(ps: list[Any], key: Any, imgs: Any) -> tuple[list[Any], Any, Any]:
            key, sub = jax.random.split(key)
            new_ps, loss = sgd(ps, device_batch(jax, sub, imgs))
            return new_ps, loss, key

        state["key"] = jax.device_put(keys[-1], gpu)
        compiled = jax.jit(train_step_dev, donate_argnums=0).lower(
            params, state["key"], images_dev).compile()

        def step() -> None:
            state["params"], state["loss"], state["key"] = compiled(
                state["params"], state["key"], images_dev)
    else:
        compiled = jax.jit(sgd, donate_argnums=0).lower(
            params, jax.device_put(make_batch(rng, images), gpu)).compile()

        def step() -> None:
            xb = jax.device_put(make_batch(rng, images), gpu)  # planted: made on the host
            state["params"], state["loss"] = compiled(state["params"], xb)

    step()
    jax.block_until_ready(state["params"])

    def sync() -> None:
        jax.block_until_ready(state["params"])

    return Step(step, sync=sync, info={
        "batch": BATCH, "crop": CROP, "width": WIDTH, "layers": LAYERS,
        "augmentation": "device" if fixed else "host (NumPy)", "jax": jax.__version__})
