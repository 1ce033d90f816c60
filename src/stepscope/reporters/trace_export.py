"""A run as a Chrome trace-event JSON timeline (Perfetto UI, chrome://tracing).

Layout (see ``docs/export.md``):

* one process per rank and host process: its threads (names from ``threads``) carry framework
  ops (``cpu_ops``), annotations (nesting as recorded) and CUDA API calls (``api_calls``); two
  extra tracks hold the rank's ``steps`` and its ``input_waits``;
* one process per GPU per rank: one thread per stream with kernels, copies and memsets, one
  track per stream for GPU-projected annotations, and counters (``samples`` per device, the
  allocator's ``memory_events`` totals);
* flow arrows (``ph`` ``s``/``f``, ``bp: "e"``) from each API call to the GPU work it started,
  matched by ``(rank, correlation)``, one arrow (one id) per GPU activity.

Timestamps are microseconds with 3 decimals (exact nanoseconds) from the run's first event;
``otherData`` records where that is on the run's clock.

Speed: events are rendered columnar, a window of ~128k events at a time, by Arrow's string
kernels: no Python object per event. Each distinct name is JSON-encoded once by msgspec (all
escaping is the encoder's). Within a window events are ordered by (ts, longest first) so that a
parent written with ``X`` comes before a child that starts at the same instant: viewers that
keep the file order for equal timestamps then nest them as recorded.

The module is longer than the house ~400 lines: its columnar JSON helpers serve only this
exporter; move them out when a second user appears.
"""

from __future__ import annotations

import functools
import os
import struct
import tempfile
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope import __version__
from stepscope.errors import StepscopeError
from stepscope.store.run import Run

TRACE_SCHEMA = "stepscope.trace/1"
WINDOW_EVENTS = 1 << 17
LANE_BASE = 1_000_000_000  # synthetic track ids start here (above any Linux tid)
GZIP_LEVEL = 1  # zlib level: on these traces 1 is ~25% faster than 3 for ~9% more bytes

Render = Callable[[int, int, int], pa.Array]  # rows [lo, hi), time origin -> event strings
Args = Callable[[int, int], list[Any]]  # rows [lo, hi) -> args fields, each ``,"key":value``
Lanes = tuple[np.ndarray, np.ndarray]  # per-row trace pid, tid


@dataclass(frozen=True)
class TraceStats:
    """What an export wrote: events per ``ph``, flow pairs, bytes (uncompressed)."""

    events: int
    by_phase: dict[str, int]
    flows: int
    bytes: int
    origin_ns: int


# -- columnar JSON helpers ---------------------------------------------------------------

def _enc(v: Any) -> str:
    return msgspec.json.encode(v).decode()


class _Strings:
    """A string column with each distinct value JSON-encoded once (by msgspec)."""

    def __init__(self, col: pa.ChunkedArray | pa.Array, null: str = "null") -> None:
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        self.indices = arr.indices
        values = arr.dictionary.to_pylist()
        self.encoded = pa.array([null if v is None else _enc(v) for v in values], pa.string())
        self.null = null

    def take(self, lo: int, hi: int) -> pa.Array:
        return pc.fill_null(pc.take(self.encoded, self.indices.slice(lo, hi - lo)), self.null)


def _num(arr: pa.Array) -> pa.Array:
    """Numbers (nullable) -> JSON text; non-finite floats become null."""
    if pa.types.is_floating(arr.type):
        arr = pc.if_else(pc.is_finite(arr), pc.round(arr, 3), pa.scalar(None, arr.type))
    return pc.fill_null(pc.cast(arr, pa.string()), "null")


def _ints(a: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(a), pa.string())


def _us(ns: np.ndarray) -> pa.Array:
    """Non-negative integer ns -> exact µs text with 3 decimals."""
    q, r = np.divmod(ns, 1000)
    return pc.binary_join_element_wise(_ints(q), pc.utf8_lpad(_ints(r), 3, "0"), _lit("."))


