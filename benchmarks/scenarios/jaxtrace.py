"""A JAX scenario's baseline traced with ``jax.profiler`` (XSpace), as a JAX user profiles:
``jax.profiler.start_trace(dir)``, each step inside ``jax.profiler.StepTraceAnnotation``, then
``stop_trace``; the ``plugins/profile/<run>/<host>.xplane.pb`` it wrote. Torch-free."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from timing import Step


def trace_jax(step: Step, out_dir: Path, *, warmup: int = 3, active: int = 8) -> dict[str, Any]:
    """Trace ``active`` steps of ``step`` after ``warmup`` untraced ones; the xplane.pb's path,
    its size and the traced wall time."""
    import jax

    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    def sync() -> None:
        if step.sync is not None:
            step.sync()

    for _ in range(warmup):
        step.fn()
    sync()
    t0 = time.perf_counter()
    jax.profiler.start_trace(str(out_dir))
    try:
        for i in range(active):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step.fn()  # dispatched; as a JAX loop runs, no wait per step
        sync()
    finally:
        jax.profiler.stop_trace()
    wall = time.perf_counter() - t0
    found = sorted(out_dir.glob("plugins/profile/*/*.xplane.pb"))
    if not found:
        raise RuntimeError(f"jax.profiler wrote no .xplane.pb under {out_dir}")
    return {"path": str(found[-1]), "bytes": found[-1].stat().st_size, "wall_s": round(wall, 3),
            "steps": active}
