"""Event sources of an export: each table of a run as rows sorted by time with a renderer of
their JSON events (slices, flow arrows from API calls to their GPU work, counters)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.graph import rank_graph
from stepscope.exporters.json_columns import (
    JsonStrings,
    arg_field,
    args_text,
    by_time,
    column_slice,
    enc,
    int_column,
    int_text,
    join,
    num_text,
    us_text,
)
from stepscope.exporters.trace_layout import Layout
from stepscope.store.run import Run

Render = Callable[[int, int, int], pa.Array]  # rows [lo, hi), time origin -> event strings
Args = Callable[[int, int], list[Any]]  # rows [lo, hi) -> args fields, each ``,"key":value``
Lanes = tuple[np.ndarray, np.ndarray]  # per-row trace pid, tid


@dataclass
class Source:
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


def _x(t: pa.Table, pid: np.ndarray, tid: np.ndarray, cat: JsonStrings | str, name: JsonStrings,
       args: Args) -> Source:
    ts, dur = int_column(t, "ts_ns"), np.maximum(int_column(t, "dur_ns"), 0)

    def render(lo: int, hi: int, origin: int) -> pa.Array:
        c = cat if isinstance(cat, str) else cat.take(lo, hi)
        return join([',\n{"ph":"X","cat":', c, ',"name":', name.take(lo, hi),
                      ',"pid":', int_text(pid[lo:hi]), ',"tid":', int_text(tid[lo:hi]),
                      ',"ts":', us_text(ts[lo:hi] - origin), ',"dur":', us_text(dur[lo:hi]),
                      ',"args":{', args_text(args(lo, hi)), "}}"])
    return Source("X", ts, dur, render)


def _fields(t: pa.Table, names: Sequence[str]) -> Args:
    """Args that are plain columns (numbers as numbers, enums/strings JSON-encoded); a null
    value leaves its key out of that event's args."""
    types = {n: t.schema.field(n).type for n in names}
    enc = {n: JsonStrings(t.column(n)) for n, typ in types.items()
           if pa.types.is_dictionary(typ) or pa.types.is_string(typ)}

    def args(lo: int, hi: int) -> list[Any]:
        out: list[Any] = []
        for n in names:
            col = column_slice(t, n, lo, hi)
            if col.null_count == len(col):
                continue
            text = enc[n].take(lo, hi) if n in enc else num_text(col)
            out += arg_field(n, text, pc.is_valid(col) if col.null_count else None)
        return out
    return args


def _triple(t: pa.Table, prefix: str, lo: int, hi: int) -> list[Any]:
    x, y, z = (column_slice(t, f"{prefix}_{a}", lo, hi) for a in "xyz")
    if x.null_count == len(x):
        return []
    text = join(["[", num_text(x), ",", num_text(y), ",", num_text(z), "]"])
    return arg_field(prefix, text, pc.is_valid(x) if x.null_count else None)