def _args(parts: list[Any]) -> pa.Array | str:
    """Fields (each ``,"key":value``, possibly empty for a row) -> the args' inner text."""
    return pc.utf8_ltrim(_join(parts), ",") if parts else ""


def _field(key: str, text: pa.Array, valid: pa.Array | None = None) -> list[Any]:
    """One arg as ``,"key":value`` parts; rows where ``valid`` is false get nothing."""
    head = "," + _enc(key) + ":"
    if valid is None or pc.all(valid).as_py():
        return [head, text]
    return [pc.if_else(valid, _join([head, text]), _lit(""))]


@functools.lru_cache(maxsize=512)
def _lit(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.string())


def _join(parts: Sequence[Any]) -> pa.Array:
    # literals as ready Arrow scalars: converting a Python str per call costs more than the join
    args = [_lit(p) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*args, _lit(""))


def _col(t: pa.Table, name: str, lo: int, hi: int) -> pa.Array:
    return t.column(name).slice(lo, hi - lo).combine_chunks()


def _np(t: pa.Table, name: str, fill: int = 0) -> np.ndarray:
    return np.asarray(pc.fill_null(t.column(name), fill).to_numpy(), dtype=np.int64)


def _sorted(t: pa.Table) -> pa.Table:
    """Rows ordered by ``ts_ns`` (stable), one chunk per column, dictionaries unified."""
    t = t.unify_dictionaries().combine_chunks()
    if t.num_rows:
        t = t.take(np.argsort(_np(t, "ts_ns"), kind="stable")).combine_chunks()
    return t


def _group(cols: Sequence[pa.ChunkedArray | pa.Array]) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """Distinct key tuples (None for null) and, per row, the index of its tuple."""
    n = len(cols[0])
    key = np.zeros(n, dtype=np.int64)
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols]
    for a in arrays:
        d = pc.dictionary_encode(a, null_encoding="encode")
        key = key * len(d.dictionary) + d.indices.to_numpy().astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    first = np.zeros(len(uniq), dtype=np.int64)
    first[inv[::-1]] = np.arange(n - 1, -1, -1)
    values = [a.take(pa.array(first)).to_pylist() for a in arrays]
    return list(zip(*values)), inv.reshape(-1)


# -- processes and tracks ----------------------------------------------------------------

@dataclass
class _Process:
    pid: int
    name: str
    sort: tuple[Any, ...]
    threads: dict[int, tuple[str, tuple[Any, ...]]] = field(default_factory=dict)
    lanes: dict[Any, int] = field(default_factory=dict)

    def thread(self, tid: int | None, name: str, sort: tuple[Any, ...]) -> int:
        """The track of a real thread/stream id (its own id when it fits the format)."""
        if tid is not None and 0 <= tid < LANE_BASE:
            self.threads.setdefault(tid, (name, sort))
            return tid
        return self.lane(("id", tid), name, sort)

    def lane(self, key: Any, name: str, sort: tuple[Any, ...]) -> int:
        """A synthetic track (steps, input waits, GPU annotations, ids that do not fit)."""
        if key not in self.lanes:
            self.lanes[key] = LANE_BASE + len(self.lanes)
            self.threads[self.lanes[key]] = (name, sort)
        return self.lanes[key]


def _main_pids(run: Run) -> dict[int, int | None]:
    """Each rank's training process: the manifest's pid, else the pid with most host rows."""
    counts: Counter[tuple[int, int]] = Counter()
    for name in ("threads", "cpu_ops", "api_calls", "annotations", "input_waits"):
        t = run.table(name).select(["rank", "pid"]).filter(pc.is_valid(run.table(name)["pid"]))
        for row in t.group_by(["rank", "pid"]).aggregate([([], "count_all")]).to_pylist():
            counts[(row["rank"], row["pid"])] += row["count_all"]
    out: dict[int, int | None] = {}
    for r in run.manifest.ranks:
        mine = [(n, -pid) for (rank, pid), n in counts.items() if rank == r.rank]
        out[r.rank] = r.pid if r.pid is not None else (-max(mine)[1] if mine else None)
    return out


