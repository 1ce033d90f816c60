"""Mutated real traces (tests/data) through ``stepscope import`` and ``report``: truncation, byte
flips, JSON structure mutations (keys dropped, wrong types, huge integers, NaN, deep nesting)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fuzz.contract import FUZZ, Outcome, check, fresh, report_json

DATA = Path(__file__).parent.parent / "data"
SMALL = ["cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
         "critical_path_cuda_event_sync_multi_stream_event_sync_trace.json.gz",
         "triton_example_triton_example.json.gz"]
RAW = {n: gzip.decompress((DATA / n).read_bytes()) for n in SMALL}
DOCS = {n: json.loads(raw) for n, raw in RAW.items()}

# values of the wrong type, of every JSON kind, and the numbers that broke the importer
ODD = st.sampled_from([None, True, "", "zero", "0x1f", [], [1, 2], {}, {"a": 1}, -1, 0, 2**31,
                       2**63, -(2**63) - 1, 2**64 + 5, 10**30, 1e30, -1e30, 1e-300,
                       float("nan"), float("inf"), float("-inf"), "\x1b[31m\u202e", "\udcff"])
TOP_KEYS = ["traceEvents", "distributedInfo", "deviceProperties", "baseTimeNanoseconds",
            "schemaVersion", "displayTimeUnit"]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"]
ARG_KEYS = ["External id", "correlation", "device", "stream", "grid", "block", "bytes",
            "registers per thread", "shared memory", "rank", "queued"]


def imported(root: Path, trace: Path) -> Outcome:
    """``import`` under the contract; a run it writes must open and report."""
    def ok(res: Outcome) -> None:
        doc = report_json(root / "run")
        assert doc["schema"] == "stepscope.report/1"
    return check(root, ["import", str(trace), "-o", str(root / "run")], "run", ok)


def deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def dumps(doc: Any) -> bytes:
    try:
        return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogateescape")
    except RecursionError:  # json itself cannot write it: build the text by hand
        return b"[" * 100_000 + b"]" * 100_000


@FUZZ
@given(name=st.sampled_from(SMALL), cut=st.floats(0.0, 1.0), gz=st.booleans())
def test_truncated(tmp_path: Path, name: str, cut: float, gz: bool) -> None:
    root = fresh(tmp_path)
    data = gzip.compress(RAW[name]) if gz else RAW[name]
    trace = root / ("t.json.gz" if gz else "t.json")
    trace.write_bytes(data[: int(len(data) * cut)])
    res = imported(root, trace)
    if gz and cut < 0.98:  # most of a gzip stream missing: never imported as if whole
        assert res.code == 2


@FUZZ
@given(name=st.sampled_from(SMALL), gz=st.booleans(),
       flips=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)),
                      min_size=1, max_size=8))
def test_byte_flips(tmp_path: Path, name: str, gz: bool,
                    flips: list[tuple[float, int]]) -> None:
    root = fresh(tmp_path)
    data = bytearray(gzip.compress(RAW[name]) if gz else RAW[name])
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    trace = root / ("t.json.gz" if gz else "t.json")
    trace.write_bytes(bytes(data))
    imported(root, trace)


@FUZZ
@given(name=st.sampled_from(SMALL), data=st.data())
def test_json_mutations(tmp_path: Path, name: str, data: st.DataObject) -> None:
    doc = copy.deepcopy(DOCS[name])
    events = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 4), "mutations")):
        where = data.draw(st.sampled_from(["top", "event", "args"]), "where")
        how = data.draw(st.sampled_from(["drop", "odd", "deep"]), "how")
        value = data.draw(ODD, "value") if how == "odd" else deep(data.draw(
            st.sampled_from([5, 5000, 50_000]), "depth"))
        if where == "top":
            target, key = doc, data.draw(st.sampled_from(TOP_KEYS), "key")
            if key == "distributedInfo" and how == "odd" and isinstance(doc.get(key), dict):
                target, key = doc[key], data.draw(st.sampled_from(["rank", "world_size"]))
        else:
            if not isinstance(events, list) or not events:
                continue
            ev = events[data.draw(st.integers(0, len(events) - 1), "event")]
            if not isinstance(ev, dict):
                continue
            target, key = ev, data.draw(st.sampled_from(EVENT_KEYS), "key")
            if where == "args":
                if not isinstance(ev.get("args"), dict):
                    continue
                target, key = ev["args"], data.draw(st.sampled_from(ARG_KEYS), "key")
        if how == "drop":
            target.pop(key, None)
        else:
            target[key] = value
    root = fresh(tmp_path)
    trace = root / "t.json"
    trace.write_bytes(dumps(doc))
    imported(root, trace)
