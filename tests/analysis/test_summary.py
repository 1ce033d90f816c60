"""Run summary: GPU busy share per rank over the devices it used, pooled over ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder import TraceBuilder
from stepscope.analysis import analyze
from stepscope.analysis.summary import rank_summary, summarize
from stepscope.model.scaling import gpu_bound_share
from stepscope.store.manifest import SourceInfo


def _two_ranks(b: TraceBuilder) -> None:
    """rank 0: 2 steps of 1000 µs, kernels 0-800 and 1000-1600 on device 3: 1.4 of 2.0 ms;
    rank 1: 2 steps of 2000 µs, kernels 0-1000 and 2000-3000 on device 0: 2.0 of 4.0 ms."""
    for i in range(2):
        b.step(i * 1000, 1000, rank=0)
        b.step(i * 2000, 2000, rank=1)
    b.kernel("k", 0, 800, device=3, rank=0).kernel("k", 1000, 600, device=3, rank=0)
    b.kernel("k", 0, 1000, rank=1).kernel("k", 2000, 1000, rank=1)


def test_busy_share_divides_by_the_devices_used_not_those_listed(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(2):
        b.step(i * 1000, 1000)
    b.kernel("k", 0, 800, device=3).kernel("k", 1000, 600, device=3)
    ra = analyze(b.build(tmp_path / "r", devices=8)).ranks[0]
    assert len(ra.devices) == 8 and ra.devices_used == (3,)
    r = rank_summary(ra)
    # 1.4 ms busy in 2.0 ms of steps on the one GPU used: 70% (not 1.4 / (2.0 x 8) = 8.75%)
    assert r.gpu_busy_in_steps_ms == pytest.approx(1.4) and r.wall_ms == pytest.approx(2.0)
    assert r.devices_used == 1 and r.gpu_busy_pct == pytest.approx(70.0)
    assert gpu_bound_share(ra) == pytest.approx(0.7)


def test_two_devices_used_count_twice(tmp_path: Path) -> None:
    # 1 step of 1000 µs, device 0 busy 0-1000, device 1 busy 0-500: 1.5 of 2 x 1.0 GPU-ms
    b = TraceBuilder()
    b.step(0, 1000)
    b.kernel("k", 0, 1000, device=0).kernel("k", 0, 500, device=1)
    r = rank_summary(analyze(b.build(tmp_path / "r", devices=8)).ranks[0])
    assert r.devices_used == 2 and r.gpu_busy_pct == pytest.approx(75.0)


def test_several_ranks_pool_gpu_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    _two_ranks(b)
    s = summarize(analyze(b.build(tmp_path / "r", devices=8)))
    assert [(r.rank, r.gpu_busy_pct) for r in s.ranks] == [(0, pytest.approx(70.0)),
                                                           (1, pytest.approx(50.0))]
    # pooled: (1.4 + 2.0) busy of (2.0 x 1 + 4.0 x 1) GPU-ms = 56.7% (the mean of the ranks'
    # shares would be 60%; busy summed over ranks over one rank's wall, 3.4 of 3.0, is > 100%)
    assert s.gpu_busy_in_steps_ms == pytest.approx(3.4)
    assert s.gpu_time_ms == pytest.approx(6.0) and s.devices_used == 2
    assert s.gpu_busy_pct == pytest.approx(100 * 3.4 / 6.0)
    assert s.gpu_use == "recorded"


def test_a_rank_without_gpu_records_has_no_busy_share(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        b.step(i * 1000, 1000, source="hook")
        b.input_wait(i * 1000, 500)
    settings = {"ranks": {"rank0": {"gpu": {"backend": "cupti", "state": "stopped"}}}}
    s = summarize(analyze(b.build(tmp_path / "r", devices=0, settings=settings,
                                  source=SourceInfo(kind="capture"))))
    (r,) = s.ranks
    assert (r.devices_used, r.gpu_busy_pct, r.gpu_use) == (0, 0.0, "none")
    assert r.gpu_note == "the GPU capture (cupti) ran through the window and recorded no GPU work"
    assert (s.gpu_time_ms, s.gpu_busy_pct, s.gpu_use) == (0.0, 0.0, "none")
    # a recorded run's steps table says which hook made the steps
    assert s.step_detail == "3 from a step hook (optimizer, Lightning, Hugging Face, Keras)"


def test_step_detail_per_rank_when_the_ranks_differ(tmp_path: Path) -> None:
    b = TraceBuilder()
    _two_ranks(b)
    s = summarize(analyze(b.build(tmp_path / "r")))
    assert s.step_detail == "2 from the trace's ProfilerStep markers"
    b2 = TraceBuilder()
    _two_ranks(b2)
    b2.step(4000, 1000, rank=1)
    s = summarize(analyze(b2.build(tmp_path / "r2")))
    assert s.step_detail == ("2 from the trace's ProfilerStep markers (rank 0; the other ranks "
                             "alike)")
