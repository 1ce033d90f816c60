"""The compiled scanner (kineto/native.py, kineto/scanned.py) gives exactly the msgspec path's tables.

Every comparison parses the same file twice, ``native=True`` and ``native=False``, and asks for
identical tables (``pyarrow.Table.equals``), diagnostics and details; the counts of chunks the
scanner read (and gave back) show which path each case took.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from stepscope.errors import TraceFormatError
from stepscope.importers import import_traces
from stepscope.importers.kineto import native as kineto_native
from stepscope.importers.kineto import parse_kineto
from stepscope.store.manifest import read_manifest
from stepscope.store.produce import RankBundle

DATA = Path(__file__).parents[2] / "data"
FILES = sorted(p for p in DATA.glob("*.json.gz") if not p.name.startswith("jax"))

pytestmark = pytest.mark.skipif(kineto_native.EXTENSION is None,
                                reason="the _ss_kineto extension is not built")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Chunks the scanner read ("native") and gave back to msgspec ("fallback")."""
    calls = {"native": 0, "fallback": 0}
    scan = kineto_native.scan

    def counting(*args: Any, **kwargs: Any) -> kineto_native.Scanned | None:
        got = scan(*args, **kwargs)
        calls["native" if got is not None else "fallback"] += 1
        return got

    monkeypatch.setattr(kineto_native, "scan", counting)
    yield calls


def same(path: Path, chunk_bytes: int) -> RankBundle:
    fast = parse_kineto(path, default_rank=0, chunk_bytes=chunk_bytes, native=True)
    slow = parse_kineto(path, default_rank=0, chunk_bytes=chunk_bytes, native=False)
    assert fast.tables.keys() == slow.tables.keys()
    for name, table in fast.tables.items():
        assert table.equals(slow.tables[name]), name
    assert fast.diagnostics == slow.diagnostics
    assert fast.details == slow.details
    assert (fast.rank, fast.tool, fast.clock_offset_ns) == (slow.rank, slow.tool,
                                                            slow.clock_offset_ns)
    return fast


@pytest.mark.parametrize("chunk_bytes", [7_000, 64_000])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0][:30])
def test_fixtures_give_the_same_tables(path: Path, chunk_bytes: int,
                                       counted: dict[str, int]) -> None:
    same(path, chunk_bytes)
    if path.stat().st_size > 20_000:  # several chunks: most are read by the scanner
        assert counted["native"] > counted["fallback"]


def _tiled(tmp_path: Path, copies: int) -> Path:
    """The GPT fixture's events ``copies`` times over (later copies shifted in time; the
    metadata events, which have no category, once)."""
    with gzip.open(DATA / "gpt_bf16_adamw.pt.trace.json.gz") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(
        e["ts"] for e in events if "ts" in e)
    path = tmp_path / "tiled.pt.trace.json"
    with open(path, "w") as out:
        out.write('{\n  "schemaVersion": 1,\n  "traceEvents": [\n')
        for c in range(copies):
            for i, e in enumerate(events):
                if c and "cat" not in e:
                    continue
                e2 = dict(e, ts=e["ts"] + c * span) if "ts" in e else e
                sep = "" if c == 0 and i == 0 else ",\n"
                out.write(sep + json.dumps(e2))
        out.write("\n  ],\n")
        out.write(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()))
        out.write("\n}\n")
    return path


def _read_run(run: Path) -> dict[str, Any]:
    tables = {p.parent.name: pq.read_table(p) for p in sorted(run.glob("*/rank-*.parquet"))}
    manifest = dataclasses.replace(read_manifest(run), created="")
    return {"tables": tables, "manifest": manifest}