def host_sources(run: Run, lay: Layout, api: pa.Table, api_lane: Lanes) -> list[Source]:
    out = []
    t = by_time(rank_graph(run, None).table("cpu_ops"))
    pid, tid = lay.rows([t["rank"], t["pid"], t["tid"]], lay.host_thread)
    out.append(_x(t, pid, tid, JsonStrings(_CPU_CAT(t["kind"])), JsonStrings(t["name"]),
                  _fields(t, ("external_id", "sequence"))))
    out.append(_x(api, *api_lane, JsonStrings(_API_CAT(api["domain"])), JsonStrings(api["name"]),
                  _fields(api, ("correlation", "external_id", "kind", "cbid"))))
    ann = by_time(rank_graph(run, None).table("annotations"))
    ann_fields = ("id", "parent_id", "depth", "source", "external_id")
    t = ann.filter(pc.is_null(ann["device"]))
    pid, tid = lay.rows([t["rank"], t["pid"], t["tid"]], lay.host_thread)
    out.append(_x(t, pid, tid, JsonStrings(_ANN_CAT(t["source"])), JsonStrings(t["name"]),
                  _fields(t, ann_fields)))
    t = ann.filter(pc.is_valid(ann["device"]))
    pid, tid = lay.rows([t["rank"], t["device"], t["stream"]], lay.gpu_lane)
    out.append(_x(t, pid, tid, JsonStrings(_ANN_CAT(t["source"])), JsonStrings(t["name"]),
                  _fields(t, ann_fields)))
    t = by_time(rank_graph(run, None).table("input_waits"))
    pid, tid = lay.rows([t["rank"], t["pid"]], lambda r, p: lay.host_lane(r, p, "input waits", 1))
    out.append(_x(t, pid, tid, '"input_wait"', JsonStrings(pc.fill_null(t["name"], "input wait")),
                  _fields(t, ("tid", "source"))))
    t = by_time(rank_graph(run, None).table("steps"))
    pid, tid = lay.rows([t["rank"]], lambda r: lay.host_lane(r, None, "steps", 0))
    label = pc.binary_join_element_wise("step ", pc.cast(t["step"], pa.string()), "")
    out.append(_x(t, pid, tid, '"step"', JsonStrings(pc.coalesce(t["name"], label)),
                  _fields(t, ("step", "source"))))
    return out


def gpu_sources(run: Run, lay: Layout) -> tuple[list[Source], dict[str, pa.Table],
                                                  dict[str, Lanes]]:
    out: list[Source] = []
    tables: dict[str, pa.Table] = {}
    lanes: dict[str, Lanes] = {}
    for name in ("kernels", "memcpy", "memset"):
        t = tables[name] = by_time(rank_graph(run, None).table(name))
        pid, tid = lanes[name] = lay.rows([t["rank"], t["device"], t["stream"]], lay.stream)
        where = ("device", "stream", "correlation", "external_id")
        if name == "kernels":
            plain = _fields(t, ("registers", "shared_memory", "static_smem", "dynamic_smem",
                                "source_occupancy_pct", "queued_ns", "graph_id") + where)

            def kargs(lo: int, hi: int, t: pa.Table = t, plain: Args = plain) -> list[Any]:
                return _triple(t, "grid", lo, hi) + _triple(t, "block", lo, hi) + plain(lo, hi)
            out.append(_x(t, pid, tid, '"kernel"', JsonStrings(t["name"]), kargs))
        elif name == "memcpy":
            kinds = [pc.fill_null(pc.cast(t[c], pa.string()), "unknown")
                     for c in ("kind", "src_kind", "dst_kind")]
            label = pc.binary_join_element_wise("Memcpy ", kinds[0], " (", kinds[1], " -> ",
                                                kinds[2], ")", "")
            plain = _fields(t, ("bytes", "kind", "src_kind", "dst_kind") + where + ("dst_device",))
            dur = np.maximum(int_column(t, "dur_ns"), 0)
            known = pc.is_valid(t["bytes"]).to_numpy(zero_copy_only=False) & (dur > 0)
            bw = pa.array(np.where(known, int_column(t, "bytes") / np.maximum(dur, 1), np.nan),
                          mask=~known)  # B/ns = GB/s

            def margs(lo: int, hi: int, plain: Args = plain, bw: pa.Array = bw) -> list[Any]:
                b = bw.slice(lo, hi - lo)
                return plain(lo, hi) + arg_field("bandwidth (GB/s)", num_text(b), pc.is_valid(b))
            out.append(_x(t, pid, tid, '"gpu_memcpy"', JsonStrings(label), margs))
        else:
            label = pc.binary_join_element_wise(
                "Memset (", pc.fill_null(pc.cast(t["dst_kind"], pa.string()), "unknown"), ")", "")
            out.append(_x(t, pid, tid, '"gpu_memset"', JsonStrings(label),
                          _fields(t, ("bytes", "dst_kind") + where)))
    return out, tables, lanes


