"""The GPU's utilisation in the capture window and after it (``capture.util_pace``), and the
samplers kept running after the window for it (``HostCapture``): synthetic rows with
hand-computed means, and the real sampler process."""

from __future__ import annotations

import time
from typing import Any

import pytest

from stepscope.capture.host import HostCapture, HostSettings
from stepscope.capture.util_pace import MIN_SAMPLES, UtilPace

S = 1_000_000_000


def _tick(ts: float, *utils: float) -> list[tuple[Any, ...]]:
    """One sampler tick at ``ts`` seconds: a ``gpu.util_pct`` row per GPU, and a row of
    another metric that does not count."""
    rows: list[tuple[Any, ...]] = [(int(ts * S), d, "gpu.util_pct", u, "%")
                                   for d, u in enumerate(utils)]
    return [*rows, (int(ts * S), None, "cpu.util_pct", 99.0, "%")]


def test_means_in_the_window_and_after_it() -> None:
    p = UtilPace(settle_s=1.0)
    p.note(_tick(0.5, 90.0, 5.0))  # before the window opened: not counted
    p.opened(1 * S)
    for k in range(10):  # the window, 1-2 s: GPU 0 at 10% or 14%, GPU 1 at 1%
        p.note(_tick(1 + 0.1 * k, 10.0 if k % 2 else 14.0, 1.0))
    p.closed(2 * S)
    p.note(_tick(2.5, 80.0, 80.0))  # within the settle time after the close: left out
    for k in range(12):  # after it, from 3 s: GPU 0 at 24%; two idle ticks left out
        p.note(_tick(3 + 0.1 * k, 24.0 if k < 10 else 0.0, 0.0))
    got = p.figures()
    assert got == {"gpu_util_device": 0, "gpu_util_pct_window": 12.0,
                   "gpu_util_samples_after_window": 10, "gpu_util_pct_after_window": 24.0}


def test_too_few_samples_after_the_window_give_no_figure() -> None:
    p = UtilPace(settle_s=0.0)
    assert p.figures() == {}  # nothing sampled
    p.opened(0)
    p.note(_tick(0.1, 50.0))
    p.closed(1 * S)
    for k in range(MIN_SAMPLES - 1):
        p.note(_tick(1 + 0.1 * k, 80.0))
    got = p.figures()
    assert got["gpu_util_pct_window"] == 50.0
    assert got["gpu_util_samples_after_window"] == MIN_SAMPLES - 1
    assert "gpu_util_pct_after_window" not in got


def _sampling(after_s: float, run_s: float) -> HostCapture:
    """A host capture with its sampler process (psutil only), run for ``run_s``."""
    cap = HostCapture(HostSettings(sample_hz=20, stack_hz=0, sampler_process=True,
                                   nvml=False, hooks=False))
    cap.util_pace = UtilPace(after_s=after_s)
    cap.start()
    time.sleep(run_s)
    return cap


def test_the_samplers_keep_going_after_the_window_for_the_pace_only() -> None:
    pytest.importorskip("psutil")
    cap = _sampling(0.8, 0.6)
    cap.stop(keep_hooks=True)
    stopped = cap._stopped_ns
    assert stopped is not None
    first = cap.drain()["samples"]["ts_ns"]
    assert first and max(first) < stopped  # the window's rows, none after it
    time.sleep(0.4)
    assert cap._remote is not None  # still sampling, for the pace
    assert cap.drain()["samples"]["ts_ns"] == []  # ... into the pace only
    deadline = time.monotonic() + 5.0
    while cap._remote is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cap._remote is None  # stopped by itself after after_s
    assert cap.settings_for_manifest()["samplers"]["metrics"]["where"] == "process"
    # a process that ends sooner stops it at once
    cap2 = _sampling(60.0, 0.3)
    cap2.stop(keep_hooks=True)
    t0 = time.monotonic()
    cap2.end_after_window()
    assert cap2._remote is None and time.monotonic() - t0 < 4.0
    # stopped for good (no later window): no sampling after it
    cap3 = _sampling(5.0, 0.3)
    cap3.stop()
    assert cap3._after is None