def test_tiled_trace_written_runs_are_identical(tmp_path: Path, counted: dict[str, int],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _tiled(tmp_path, 3)  # ~22 MB: default 4 MB chunks
    runs = {}
    for flag in ("1", "0"):
        monkeypatch.setenv(kineto_native.ENV, flag)
        runs[flag] = _read_run(import_traces([trace], tmp_path / f"run{flag}"))
    assert counted["native"] >= 3
    fast, slow = runs["1"], runs["0"]
    assert fast["tables"].keys() == slow["tables"].keys() and len(fast["tables"]) > 10
    for name, table in fast["tables"].items():
        assert table.equals(slow["tables"][name]), name
    assert fast["manifest"] == slow["manifest"]


def test_the_variable_turns_the_scanner_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kineto_native.enabled()
    monkeypatch.setenv(kineto_native.ENV, "0")
    assert not kineto_native.enabled()
    assert kineto_native.enabled(True)
    monkeypatch.setenv(kineto_native.ENV, "1")
    assert not kineto_native.enabled(False)


# Synthetic traces: the edge cases land in one chunk among plain events.

def _op(i: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 10, "tid": 11,
            "ts": 1000.5 + i, "dur": 0.25, "args": {"External id": i, "Sequence number": i,
                                                    "Input Dims": [[1, 2], []]}}


def _kernel(i: int, **args: Any) -> dict[str, Any]:
    a = {"External id": i, "queued": 0, "device": 0, "context": 1, "stream": 7,
         "correlation": 5000 + i, "registers per thread": 32, "shared memory": 0,
         "blocks per SM": 0.5, "warps per SM": 2.0, "grid": [4, 1, 1], "block": [128, 1, 1],
         "est. achieved occupancy %": 6}
    a.update(args)
    return {"ph": "X", "cat": "kernel", "name": f"kernel_{i % 3}", "pid": 0, "tid": 7,
            "ts": 1000.0 + i, "dur": 1.5, "args": a}


def _trace(tmp_path: Path, special: list[dict[str, Any]] | list[str], n: int = 120) -> Path:
    """Plain events with ``special`` (events, or raw JSON texts) in the middle."""
    plain = [json.dumps(e, ensure_ascii=False) for i in range(n)
             for e in ((_op(i), _kernel(i)) if i % 2 else (_op(i),))]
    raw = [s if isinstance(s, str) else json.dumps(s, ensure_ascii=False) for s in special]
    mid = len(plain) // 2
    events = plain[:mid] + raw + plain[mid:]
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events)
                    + '\n], "baseTimeNanoseconds": 1700000000000000000}', encoding="utf-8")
    return path


def _kernel_with(**fields: Any) -> dict[str, Any]:
    e = _kernel(999)
    e.update(fields)
    return e


def _op_args(**args: Any) -> dict[str, Any]:
    e = _op(998)
    e["args"] = dict(e["args"], **args)
    return e


def _without(event: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in keys}


NATIVE_CASES: dict[str, list[Any]] = {  # read by the scanner, same tables
    "unicode_names": [_kernel_with(name="Ünïcödé ✓ 😀"), _kernel_with(name="")],
    "escaped_names": [r'{"ph": "X", "cat": "cpu_op", "name": "a\"b\\c\/d\n\t\u00e9\ud83d\ude00",'
                      r' "pid": 1, "tid": 1, "ts": 5.0, "dur": 1.0}'],
    "missing_fields": [_without(_op(1), "ts"), _without(_op(2), "dur"), _without(_op(3), "name"),
                       _without(_op(4), "pid", "tid"), _without(_kernel(5), "ph"),
                       _without(_op(6), "args")],
    "negative_dur": [dict(_op(1), dur=-3.0), dict(_kernel(2), dur=-0.5)],
    "huge_ints": [_op_args(**{"External id": 2**63 - 1}),
                  _kernel_with(args={**_kernel(3)["args"], "device": 2**40, "stream": -(2**63),
                                     "registers per thread": 2**31, "grid": [2**31, 1, -1]})],
    "float_ts": [dict(_op(1), ts=1234.567, dur=0.001), dict(_op(2), ts=9007199254740993),
                 dict(_op(3), ts=1.5e3, dur=2e-3), dict(_op(4), ts=1699999999123456.789)],
    "nulls": [_op_args(**{"External id": None}), _kernel_with(args={"correlation": 7, "grid": None,
                                                                     "device": None})],
    "odd_lists": [_kernel_with(args={"correlation": 8, "grid": [1, 2], "block": "dim3(1)"})],
    "other_phases": [dict(_op(1), ph="i"), dict(_kernel(2), ph="")],
    "annotations": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 10,
                     "tid": 11, "ts": 1000.0, "dur": 500.0, "args": {"External id": 1}},
                    {"ph": "X", "cat": "gpu_user_annotation", "name": "ann", "pid": 0, "tid": 7,
                     "ts": 1001.0, "dur": -1.0}],
    "memory": [{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 11,
                "ts": 1050.5, "s": "t", "args": {"Total Reserved": 1, "Total Allocated": 2,
                                                 "Bytes": -64, "Device Id": 0, "Device Type": 1,
                                                 "Addr": 2**62}},
               {"ph": "i", "cat": "cpu_instant_event", "name": "other", "pid": 10, "tid": 11,
                "ts": 1050.5}],
}
FALLBACK_CASES: dict[str, list[Any]] = {  # given back to msgspec, same tables
    "string_pid": [dict(_op(1), pid="Spans"), dict(_kernel(2), tid="stream 7")],
    "wrong_types": [dict(_op(1), dur="5"), _op_args(**{"External id": "0x10"}),
                    _op_args(**{"External id": [1]}), dict(_op(2), ts=None), dict(_op(3), pid=1.5),
                    _kernel_with(name=5)],
    "wrong_arg_types": [_kernel_with(args={"correlation": 9, "est. achieved occupancy %": "12.5"}),
                        _kernel_with(args={"correlation": 10, "name": 3})],
    "beyond_int64": [_op_args(**{"External id": 2**64 - 1})],
    "odd_phase": [dict(_op(1), ph="Q")],
    "unknown_category": [dict(_op(1), cat="new_category")],
    "metadata": [{"ph": "M", "name": "thread_name", "pid": 10, "tid": 11,
                  "args": {"name": "main"}}],
    "repeated_key": ['{"ph": "X", "cat": "cpu_op", "name": "a", "name": "b", "pid": 1, "tid": 1, '
                     '"ts": 5.0, "dur": 1.0}'],
    "escaped_key": ['{"ph": "X", "c\\u0061t": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
                    '"ts": 5.0, "dur": 1.0}'],
    "args_not_object": [dict(_op(1), args=[1, 2])],
    "no_correlation": [_kernel_with(args={"device": 0, "stream": 7}),
                       {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 1999.0, "cat": "ac2g",
                        "name": "ac2g", "bp": "e"}],
}


