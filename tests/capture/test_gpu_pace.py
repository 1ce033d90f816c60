"""The GPU's busy time per window step, and the host running ahead of it (capture/gpu_pace.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stepscope.capture.gpu_pace import GpuBusy, with_gpu_pace
from stepscope.capture.partitions import merge
from stepscope.capture.staging import PartitionMeta, StagingPartition
from stepscope.store.run import Run

MS = 1_000_000


def table(rows: list[tuple[int, int, int | None]]) -> pa.Table:
    ts, dur, dev = zip(*rows) if rows else ((), (), ())
    return pa.table({"ts_ns": pa.array(ts, pa.int64()), "dur_ns": pa.array(dur, pa.int64()),
                     "device": pa.array(dev, pa.int32())})


def test_busy_is_the_union_per_device_inside_the_window() -> None:
    b = GpuBusy(100, 1_000)
    # device 0: [50, 200) clipped to [100, 200); [150, 300) overlaps it; [400, 500) apart;
    # [900, 1200) clipped to [900, 1000); a zero-length one counts nothing
    b.add(table([(50, 150, 0), (150, 150, 0), (400, 100, 0), (900, 300, 0), (600, 0, 0)]))
    # copies on device 0 overlap a kernel: counted once; device 1 is less busy
    b.add(table([(450, 100, 0), (100, 50, 1)]))
    assert b.busiest_ns() == (300 - 100) + (550 - 400) + (1000 - 900)


def test_no_records_and_no_window() -> None:
    b = GpuBusy(0, 10)
    b.add(table([]))
    assert b.busiest_ns() == 0
    assert GpuBusy.for_window({"window_start_ns": 5, "window_end_ns": None}) is None
    assert GpuBusy.for_window({"window_start_ns": 5, "window_end_ns": 5}) is None
    w = GpuBusy.for_window({"window_start_ns": 5, "window_end_ns": 9})
    assert w is not None and (w.lo, w.hi) == (5, 9)


def figures(after_ms: float, **more: Any) -> dict[str, Any]:
    return {"steps_in_window": 10, "median_step_ms_in_window": 26.0,
            "median_step_ms_after_window": after_ms, **more}


def test_steps_after_the_window_shorter_than_the_gpu_work_are_no_timing() -> None:
    # the H100 case of docs/benchmarks.md: 24.2 ms of GPU work per step, 18.9 ms host steps after
    o = with_gpu_pace(figures(18.9), busy_ns=242 * MS)
    assert o["gpu_busy_ms_per_step_in_window"] == pytest.approx(24.2)
    assert "ran ahead of the GPU" in o["step_time_ratio_after_unmeasurable"]
    assert "18.9 ms" in o["step_time_ratio_after_unmeasurable"]


def test_steps_that_can_time_the_gpu_work_keep_the_figure() -> None:
    # 5% shorter than the window's GPU work is still a timing (kernels run faster without CUPTI)
    assert "step_time_ratio_after_unmeasurable" not in with_gpu_pace(figures(23.0), 242 * MS)
    assert "step_time_ratio_after_unmeasurable" in with_gpu_pace(figures(22.9), 242 * MS)
    # an earlier reason stays
    o = with_gpu_pace(figures(5.0, step_time_ratio_after_unmeasurable="speed changed"), 242 * MS)
    assert o["step_time_ratio_after_unmeasurable"] == "speed changed"


def test_nothing_to_compare() -> None:
    assert with_gpu_pace(figures(5.0), busy_ns=0) == figures(5.0)  # no GPU records
    no_steps = {"median_step_ms_after_window": 5.0}
    assert with_gpu_pace(no_steps, busy_ns=10 * MS) == no_steps
    o = with_gpu_pace({"steps_in_window": 4}, busy_ns=10 * MS)  # no steps after the window
    assert o == {"steps_in_window": 4, "gpu_busy_ms_per_step_in_window": 2.5}


@pytest.mark.parametrize(("after_ms", "marked"), [(5.0, True), (9.0, False)])
def test_merge_keeps_the_gpu_pace_with_the_figures(tmp_path: Path, after_ms: float,
                                                   marked: bool) -> None:
    start = 1_000 * MS
    p = StagingPartition.for_process(tmp_path / "staging", os.getpid(), start)
    # 10 steps of 10 ms in the window, each with 8 ms of kernels; one kernel before the window
    kernels = {"ts_ns": [start - 5 * MS] + [start + i * 10 * MS for i in range(10)],
               "dur_ns": [4 * MS] + [8 * MS] * 10, "device": [0] * 11, "name": ["k"] * 11}
    p.write_chunk({"kernels": kernels})
    p.write_meta(PartitionMeta(
        pid=os.getpid(), start_ns=start, host="h", ended="exit",
        settings={"window_start_ns": start, "window_end_ns": start + 100 * MS},
        overhead=figures(after_ms)))
    o = Run(merge(tmp_path / "staging", tmp_path / "run", command=["x"], returncode=0)
            ).manifest.overhead["rank0"]
    assert o["gpu_busy_ms_per_step_in_window"] == pytest.approx(8.0)
    assert ("step_time_ratio_after_unmeasurable" in o) is marked


def test_a_table_is_read_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import stepscope.capture.gpu_pace as gp

    monkeypatch.setattr(gp, "SLICE_ROWS", 2)  # 5 rows in 3 slices: intervals cross slices
    b = GpuBusy(0, 1_000)
    b.add(table([(0, 100, 0), (50, 100, 0), (140, 60, 0), (300, 10, 0), (305, 10, 0)]))
    assert b.busiest_ns() == 200 + 15
