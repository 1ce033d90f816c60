"""JAX compilations seen, for the default window's warm-up (``capture.auto_window``).

A JAX program's first GPU work is often XLA's own, while it compiles: GEMM autotuning launches
hundreds of kernels (``RedzoneAllocatorKernel``, ``xla_fp_comparison``, the candidates) for
seconds before the first step runs. A warm-up counted from the first GPU use can end inside
that, and a time window then records compilation instead of steps (a jitted MLP on an H100,
2026-11-26: the 10 s window held 6 s of autotuning and no step). So the warm-up also waits for
compilation to stop: JAX reports each compilation through ``jax.monitoring`` (public API:
``register_event_duration_secs_listener``; events such as
``/jax/core/compile/backend_compile_duration``, sent when the compile ends), and the listener
registered here notes when the last one ended. It is registered once per process, when
``jax.monitoring`` (or ``jax._src.monitoring``) is imported; JAX has no public way to take a
listener out, so after the capture it stays registered and does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

JAX_MONITORING_MODULES = ("jax._src.monitoring", "jax.monitoring")


def listen_compiles(module: ModuleType, on_compile: Callable[[], None],
                    active: Callable[[], bool]) -> str:
    """Register the listener on ``module``'s ``register_event_duration_secs_listener``; what
    was done, for the manifest."""
    register = getattr(module, "register_event_duration_secs_listener", None)
    if not callable(register):
        return "not listening: no register_event_duration_secs_listener"

    def listener(event: Any, duration_secs: Any = None, **_: Any) -> None:
        try:
            if active() and "compile" in str(event):
                on_compile()
        except Exception:  # noqa: BLE001 - a listener must never break the program's compile
            pass

    register(listener)
    return "listening for compile events"


__all__ = ["JAX_MONITORING_MODULES", "listen_compiles"]
