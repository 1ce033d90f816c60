"""The fast per-category decode (kineto/fast.py) gives the tables the generic ``Event`` decode gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stepscope.importers.kineto import build as kineto_build
from stepscope.importers.kineto import parse_kineto
from stepscope.importers.kineto import reader as kineto_reader
from stepscope.importers.kineto.fast import Decoders
from stepscope.store.produce import RankBundle

DATA = Path(__file__).parents[2] / "data"
FILES = sorted(p for p in DATA.glob("*.json.gz") if not p.name.startswith("jax"))
# No category at all: every event fails the fast decode and is decoded as a generic Event.
GENERIC = Decoders(full=(), ops=(), python=(), memory=(), flows=(), skipped=())


def _values(t: pa.Table) -> pa.Table:
    """Dictionary columns as their values (their dictionaries' order depends on the chunking)."""
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(t.column_names, t.columns)})


def tables_equal(a: RankBundle, b: RankBundle, *, exact: bool = True) -> None:
    assert a.tables.keys() == b.tables.keys()
    for name, table in a.tables.items():
        if exact:
            assert table.equals(b.tables[name]), name
        else:
            assert _values(table).equals(_values(b.tables[name])), name
    assert a.diagnostics == b.diagnostics
    assert a.details == b.details


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0][:30])
def test_fast_and_generic_decode_give_the_same_tables(path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fast = parse_kineto(path, default_rank=0)
    chunked = parse_kineto(path, default_rank=0, chunk_bytes=50_000)
    monkeypatch.setattr(kineto_reader, "decoders", lambda flows=False: GENERIC)
    tables_equal(fast, parse_kineto(path, default_rank=0))
    tables_equal(chunked, parse_kineto(path, default_rank=0, chunk_bytes=50_000))
    tables_equal(fast, chunked, exact=False)


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n'
                    + ",\n".join(json.dumps(e) for e in events) + "\n]}")
    return path


def _op(cat: str, i: int, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": f"{cat}{i}", "pid": 1, "tid": 1, "ts": float(i),
            "dur": 0.5, "args": args}


def test_fields_a_table_does_not_use_are_not_checked(tmp_path: Path) -> None:
    events = [_op("python_function", 0, name=5),  # python_function args are not imported
              _op("cpu_op", 1, **{"External id": [1]}),  # used: the event is dropped
              _op("cpu_op", 2, **{"External id": 7, "Input Dims": {"x": None}})]
    kf = parse_kineto(_write(tmp_path, events), default_rank=0)
    assert kf.tables["cpu_ops"].column("name").to_pylist() == ["python_function0", "cpu_op2"]
    (diag,) = kf.diagnostics
    assert diag.code == "bad_event" and diag.count == 1 and "event 1" in diag.message


def test_unknown_phase_category_and_metadata_mixed_in_a_chunk(tmp_path: Path) -> None:
    events = [_op("cpu_op", i, **{"External id": i}) for i in range(300)]
    events[100]["ph"] = "Q"  # not a Chrome phase: decoded generically, then not an 'X' op
    events[150]["cat"] = "new_category"
    events[200] = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                   "args": {"name": "main"}}
    path = _write(tmp_path, events)
    for chunk in (2_000, 1 << 20):
        kf = parse_kineto(path, default_rank=0, chunk_bytes=chunk)
        ext = kf.tables["cpu_ops"].column("external_id").to_pylist()
        assert ext == [i for i in range(300) if i not in (100, 150, 200)]
        assert kf.tables["threads"].column("name").to_pylist() == ["main"]
        assert kf.details["categories"]["new_category"] == 1


def test_flows_are_read_when_a_later_chunk_needs_them(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[dict[str, Any]] = []
    for i in range(400):
        kernel = _op("kernel", i, device=0, stream=7, correlation=i)
        kernel.update(pid=0, tid=7)
        if i >= 300:  # an old trace: the link is only in the flow
            del kernel["args"]["correlation"]
        events += [{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1000 + i, "bp": "e",
                    "pid": 0, "tid": 7, "ts": float(i)}, kernel]
    path = _write(tmp_path, events)
    whole = parse_kineto(path, default_rank=0)
    want = list(range(300)) + [1000 + i for i in range(300, 400)]
    assert whole.tables["kernels"].column("correlation").to_pylist() == want
    chunked = parse_kineto(path, default_rank=0, chunk_bytes=4_000)  # restarts with the flows
    monkeypatch.setattr(kineto_reader, "decoders", lambda flows=False: GENERIC)
    tables_equal(chunked, parse_kineto(path, default_rank=0, chunk_bytes=4_000))


def test_chunks_are_bracketed_in_place_without_changing_the_file(tmp_path: Path) -> None:
    events = [_op("cpu_op", i, **{"External id": i}) for i in range(2000)]
    path = _write(tmp_path, events)
    before = path.read_bytes()
    kf = parse_kineto(path, default_rank=0, chunk_bytes=3_000)
    assert kf.tables["cpu_ops"].column("external_id").to_pylist() == list(range(2000))
    assert path.read_bytes() == before


def test_every_imported_category_has_a_fast_struct() -> None:
    classes = kineto_build.decoders().classes
    assert set(classes) == kineto_build.TABLE_CATEGORIES | kineto_build.IGNORED_CATEGORIES
    assert isinstance(kineto_build.bucket([]), dict)
    assert pa.__version__  # the decoders build without touching Arrow


def test_without_the_compiled_scanner_msgspec_reads_every_chunk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No extension (a machine without a compiler): the same tables, all through msgspec."""
    from stepscope.importers.kineto import native as kineto_native

    path = DATA / "gpt_bf16_adamw.pt.trace.json.gz"
    expected = parse_kineto(path, default_rank=0, chunk_bytes=64_000, native=False)
    monkeypatch.setattr(kineto_native, "EXTENSION", None)
    assert not kineto_native.enabled() and not kineto_native.enabled(True)

    def no_scan(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the scanner must not run")

    monkeypatch.setattr(kineto_native, "scan", no_scan)
    tables_equal(parse_kineto(path, default_rank=0, chunk_bytes=64_000), expected)


def test_a_map_still_viewed_is_left_to_close_itself(tmp_path: Path) -> None:
    """A live capture's stack sampler can hold a frame of the reader (and so a view of the map)
    for a moment after the import: closing then must not fail the import (BufferError)."""
    import mmap

    from stepscope.importers.kineto.trace_file import Loaded

    f = tmp_path / "t.json"
    f.write_bytes(b'{"traceEvents": []}')
    with f.open("rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    view = memoryview(mm)[:4]
    Loaded(mm, 19, False).close()  # no BufferError
    assert bytes(view) == b'{"tr'
    view.release()
    mm.close()
