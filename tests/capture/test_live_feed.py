"""``capture.live_feed``: the figures of ``record --live``, read from a staging folder as the
capture writes it (hand-built chunks with hand-computed answers, and a folder a Session wrote)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.capture.test_bootstrap import FakeClock, FakeHost, run_steps

from stepscope.capture import live_feed
from stepscope.capture.bootstrap import CaptureConfig, Session
from stepscope.capture.live_feed import (
    LiveFeed,
    LiveSnapshot,
    ProcessLive,
    covered,
    gpu_busy,
    hint,
    process_figures,
)
from stepscope.capture.schedule import make_schedule
from stepscope.capture.staging import StagingPartition

MS = 1_000_000
S = 1_000_000_000


def test_covered_is_the_union_inside_the_span() -> None:
    ts = np.array([2, 11, 12, 40, -5], dtype=np.int64)
    dur = np.array([3, 2, 2, 10, 6], dtype=np.int64)
    # in [0, 32): [0,1) from the one starting at -5, [2,5), [11,14) (two overlapping), none of 40
    assert covered(ts, dur, 0, 32) == 1 + 3 + 3
    assert covered(ts[:0], dur[:0], 0, 32) == 0
    assert covered(np.array([50]), np.array([5]), 0, 32) == 0


def test_process_figures_take_the_last_steps() -> None:
    n = 25  # more than RECENT_STEPS (20): the first five are left out
    ts = np.arange(n, dtype=np.int64) * 10 * MS
    dur = np.full(n, 10 * MS, dtype=np.int64)
    dur[:5] = 100 * MS  # slow warm-up steps, outside the recent 20
    dur[-1] = 12 * MS
    steps = {"ts_ns": ts, "dur_ns": dur, "step": np.arange(n, dtype=np.int64) + 7}
    # one wait inside the recent span [50 ms, 252 ms): 20.2 ms of it
    waits = {"ts_ns": np.array([0, 60 * MS]), "dur_ns": np.array([5 * MS, 20_200_000])}
    p = process_figures(42, 3, steps, waits)
    assert (p.pid, p.rank, p.steps, p.last_step) == (42, 3, 25, 31)
    assert p.step_ms == pytest.approx(10.0)
    assert p.input_wait_share == pytest.approx(20.2 / 202.0)
    empty = process_figures(1, None, {}, {})
    assert (empty.steps, empty.step_ms, empty.input_wait_share) == (0, None, None)


def test_gpu_busy_is_the_mean_of_the_last_ten_seconds_per_device() -> None:
    a = {"ts_ns": np.array([0, 5 * S, 12 * S, 20 * S]), "device": np.array([0, 0, 0, 0]),
         "value": np.array([0.0, 10.0, 50.0, 70.0])}
    # the same samples of device 0 read by a second process count once; device 1 alone
    b = {"ts_ns": np.array([12 * S, 20 * S, 20 * S]), "device": np.array([0, 0, 1]),
         "value": np.array([50.0, 70.0, 30.0])}
    assert gpu_busy([a, b]) == ((0, 60.0), (1, 30.0))
    assert gpu_busy([]) == ()


def proc(share: float | None, steps: int = 5) -> ProcessLive:
    return ProcessLive(1, 0, steps, 10.0, steps, share)


def test_hint_picks_the_larger_share_past_its_threshold() -> None:
    assert hint(LiveSnapshot()) is None
    assert hint(LiveSnapshot(processes=(proc(0.05),), gpu_busy=((0, 95.0),))) is None
    h = hint(LiveSnapshot(processes=(proc(0.2),), gpu_busy=((0, 95.0),)))
    assert h is not None and h.topic == "input_bound" and "20%" in h.text
    h = hint(LiveSnapshot(processes=(proc(0.2),), gpu_busy=((0, 95.0), (1, 30.0))))
    assert h is not None and h.topic == "gpu_idle" and "30%" in h.text  # idle 70% > wait 20%
    # a GPU that idles before any step ran (start-up) is not a finding
    assert hint(LiveSnapshot(processes=(proc(None, steps=0),), gpu_busy=((0, 5.0),))) is None


def write_part(staging: Path, pid: int, rank: int | None = None) -> StagingPartition:
    part = StagingPartition.for_process(staging, pid, 1000 + pid)
    if rank is not None:
        (part.path / "meta.json").write_text(json.dumps({"pid": pid, "start_ns": 1000 + pid,
                                                         "env_rank": rank}))
    return part


def steps_chunk(first: int, n: int, step_ms: int) -> dict[str, dict[str, list[object]]]:
    return {"steps": {"ts_ns": [(first + i) * step_ms * MS for i in range(n)],
                      "dur_ns": [step_ms * MS] * n, "step": list(range(first, first + n)),
                      "source": ["manual"] * n}}


def test_feed_reads_each_chunk_once_as_the_capture_writes_them(tmp_path: Path) -> None:
    feed = LiveFeed(tmp_path)
    assert feed.poll() == LiveSnapshot()  # nothing written yet
    part = write_part(tmp_path, 42, rank=1)
    part.write_chunk(steps_chunk(0, 4, 10))
    snap = feed.poll()
    assert snap.chunks == 1
    assert [(p.pid, p.rank, p.steps, p.last_step, p.step_ms) for p in snap.processes] == [
        (42, 1, 4, 3, 10.0)]
    assert feed.poll().chunks == 1  # read once
    part.write_chunk({**steps_chunk(4, 4, 30),
                      "input_waits": {"ts_ns": [40 * MS], "dur_ns": [15 * MS]},
                      "samples": {"ts_ns": [S, S], "device": [0, None],
                                  "metric": ["gpu.util_pct", "proc.cpu_pct"],
                                  "value": [80.0, 12.0], "unit": ["%", "%"]}})
    snap = feed.poll()
    assert snap.chunks == 4
    (p,) = snap.processes
    assert (p.steps, p.last_step) == (8, 7)
    assert p.step_ms == pytest.approx(20.0)  # median of 4 x 10 and 4 x 30
    # steps at 0-40 ms (4 x 10 ms) and 120-240 ms (4 x 30 ms, at (4 + i) x 30 ms): span
    # [0, 240 ms), one 15 ms wait
    assert p.input_wait_share == pytest.approx(15 / 240)
    assert snap.gpu_busy == ((0, 80.0),)
    # another GPU sampled, idle: listed until the processes' devices rows say which GPUs they use
    part.write_chunk({"samples": {"ts_ns": [2 * S], "device": [1], "metric": ["gpu.util_pct"],
                                  "value": [0.0], "unit": ["%"]}})
    assert feed.poll().gpu_busy == ((0, 80.0), (1, 0.0))
    part.write_chunk({"devices": {"device": [0], "name": ["H100"]}})
    assert feed.poll().gpu_busy == ((0, 80.0),)
    # a second process without a rank sorts after the ranked one; a stray file is not a chunk
    write_part(tmp_path, 7).write_chunk(steps_chunk(0, 2, 5))
    (tmp_path / "p1007-7" / "steps.00000.parquet.tmp").write_bytes(b"half")
    assert [(p.pid, p.rank) for p in feed.poll().processes] == [(42, 1), (7, None)]


def test_feed_reads_a_processs_meta_once_it_is_there(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the rank comes from meta.json: read until it is there, then never again, also for a
    # process without a rank (the panel polls every second)
    reads: list[str] = []
    real = live_feed._rank
    monkeypatch.setattr(live_feed, "_rank", lambda part: reads.append(part.name) or real(part))
    feed = LiveFeed(tmp_path)
    late = write_part(tmp_path, 8)  # its meta.json comes after its first chunk
    late.write_chunk(steps_chunk(0, 2, 5))
    none = write_part(tmp_path, 9)
    (none.path / "meta.json").write_text(json.dumps({"pid": 9, "start_ns": 1009,
                                                     "env_rank": None}))
    none.write_chunk(steps_chunk(0, 2, 5))
    assert [(p.pid, p.rank) for p in feed.poll().processes] == [(8, None), (9, None)]
    (late.path / "meta.json").write_text(json.dumps({"pid": 8, "start_ns": 1008, "env_rank": 3}))
    for _ in range(3):
        assert [(p.pid, p.rank) for p in feed.poll().processes] == [(8, 3), (9, None)]
    assert sorted(reads) == ["p1008-8", "p1008-8", "p1009-9"]


def test_feed_skips_a_chunk_it_cannot_read(tmp_path: Path) -> None:
    part = write_part(tmp_path, 5)
    (part.path / "steps.00000.parquet").write_bytes(b"not parquet")
    part.write_chunk(steps_chunk(0, 3, 10))
    snap = LiveFeed(tmp_path).poll()
    assert [p.steps for p in snap.processes] == [3]


def test_feed_reads_what_a_session_writes(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = CaptureConfig(staging=str(tmp_path / "staging"), schedule=make_schedule("2-8"),
                        gpu="none")
    s = Session(cfg, clock=clock, environ={"RANK": "2"},
                host_factory=lambda c, r, clk: FakeHost(clk), poll_s=None)
    s.begin()
    run_steps(s, clock, 12, step_ms=15)
    s.finish()
    snap = LiveFeed(tmp_path / "staging").poll()
    (p,) = snap.processes
    assert p.rank == 2 and p.step_ms == pytest.approx(15.0) and p.steps > 0
