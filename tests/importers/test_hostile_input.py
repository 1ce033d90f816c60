"""Issue 19: traces that used to crash the importer (RecursionError, OverflowError), hang it (a
pipe) or import with exit 0 and wrong numbers (a duration of 1e30 became 0, events without a
phase vanished, a truncated rank file in a folder was skipped). Each is now one line naming the
file, or the event is dropped with a diagnostic."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from stepscope.errors import DamagedFileError, TraceFormatError
from stepscope.importers import import_traces
from stepscope.importers.kineto import parse_kineto

DATA = Path(__file__).parent.parent / "data"


def kernel(**extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 2.0,
            "args": {"device": 0, "stream": 7, "correlation": 1}, **extra}


def op(name: str = "aten::mm", **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
            "args": {"External id": 1}, **extra}


def trace(tmp_path: Path, events: list[Any], name: str = "t.json", **top: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **top}))
    return path


def refused(tmp_path: Path, path: Path, needle: str) -> None:
    before = sorted(tmp_path.iterdir())
    for call in (lambda: parse_kineto(path, default_rank=0),
                 lambda: import_traces([path], tmp_path / "run")):
        with pytest.raises(TraceFormatError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(str(path)) and needle in msg and "\n" not in msg, msg
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("gz", [False, True])
def test_deep_nesting_is_invalid_json_not_a_recursion_error(tmp_path: Path, gz: bool) -> None:
    depth = 100_000
    raw = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, '
           b'"args": {"a": ' + b"[" * depth + b"]" * depth + b"}}]}")
    path = tmp_path / ("d.json.gz" if gz else "d.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    refused(tmp_path, path, "nested too deeply")


@pytest.mark.parametrize(("top", "needle"), [
    ({"distributedInfo": {"rank": 2**70}}, "distributedInfo.rank"),
    ({"distributedInfo": {"rank": 2**40}}, "distributedInfo.rank"),
    ({"distributedInfo": {"rank": -3}}, "distributedInfo.rank"),
    ({"baseTimeNanoseconds": 2**70}, "baseTimeNanoseconds"),
    ({"baseTimeNanoseconds": -(2**63)}, "baseTimeNanoseconds"),
])
def test_ranks_and_base_times_out_of_range(tmp_path: Path, top: dict[str, Any],
                                           needle: str) -> None:
    refused(tmp_path, trace(tmp_path, [op()], **top), needle)


@pytest.mark.parametrize(("field", "code"), [("dur", "duration_out_of_range"),
                                             ("ts", "time_out_of_range")])
@pytest.mark.parametrize("native", [False, True])
def test_times_out_of_range_are_dropped_with_a_diagnostic(tmp_path: Path, field: str, code: str,
                                                          native: bool) -> None:
    events = [kernel(), kernel(**{field: 1e30}), *[op(f"op{i}") for i in range(60)]]
    kf = parse_kineto(trace(tmp_path, events), default_rank=0, chunk_bytes=2000, native=native)
    assert kf.tables["kernels"].num_rows == 1  # never a kernel of 0 ns
    (diag,) = [d for d in kf.diagnostics if d.code == code]
    assert diag.count == 1 and "out of range" in diag.message


@pytest.mark.parametrize("native", [False, True])
def test_events_without_a_phase_are_counted(tmp_path: Path, native: bool) -> None:
    no_ph = {k: v for k, v in kernel().items() if k != "ph"}
    events = [kernel(), no_ph, *[op(f"op{i}") for i in range(60)]]
    kf = parse_kineto(trace(tmp_path, events), default_rank=0, chunk_bytes=2000, native=native)
    assert kf.tables["kernels"].num_rows == 1
    (diag,) = [d for d in kf.diagnostics if d.code == "missing_ph"]
    assert diag.count == 1 and "phase ('ph')" in diag.message


def test_a_pipe_is_refused_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    refused(tmp_path, path, "not a regular file")


def test_a_truncated_rank_file_in_a_folder_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copy(DATA / "trace_filter_sampled_rank-0.json.gz", folder / "rank-0.json.gz")
    data = (DATA / "trace_filter_sampled_rank-1.json.gz").read_bytes()
    (folder / "rank-1.json.gz").write_bytes(data[: len(data) // 2])
    (folder / "notes.json").write_text('{"lr": 0.1}')  # not a trace: still skipped
    with pytest.raises(DamagedFileError, match="rank-1.json.gz: truncated gzip"):
        import_traces([folder], tmp_path / "run")
    assert not (tmp_path / "run").exists()