def flow_sources(api: pa.Table, api_lane: Lanes, tables: dict[str, pa.Table],
                  lanes: dict[str, Lanes]) -> list[Source]:
    """One s/f pair per GPU activity whose (rank, correlation) has an API call (the earliest)."""
    def keyed(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        corr = int_column(t, "correlation", -1)
        ok = pc.is_valid(t["correlation"]).to_numpy(zero_copy_only=False)
        ok &= (corr >= 0) & (corr < 1 << 40)
        rows = np.flatnonzero(ok)
        return (int_column(t, "rank")[rows] << 40) | corr[rows], rows

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
    a_ts = int_column(api, "ts_ns")
    s_idx = np.concatenate(s_rows) if s_rows else np.zeros(0, np.int64)
    ids = np.arange(1, len(s_idx) + 1, dtype=np.int64)
    f_ts = np.concatenate([int_column(tables[n], "ts_ns")[r] for n, r in g_parts])
    f_pid = np.concatenate([lanes[n][0][r] for n, r in g_parts])
    f_tid = np.concatenate([lanes[n][1][r] for n, r in g_parts])

    def source(ph: str, ts: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> Source:
        o = np.argsort(ts, kind="stable")
        ts, pid, tid, fid = ts[o], pid[o], tid[o], ids[o]
        head = ',\n{"ph":"s","cat":"flow","name":"launch","id":' if ph == "s" else \
            ',\n{"ph":"f","bp":"e","cat":"flow","name":"launch","id":'

        def render(lo: int, hi: int, origin: int) -> pa.Array:
            return join([head, int_text(fid[lo:hi]), ',"pid":', int_text(pid[lo:hi]), ',"tid":',
                          int_text(tid[lo:hi]), ',"ts":', us_text(ts[lo:hi] - origin), "}"])
        return Source(ph, ts, np.zeros(len(ts), np.int64), render, prio=2)

    return [source("s", a_ts[s_idx], api_lane[0][s_idx], api_lane[1][s_idx]),
            source("f", f_ts, f_pid, f_tid)]


def _counter(t: pa.Table, pid: np.ndarray, name: JsonStrings, key: str, value: str) -> Source:
    ts = int_column(t, "ts_ns")
    head = ',"args":{' + enc(key) + ":"

    def render(lo: int, hi: int, origin: int) -> pa.Array:
        return join([',\n{"ph":"C","name":', name.take(lo, hi), ',"pid":', int_text(pid[lo:hi]),
                      ',"ts":', us_text(ts[lo:hi] - origin), head, num_text(column_slice(t, value, lo, hi)), "}}"])
    return Source("C", ts, np.zeros(len(ts), np.int64), render)


def counter_sources(run: Run, lay: Layout) -> list[Source]:
    def proc(rank: int, device: int | None, pid: int | None = None) -> tuple[int, int]:
        return (lay.gpu(rank, device) if device is not None else lay.host(rank, pid)).pid, 0

    t = by_time(rank_graph(run, None).table("samples"))
    t = t.filter(pc.is_finite(t["value"]))
    out = [_counter(t, lay.rows([t["rank"], t["device"]], proc)[0], JsonStrings(t["metric"]),
                    "value", "value")]
    m = by_time(rank_graph(run, None).table("memory_events"))
    kind = pc.fill_null(pc.cast(m["device_type"], pa.string()), "")
    on_gpu = pc.and_(pc.is_valid(m["device"]), pc.not_equal(kind, "cpu"))
    m = m.append_column("gpu", pc.if_else(on_gpu, m["device"], pa.scalar(None, pa.int32())))
    for col, what in (("total_allocated", "allocated"), ("total_reserved", "reserved")):
        t = m.filter(pc.is_valid(m[col]))
        pid = lay.rows([t["rank"], t["gpu"], t["pid"]], proc)[0]
        name = pc.if_else(pc.is_valid(t["gpu"]), f"memory {what}", f"CPU memory {what}")
        out.append(_counter(t, pid, JsonStrings(name), "bytes", col))
    return out
