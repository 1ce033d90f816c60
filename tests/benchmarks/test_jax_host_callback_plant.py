"""benchmarks/scenarios/jax_host_callback.py: the callback's host work is fixed and allocates
nothing per call (the plant's step time then does not depend on the C allocator's state: the
8 MiB operand it used to take ran 6.5 or 11.8 ms per step from process to process)."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

SCEN = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"
if str(SCEN) not in sys.path:
    sys.path.insert(0, str(SCEN))

import jax_host_callback as plant


def test_the_operand_is_small_and_the_host_buffers_are_made_once() -> None:
    seen: list[float] = []
    fn = plant.host_metric_fn(seen)
    ms = np.linspace(0.5, 1.5, plant.SAMPLE, dtype=np.float32)
    assert ms.nbytes <= 4096  # the callback's operand: one value per sampled row
    fn(ms)
    tracemalloc.start()
    try:
        for _ in range(3):
            fn(ms)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the working buffer alone is HOST_ELEMS float64 (256 KiB): a call must not make another
    assert peak < plant.HOST_ELEMS * 8 // 8
    assert len(seen) == 4 and len(set(seen)) == 1  # the same input, the same metric


def test_the_host_metric_is_the_iterated_transform_of_the_tiled_operand() -> None:
    seen: list[float] = []
    ms = np.linspace(0.5, 1.5, plant.SAMPLE, dtype=np.float32)
    plant.host_metric_fn(seen)(ms)
    x = np.tile(ms.astype(np.float64), plant.HOST_ELEMS // plant.SAMPLE)
    for _ in range(plant.HOST_PASSES):
        x = np.cos(np.sin(x))
    assert seen[0] == pytest.approx(float(x.mean()), rel=1e-12)  # what device_metric computes
