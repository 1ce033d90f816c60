"""The session's GPU backend: prepared off-thread, started one step before the window, flushed,
clipped to the window, stopped at its end; unavailable backends become a diagnostic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps

from stepscope.capture import cuda_driver
from stepscope.capture.bootstrap import CaptureConfig, Session, clip
from stepscope.capture.cupti.native import Unavailable
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.store.manifest import Diagnostic
from stepscope.store.run import Run


class FakeGpu:
    backend = "fake"

    def __init__(self, clock: FakeClock, log: list[str]) -> None:
        self.clock, self.log = clock, log

    def _kernel_now(self) -> dict[str, Any]:
        t = self.clock()
        return {"kernels": {"ts_ns": [t - 5_000_000], "dur_ns": [1_000_000], "name": ["k"]}}

    def start(self) -> None:
        self.log.append(f"start@{self.clock()}")

    def flush(self, forced: bool = False) -> dict[str, Any]:
        self.log.append("flush")
        return self._kernel_now()

    def stop(self) -> dict[str, Any]:
        self.log.append(f"stop@{self.clock()}")
        return self._kernel_now()

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return (Diagnostic("info", "fake_gpu", "fake GPU ran"),)

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": "fake", "records": 2}


def make(tmp_path: Path, gpu_factory: Callable[[str, str], Any], steps: str = "3-5",
         **kw: Any) -> tuple[Session, FakeClock]:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule(steps), **kw)
    s = Session(cfg, clock=clock, environ={}, gpu_factory=gpu_factory,
                host_factory=lambda c, r, clk: FakeHost(clk))
    return s, clock


def test_gpu_starts_a_step_early_and_its_tables_are_clipped_to_the_window(tmp_path: Path) -> None:
    log: list[str] = []
    clocks: list[FakeClock] = []
    s, clock = make(tmp_path, lambda b, a: FakeGpu(clocks[0], log))
    clocks.append(clock)
    s.begin()
    start_ms = clock.t
    run_steps(s, clock, 9)  # boundaries 0..8 at 10 ms; window 3-5 opens at 3, closes at 6
    s.finish()
    assert log[0] == f"start@{start_ms + 2 * 10_000_000}"  # boundary 2 = first - 1
    assert log[-1] == f"stop@{start_ms + 6 * 10_000_000}"
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    k = run.table("kernels")
    # the stop batch's kernel lies inside the window; nothing from the warm-up step survives
    lo, hi = start_ms + 3 * 10_000_000, start_ms + 6 * 10_000_000
    assert k.num_rows >= 1 and all(lo <= t <= hi for t in k.column("ts_ns").to_pylist())
    assert run.manifest.source.tool.endswith("record (host + fake)")
    codes = {d.code for d in run.manifest.diagnostics}
    assert "fake_gpu" in codes and "gpu_not_captured" not in codes
    assert run.manifest.settings["ranks"]["rank0"]["gpu"]["state"] == "stopped"


def test_unavailable_gpu_is_a_diagnostic_and_host_capture_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(b: str, a: str) -> Any:
        raise Unavailable("libcupti not found (install the nvidia-cuda-cupti wheel)")

    # a machine with a usable GPU: the backend's reason is the one given (test_gpu_devices.py)
    monkeypatch.setattr(cuda_driver, "no_gpu_reason", lambda: None)
    s, clock = make(tmp_path, fail)
    s.begin()
    run_steps(s, clock, 8)
    s.finish()
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert run.table("steps").column("step").to_pylist() == [3, 4, 5]
    msgs = [d.message for d in run.manifest.diagnostics if d.code == "gpu_not_captured"]
    assert any("libcupti not found" in m for m in msgs)
    assert run.manifest.settings["ranks"]["rank0"]["gpu"]["state"] == "unavailable"


def test_backend_none_starts_nothing(tmp_path: Path) -> None:
    called: list[str] = []
    s, clock = make(tmp_path, lambda b, a: called.append(b), gpu="none")
    s.begin()
    run_steps(s, clock, 8)
    s.finish()
    assert called == []


def test_window_never_reached_stops_a_started_gpu(tmp_path: Path) -> None:
    log: list[str] = []
    clocks: list[FakeClock] = []
    s, clock = make(tmp_path, lambda b, a: FakeGpu(clocks[0], log), steps="3-5")
    clocks.append(clock)
    s.begin()
    run_steps(s, clock, 3)  # boundaries 0, 1, 2: started at 2, window never opens
    s.finish()
    assert log[0].startswith("start@") and log[-1].startswith("stop@")


def test_timed_window_starts_the_gpu_ahead_and_keeps_only_the_window(tmp_path: Path) -> None:
    """CUPTI needs a moment to start recording: for --delay/--duration the backend starts
    gpu_lead_s before the window opens, and what it recorded before the window is clipped away."""
    import threading
    import time

    started: list[int] = []
    begun: list[int] = []

    class TimedGpu(FakeGpu):
        def start(self) -> None:
            started.append(time.time_ns())

        def stop(self) -> dict[str, Any]:
            # one kernel as the backend started (before the window), one in the middle of the
            # window (0.4-0.7 s after begin): not "now", which a loaded machine can reach only
            # after the window closed (seen once in CI's full suite)
            t0 = started[0]
            return {"kernels": {"ts_ns": [t0, begun[0] + 550_000_000], "dur_ns": [1000, 1000],
                                "name": ["early", "inside"]}}

    cfg = CaptureConfig(staging=str(tmp_path / "staging"), gpu_lead_s=0.3,
                        schedule=make_schedule(delay_s=0.4, duration_s=0.3))
    s = Session(cfg, environ={}, gpu_factory=lambda b, a: TimedGpu(FakeClock(), []),
                host_factory=lambda c, r, clk: FakeHost(clk))
    t_begin = time.time_ns()
    begun.append(t_begin)
    s.begin()
    done = threading.Event()
    done.wait(0.9)
    s.finish()
    assert len(started) == 1
    assert 0.05e9 <= started[0] - t_begin <= 0.3e9  # 0.4 - 0.3 s after the start, not at 0.4 s
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert run.table("kernels").column("name").to_pylist() == ["inside"]


def test_clip_handles_numpy_lists_and_arrow() -> None:
    import numpy as np
    import pyarrow as pa

    cols = {"ts_ns": np.array([0, 100, 200]), "dur_ns": np.array([10, 10, 10]), "name": ["a", "b", "c"]}
    out = clip({"kernels": cols, "devices": {"device": [0]}}, 50, 150)
    assert list(out["kernels"]["ts_ns"]) == [100] and out["kernels"]["name"] == ["b"]
    assert out["devices"] == {"device": [0]}
    tab = pa.table({"ts_ns": [0, 100, 200], "dur_ns": [10, 10, 10]})
    assert clip({"kernels": tab}, 50, None)["kernels"].column("ts_ns").to_pylist() == [100, 200]
