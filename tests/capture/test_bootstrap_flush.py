"""In-window flushes run on the flush thread, outside the session lock: a step boundary never
waits on their I/O, closing the window waits for one under way, and records a GPU backend keeps
raw count toward the row cap."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.capture.test_bootstrap import FakeClock, FakeHost
from tests.capture.test_bootstrap_gpu import FakeGpu

from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.partitions import read_partitions
from stepscope.capture.schedule import make_schedule


def make(tmp_path: Path, gpu: Any, steps: str = "1-100000", **kw: Any) -> tuple[Session, FakeClock]:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule(steps), **kw)
    s = Session(cfg, clock=clock, environ={}, gpu_factory=lambda b, a: gpu,
                host_factory=lambda c, r, clk: FakeHost(clk))
    return s, clock


def step(s: Session, clock: FakeClock) -> None:
    s.step()
    clock.t += 10_000_000


def test_window_chunks_are_written_by_the_flush_thread(tmp_path: Path) -> None:
    s, clock = make(tmp_path, FakeGpu(FakeClock(), []), flush_every_s=0.02)
    writers: list[str] = []
    real = s.partition.write_chunk

    def spy(tables: Any) -> int:
        writers.append(threading.current_thread().name)
        return real(tables)

    s.partition.write_chunk = spy  # type: ignore[method-assign]
    s.begin()
    step(s, clock)
    step(s, clock)  # boundary 1: the window opens (untimed tables written here)
    opened = len(writers)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        step(s, clock)
        time.sleep(0.005)
    in_window = writers[opened:]
    s.finish()
    assert in_window and set(in_window) == {"stepscope-flush"}


class BlockingGpu(FakeGpu):
    """A backend whose flush blocks until released (a slow disk, a big buffer)."""

    def __init__(self, clock: FakeClock, log: list[str]) -> None:
        super().__init__(clock, log)
        self.entered, self.release = threading.Event(), threading.Event()

    def flush(self, forced: bool = False) -> dict[str, Any]:
        self.log.append("flush-begin")
        self.entered.set()
        self.release.wait(10)
        self.log.append("flush-end")
        return {}


def test_steps_go_on_during_a_flush_and_closing_waits_for_it(tmp_path: Path) -> None:
    log: list[str] = []
    gpu = BlockingGpu(FakeClock(), log)
    s, clock = make(tmp_path, gpu, steps="1-5", flush_every_s=0.02)
    s.begin()
    step(s, clock)
    step(s, clock)  # the window opens
    assert gpu.entered.wait(5)  # the flush thread is inside the backend's flush
    t0 = time.monotonic()
    for _ in range(4):
        step(s, clock)  # boundaries 2-5: not blocked by the flush under way
    assert time.monotonic() - t0 < 1.0 and s.close_ns is None
    closer = threading.Thread(target=step, args=(s, clock))  # boundary 6: the window closes
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # waiting for the flush to end
    gpu.release.set()
    closer.join(5)
    assert not closer.is_alive()
    s.finish()
    assert log.index("flush-end") < next(i for i, x in enumerate(log) if x.startswith("stop@"))


class RawGpu(FakeGpu):
    """A backend that keeps its records raw: 100 more per flush, none handed over as tables."""

    raw_records = 0
    forced: list[bool] = []

    def flush(self, forced: bool = False) -> dict[str, Any]:
        self.forced.append(forced)
        self.raw_records += 100
        return {}

    def stop(self) -> dict[str, Any]:
        self.raw_records += 100
        return {}


def test_raw_records_count_toward_the_row_cap(tmp_path: Path) -> None:
    gpu = RawGpu(FakeClock(), [])
    s, clock = make(tmp_path, gpu, flush_every_s=0.01, max_rows=250)
    s.begin()
    deadline = time.monotonic() + 5
    while s.close_ns is None and time.monotonic() < deadline:
        step(s, clock)
        time.sleep(0.005)
    assert s.close_ns is not None  # the cap closed the window
    s.finish()
    part = read_partitions(tmp_path / "staging")[0]
    assert any(d.code == "row_cap" for d in part.meta.diagnostics)
    assert 250 < s.rows <= 400 and gpu.raw_records <= 400
    # periodic flushes take CUPTI's partly filled buffers too: a kill later loses <= one period
    assert gpu.forced and all(gpu.forced)
