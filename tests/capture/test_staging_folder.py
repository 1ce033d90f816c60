"""The staging folder of a run being recorded (capture.staging_folder): named with the recorder's
pid and start time, and claimed, by `stepscope record` and by `stepscope.record()` alike."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stepscope.capture.staging_folder import make_staging, staging_prefix
from stepscope.errors import RunError
from stepscope.recording import record


def test_make_staging_names_the_folder_after_its_recorder(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "run"
    staging = make_staging(out)
    assert staging.parent == out.parent and staging.is_dir()
    pid, started, _ = staging.name.removeprefix(staging_prefix(out)).split("-", 2)
    assert int(pid) == os.getpid() and abs(int(started) - time.time_ns()) < 60 * 10**9


def test_the_python_api_stops_when_a_live_record_writes_the_same_run(tmp_path: Path) -> None:
    # a live `stepscope record -o run` (our parent process is alive) that started a second ago
    live = tmp_path / f".run.staging-{os.getppid()}-{time.time_ns() - 10**9}-abc"
    live.mkdir()
    with pytest.raises(RunError, match="is writing this run"):
        with record(out=tmp_path / "run"):
            pass
    assert [p.name for p in tmp_path.iterdir()] == [live.name]  # ours removed, theirs kept
