from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stepscope.capture.bootstrap import CaptureConfig, Session, clip
from stepscope.capture.launcher import SITE_DIR, child_env
from stepscope.capture.partitions import merge, read_partitions
from stepscope.capture.schedule import make_schedule
from stepscope.store.manifest import Diagnostic
from stepscope.store.run import Run

SRC = str(Path(__file__).resolve().parents[2] / "src")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000_000_000_000

    def __call__(self) -> int:
        return self.t


class FakeHost:
    """The HostCapture API, driven by the test's clock: one sample per mark_step."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.listeners: list[Callable[[int], None]] = []
        self.running = False
        self.last: int | None = None
        self.index = 0
        self.rows: dict[str, dict[str, list[Any]]] = {}
        self.stopped = 0
        self.hooks_kept = False
        self.released = 0

    def start(self) -> None:
        self.running = True

    def stop(self, keep_hooks: bool = False) -> None:
        self.running = False
        self.stopped += 1
        self.hooks_kept = keep_hooks

    def release_hooks(self) -> None:
        self.released += 1

    def add_step_listener(self, fn: Callable[[int], None]) -> None:
        self.listeners.append(fn)

    def _add(self, table: str, **cols: Any) -> None:
        t = self.rows.setdefault(table, {k: [] for k in cols})
        for k, v in cols.items():
            t[k].append(v)

    def mark_step(self, ts_ns: int | None = None) -> None:
        now = self.clock() if ts_ns is None else ts_ns
        if self.last is not None:
            self._add("steps", ts_ns=self.last, dur_ns=now - self.last, step=self.index - 1,
                      source="manual")
        self._add("samples", ts_ns=now, metric="proc.cpu_pct", value=1.0, unit="%")
        self.last = now
        self.index += 1
        for fn in self.listeners:
            fn(self.index - 1)

    def drain(self) -> dict[str, dict[str, list[Any]]]:
        out, self.rows = self.rows, {}
        return out

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"fake": True}

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return ()


def session(tmp_path: Path, steps: str | None = None, **kw: Any) -> tuple[Session, FakeClock, list[FakeHost]]:
    clock = FakeClock()
    hosts: list[FakeHost] = []

    def factory(cfg: CaptureConfig, rank: int, clk: Callable[[], int]) -> FakeHost:
        hosts.append(FakeHost(clk))
        return hosts[-1]

    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule(steps), **kw)
    return Session(cfg, clock=clock, environ={}, host_factory=factory), clock, hosts


def run_steps(s: Session, clock: FakeClock, n: int, step_ms: int = 10) -> None:
    for _ in range(n):
        s.step()
        clock.t += step_ms * 1_000_000


def captured_run(tmp_path: Path, steps: str = "3-8", n: int = 12) -> Run:
    """A run as `stepscope record` writes it (no GPU backend, the fake host): for report tests."""
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule(steps), gpu="none")
    s = Session(cfg, clock=clock, environ={}, host_factory=lambda c, r, clk: FakeHost(clk))
    s.begin()
    run_steps(s, clock, n)
    s.finish()
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))


def test_step_window_keeps_only_the_window(tmp_path: Path) -> None:
    s, clock, hosts = session(tmp_path, "2-4")
    s.begin()
    run_steps(s, clock, 10)
    assert hosts[0].stopped == 1  # capture stopped when the window closed (bounded memory)
    s.finish()
    out = merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0)
    run = Run(out)
    steps = run.table("steps").column("step").to_pylist()
    assert steps == [2, 3, 4]
    assert not run.manifest.partial
    assert any(d.code == "gpu_not_captured" for d in run.manifest.diagnostics)
    o = run.manifest.overhead["rank0"]
    # step 1 -> 2 is the GPU backend's warm-up step: counted neither before nor in the window
    assert o["steps_in_window"] == 3 and o["steps_before_window"] == 1
    assert o["step_time_ratio_in_window_vs_before"] == pytest.approx(1.0)


def test_overhead_ratio_compares_medians_of_the_last_steps_before_the_window(tmp_path: Path) -> None:
    s, clock, _ = session(tmp_path, "20-24")
    s.begin()
    run_steps(s, clock, 5, step_ms=200)  # slow first steps (loader start, first CUDA calls)
    run_steps(s, clock, 14, step_ms=10)  # steady state before the window
    run_steps(s, clock, 8, step_ms=11)  # the window: 10% slower
    s.finish()
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    o = run.manifest.overhead["rank0"]
    assert o["median_step_ms_before_window"] == pytest.approx(10.0)
    assert o["median_step_ms_in_window"] == pytest.approx(11.0)
    assert o["step_time_ratio_in_window_vs_before"] == pytest.approx(1.1)
    assert o["mean_step_ms_before_window"] > 50  # the mean would have said the window was faster


def test_steps_after_the_window_are_timed_then_the_hooks_come_out(tmp_path: Path) -> None:
    s, clock, hosts = session(tmp_path, "3-7")
    s.begin()
    run_steps(s, clock, 3, step_ms=10)  # boundaries 0-2 (2 -> 3: the GPU backend's warm-up)
    run_steps(s, clock, 5, step_ms=11)  # the window: boundaries 3-7, 10% slower
    run_steps(s, clock, 1, step_ms=500)  # boundary 8 closes the window: its step pays for it
    assert hosts[0].stopped == 1 and hosts[0].hooks_kept and hosts[0].released == 0
    run_steps(s, clock, 10, step_ms=10)  # the steps after the window
    assert hosts[0].released == 0  # the tenth step after the window has not ended yet
    run_steps(s, clock, 1, step_ms=10)
    assert hosts[0].released == 1  # ten timed: hooks out while the program runs on
    run_steps(s, clock, 5, step_ms=30)  # later steps are not timed
    s.finish()
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    o = run.manifest.overhead["rank0"]
    assert o["steps_after_window"] == 10
    assert o["median_step_ms_after_window"] == pytest.approx(10.0)
    assert o["step_time_ratio_in_window_vs_after"] == pytest.approx(1.1)
    assert run.table("steps").column("step").to_pylist() == [3, 4, 5, 6, 7]  # no after-steps


def test_a_program_ending_soon_after_the_window_reports_the_steps_it_had(tmp_path: Path) -> None:
    s, clock, hosts = session(tmp_path, "3-5")
    s.begin()
    run_steps(s, clock, 6, step_ms=10)
    run_steps(s, clock, 5, step_ms=20)  # boundary 6 closes the window, 7 ends its step: 3 after
    s.finish()
    assert hosts[0].released == 1  # finish takes the hooks out
    o = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0)
            ).manifest.overhead["rank0"]
    assert o["steps_after_window"] == 3 and o["median_step_ms_after_window"] == pytest.approx(20.0)
    assert o["step_time_ratio_in_window_vs_after"] == pytest.approx(0.5)


def test_a_window_closed_by_the_end_of_the_program_times_nothing_after(tmp_path: Path) -> None:
    s, clock, hosts = session(tmp_path, "3-50")
    s.begin()
    run_steps(s, clock, 10)
    s.finish()
    assert hosts[0].stopped == 1 and not hosts[0].hooks_kept
    o = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0)
            ).manifest.overhead["rank0"]
    assert "steps_after_window" not in o


def test_steps_after_a_timed_window_are_timed_too(tmp_path: Path) -> None:
    """--delay/--duration: the window closes on a timer, between two steps; the step it closes
    in is left out and the next ten are timed."""
    import time

    hosts: list[FakeHost] = []

    def factory(cfg: CaptureConfig, rank: int, clk: Callable[[], int]) -> FakeHost:
        hosts.append(FakeHost(clk))
        return hosts[-1]

    cfg = CaptureConfig(staging=str(tmp_path / "staging"), gpu="none",
                        schedule=make_schedule(delay_s=0.05, duration_s=0.15))
    s = Session(cfg, environ={}, host_factory=factory)
    s.begin()
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        s.step()
        time.sleep(0.01)
    assert hosts and hosts[0].released == 1  # ten steps after the window: hooks out
    s.finish()
    o = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0)
            ).manifest.overhead["rank0"]
    assert o["steps_after_window"] == 10
    assert 0.3 < o["step_time_ratio_in_window_vs_after"] < 3  # same sleep both sides


def test_default_window_closes_after_ten_seconds(tmp_path: Path) -> None:
    s, clock, _ = session(tmp_path)
    s.begin()
    run_steps(s, clock, 30, step_ms=1000)  # 1 s steps: 3 skipped, then 10 captured
    s.finish()
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    assert run.table("steps").column("step").to_pylist() == list(range(3, 13))


def test_window_never_reached_keeps_tail_with_diagnostic(tmp_path: Path) -> None:
    s, clock, _ = session(tmp_path, "100-200")
    s.begin()
    run_steps(s, clock, 5)
    s.finish("exception: ValueError")
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=1))
    assert run.manifest.partial
    codes = {d.code for d in run.manifest.diagnostics}
    assert {"window_not_reached", "partial_run", "process_ended"} <= codes
    assert run.table("samples").num_rows > 0


def test_row_cap(tmp_path: Path) -> None:
    s, clock, _ = session(tmp_path, "0-1000", max_rows=5, flush_every_s=0.0)
    s.begin()
    run_steps(s, clock, 50)
    s.finish()
    parts = read_partitions(tmp_path / "staging")
    assert any(d.code == "row_cap" for d in parts[0].meta.diagnostics)
    assert sum(parts[0].rows(n) for n in parts[0].names()) <= 5


def test_clip_uses_midpoints() -> None:
    t = {"steps": {"ts_ns": [0, 10, 20], "dur_ns": [10, 10, 10], "step": [0, 1, 2]},
         "threads": {"tid": [1], "pid": [1], "name": ["x"]}}
    c = clip(t, 10, 20)
    assert c["steps"]["step"] == [1]
    assert c["threads"] == t["threads"]


def test_forked_child_does_not_finish_parent_session(tmp_path: Path) -> None:
    s, clock, _ = session(tmp_path, "0-3")
    s.begin()
    s.pid = -1  # as seen from a forked child
    s.finish()
    assert not s.finished


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def test_sitecustomize_chains_an_existing_one(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    env = {k: v for k, v in os.environ.items() if k != "STEPSCOPE_CAPTURE"}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(other), SRC])
    r = _python("import os, sys; print(os.environ.get('CHAINED'), "
                "'_stepscope_chained_sitecustomize' in sys.modules)", env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "yes True\n"
    assert r.stderr == ""


def test_injected_bootstrap_writes_a_partition_and_keeps_output(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    cfg = CaptureConfig(staging=str(staging), schedule=make_schedule("0-2"), pkg_root=SRC)
    env = child_env(cfg, {**os.environ, "PYTHONPATH": SRC})
    code = ("import stepscope, sys\n"
            "for i in range(5): stepscope.step()\n"
            "sys.stdout.write('out'); sys.stderr.write('err')\n")
    r = _python(code, env, tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "out", "err")
    errors = list(staging.glob("bootstrap-error-*"))
    if errors and "stepscope.capture.host" in errors[0].read_text():
        pytest.skip("capture/host.py (HostCapture) is not in the tree yet")
    assert not errors, errors[0].read_text()
    parts = read_partitions(staging)
    assert len(parts) == 1
    assert parts[0].meta.ended == "exit"
    assert json.loads((parts[0].path / "meta.json").read_text())["pid"] == parts[0].meta.pid


@pytest.mark.parametrize(("call", "code", "ended"), [("sys.exit(3)", 3, "exit status 3"),
                                                     ("sys.exit('bye')", 1, "exit status 1"),
                                                     ("sys.exit(0)", 0, "exit"),
                                                     ("exit(4)", 4, "exit status 4"),
                                                     ("quit(5)", 5, "exit status 5")])
def test_exit_status_of_a_process_is_noted(tmp_path: Path, call: str, code: int, ended: str) -> None:
    """A rank that calls sys.exit(3) must not look like a clean exit in its partition."""
    staging = tmp_path / "staging"
    staging.mkdir()
    cfg = CaptureConfig(staging=str(staging), schedule=make_schedule("0-2"), pkg_root=SRC)
    env = child_env(cfg, {**os.environ, "PYTHONPATH": SRC})
    r = _python(f"import stepscope, sys\nfor i in range(5): stepscope.step()\n{call}\n", env, tmp_path)
    assert r.returncode == code
    assert r.stderr == ("bye\n" if "bye" in call else "")
    if any(staging.glob("bootstrap-error-*")):
        pytest.skip("capture/host.py (HostCapture) is not in the tree yet")
    (part,) = read_partitions(staging)
    assert part.meta.ended == ended


class PacedHost(FakeHost):
    """A FakeHost with the GPU-utilisation meter of ``HostCapture``: each step it sees feeds
    it one tick at 10%."""

    def __init__(self, clock: Callable[[], int]) -> None:
        from stepscope.capture.util_pace import UtilPace

        super().__init__(clock)
        self.util_pace = UtilPace(settle_s=0.005)  # the tick at the close is left out
        self.ended = 0

    def mark_step(self, ts_ns: int | None = None) -> None:
        self.util_pace.note([(self.clock(), 0, "gpu.util_pct", 10.0, "%")])
        super().mark_step(ts_ns)

    def end_after_window(self) -> None:
        self.ended += 1


def test_the_gpus_utilisation_in_the_window_and_after_it_goes_to_the_overhead(
        tmp_path: Path) -> None:
    clock = FakeClock()
    hosts: list[PacedHost] = []

    def factory(cfg: CaptureConfig, rank: int, clk: Callable[[], int]) -> PacedHost:
        hosts.append(PacedHost(clk))
        return hosts[-1]

    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("3-8"),
                        gpu="none")
    s = Session(cfg, clock=clock, environ={}, host_factory=factory)
    s.begin()
    run_steps(s, clock, 10)  # the window: steps 3-8 at 10%
    assert hosts[0].hooks_kept  # the program goes on: the host keeps its hooks
    # a window with steps has them to time after it, with the samplers stopped: no pace
    # sampling (a window without steps keeps it: tests/capture/test_util_pace.py)
    assert hosts[0].util_pace.after_s == 0.0
    for _ in range(12):  # ticks that reach the meter after it count as after it: 20%
        hosts[0].util_pace.note([(clock(), 0, "gpu.util_pct", 20.0, "%")])
        run_steps(s, clock, 1)
    s.finish()
    assert hosts[0].ended == 1  # the sampling after the window stopped before the final meta
    run = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0))
    o = run.manifest.overhead["rank0"]
    assert o["gpu_util_pct_window"] == 10.0 and o["gpu_util_pct_after_window"] == 20.0
    assert o["gpu_util_samples_after_window"] >= 10 and o["gpu_util_device"] == 0
