"""JAX for the scenarios: imported on demand, on the GPU only (no torch in the process)."""

from __future__ import annotations

import os
from typing import Any

from timing import SkipScenario


def jax_gpu(device: str) -> tuple[Any, Any]:
    """``(jax, the GPU device)``, or SkipScenario. Sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false``
    first (unless set): the GPU memory a recording samples is then what the program uses, not
    JAX's up-front 75% of the card (both variants share one process when timed)."""
    if not str(device).startswith("cuda"):
        raise SkipScenario("needs CUDA (JAX on the GPU)")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except Exception as exc:  # noqa: BLE001 - ImportError or a CUDA plugin mismatch
        raise SkipScenario(f"needs JAX ({type(exc).__name__}: {exc})") from None
    try:
        gpus = jax.devices("gpu")
    except Exception as exc:  # noqa: BLE001 - RuntimeError: no GPU backend
        raise SkipScenario(f"JAX has no GPU backend ({type(exc).__name__}: {exc})") from None
    if not gpus:
        raise SkipScenario("JAX has no GPU device")
    return jax, gpus[0]
