"""The row cap over written chunks and raw GPU records."""

from __future__ import annotations

from pathlib import Path

from stepscope.capture.staging import StagingPartition
from stepscope.capture.window_writer import WindowWriter


def steps(n: int) -> dict[str, dict[str, list[int]]]:
    return {"steps": {"ts_ns": list(range(n)), "dur_ns": [1] * n, "step": list(range(n))}}


def test_chunks_and_raw_records_share_one_cap(tmp_path: Path) -> None:
    w = WindowWriter(StagingPartition(tmp_path / "p"), max_rows=10)
    assert w.write(steps(4)) and w.rows == 4
    assert w.count_raw(3) and w.rows == 7  # 3 raw records so far
    assert w.count_raw(5) and w.rows == 9  # 5 so far: 2 more
    assert not w.write(steps(2))  # would make 11: refused, nothing written
    assert w.rows == 9 and [d.code for d in w.diagnostics] == ["row_cap"]
    # the way out for a window of steps and for a timed one (no step hook)
    assert "--steps A-B" in w.diagnostics[0].message
    assert "--duration S where no step hook fires" in w.diagnostics[0].message
    assert not w.count_raw(7) and w.rows == 11  # raw records are on disk already: counted
    assert [d.code for d in w.diagnostics] == ["row_cap"]  # said once
    assert w.write({}) and len(list((tmp_path / "p").glob("steps.*.parquet"))) == 1


def test_the_devices_table_is_written_past_the_cap(tmp_path: Path) -> None:
    """The final chunk of a capped window still brings the GPUs used (the kernel rules need
    them); its events are dropped."""
    w = WindowWriter(StagingPartition(tmp_path / "p"), max_rows=3)
    data = {**steps(5), "devices": {"device": [0], "name": ["H100"]}}
    assert not w.write(data)
    assert len(list((tmp_path / "p").glob("devices.*.parquet"))) == 1
    assert not list((tmp_path / "p").glob("steps.*.parquet"))