@pytest.mark.parametrize("case", sorted(NATIVE_CASES))
def test_edge_cases_the_scanner_reads(tmp_path: Path, case: str,
                                      counted: dict[str, int]) -> None:
    same(_trace(tmp_path, NATIVE_CASES[case]), 2_000)
    assert counted["native"] > 10 and counted["fallback"] == 0


@pytest.mark.parametrize("case", sorted(FALLBACK_CASES))
def test_edge_cases_given_back_to_msgspec(tmp_path: Path, case: str,
                                          counted: dict[str, int]) -> None:
    same(_trace(tmp_path, FALLBACK_CASES[case]), 2_000)
    assert counted["native"] >= 5 and counted["fallback"] >= 1


def test_drops_report_the_same_first_event(tmp_path: Path, counted: dict[str, int]) -> None:
    special = [dict(_op(1), dur=-3.0), _without(_kernel(2), "ts"), dict(_kernel(3), dur=-1.0)]
    kf = same(_trace(tmp_path, special), 2_000)
    codes = {d.code: d.message for d in kf.diagnostics}
    assert "negative_duration" in codes and "missing_ts" in codes
    assert "event " in codes["negative_duration"] and counted["fallback"] == 0


@pytest.mark.parametrize("damage", ["truncated", "garbage", "unclosed_string", "deep"])
def test_bad_json_gives_the_same_error(tmp_path: Path, damage: str,
                                       counted: dict[str, int]) -> None:
    path = _trace(tmp_path, [])
    text = path.read_text()
    mid = len(text) // 2
    if damage == "truncated":
        text = text[:mid]
    elif damage == "garbage":
        at = text.index("},\n", mid) + 2
        text = text[:at] + "x" + text[at:]
    elif damage == "unclosed_string":
        at = text.index('"name": "', mid) + 9
        text = text[:at] + "\x01" + text[at:]
    else:  # valid, deeper than the scanner reads (msgspec takes it)
        at = text.index('"Input Dims": [[1, 2], []]', mid) + 14
        text = text[:at] + "[" * 100 + "]" * 100 + text[at + 12:]
    path.write_text(text)
    errors = []
    for native in (True, False):
        try:
            parse_kineto(path, default_rank=0, chunk_bytes=2_000, native=native)
            errors.append("")
        except TraceFormatError as exc:
            errors.append(str(exc))
    assert errors[0] == errors[1]
    assert counted["fallback"] >= 1


