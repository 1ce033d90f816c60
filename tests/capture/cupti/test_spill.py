"""Raw records kept by a capture (``spill``) and decoded at merge (``raw``): the buffers recorded
on an H100 (tests/data/cupti) written through the spill and decoded back give the tables a
direct decode gives; clock offset, window clip, grouping, and damaged files."""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.capture.cupti.records import kernel
from tests.capture.cupti.test_recorded import Recorded, recorded

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.native import build_shim, load_shim
from stepscope.capture.cupti.raw import decode_folder, has_raw, raw_files
from stepscope.capture.cupti.spill import RAW_META, SpillWriter

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_shim(build_shim(tmp_path_factory.mktemp("shim")))


def spill(shim: ctypes.CDLL, folder: Path, r: Recorded, *, flushes: int = 2, offset: int = 0,
          asked: list[int] | None = None) -> SpillWriter:
    """Write the recording's buffers as a capture would: ``flushes`` flushes, then the meta."""
    strings = {int(k): v for k, v in r.meta["strings"].items()}

    def read(ptr: int) -> str | None:
        if asked is not None:
            asked.append(ptr)
        return strings.get(ptr)

    w = SpillWriter(folder, shim, r.layouts, read)
    sizes = (ctypes.c_uint32 * 64)(*r.sizes())
    per = max(1, -(-len(r.buffers) // flushes))
    for i, buf in enumerate(r.buffers):
        counts, stop = w.scan(int(buf.ctypes.data), len(buf), sizes)
        assert stop == len(buf)
        w.add(int(buf.ctypes.data), len(buf), counts)
        if (i + 1) % per == 0:
            w.end_flush()
    w.end_flush()
    names: dict[str, dict[str, str]] = {}
    for key, name in r.meta["api_names"].items():
        d, c = key.split(":")
        names.setdefault(d, {})[c] = name
    w.write_meta({"cupti_api_version": r.meta["cupti_api_version"], "layout": r.meta["layout"],
                  "sizes": r.sizes(), "api_names": names, "pid": 99, "clock_offset_ns": offset})
    return w


def decoded(folder: Path, lo: int | None = None, hi: int | None = None,
            group_bytes: int = 1 << 30) -> tuple[dict[str, dict[str, list[Any]]], Any]:
    chunks: list[dict[str, Any]] = []

    def write(tables: dict[str, Any]) -> int:
        chunks.append(tables)
        return sum(len(next(iter(c.values()))) for c in tables.values())

    res = decode_folder(folder, lo, hi, write, group_bytes=group_bytes)
    out: dict[str, dict[str, list[Any]]] = {}
    for c in chunks:
        for name, cols in c.items():
            dest = out.setdefault(name, {})
            for k, v in cols.items():
                dest.setdefault(k, []).extend(np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
    return out, res


def as_lists(tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    return {n: {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else list(v))
                for k, v in cols.items()} for n, cols in tables.items()}


@pytest.mark.parametrize("name", ["torch", "cupy", "jax"])
def test_spilled_records_decode_to_the_direct_decode(shim: ctypes.CDLL, tmp_path: Path,
                                                     name: str) -> None:
    r = recorded(name)
    asked: list[int] = []
    w = spill(shim, tmp_path, r, asked=asked)
    assert w.error is None and w.frames == len(r.buffers)
    assert len(asked) == len(set(asked))  # each name read once, in the process
    dec, direct = r.decode()
    assert w.records == dec.records
    got, res = decoded(tmp_path)
    assert res.records == dec.records and res.frames == len(r.buffers) and not res.diagnostics
    assert got == as_lists(direct)
    assert res.rows == sum(len(next(iter(c.values()))) for c in direct.values())


def test_clock_offset_window_and_groups(shim: ctypes.CDLL, tmp_path: Path) -> None:
    r = recorded("torch")
    spill(shim, tmp_path, r, flushes=3, offset=1000)
    _, direct = r.decode()
    ts = sorted(np.asarray(direct["kernels"]["ts_ns"]).tolist())
    lo, hi = ts[len(ts) // 4] - 1000, ts[3 * len(ts) // 4] - 1000  # on the host clock
    got, _ = decoded(tmp_path, lo, hi, group_bytes=1)  # one group per buffer
    k = got["kernels"]
    mids = [t + d // 2 for t, d in zip(k["ts_ns"], k["dur_ns"])]
    assert k["ts_ns"] and all(lo <= m <= hi for m in mids)
    want = [t - 1000 for t, d in zip(np.asarray(direct["kernels"]["ts_ns"]).tolist(),
                                     np.asarray(direct["kernels"]["dur_ns"]).tolist())
            if lo <= t - 1000 + d // 2 <= hi]
    assert sorted(k["ts_ns"]) == sorted(want)


def test_a_cut_frame_and_an_interrupted_flush_lose_only_themselves(shim: ctypes.CDLL,
                                                                   tmp_path: Path) -> None:
    r = recorded("jax")
    spill(shim, tmp_path, r, flushes=len(r.buffers))
    bins = sorted(tmp_path.glob("cupti.*.bin"))
    assert len(bins) == len(r.buffers) >= 2
    cut = bins[-2]
    cut.write_bytes(cut.read_bytes()[:-100])  # a frame cut short (a disk that filled up)
    (tmp_path / "cupti.00099.bin.tmp").write_bytes(b"SSCUPTI1")  # a flush that never finished
    got, res = decoded(tmp_path)
    assert {d.code for d in res.diagnostics} == {"cupti_raw_truncated"}
    assert res.frames == len(r.buffers) - 1
    dec = r.decode()[0]
    assert 0 < res.records < dec.records


def test_unreadable_meta_is_one_diagnostic(tmp_path: Path) -> None:
    (tmp_path / RAW_META).write_text("{not json")
    got, res = decoded(tmp_path)
    assert got == {} and [d.code for d in res.diagnostics] == ["cupti_raw_unreadable"]
    (tmp_path / RAW_META).write_text(json.dumps({"cupti_api_version": 5, "layout": "13",
                                                 "sizes": [0] * 64, "api_names": {}}))
    got, res = decoded(tmp_path)
    assert got == {} and [d.code for d in res.diagnostics] == ["cupti_raw_unreadable"]


def test_names_pointing_nowhere_are_unknown_not_lost(shim: ctypes.CDLL, tmp_path: Path) -> None:
    w = SpillWriter(tmp_path, shim, L.LAYOUTS_13, lambda p: None)  # a string CUPTI freed
    data = np.frombuffer(kernel(10, 20, name=0x5000, corr=1), dtype=np.uint8).copy()
    sizes = (ctypes.c_uint32 * 64)(*L.size_table(L.LAYOUTS_13))
    counts, _ = w.scan(int(data.ctypes.data), len(data), sizes)
    w.add(int(data.ctypes.data), len(data), counts)
    w.end_flush()
    w.write_meta({"cupti_api_version": 130001, "layout": "13",
                  "sizes": L.size_table(L.LAYOUTS_13), "api_names": {}, "pid": 1})
    assert has_raw(tmp_path) and len(raw_files(tmp_path)) == 2  # meta + one .bin, no strings
    got, res = decoded(tmp_path)
    assert got["kernels"]["name"] == ["<unknown>"] and res.records == 1


def test_a_decode_that_fails_costs_only_the_gpu_records(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from stepscope.capture import materialize as mat
    from stepscope.capture.cupti import raw

    part = tmp_path / "p1-1"
    part.mkdir()
    (part / "meta.json").write_text(json.dumps({"pid": 1, "start_ns": 1, "settings": {"gpu": {}},
                                                "diagnostics": []}))
    (part / RAW_META).write_text("{}")

    def boom(*a: Any, **k: Any) -> Any:
        raise ValueError("bad bytes")

    monkeypatch.setattr(raw, "decode_folder", boom)
    assert mat.materialize(part)
    meta = json.loads((part / "meta.json").read_text())
    assert [d["code"] for d in meta["diagnostics"]] == ["cupti_raw_decode_failed"]
    assert raw_files(part) == []
