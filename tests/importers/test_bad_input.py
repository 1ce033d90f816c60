"""Broken and hostile inputs: one-line errors naming the file, or an import with a diagnostic.

Every failing import must leave nothing behind (no half-written run, no temp folder).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from stepscope.errors import TraceFormatError
from stepscope.importers import detect, import_traces
from stepscope.importers.kineto import parse_kineto
from stepscope.store import Run

DATA = Path(__file__).parent.parent / "data"
CNN = DATA / "cnn_fp32_sync.pt.trace.json.gz"


def event(name: str = "aten::mm", ts: Any = 1.0, dur: Any = 2.0, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"External id": 1}, **extra}


def write(tmp_path: Path, name: str, payload: Any) -> Path:
    path = tmp_path / name
    if isinstance(payload, bytes):
        path.write_bytes(payload)
    elif isinstance(payload, str):
        path.write_text(payload)
    else:
        path.write_text(json.dumps(payload))
    return path


def fails(tmp_path: Path, path: Path, *needles: str) -> str:
    """``path`` is refused by detect, parse_kineto and import_traces, with one line that
    names the file; the import leaves nothing in ``tmp_path`` but the inputs."""
    before = sorted(tmp_path.iterdir())
    messages = []
    for call in (lambda: detect(path), lambda: parse_kineto(path, default_rank=0),
                 lambda: import_traces([path], tmp_path / "run")):
        with pytest.raises(TraceFormatError) as err:
            call()
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith(str(path)), msg
        messages.append(msg)
    for needle in needles:
        assert any(needle in m for m in messages), (needle, messages)
    assert sorted(tmp_path.iterdir()) == before  # no run, no temp folder
    return messages[1]


def test_truncated_gzip(tmp_path: Path) -> None:
    blob = CNN.read_bytes()
    fails(tmp_path, write(tmp_path, "cut.json.gz", blob[: len(blob) // 2]), "truncated gzip")


def test_corrupt_gzip(tmp_path: Path) -> None:
    blob = bytearray(CNN.read_bytes())
    blob[20:60] = b"\xff" * 40
    fails(tmp_path, write(tmp_path, "bad.json.gz", bytes(blob)), "gzip")


def test_invalid_json(tmp_path: Path) -> None:
    msg = fails(tmp_path, write(tmp_path, "bad.json", '{"traceEvents": [{"ph": "X",, }]}'),
                "invalid JSON")
    assert "invalid JSON" in msg
    fails(tmp_path, write(tmp_path, "cut.json", '{"schemaVersion": 1, "traceEvents": [{"ph": "X"'),
          "invalid JSON")


def test_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    # msgspec raises UnicodeDecodeError (not DecodeError) for it: plain, gzip and chunked alike
    raw = json.dumps({"traceEvents": [event(f"op{i}", ts=float(i)) for i in range(200)]}).encode()
    bad = raw.replace(b'"op120"', b'"op\xff120"')
    for name, blob in (("bad.json", bad), ("bad.json.gz", gzip.compress(bad))):
        fails(tmp_path, write(tmp_path, name, blob), "invalid JSON")
    path = write(tmp_path, "chunked.json", bad)
    for native in (True, False):
        with pytest.raises(TraceFormatError, match="invalid JSON"):
            parse_kineto(path, default_rank=0, chunk_bytes=2000, native=native)


def test_json_that_is_not_a_trace(tmp_path: Path) -> None:
    fails(tmp_path, write(tmp_path, "numbers.json", [1, 2, 3]), "JSON array")
    fails(tmp_path, write(tmp_path, "config.json", {"lr": 0.1, "epochs": 3}), "traceEvents")
    fails(tmp_path, write(tmp_path, "empty.json", b""), "empty")
    fails(tmp_path, write(tmp_path, "text.json", "hello"), "JSON")


def test_trace_events_not_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", {"schemaVersion": 1, "traceEvents": {"ph": "X"}})
    with pytest.raises(TraceFormatError) as err:
        parse_kineto(path, default_rank=0)
    assert "'traceEvents' is not a list" in str(err.value) and "\n" not in str(err.value)


def test_bad_events_are_dropped_with_diagnostics(tmp_path: Path) -> None:
    events = [
        event("ok1"),
        event("string ts", ts="12"),           # wrong type: whole event skipped
        {"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 1.0},
        event("negative", dur=-5.0),
        "not an object",
        event("ok2", ts=3.0),
        {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": 1, "tid": 1, "ts": 4.0},
        event("bad args", args={"External id": [1, 2]}),
    ]
    path = write(tmp_path, "t.json", {"schemaVersion": 1, "traceEvents": events})
    kf = parse_kineto(path, default_rank=0)
    assert kf.tables["cpu_ops"].column("name").to_pylist() == ["ok1", "ok2"]
    diags = {d.code: d for d in kf.diagnostics}
    assert set(diags) == {"bad_event", "missing_ts", "negative_duration", "missing_dur"}
    assert diags["bad_event"].count == 3  # string ts, not an object, list as External id
    assert "event 1" in diags["bad_event"].message and "ts" in diags["bad_event"].message
    assert diags["missing_ts"].count == 1 and "event 2" in diags["missing_ts"].message
    negative = diags["negative_duration"]
    assert negative.count == 1 and "'negative'" in negative.message
    assert diags["missing_dur"].count == 1
    assert all(d.file == str(path) and "\n" not in d.message for d in kf.diagnostics)
    out = import_traces([path], tmp_path / "run")
    assert {d.code for d in Run(out).manifest.diagnostics} == set(diags)


def test_bad_event_in_a_middle_chunk_keeps_its_file_index(tmp_path: Path) -> None:
    events = [event(f"op{i}", ts=float(i)) for i in range(3000)]
    events[2345] = event("bad", ts="oops")
    path = write(tmp_path, "t.json", {"schemaVersion": 1, "traceEvents": events})
    kf = parse_kineto(path, default_rank=0, chunk_bytes=8192)
    assert kf.tables["cpu_ops"].num_rows == 2999
    (diag,) = kf.diagnostics
    assert diag.code == "bad_event" and "event 2345" in diag.message


def test_nested_objects_that_look_like_event_boundaries(tmp_path: Path) -> None:
    # args holding a list of objects: a chunk boundary can land inside an event;
    # the reader notices and decodes the document whole instead.
    events = [event(f"op{i}", ts=float(i), args={"External id": i, "pg": [{"a": 1}, {"b": 2}] * 20})
              for i in range(400)]
    path = write(tmp_path, "t.json", {"schemaVersion": 1, "traceEvents": events,
                                      "deviceProperties": [{"id": 0, "name": "x"}, {"id": 1}]})
    for chunk in (256, 1000, 4096):
        kf = parse_kineto(path, default_rank=0, chunk_bytes=chunk)
        assert kf.tables["cpu_ops"].column("external_id").to_pylist() == list(range(400))
        assert kf.tables["devices"].num_rows == 2
        assert kf.diagnostics == ()


def test_bad_top_level_metadata_is_ignored_with_a_diagnostic(tmp_path: Path) -> None:
    events = [event(f"op{i}", ts=float(i)) for i in range(200)]
    path = write(tmp_path, "t.json", {"schemaVersion": 1, "deviceProperties": "GPU",
                                      "traceEvents": events})
    for chunk in (1 << 30, 1024):  # whole, and in chunks (the head is decoded on its own)
        kf = parse_kineto(path, default_rank=0, chunk_bytes=chunk)
        assert [d.code for d in kf.diagnostics] == ["bad_metadata"]
        assert "deviceProperties" in kf.diagnostics[0].message
        assert "devices" not in kf.tables and kf.tables["cpu_ops"].num_rows == 200


def test_empty_trace_imports_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", {"schemaVersion": 1, "traceEvents": []})
    kf = parse_kineto(path, default_rank=0)
    assert kf.tables == {} and [d.code for d in kf.diagnostics] == ["empty_trace"]


def test_no_readable_event_and_no_metadata(tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", {"traceEvents": [1, 2, "x"]})
    with pytest.raises(TraceFormatError) as err:
        parse_kineto(path, default_rank=0)
    assert "none of its 3 events" in str(err.value)


def test_chrome_trace_from_another_tool(tmp_path: Path) -> None:
    path = write(tmp_path, "t.json", {"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1,
                                                       "pid": 1, "tid": 1}]})
    fails(tmp_path, path, "without PyTorch profiler")


def test_a_directory_with_no_traces(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "notes.txt").write_text("hi")
    with pytest.raises(TraceFormatError) as err:
        import_traces([folder], tmp_path / "run")
    assert str(err.value).startswith(str(folder)) and "no trace files" in str(err.value)
    write(folder, "config.json", {"lr": 1})
    with pytest.raises(TraceFormatError) as err:
        import_traces([folder], tmp_path / "run")
    msg = str(err.value)
    assert "no PyTorch profiler traces" in msg and "config.json" in msg and "\n" not in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_unreadable_and_missing_paths(tmp_path: Path) -> None:
    fails(tmp_path, tmp_path / "nope.json", "no such file")
    folder_named_like_a_file = tmp_path / "x.json"
    folder_named_like_a_file.mkdir()
    for call in (lambda: detect(folder_named_like_a_file),
                 lambda: parse_kineto(folder_named_like_a_file, default_rank=0)):
        with pytest.raises(TraceFormatError) as err:
            call()
        assert "is a directory" in str(err.value)
    if os.geteuid() != 0:  # root can read anything
        locked = write(tmp_path, "locked.json", {"traceEvents": []})
        locked.chmod(0)
        try:
            fails(tmp_path, locked, "permission denied")
        finally:
            locked.chmod(0o644)


def test_failure_in_a_later_file_leaves_no_run(tmp_path: Path) -> None:
    good = tmp_path / "a.json.gz"
    good.write_bytes(CNN.read_bytes())
    bad = write(tmp_path, "b.json", {"schemaVersion": 1, "traceEvents": [event()]})
    bad.write_text(bad.read_text()[:-5])  # cut after detection would accept it
    with pytest.raises(TraceFormatError) as err:
        import_traces([good, bad], tmp_path / "run")
    assert str(err.value).startswith(str(bad))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json.gz", "b.json"]


def test_existing_run_is_kept_unless_overwrite(tmp_path: Path) -> None:
    out = import_traces([CNN], tmp_path / "run")
    before = Run(out).manifest.created
    with pytest.raises(Exception) as err:
        import_traces([CNN], out)
    assert "already exists" in str(err.value)
    assert Run(out).manifest.created == before
    import_traces([CNN], out, overwrite=True)
    assert Run(out).query("select count(*) as n from kernels").column("n")[0].as_py() == 288


def test_gzip_of_garbage_json(tmp_path: Path) -> None:
    path = write(tmp_path, "g.json.gz", gzip.compress(b'{"traceEvents": [1, 2'))
    fails(tmp_path, path, "invalid JSON")