class _Layout:
    """Maps (rank, pid, tid) and (rank, device, stream) to trace pid/tid, with names."""

    def __init__(self, run: Run) -> None:
        self.procs: dict[tuple[Any, ...], _Process] = {}
        self.main_pid = _main_pids(run)
        self.host_names = {(r["rank"], r["pid"]): r for r in run.table("processes").to_pylist()}
        self.thread_names = {(r["rank"], r["pid"], r["tid"]): r["name"]
                             for r in run.table("threads").to_pylist()}
        self.devices = {(r["rank"], r["device"]): r["name"]
                        for r in run.table("devices").to_pylist()}
        self.streams = {(r["rank"], r["device"], r["stream"]): r["name"]
                        for r in run.table("streams").to_pylist()}
        for rank in run.ranks:
            self.host(rank, None)
        for rank, device in sorted(self.devices):
            self.gpu(rank, device)
        for rank, pid, tid in sorted(self.thread_names,
                                     key=lambda k: tuple(-1 if x is None else x for x in k)):
            self.host_thread(rank, pid, tid)

    def _proc(self, key: tuple[Any, ...], name: str, sort: tuple[Any, ...]) -> _Process:
        if key not in self.procs:
            self.procs[key] = _Process(len(self.procs) + 1, name, sort)
        return self.procs[key]

    def host(self, rank: int, pid: int | None) -> _Process:
        main = self.main_pid.get(rank)
        pid = main if pid is None else pid
        info = self.host_names.get((rank, pid)) or {}
        label = " · ".join(x for x in (info.get("host"), info.get("name")) if x)
        name = f"rank {rank} · {label + ' ' if label else ''}(pid {pid})" if pid is not None \
            else f"rank {rank} · host"
        return self._proc(("host", rank, pid), name, (rank, 0 if pid == main else 1, pid or 0))

    def gpu(self, rank: int, device: int | None) -> _Process:
        dev = "?" if device is None else device
        model = self.devices.get((rank, device))
        name = f"rank {rank} · GPU {dev}" + (f" · {model}" if model else "")
        return self._proc(("gpu", rank, device), name, (rank, 2, -1 if device is None else device))

    def host_thread(self, rank: int, pid: int | None, tid: int | None) -> tuple[int, int]:
        p = self.host(rank, pid)
        pid = self.main_pid.get(rank) if pid is None else pid
        name = self.thread_names.get((rank, pid, tid)) or f"thread {'?' if tid is None else tid}"
        sort = (1, 0 if tid == pid else 1, -1 if tid is None else tid)
        return p.pid, p.thread(tid, name, sort)

    def host_lane(self, rank: int, pid: int | None, lane: str, order: int) -> tuple[int, int]:
        p = self.host(rank, pid)
        return p.pid, p.lane(lane, lane, (0, order))

    def stream(self, rank: int, device: int | None, stream: int | None) -> tuple[int, int]:
        p = self.gpu(rank, device)
        s = "?" if stream is None else stream
        name = self.streams.get((rank, device, stream)) or f"stream {s}"
        return p.pid, p.thread(stream, name, (-1 if stream is None else stream, 1))

    def gpu_lane(self, rank: int, device: int | None, stream: int | None) -> tuple[int, int]:
        p = self.gpu(rank, device)
        s = "?" if stream is None else stream
        return p.pid, p.lane(("annotations", stream), f"stream {s} annotations",
                             (-1 if stream is None else stream, 0))

    def rows(self, cols: Sequence[pa.ChunkedArray | pa.Array],
             fn: Callable[..., tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """Per-row trace (pid, tid) for key columns, ``fn`` called once per distinct key."""
        if len(cols[0]) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        keys, inv = _group(cols)
        lut = np.array([fn(*k) for k in keys], dtype=np.int64).reshape(-1, 2)
        return lut[inv, 0], lut[inv, 1]

    def metadata(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, p in enumerate(sorted(self.procs.values(), key=lambda p: p.sort)):
            out.append({"ph": "M", "name": "process_name", "pid": p.pid, "tid": 0, "ts": 0,
                        "args": {"name": p.name}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": p.pid, "tid": 0, "ts": 0,
                        "args": {"sort_index": i}})
            for j, (tid, (name, _)) in enumerate(sorted(p.threads.items(), key=lambda x: x[1][1])):
                out.append({"ph": "M", "name": "thread_name", "pid": p.pid, "tid": tid, "ts": 0,
                            "args": {"name": name}})
                out.append({"ph": "M", "name": "thread_sort_index", "pid": p.pid, "tid": tid,
                            "ts": 0, "args": {"sort_index": j}})
        return out


# -- event sources -----------------------------------------------------------------------

@dataclass
class _Source:
    phase: str
    ts: np.ndarray  # absolute ns, ascending
    dur: np.ndarray  # ns; ties at one ts put the longest first
    render: Render
    prio: int = 1  # after the longest-first rule: X (1) before flow ends (2) at one ts


def _lookup(mapping: dict[str, str]) -> Callable[[pa.ChunkedArray], pa.Array]:
    def f(col: pa.ChunkedArray) -> pa.Array:
        text = pc.cast(col.combine_chunks(), pa.string())
        out = pc.fill_null(text, "")
        for k, v in mapping.items():
            out = pc.if_else(pc.equal(out, k), v, out)
        return out
    return f


_CPU_CAT = _lookup({"framework": "cpu_op", "python": "python_function", "": "cpu_op"})
_API_CAT = _lookup({"runtime": "cuda_runtime", "driver": "cuda_driver", "": "cuda_api"})
_ANN_CAT = _lookup({"user": "user_annotation", "gpu_user": "gpu_user_annotation",
                    "nvtx": "nvtx", "profiler_step": "profiler_step", "": "annotation"})


def _x(t: pa.Table, pid: np.ndarray, tid: np.ndarray, cat: _Strings | str, name: _Strings,
       args: Args) -> _Source:
    ts, dur = _np(t, "ts_ns"), np.maximum(_np(t, "dur_ns"), 0)

    def render(lo: int, hi: int, origin: int) -> pa.Array:
        c = cat if isinstance(cat, str) else cat.take(lo, hi)
        return _join([',\n{"ph":"X","cat":', c, ',"name":', name.take(lo, hi),
                      ',"pid":', _ints(pid[lo:hi]), ',"tid":', _ints(tid[lo:hi]),
                      ',"ts":', _us(ts[lo:hi] - origin), ',"dur":', _us(dur[lo:hi]),
                      ',"args":{', _args(args(lo, hi)), "}}"])
    return _Source("X", ts, dur, render)


def _fields(t: pa.Table, names: Sequence[str]) -> Args:
    """Args that are plain columns (numbers as numbers, enums/strings JSON-encoded); a null
    value leaves its key out of that event's args."""
    types = {n: t.schema.field(n).type for n in names}
    enc = {n: _Strings(t.column(n)) for n, typ in types.items()
           if pa.types.is_dictionary(typ) or pa.types.is_string(typ)}

    def args(lo: int, hi: int) -> list[Any]:
        out: list[Any] = []
        for n in names:
            col = _col(t, n, lo, hi)
            if col.null_count == len(col):
                continue
            text = enc[n].take(lo, hi) if n in enc else _num(col)
            out += _field(n, text, pc.is_valid(col) if col.null_count else None)
        return out
    return args


def _triple(t: pa.Table, prefix: str, lo: int, hi: int) -> list[Any]:
    x, y, z = (_col(t, f"{prefix}_{a}", lo, hi) for a in "xyz")
    if x.null_count == len(x):
        return []
    text = _join(["[", _num(x), ",", _num(y), ",", _num(z), "]"])
    return _field(prefix, text, pc.is_valid(x) if x.null_count else None)


def _host_sources(run: Run, lay: _Layout, api: pa.Table, api_lane: Lanes) -> list[_Source]:
    out = []
    t = _sorted(run.table("cpu_ops"))
    pid, tid = lay.rows([t["rank"], t["pid"], t["tid"]], lay.host_thread)
    out.append(_x(t, pid, tid, _Strings(_CPU_CAT(t["kind"])), _Strings(t["name"]),
                  _fields(t, ("external_id", "sequence"))))
    out.append(_x(api, *api_lane, _Strings(_API_CAT(api["domain"])), _Strings(api["name"]),
                  _fields(api, ("correlation", "external_id", "kind", "cbid"))))
    ann = _sorted(run.table("annotations"))
    ann_fields = ("id", "parent_id", "depth", "source", "external_id")
    t = ann.filter(pc.is_null(ann["device"]))
    pid, tid = lay.rows([t["rank"], t["pid"], t["tid"]], lay.host_thread)
    out.append(_x(t, pid, tid, _Strings(_ANN_CAT(t["source"])), _Strings(t["name"]),
                  _fields(t, ann_fields)))
    t = ann.filter(pc.is_valid(ann["device"]))
    pid, tid = lay.rows([t["rank"], t["device"], t["stream"]], lay.gpu_lane)
    out.append(_x(t, pid, tid, _Strings(_ANN_CAT(t["source"])), _Strings(t["name"]),
                  _fields(t, ann_fields)))
    t = _sorted(run.table("input_waits"))
    pid, tid = lay.rows([t["rank"], t["pid"]], lambda r, p: lay.host_lane(r, p, "input waits", 1))
    out.append(_x(t, pid, tid, '"input_wait"', _Strings(pc.fill_null(t["name"], "input wait")),
                  _fields(t, ("tid", "source"))))
    t = _sorted(run.table("steps"))
    pid, tid = lay.rows([t["rank"]], lambda r: lay.host_lane(r, None, "steps", 0))
    label = pc.binary_join_element_wise("step ", pc.cast(t["step"], pa.string()), "")
    out.append(_x(t, pid, tid, '"step"', _Strings(pc.coalesce(t["name"], label)),
                  _fields(t, ("step", "source"))))
    return out


def _gpu_sources(run: Run, lay: _Layout) -> tuple[list[_Source], dict[str, pa.Table],
                                                  dict[str, Lanes]]:
    out: list[_Source] = []
    tables: dict[str, pa.Table] = {}
    lanes: dict[str, Lanes] = {}
    for name in ("kernels", "memcpy", "memset"):
        t = tables[name] = _sorted(run.table(name))
        pid, tid = lanes[name] = lay.rows([t["rank"], t["device"], t["stream"]], lay.stream)
        where = ("device", "stream", "correlation", "external_id")
        if name == "kernels":
            plain = _fields(t, ("registers", "shared_memory", "static_smem", "dynamic_smem",
                                "source_occupancy_pct", "queued_ns", "graph_id") + where)

            def kargs(lo: int, hi: int, t: pa.Table = t, plain: Args = plain) -> list[Any]:
                return _triple(t, "grid", lo, hi) + _triple(t, "block", lo, hi) + plain(lo, hi)
            out.append(_x(t, pid, tid, '"kernel"', _Strings(t["name"]), kargs))
        elif name == "memcpy":
            kinds = [pc.fill_null(pc.cast(t[c], pa.string()), "unknown")
                     for c in ("kind", "src_kind", "dst_kind")]
            label = pc.binary_join_element_wise("Memcpy ", kinds[0], " (", kinds[1], " -> ",
                                                kinds[2], ")", "")
            plain = _fields(t, ("bytes", "kind", "src_kind", "dst_kind") + where + ("dst_device",))
            dur = np.maximum(_np(t, "dur_ns"), 0)
            known = pc.is_valid(t["bytes"]).to_numpy(zero_copy_only=False) & (dur > 0)
            bw = pa.array(np.where(known, _np(t, "bytes") / np.maximum(dur, 1), np.nan),
                          mask=~known)  # B/ns = GB/s

            def margs(lo: int, hi: int, plain: Args = plain, bw: pa.Array = bw) -> list[Any]:
                b = bw.slice(lo, hi - lo)
                return plain(lo, hi) + _field("bandwidth (GB/s)", _num(b), pc.is_valid(b))
            out.append(_x(t, pid, tid, '"gpu_memcpy"', _Strings(label), margs))
        else:
            label = pc.binary_join_element_wise(
                "Memset (", pc.fill_null(pc.cast(t["dst_kind"], pa.string()), "unknown"), ")", "")
            out.append(_x(t, pid, tid, '"gpu_memset"', _Strings(label),
                          _fields(t, ("bytes", "dst_kind") + where)))
    return out, tables, lanes


def _flow_sources(api: pa.Table, api_lane: Lanes, tables: dict[str, pa.Table],
                  lanes: dict[str, Lanes]) -> list[_Source]:
    """One s/f pair per GPU activity whose (rank, correlation) has an API call (the earliest)."""
    def keyed(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        corr = _np(t, "correlation", -1)
        ok = pc.is_valid(t["correlation"]).to_numpy(zero_copy_only=False)
        ok &= (corr >= 0) & (corr < 1 << 40)
        rows = np.flatnonzero(ok)
        return (_np(t, "rank")[rows] << 40) | corr[rows], rows

    akey, arows = keyed(api)
    uniq, first = np.unique(akey, return_index=True)  # api rows are in ts order: first = earliest
    arows = arows[first]
    s_rows, g_parts = [], []
    for name, t in tables.items():
        gkey, grows = keyed(t)
        pos = np.minimum(np.searchsorted(uniq, gkey), max(len(uniq) - 1, 0))
        hit = (uniq[pos] == gkey) if len(uniq) else np.zeros(len(gkey), bool)
        s_rows.append(arows[pos[hit]])
        g_parts.append((name, grows[hit]))
    a_ts = _np(api, "ts_ns")
    s_idx = np.concatenate(s_rows) if s_rows else np.zeros(0, np.int64)
    ids = np.arange(1, len(s_idx) + 1, dtype=np.int64)
    f_ts = np.concatenate([_np(tables[n], "ts_ns")[r] for n, r in g_parts])
    f_pid = np.concatenate([lanes[n][0][r] for n, r in g_parts])
    f_tid = np.concatenate([lanes[n][1][r] for n, r in g_parts])

    def source(ph: str, ts: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> _Source:
        o = np.argsort(ts, kind="stable")
        ts, pid, tid, fid = ts[o], pid[o], tid[o], ids[o]
        head = ',\n{"ph":"s","cat":"flow","name":"launch","id":' if ph == "s" else \
            ',\n{"ph":"f","bp":"e","cat":"flow","name":"launch","id":'

        def render(lo: int, hi: int, origin: int) -> pa.Array:
            return _join([head, _ints(fid[lo:hi]), ',"pid":', _ints(pid[lo:hi]), ',"tid":',
                          _ints(tid[lo:hi]), ',"ts":', _us(ts[lo:hi] - origin), "}"])
        return _Source(ph, ts, np.zeros(len(ts), np.int64), render, prio=2)

    return [source("s", a_ts[s_idx], api_lane[0][s_idx], api_lane[1][s_idx]),
            source("f", f_ts, f_pid, f_tid)]


def _counter(t: pa.Table, pid: np.ndarray, name: _Strings, key: str, value: str) -> _Source:
    ts = _np(t, "ts_ns")
    head = ',"args":{' + _enc(key) + ":"

    def render(lo: int, hi: int, origin: int) -> pa.Array:
        return _join([',\n{"ph":"C","name":', name.take(lo, hi), ',"pid":', _ints(pid[lo:hi]),
                      ',"ts":', _us(ts[lo:hi] - origin), head, _num(_col(t, value, lo, hi)), "}}"])
    return _Source("C", ts, np.zeros(len(ts), np.int64), render)


def _counter_sources(run: Run, lay: _Layout) -> list[_Source]:
    def proc(rank: int, device: int | None, pid: int | None = None) -> tuple[int, int]:
        return (lay.gpu(rank, device) if device is not None else lay.host(rank, pid)).pid, 0

    t = _sorted(run.table("samples"))
    t = t.filter(pc.is_finite(t["value"]))
    out = [_counter(t, lay.rows([t["rank"], t["device"]], proc)[0], _Strings(t["metric"]),
                    "value", "value")]
    m = _sorted(run.table("memory_events"))
    kind = pc.fill_null(pc.cast(m["device_type"], pa.string()), "")
    on_gpu = pc.and_(pc.is_valid(m["device"]), pc.not_equal(kind, "cpu"))
    m = m.append_column("gpu", pc.if_else(on_gpu, m["device"], pa.scalar(None, pa.int32())))
    for col, what in (("total_allocated", "allocated"), ("total_reserved", "reserved")):
        t = m.filter(pc.is_valid(m[col]))
        pid = lay.rows([t["rank"], t["gpu"], t["pid"]], proc)[0]
        name = pc.if_else(pc.is_valid(t["gpu"]), f"memory {what}", f"CPU memory {what}")
        out.append(_counter(t, pid, _Strings(name), "bytes", col))
    return out


# -- writing -------------------------------------------------------------------------------

def _payload(arr: pa.Array) -> memoryview:
    """The UTF-8 bytes of a string array's values, back to back (no copy)."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1,
                            offset=arr.offset * 4)
    return memoryview(arr.buffers()[2])[offsets[0]:offsets[-1]]


class TraceExport:
    """A planned export: tracks assigned, sources sorted; ``chunks()`` renders the JSON."""

    def __init__(self, run: Run, *, window: int = WINDOW_EVENTS) -> None:
        self.run = run
        self.window = max(1, window)
        lay = self.layout = _Layout(run)
        gpu, tables, lanes = _gpu_sources(run, lay)
        api = _sorted(run.table("api_calls"))
        api_lane = lay.rows([api["rank"], api["pid"], api["tid"]], lay.host_thread)
        host = _host_sources(run, lay, api, api_lane)
        flows = _flow_sources(api, api_lane, tables, lanes)
        self.sources = [s for s in host + gpu + flows + _counter_sources(run, lay) if len(s.ts)]
        self.flows = len(flows[0].ts)
        self.origin_ns = min((int(s.ts[0]) for s in self.sources), default=0)
        self.metadata = lay.metadata()
        by_phase: dict[str, int] = {"M": len(self.metadata)}
        for s in self.sources:
            by_phase[s.phase] = by_phase.get(s.phase, 0) + len(s.ts)
        self.by_phase = by_phase

    def other_data(self) -> dict[str, Any]:
        m = self.run.manifest
        return {"schema": TRACE_SCHEMA, "run": str(self.run.path), "source": m.source.kind,
                "tool": m.source.tool, "clock": m.clock, "clock_offset_ns": m.clock_offset_ns,
                "origin_ns": self.origin_ns,
                "time": "ts and dur in µs; ts = (ts_ns - origin_ns) / 1000 on the run's clock; "
                        "the source's own clock = ts_ns - clock_offset_ns",
                "ranks": list(self.run.ranks), "stepscope_version": __version__}

    def _window(self, cuts: list[np.ndarray], k: int, skip_comma: bool,
                level: int | None) -> tuple[memoryview, bytes | None]:
        """Window ``k`` rendered (events of every source by ts, longest first, prio), and
        deflated when ``level`` is set: both run on a worker thread."""
        parts, ts, dur, prio = [], [], [], []
        for s, c in zip(self.sources, cuts):
            lo, hi = int(c[k]), int(c[k + 1])
            if hi > lo:
                parts.append(s.render(lo, hi, self.origin_ns))
                ts.append(s.ts[lo:hi])
                dur.append(s.dur[lo:hi])
                prio.append(np.full(hi - lo, s.prio, np.int8))
        order = np.lexsort((np.concatenate(prio), -np.concatenate(dur), np.concatenate(ts)))
        raw = _payload(pa.concat_arrays(parts).take(pa.array(order)))
        raw = raw[1:] if skip_comma else raw  # the first event of the array has no comma
        return raw, _deflate(raw, level)

    def pieces(self, level: int | None = None, *,
               threads: int | None = None) -> Iterator[tuple[memoryview | bytes, bytes | None]]:
        """The JSON in order, as (raw, raw deflated at ``level`` or None). Windows are
        rendered and deflated ahead on worker threads (Arrow's kernels and zlib release
        the GIL), so that work overlaps the writing."""
        meta = b",\n".join(msgspec.json.encode(e) for e in self.metadata)
        head = (b'{"displayTimeUnit":"ns","otherData":' + msgspec.json.encode(self.other_data())
                + b',"traceEvents":[\n' + meta)
        yield head, _deflate(head, level)
        if self.sources:
            all_ts = np.sort(np.concatenate([s.ts for s in self.sources]))
            bounds = np.unique(all_ts[:: self.window])
            cuts = [np.append(np.searchsorted(s.ts, bounds, "left"), len(s.ts))
                    for s in self.sources]
            workers = max(1, threads if threads is not None else min(4, os.cpu_count() or 1))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                ahead: deque[Future[tuple[memoryview, bytes | None]]] = deque()
                for k in range(len(bounds)):
                    skip = k == 0 and not self.metadata
                    ahead.append(pool.submit(self._window, cuts, k, skip, level))
                    if len(ahead) > workers:
                        yield ahead.popleft().result()
                while ahead:
                    yield ahead.popleft().result()
        tail = b"\n]}\n"
        yield tail, _deflate(tail, level)

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The JSON, in order, as byte chunks."""
        for raw, _ in self.pieces():
            yield raw

    def _stats(self, nbytes: int) -> TraceStats:
        return TraceStats(events=sum(self.by_phase.values()), by_phase=dict(self.by_phase),
                          flows=self.flows, bytes=nbytes, origin_ns=self.origin_ns)

    def write(self, fp: IO[bytes]) -> TraceStats:
        """Write the JSON into a binary stream."""
        n = 0
        for raw, _ in self.pieces():
            fp.write(raw)
            n += len(raw)
        return self._stats(n)

    def write_gzip(self, fp: IO[bytes], level: int = GZIP_LEVEL) -> TraceStats:
        """Write one gzip member: windows deflated in parallel, each ended with a sync flush,
        then an empty final block (as pigz does), CRC-32 and size in the trailer."""
        fp.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # deflate, mtime 0, OS unknown
        crc = n = 0
        for raw, packed in self.pieces(level):
            crc = zlib.crc32(raw, crc)
            n += len(raw)
            fp.write(packed or b"")
        fp.write(zlib.compressobj(level, zlib.DEFLATED, -15).flush(zlib.Z_FINISH))
        fp.write(struct.pack("<II", crc & 0xFFFFFFFF, n & 0xFFFFFFFF))
        return self._stats(n)


def _deflate(raw: memoryview | bytes, level: int | None) -> bytes | None:
    """Raw deflate of one piece, byte-aligned by a sync flush so pieces concatenate."""
    if level is None:
        return None
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(raw) + c.flush(zlib.Z_SYNC_FLUSH)


def write_trace(run: Run, fp: IO[bytes]) -> TraceStats:
    """Write ``run`` as trace-event JSON into a binary stream."""
    return TraceExport(run).write(fp)


def trace_json(run: Run) -> bytes:
    """The whole trace in memory (tests, small runs)."""
    import io

    buf = io.BytesIO()
    write_trace(run, buf)
    return buf.getvalue()


def export_trace(run: Run, path: str | os.PathLike[str], *,
                 gzip_level: int = GZIP_LEVEL) -> TraceStats:
    """Write ``run`` to ``path`` (gzip when it ends in ``.gz``), atomically: a temporary
    sibling renamed into place, so a failed export leaves no partial file."""
    out = Path(path)
    export = TraceExport(run)  # plan first: a bad run fails before anything is created
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as raw:
            if out.name.endswith(".gz"):
                stats = export.write_gzip(raw, gzip_level)
            else:
                stats = export.write(raw)
        os.replace(tmp, out)
        tmp = None
    except OSError as exc:
        raise StepscopeError(f"{out}: cannot write the trace ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return stats
