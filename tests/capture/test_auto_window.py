"""The default window's fallback (``capture.auto_window``): a time window for programs whose steps
no hook marks, driven by a fake GPU probe and a fake clock (``poll_s=None``: the test polls)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps

from stepscope.capture.auto_window import (
    NO_STEPS,
    Move,
    RawTail,
    WatchState,
    Window,
    compiling_now,
    needs_probe,
    next_move,
)
from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.gpu_flow import GpuFlow
from stepscope.capture.partitions import merge
from stepscope.capture.schedule import make_schedule
from stepscope.store.manifest import Diagnostic
from stepscope.store.run import Run

S = 1_000_000_000


class QueueGpu:
    """A GPU backend whose records the test queues (``emit``); flush and stop hand them over."""

    backend = "fake"

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.queue: list[tuple[int, str]] = []

    def emit(self, ts: int, name: str) -> None:
        self.queue.append((ts, name))

    def _take(self) -> dict[str, Any]:
        out, self.queue = self.queue, []
        if not out:
            return {}
        return {"kernels": {"ts_ns": [t for t, _ in out], "dur_ns": [1000] * len(out),
                            "name": [n for _, n in out]}}

    def start(self) -> None:
        self.log.append("start")

    def flush(self, forced: bool = False) -> dict[str, Any]:
        self.log.append("flush")
        return self._take()

    def stop(self) -> dict[str, Any]:
        self.log.append("stop")
        return self._take()

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return ()

    def settings_for_manifest(self) -> dict[str, Any]:
        return {"backend": "fake"}


class Probe:
    def __init__(self) -> None:
        self.in_use = False
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.in_use


def make(tmp_path: Path, steps: str | None = None, **kw: Any
         ) -> tuple[Session, FakeClock, Probe, QueueGpu, list[FakeHost]]:
    clock, probe, log = FakeClock(), Probe(), []
    gpu = QueueGpu(log)
    hosts: list[FakeHost] = []

    def host(c: CaptureConfig, r: int, clk: Callable[[], int]) -> FakeHost:
        hosts.append(FakeHost(clk))
        return hosts[-1]

    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule(steps), **kw)
    s = Session(cfg, clock=clock, environ={}, gpu_factory=lambda b, a: gpu, host_factory=host,
                gpu_probe=probe, poll_s=None, steps_probe=lambda: False,
                compile_probe=lambda: False)
    return s, clock, probe, gpu, hosts


def advance(s: Session, clock: FakeClock, seconds: float, every: float = 0.25) -> None:
    """Let ``seconds`` pass on the fake clock, polling as the watcher would."""
    for _ in range(round(seconds / every)):
        clock.t += int(every * S)
        s.poll()


def merged(tmp_path: Path, code: int = 0) -> Run:
    return Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=code))


def rank0(run: Run) -> dict[str, Any]:
    settings: dict[str, Any] = run.manifest.settings["ranks"]["rank0"]
    return settings


# -- the decision, as a pure function ---------------------------------------------------------

def state(**kw: Any) -> WatchState:
    base: dict[str, Any] = {"now_ns": 100 * S, "boundaries": 0, "window": Window.NONE,
                            "gpu_seen_ns": None, "auto_open_ns": None, "last_gpu_flush_ns": 0,
                            "warmup_s": 3.0, "max_s": 10.0, "flush_every_s": 5.0}
    return WatchState(**{**base, **kw})


@pytest.mark.parametrize(("kw", "in_use", "move"), [
    ({}, False, Move.WAIT),  # no GPU yet, no hook
    ({}, True, Move.START_GPU),  # the GPU is in use: the tentative capture starts
    ({"boundaries": 1}, True, Move.STOP),  # a step hook fired first: the step schedule
    ({"gpu_seen_ns": 98 * S, "last_gpu_flush_ns": 98 * S}, False, Move.WAIT),  # warming up
    ({"gpu_seen_ns": 97 * S, "last_gpu_flush_ns": 97 * S}, False, Move.OPEN),  # 3 s later
    ({"gpu_seen_ns": 97 * S, "boundaries": 2, "last_gpu_flush_ns": 97 * S}, False, Move.WAIT),
    ({"gpu_seen_ns": 90 * S, "boundaries": 2, "last_gpu_flush_ns": 95 * S}, False, Move.FLUSH_GPU),
    # an optimizer exists: its step hook should come, the fallback waits 60 s for it
    ({"gpu_seen_ns": 97 * S, "last_gpu_flush_ns": 97 * S, "steps_expected": True}, False,
     Move.WAIT),
    ({"gpu_seen_ns": 40 * S, "last_gpu_flush_ns": 99 * S, "steps_expected": True}, False,
     Move.OPEN),
    # a compile ended 1 s ago (JAX autotuning after the first GPU use): the warm-up waits for
    # compiling to stop, 3 s after the last compile; at most 60 s after the first GPU use
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "last_compile_ns": 99 * S}, False,
     Move.WAIT),
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "last_compile_ns": 97 * S}, False,
     Move.OPEN),
    ({"gpu_seen_ns": 40 * S, "last_gpu_flush_ns": 99 * S, "last_compile_ns": 99 * S}, False,
     Move.OPEN),
    # NVML says when the GPU's work flows: set-up work after the first GPU use (GPU quiet)
    # holds the window back; it opens 3 s after the work started to flow, and at most 60 s
    # after the first GPU use; without NVML (flow_known False) as before
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "flow_known": True}, False, Move.WAIT),
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "flow_known": True,
      "flow_since_ns": 98 * S}, False, Move.WAIT),
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "flow_known": True,
      "flow_since_ns": 97 * S}, False, Move.OPEN),
    ({"gpu_seen_ns": 40 * S, "last_gpu_flush_ns": 99 * S, "flow_known": True}, False, Move.OPEN),
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "flow_since_ns": 99 * S}, False,
     Move.OPEN),
    ({"gpu_seen_ns": 90 * S, "last_gpu_flush_ns": 99 * S, "flow_known": True,
      "steps_expected": True}, False, Move.WAIT),  # the optimizer's 60 s wait rules
    ({"window": Window.AUTO, "auto_open_ns": 91 * S}, False, Move.WAIT),
    ({"window": Window.AUTO, "auto_open_ns": 90 * S}, False, Move.CLOSE),  # after max_s
    ({"window": Window.STEPS, "gpu_seen_ns": 90 * S}, False, Move.STOP),
    ({"window": Window.CLOSED}, True, Move.STOP),
    ({"finished": True}, True, Move.STOP),
])
def test_next_move(kw: dict[str, Any], in_use: bool, move: Move) -> None:
    assert next_move(state(**kw), in_use) is move


def test_the_probe_is_asked_only_while_it_matters() -> None:
    assert needs_probe(state())
    assert not needs_probe(state(gpu_seen_ns=1))
    assert not needs_probe(state(boundaries=1))
    assert not needs_probe(state(window=Window.STEPS))


# -- the session --------------------------------------------------------------------------------

def test_a_program_without_step_hooks_gets_a_time_window_from_its_gpu_use(tmp_path: Path) -> None:
    s, clock, probe, gpu, hosts = make(tmp_path)
    s.begin()
    advance(s, clock, 2.0)  # imports: no GPU yet
    assert gpu.log == [] and probe.calls == 8
    probe.in_use = True
    advance(s, clock, 0.25)
    t_gpu = clock.t
    assert gpu.log == ["start"]  # at once: a program that ends early still leaves GPU data
    gpu.emit(t_gpu + S, "warmup_kernel")  # in the warm-up: before the window, clipped away
    hosts[0]._add("samples", ts_ns=t_gpu + S, metric="m", value=1.0, unit="%")
    advance(s, clock, 2.75)
    assert s.open_ns is None  # 2.75 s of warm-up
    advance(s, clock, 0.25)
    assert s.open_ns == t_gpu + 3 * S and probe.calls == 9  # never asked again once seen
    gpu.emit(t_gpu + 5 * S, "window_kernel")
    hosts[0]._add("samples", ts_ns=t_gpu + 5 * S, metric="m", value=2.0, unit="%")
    advance(s, clock, 9.75)
    assert s.close_ns is None
    advance(s, clock, 0.25)
    assert s.close_ns == t_gpu + 13 * S  # max_seconds (10 s) after it opened
    assert not s.poll()  # the watcher's work is done
    advance(s, clock, 5.0)
    s.finish()
    run = merged(tmp_path)
    assert run.table("kernels").column("name").to_pylist() == ["window_kernel"]
    assert run.table("samples").column("value").to_pylist() == [2.0]
    assert run.table("steps").num_rows == 0  # steps are recovered at analysis
    r = rank0(run)
    assert r["window_kind"] == "gpu_time"
    assert r["window"].startswith("no step hook fired: 10 s from 3 s after the GPU was first used")
    assert r["gpu_first_used_ns"] == t_gpu and r["auto_warmup_s"] == 3.0
    assert run.manifest.settings["window_used"] == r["window"]
    assert not run.manifest.partial
    codes = {d.code for d in run.manifest.diagnostics}
    assert not {"window_not_reached", "no_step_hook", "partial_run"} & codes
    o = run.manifest.overhead["rank0"]  # no steps: no ratio, and it says why
    assert o["step_time_ratio_after_unmeasurable"] == NO_STEPS
    assert not [k for k in o if k.startswith("step_time_ratio_in_window")]
    assert o["window_wall_s"] == pytest.approx(10.0)


def test_set_up_work_after_the_first_gpu_use_is_not_taken_for_the_loop(tmp_path: Path) -> None:
    # the program touches the GPU, then prepares data on the host for 8 s (NVML: 0% busy),
    # then loops: the window opens 3 s after the GPU's work started to flow
    s, clock, probe, gpu, hosts = make(tmp_path)
    flow = GpuFlow()
    s.begin()
    hosts[0].gpu_flow = flow  # what HostCapture feeds from its samplers' rows
    probe.in_use = True
    advance(s, clock, 0.25)
    t_gpu = clock.t
    for i in range(80):  # 8 s of set-up: the GPU is idle
        flow.note([(t_gpu + i * S // 10, 0, "gpu.util_pct", 0.0, "%")])
    advance(s, clock, 8.0)
    assert s.open_ns is None  # the 3 s warm-up from the first GPU use is long over
    t_loop = t_gpu + 8 * S
    for i in range(40):  # the loop: kernels run
        flow.note([(t_loop + i * S // 10, 0, "gpu.util_pct", 60.0, "%")])
    advance(s, clock, 2.75)
    assert s.open_ns is None
    advance(s, clock, 0.5)
    assert s.open_ns is not None and t_loop + 3 * S <= s.open_ns <= t_loop + int(3.25 * S)
    advance(s, clock, 11.0)
    s.finish()
    r = rank0(merged(tmp_path))
    assert r["window"].startswith("no step hook fired: 10 s from 3 s after the GPU's work "
                                  "started to flow (8 s after the GPU was first used")


def test_gpu_flow_from_nvml_samples() -> None:
    f = GpuFlow(quiet_s=1.0)
    assert not f.known and f.flow_since(0) is None
    f.note([(0, None, "cpu.util_pct", 50.0, "%")])
    assert not f.known  # not a GPU utilisation
    # two GPUs per tick: a tick is busy when either is
    f.note([(1 * S, 0, "gpu.util_pct", 0.0, "%"), (1 * S, 1, "gpu.util_pct", 0.0, "%")])
    assert f.known and f.flow_since(1 * S) is None
    f.note([(2 * S, 0, "gpu.util_pct", 0.0, "%"), (2 * S, 1, "gpu.util_pct", 30.0, "%")])
    assert f.flow_since(2 * S) == 2 * S
    # a quiet stretch shorter than 1 s does not end the flow
    f.note([(int(2.5 * S), 0, "gpu.util_pct", 0.0, "%"), (3 * S, 0, "gpu.util_pct", 5.0, "%")])
    assert f.flow_since(3 * S) == 2 * S
    # quiet for 1 s or more: no flow now; the next busy sample starts a new flow
    f.note([(4 * S, 0, "gpu.util_pct", 0.0, "%"), (5 * S, 0, "gpu.util_pct", 0.0, "%")])
    assert f.flow_since(int(5.5 * S)) is None
    f.note([(6 * S, 0, "gpu.util_pct", 0.5, "%")])  # below 1%: still quiet
    f.note([(7 * S, 0, "gpu.util_pct", 80.0, "%")])
    assert f.flow_since(7 * S) == 7 * S


def test_a_program_ending_in_the_warm_up_keeps_all_since_the_first_gpu_use(tmp_path: Path) -> None:
    s, clock, probe, gpu, hosts = make(tmp_path)
    s.begin()
    hosts[0]._add("samples", ts_ns=clock.t + S // 2, metric="m", value=1.0, unit="%")  # imports
    advance(s, clock, 1.0)
    probe.in_use = True
    advance(s, clock, 0.25)
    t_gpu = clock.t
    gpu.emit(t_gpu + S // 2, "early_kernel")
    hosts[0]._add("samples", ts_ns=t_gpu + S // 2, metric="m", value=2.0, unit="%")
    advance(s, clock, 1.25)
    s.finish()  # 1.25 s into the 3 s warm-up
    assert gpu.log == ["start", "stop"]
    run = merged(tmp_path)
    assert run.table("kernels").column("name").to_pylist() == ["early_kernel"]
    assert run.table("samples").column("value").to_pylist() == [2.0]  # not the imports
    r = rank0(run)
    assert (r["window_kind"], r["window_start_ns"], r["window_end_ns"]) == (
        "gpu_warmup", t_gpu, t_gpu + int(1.25 * S))
    (d,) = [d for d in run.manifest.diagnostics if d.code == "window_includes_warmup"]
    assert d.level == "info" and "warm-up included" in d.message
    assert not run.manifest.partial


def test_step_hooks_firing_during_the_warm_up_win(tmp_path: Path) -> None:
    s, clock, probe, gpu, _ = make(tmp_path)
    s.begin()
    probe.in_use = True
    advance(s, clock, 0.25)
    t_gpu = clock.t
    assert gpu.log == ["start"]
    gpu.emit(t_gpu + 1, "before_steps")
    run_steps(s, clock, 2, step_ms=1000)  # boundaries 0 and 1, 1 s apart
    advance(s, clock, 2.0)  # past the warm-up: steps fired, no time window
    assert s.open_ns is None and s.auto.open_ns is None
    run_steps(s, clock, 1, step_ms=1000)  # boundary 2
    t_open = clock.t
    run_steps(s, clock, 1, step_ms=1000)  # boundary 3 opens the step window
    assert s.open_ns == t_open
    assert not s.poll()  # the step schedule's window: nothing left for the watcher
    gpu.emit(t_open + 1, "in_window")
    run_steps(s, clock, 4, step_ms=1000)
    s.finish()
    run = merged(tmp_path)
    assert run.table("kernels").column("name").to_pylist() == ["in_window"]
    assert run.table("steps").column("step").to_pylist() == [3, 4, 5, 6]
    assert rank0(run)["window_kind"] == "steps"


def test_steps_in_a_time_window_are_recorded_but_do_not_close_it(tmp_path: Path) -> None:
    s, clock, probe, _gpu, _ = make(tmp_path)
    s.begin()
    probe.in_use = True
    advance(s, clock, 3.25)
    assert s.auto.open_ns is not None
    run_steps(s, clock, 60, step_ms=100)  # 60 boundaries (past max_steps) in 6 s
    assert s.close_ns is None
    advance(s, clock, 4.0)
    assert s.close_ns is not None  # by time
    s.finish()
    run = merged(tmp_path)
    assert run.table("steps").num_rows == 59
    o = run.manifest.overhead["rank0"]
    assert "step_time_ratio_after_unmeasurable" not in o and o["steps_in_window"] == 59


def test_no_gpu_and_no_hook_keeps_the_host_tail_with_an_info(tmp_path: Path) -> None:
    s, clock, _probe, gpu, hosts = make(tmp_path)
    s.begin()
    for i in range(30):  # 30 s of host samples, drained every flush_every_s by the watcher
        hosts[0]._add("samples", ts_ns=clock.t, metric="m", value=float(i), unit="%")
        advance(s, clock, 1.0)
    assert len(s._pre) <= s._pre.maxlen  # type: ignore[operator]
    s.finish()
    assert gpu.log == []
    run = merged(tmp_path)
    assert run.table("samples").column("value").to_pylist() == [float(i) for i in range(20, 30)]
    diags = [d for d in run.manifest.diagnostics if d.code in ("no_step_hook", "window_not_reached")]
    assert [(d.level, d.message) for d in diags] == [(
        "info", "no step hook fired and no GPU work was seen: kept the last 10 s of host activity")]
    assert rank0(run)["window_kind"] == "tail" and not run.manifest.partial


def test_too_few_steps_with_the_gpu_keep_a_tail_of_both(tmp_path: Path) -> None:
    s, clock, probe, gpu, _ = make(tmp_path)
    s.begin()
    probe.in_use = True
    advance(s, clock, 0.25)
    gpu.emit(clock.t, "old")
    run_steps(s, clock, 1, step_ms=1000)  # a step hook fired: no time window
    advance(s, clock, 20.0)
    gpu.emit(clock.t - S, "recent")
    s.finish()
    run = merged(tmp_path)
    assert run.table("kernels").column("name").to_pylist() == ["recent"]  # the last 10 s
    (d,) = [d for d in run.manifest.diagnostics if d.code == "window_not_reached"]
    assert d.level == "warning" and "host and GPU activity" in d.message


@pytest.mark.parametrize("opts", [{"steps": "3-5"}, {"nvtx_step": "train_step"},
                                  {"auto_warmup_s": -1.0}])
def test_no_fallback_where_the_user_chose_the_window(tmp_path: Path, opts: dict[str, Any]) -> None:
    s, clock, probe, gpu, _ = make(tmp_path, **opts)
    assert not s.auto.enabled
    s.begin()
    probe.in_use = True
    advance(s, clock, 20.0)
    assert probe.calls == 0 and gpu.log == [] and s.open_ns is None


def test_timed_windows_have_no_fallback(tmp_path: Path) -> None:
    cfg = CaptureConfig(staging=str(tmp_path), schedule=make_schedule(delay_s=1, duration_s=1))
    assert not cfg.auto_window


def test_a_forked_child_never_polls(tmp_path: Path) -> None:
    s, _clock, probe, gpu, _ = make(tmp_path)
    s.begin()
    s.pid = -1  # as seen from a forked child (a DataLoader worker)
    probe.in_use = True
    assert not s.poll()
    assert probe.calls == 0 and gpu.log == []


def test_the_watcher_thread_runs_from_begin_to_finish(tmp_path: Path) -> None:
    ready = threading.Event()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), auto_warmup_s=0.0, gpu="none")
    s = Session(cfg, environ={}, host_factory=lambda c, r, clk: FakeHost(clk),
                gpu_probe=ready.is_set, poll_s=0.01, steps_probe=lambda: False)
    s.begin()
    (t,) = [t for t in threading.enumerate() if t.name == "stepscope-watch"]
    assert t.daemon
    ready.set()
    deadline = time.monotonic() + 5
    while s.auto.open_ns is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.auto.open_ns is not None and s.auto.gpu_seen_ns is not None
    s.finish()
    t.join(1.0)
    assert not t.is_alive()


def test_a_probe_that_raises_is_a_no(tmp_path: Path) -> None:
    s, clock, _, gpu, _ = make(tmp_path)

    def boom() -> bool:
        raise RuntimeError("driver")

    s.auto.probe = boom
    s.begin()
    advance(s, clock, 1.0)
    assert gpu.log == []


def test_raw_tail_drops_old_record_files_but_keeps_names(tmp_path: Path) -> None:
    tail = RawTail(tmp_path)
    (tmp_path / "cupti.00000.bin").write_bytes(b"x")
    (tmp_path / "cupti.00000.strings.json").write_text("{}")
    tail.note(10 * S)
    (tmp_path / "cupti.00001.bin").write_bytes(b"x")
    (tmp_path / "cupti.00001.bin.tmp").write_bytes(b"x")  # a flush under way: not its own
    tail.note(20 * S)
    assert tail.drop_before(15 * S) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cupti.00000.strings.json", "cupti.00001.bin", "cupti.00001.bin.tmp"]
    assert tail.drop_before(15 * S) == 0


def test_an_optimizer_makes_the_fallback_wait_for_its_steps(tmp_path: Path) -> None:
    """A program that built an optimizer (torch.compile or a slow first batch before the first
    step): the time window does not open after the 3 s warm-up but after 60 s, and the step
    schedule takes over when the steps come."""
    s, clock, probe, gpu, hosts = make(tmp_path)
    s.auto.steps_probe = lambda: True
    s.begin()
    probe.in_use = True
    advance(s, clock, 10.0)
    assert s.open_ns is None and s.auto.steps_expected
    advance(s, clock, 51.0)
    assert s.open_ns is not None
    assert "an optimizer was built" in s.window_used.text


def test_the_time_window_waits_for_compilation_to_stop(tmp_path: Path) -> None:
    """A JAX program compiles (and autotunes on the GPU) for 8 s after its first GPU use: the
    window opens 3 s after the last compile, not 3 s after the first GPU use, and says so."""
    s, clock, probe, gpu, hosts = make(tmp_path)
    s.begin()
    probe.in_use = True
    advance(s, clock, 0.25)
    t_gpu = clock.t
    for _ in range(8):  # a compile ends every second
        hosts[0].last_compile_ns = clock.t
        advance(s, clock, 1.0)
    last = hosts[0].last_compile_ns
    assert s.open_ns is None  # 8 s after the first GPU use, still compiling a second ago
    advance(s, clock, 1.75)
    assert s.open_ns is None
    advance(s, clock, 0.25)
    assert s.open_ns == last + 3 * S
    assert s.window_used.text.startswith("no step hook fired: 10 s from 3 s after the last "
                                         f"compilation ({(last - t_gpu) / S:.3g} s after")


def test_the_warm_up_waits_while_a_compiler_runs(tmp_path: Path) -> None:
    """One long compile (no compile event until it ends): while a compiler's frame is on a
    stack, the warm-up waits; the window opens 3 s after it left."""
    s, clock, probe, gpu, hosts = make(tmp_path)
    busy = [True]
    s._compile_probe = lambda: busy[0]
    s.begin()
    probe.in_use = True
    advance(s, clock, 0.25)
    advance(s, clock, 20.0)
    assert s.open_ns is None  # 20 s into one compile
    busy[0] = False
    t_done = clock.t
    advance(s, clock, 2.75)
    assert s.open_ns is None
    advance(s, clock, 0.25)
    assert s.open_ns == t_done + 3 * S
    assert "after the last compilation" in s.window_used.text


def test_compiling_now_sees_a_compiler_frame_on_any_thread() -> None:
    assert not compiling_now()
    code = compile("def backend_compile(ev):\n    ev.wait(5)\n",
                   "/site-packages/jax/_src/compiler.py", "exec")
    ns: dict[str, Any] = {}
    exec(code, ns)
    ev = threading.Event()
    t = threading.Thread(target=ns["backend_compile"], args=(ev,))
    t.start()
    try:
        deadline = time.monotonic() + 5
        while not compiling_now() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert compiling_now()
    finally:
        ev.set()
        t.join()
    assert not compiling_now()


def test_optimizer_built_reads_torch_without_patching() -> None:
    torch = pytest.importorskip("torch")
    from stepscope.capture.hooks.optimizer import optimizer_built

    class Mine(torch.optim.Optimizer):  # a step of its own: earlier tests may have built SGDs
        def step(self, closure: Any = None) -> None:
            return None

    assert getattr(Mine.__dict__.get("step"), "hooked", False) is False
    Mine(torch.nn.Linear(2, 2).parameters(), {"lr": 0.1})
    assert optimizer_built()
    assert getattr(Mine.__dict__.get("step"), "hooked", False) is True
