"""JAX jit: an fp32 MLP train step compiled with matmul precision "highest" (no TF32).

The whole step (forward, ``jax.value_and_grad``, SGD update) is one ``jax.jit`` function with
donated parameters; nothing is annotated, so ``stepscope record`` uses its time window.

The planted setting is ``jax_default_matmul_precision = "highest"``, applied here with the
``jax.default_matmul_precision`` context while the baseline is traced and compiled (the fixed
variant is compiled outside it), so both variants live in one process. On an H100 XLA's default
precision for fp32 dots is TF32 (the fixture ``jax_mlp.trace.json.gz`` shows
``sm90_xmma_gemm_f32f32_tf32f32_f32_*`` cuBLAS kernels): the fix is the default.

Whether ``no_tensor_cores`` can name it from a recording depends on the kernels XLA picks:
cuBLAS fp32 GEMMs carry their type in the name (``*_f32f32_f32f32_*_ffma``, ``*simt_sgemm*``),
while XLA's Triton GEMM fusions (``gemm_fusion_dot*``, ``triton_gemm*``) do not. ``info``
records which backend the compiled HLO uses for its dots (``gemm_backends``), so a miss can be
told apart from a rule gap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jaxenv import jax_gpu
from timing import Step

EXPECTED = "no_tensor_cores"
FRAMEWORK = "jax"
DESCRIPTION = ("JAX jit train step of an fp32 MLP (3 x 4096x4096, batch 2048, tanh, SGD), "
               "compiled under jax_default_matmul_precision='highest' -> fixed: default "
               "precision (TF32 on Hopper)")

BATCH, WIDTH, LAYERS = 2048, 4096, 3
LR = 1e-4

_GEMM_MARKERS = {  # custom-call targets / fusion kinds of XLA:GPU's GEMM backends
    "cublas": ("__cublas$gemm", "__cublas$lt$matmul"),
    "triton": ("__triton_gemm",),
    "cudnn": ("__cudnn$fusion",),
    "precision_highest": ("operand_precision={highest",),  # the plant is in effect
}


def gemm_backends(hlo_text: str) -> dict[str, int]:
    """How often each GEMM backend's marker occurs in the optimized HLO
    (``compiled.as_text()``): which one runs the dots, roughly how many; and how many dots
    carry precision HIGHEST."""
    return {k: sum(hlo_text.count(m) for m in marks) for k, marks in _GEMM_MARKERS.items()}


def build(fixed: bool, device: str) -> Step:
    jax, gpu = jax_gpu(device)
    jnp = jax.numpy
    rng = np.random.default_rng(17)
    scale = np.float32(1.0 / np.sqrt(WIDTH))
    params = [jax.device_put(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale, gpu)
              for _ in range(LAYERS)]
    x = jax.device_put(rng.standard_normal((BATCH, WIDTH), dtype=np.float32), gpu)

    def loss_fn(ps: list[Any], xb: Any) -> Any:
        h = xb
        for w in ps:
            h = jnp.tanh(h @ w)
        return jnp.mean(h * h)

    def train_step(ps: list[Any], xb: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(ps, xb)
        return [p - LR * g for p, g in zip(ps, grads)], loss

    jitted = jax.jit(train_step, donate_argnums=0)
    if fixed:
        compiled = jitted.lower(params, x).compile()
    else:
        with jax.default_matmul_precision("highest"):  # the planted setting
            compiled = jitted.lower(params, x).compile()
    try:
        backends = gemm_backends(compiled.as_text())
    except Exception as exc:  # noqa: BLE001 - as_text() is informative only
        backends = {"error": f"{type(exc).__name__}: {exc}"}  # type: ignore[dict-item]
    state: dict[str, Any] = {"params": params, "loss": None}

    def step() -> None:
        state["params"], state["loss"] = compiled(state["params"], x)

    step()  # first run (autotuning results are cached at compile time; this allocates)
    jax.block_until_ready(state["params"])

    def sync() -> None:
        jax.block_until_ready(state["params"])

    return Step(step, sync=sync, info={
        "batch": BATCH, "width": WIDTH, "layers": LAYERS,
        "matmul_precision": "default" if fixed else "highest", "gemm_backends": backends,
        "jax": jax.__version__})