def test_scanner_numbers_are_pythons(tmp_path: Path) -> None:
    """ts values as Python's float() reads them (correctly rounded), whatever their form."""
    import random

    rnd = random.Random(7)
    texts = ["0", "-0.0", "1e-400", "4.9e-324", "9007199254740993", "123456789012345678901234",
             "1234.567", "0.1", "1.7976931348623157e308"]
    for _ in range(3000):
        digits = "".join(rnd.choice("0123456789") for _ in range(rnd.randint(1, 22)))
        digits = digits.lstrip("0") or "0"
        cut = rnd.randint(1, len(digits))
        t = digits if cut == len(digits) else digits[:cut] + "." + digits[cut:]
        texts.append(t + (f"e{rnd.randint(-30, 30)}" if rnd.random() < 0.3 else ""))
    body = ",".join(f'{{"ph":"X","cat":"cpu_op","name":"a","ts":{t},"dur":1}}' for t in texts)
    data = body.encode()
    got = kineto_native.scan(data, 0, len(data), tail=False, decoder=_never())
    assert got is not None
    assert got.floats[:, 0].tolist() == [float(t) for t in texts]


@pytest.mark.parametrize("text", [
    '{"cat":"cpu_op","name":"\\ud800"}', '{"cat":"cpu_op","name":"\\udc00x"}',
    '{"cat":"cpu_op","name":"a\x01"}', '{"cat":"cpu_op","ts":01}', '{"cat":"cpu_op","ts":1.}',
    '{"cat":"cpu_op","ts":NaN}', '{"cat":"cpu_op","ts":1e400}', '{"cat":"cpu_op",}',
    '{"cat":"cpu_op"} {"cat":"cpu_op"}', '{"cat":"cpu_op","args":{"x":' + "[" * 70 + "]" * 70 + "}}",
    '{"cat":"cpu_op","name":"x"}, ', '[{"cat":"cpu_op"}]', '{"name":"no category"}',
])
def test_scanner_gives_up_on_what_it_does_not_reproduce(text: str) -> None:
    data = text.encode()
    assert kineto_native.scan(data, 0, len(data), tail=False, decoder=_never()) is None


def test_scanner_rejects_invalid_utf8() -> None:
    for raw in (b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"):
        data = b'{"cat":"cpu_op","name":"' + raw + b'"}'
        assert kineto_native.scan(data, 0, len(data), tail=False, decoder=_never()) is None
    ok = '{"cat":"cpu_op","name":"é✓😀"}'.encode()
    got = kineto_native.scan(ok, 0, len(ok), tail=False, decoder=_never())
    assert got is not None and got.strings.to_pylist() == ["é✓😀"]


def _never() -> Any:
    """A decoder for tests without object categories."""
    class Never:
        def decode(self, buf: bytes) -> list[Any]:
            raise AssertionError("no object events expected")
    return Never()



MUTATIONS = [  # (a key as Kineto writes it, values put in front of the real one)
    (b'"dur": ', [b"-1", b'"5"', b"null", b"1.5e3"]),
    (b'"ts": ', [b"1e3", b"-0.0", b"0.1", b"9007199254740993"]),
    (b'"pid": ', [b'"Spans"', b"1.5", b"-3", b"null"]),
    (b'"External id": ', [b'"0x10"', b"18446744073709551615", b"[1]", b"null"]),
    (b'"correlation": ', [b"null", b'"c"', b"9223372036854775807"]),
    (b'"device": ', [b"null", b"4294967296", b"-1"]),
    (b'"grid": ', [b"[1, 2]", b"[-5, 1, 1]", b"[4294967296, 1, 1]", b'"g"', b"{}"]),
    (b'"est. achieved occupancy %": ', [b'"7"', b"null", b"1e39", b"3"]),
    (b'"name": ', [b'"a\\u00e9\\"b"', b"7", b'"\\ud83d\\ude00"']),
]


def test_random_field_changes_give_the_same_tables(tmp_path: Path,
                                                  counted: dict[str, int]) -> None:
    """Fields of real events changed at random (to values each path must treat alike)."""
    import random

    with gzip.open(DATA / "cnn_fp32_sync.pt.trace.json.gz") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if "cat" in e][:400]
    base = ('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(map(json.dumps, events))
            + '\n], "baseTimeNanoseconds": 1700000000000000000}').encode()
    rnd = random.Random(11)
    for i in range(25):
        data = bytearray(base)
        for key, values in rnd.sample(MUTATIONS, 3):
            hits = [j for j in range(len(data)) if data.startswith(key, j)]
            for j in sorted(rnd.sample(hits, min(2, len(hits))), reverse=True):
                at = j + len(key)
                data[at:at] = rnd.choice(values) + b', "z": '
        path = tmp_path / f"m{i}.json"
        path.write_bytes(bytes(data))
        same(path, 3_000)
    assert counted["native"] > 2 * counted["fallback"] > 0, counted
