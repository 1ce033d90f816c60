"""Columns of one chunk read by the compiled scanner (:class:`native.Scanned`).

The twin of :mod:`tables` for events that never became objects: every function here
gives the columns its namesake there gives for the same events (tests/importers/
test_native.py compares both paths table by table). The rules are the ones of the object
path: a phase filter, then :func:`timed`'s drops (same diagnostics, same "first" event), an
integer column is null where the field is absent or null or out of the column type's range,
``args.device`` / ``args.stream`` fall back to ``pid`` / ``tid``, names are dictionaries in
order of first appearance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

import stepscope.importers.kineto.tables as kt
from stepscope.call_kinds import classify_api
from stepscope.importers.kineto.build import (
    API_CATEGORIES,
    CPU_OP_CATEGORIES,
    GPU_CATEGORIES,
    GPU_TABLES,
    TableBuilder,
)
from stepscope.importers.kineto.build import phase as phase_of
from stepscope.importers.kineto.columns import (
    MAX_US,
    Drops,
    arrow,
    parse_memcpy_name,
    parse_memset_name,
    per_name,
    us_to_ns,
)
from stepscope.importers.kineto.columns import timed as columns_timed
from stepscope.importers.kineto.comms import is_call
from stepscope.importers.kineto.native import COLUMN_CATEGORIES, Scanned
from stepscope.schema_enums import ApiDomain, CopyKind, CpuOpKind, DeviceType, SyncKind

Rows = npt.NDArray[np.intp]
I32, I64 = pa.int32(), pa.int64()
_RANGE = {I32: (-(1 << 31), (1 << 31) - 1), I64: (-(1 << 63), (1 << 63) - 1)}
_NP = {I32: np.int32, I64: np.int64}
_X, _I, _BIG_I = ord("X"), ord("i"), ord("I")


def ints(values: npt.NDArray[np.int64], ok: npt.NDArray[np.bool_],
         typ: pa.DataType = I64) -> pa.Array:
    """An integer column: null where not ``ok`` or out of ``typ``'s range."""
    lo, hi = _RANGE[typ]
    if typ != I64:
        ok = ok & (values >= lo) & (values <= hi)
    v = np.where(ok, values, 0).astype(_NP[typ], copy=False)
    return arrow(v, ~ok)


def field(sc: Scanned, name: str, rows: Rows, typ: pa.DataType = I64) -> pa.Array:
    return ints(*sc.column(name, rows), typ)


def names(sc: Scanned, rows: Rows) -> pa.Array:
    """The names of ``rows`` as a dictionary array (dictionary in order of first appearance)."""
    ids = sc.name[rows]
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int32)
    rank[order] = np.arange(len(uniq), dtype=np.int32)
    dictionary = sc.strings.take(arrow(uniq[order].astype(np.int64)))
    return pa.DictionaryArray.from_arrays(arrow(rank[inverse.reshape(-1)]), dictionary)


def _text(sc: Scanned, i: int) -> str:
    return str(sc.strings[i].as_py())


def phase(sc: Scanned, rows: Rows, *phases: int) -> Rows:
    ph = sc.ph[rows]
    keep = ph == phases[0]
    for other in phases[1:]:
        keep |= ph == other
    return rows if keep.all() else rows[keep]


def _drop(drops: Drops, sc: Scanned, rows: Rows, cat: str, code: str,
          mask: npt.NDArray[np.bool_], why: str) -> None:
    n = int(np.count_nonzero(mask))
    if not n:
        return
    r = int(rows[int(np.argmax(mask))])
    ts, dur = sc.floats[r, 0], sc.floats[r, 1]
    drops.add_at(code, n, int(sc.pos[r]), cat, _text(sc, int(sc.name[r])), float(ts),
                 float(dur), why)


def timed(sc: Scanned, rows: Rows, cat: str, drops: Drops, *, instant: bool = False) -> tuple[
        Rows, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`columns.timed` on rows: (kept rows, ts_ns, dur_ns)."""
    ts = sc.floats[rows, 0]
    bad = ~np.isfinite(ts)
    _drop(drops, sc, rows, cat, "missing_ts", bad, "without a timestamp ('ts')")
    far = ~bad & (np.abs(ts) > MAX_US)
    _drop(drops, sc, rows, cat, "time_out_of_range", far, "with a timestamp ('ts') out of range")
    bad |= far
    if instant:
        dur = np.zeros(len(rows))
    else:
        dur = sc.floats[rows, 1]
        no_dur = ~np.isfinite(dur) & ~bad
        _drop(drops, sc, rows, cat, "missing_dur", no_dur, "without a duration ('dur')")
        neg = (dur < 0) & ~bad
        _drop(drops, sc, rows, cat, "negative_duration", neg, "with a negative duration")
        huge = (dur > MAX_US) & ~bad & ~no_dur
        _drop(drops, sc, rows, cat, "duration_out_of_range", huge,
              "with a duration ('dur') out of range")
        bad |= no_dur | neg | huge
    if bad.any():
        keep = ~bad
        rows, ts, dur = rows[keep], ts[keep], dur[keep]
    return rows, us_to_ns(ts), us_to_ns(dur)


def _or_fallback(sc: Scanned, rows: Rows, name: str, fallback: str,
                 typ: pa.DataType) -> pa.Array:
    v, ok = sc.column(name, rows)
    if not ok.all():
        fv, fok = sc.column(fallback, rows)
        v, ok = np.where(ok, v, fv), ok | fok
    return ints(v, ok, typ)


def _host(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64],
          dur: npt.NDArray[np.int64]) -> kt.Columns:
    return {"ts_ns": ts, "dur_ns": dur, "pid": field(sc, "pid", rows),
            "tid": field(sc, "tid", rows)}


def _gpu(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64],
         dur: npt.NDArray[np.int64]) -> kt.Columns:
    return {"ts_ns": ts, "dur_ns": dur,
            "device": _or_fallback(sc, rows, "device", "pid", I32),
            "stream": _or_fallback(sc, rows, "stream", "tid", I64),
            "correlation": field(sc, "correlation", rows),
            "external_id": field(sc, "external_id", rows)}


def _xyz(sc: Scanned, rows: Rows, which: int) -> list[pa.Array]:
    ok = sc.xyz_set[rows, which]
    return [ints(sc.xyz[rows, 3 * which + i], ok, I32) for i in range(3)]


def kernels(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64],
            dur: npt.NDArray[np.int64]) -> kt.Columns:
    cols = _gpu(sc, rows, ts, dur)
    gx, gy, gz = _xyz(sc, rows, 0)
    bx, by, bz = _xyz(sc, rows, 1)
    graph, graph_ok = sc.column("graph_id", rows)
    occ = sc.floats[rows, 2]
    with np.errstate(over="ignore"):
        occ32 = occ.astype(np.float32)
    cols.update(
        name=names(sc, rows),
        grid_x=gx, grid_y=gy, grid_z=gz, block_x=bx, block_y=by, block_z=bz,
        registers=field(sc, "registers", rows, I32),
        shared_memory=field(sc, "shared_memory", rows),
        graph_id=ints(graph, graph_ok & (graph != 0)),
        source_occupancy_pct=arrow(occ32, np.isnan(occ)),
        _queued_us=field(sc, "queued", rows),
    )
    return cols


def memcpy(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64],
           dur: npt.NDArray[np.int64]) -> kt.Columns:
    cols = _gpu(sc, rows, ts, dur)
    parsed = per_name(names(sc, rows), parse_memcpy_name, pa.list_(pa.string(), 3))
    kind = pc.list_element(parsed, kt.FIRST)
    peer = field(sc, "to_device", rows, I32)
    cols.update(
        kind=kind, src_kind=pc.list_element(parsed, kt.SECOND),
        dst_kind=pc.list_element(parsed, kt.THIRD), bytes=field(sc, "bytes", rows),
        dst_device=pc.if_else(pc.equal(kind, kt._s(CopyKind.PTOP.value)), peer,
                              pa.scalar(None, I32)),
    )
    return cols


def memset(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64],
           dur: npt.NDArray[np.int64]) -> kt.Columns:
    cols = _gpu(sc, rows, ts, dur)
    cols.update(bytes=field(sc, "bytes", rows),
                dst_kind=per_name(names(sc, rows), parse_memset_name))
    return cols


def sync(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64],
         dur: npt.NDArray[np.int64]) -> kt.Columns:
    cols = _gpu(sc, rows, ts, dur)
    text = sc.strings.to_pylist()
    kinds = [text[k] if k >= 0 and text[k] else text[n]
             for k, n in zip(sc.sync[rows].tolist(), sc.name[rows].tolist())]
    kind = per_name(pa.array(kinds, pa.string()),
                    lambda s: kt._SYNC_KINDS.get((s or "").lower(), SyncKind.UNKNOWN).value)
    stream = cols["stream"]
    event = field(sc, "wait_event", rows)
    cols.update(
        stream=pc.if_else(pc.less(stream, kt.ZERO), pa.scalar(None, I64), stream),
        kind=kind,
        event_id=pc.if_else(pc.greater_equal(event, kt.ZERO), event, pa.scalar(None, I64)),
    )
    return cols


def api_calls(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64], dur: npt.NDArray[np.int64],
              domain: ApiDomain) -> kt.Columns:
    cols = _host(sc, rows, ts, dur)
    nm = names(sc, rows)
    cols.update(correlation=field(sc, "correlation", rows),
                external_id=field(sc, "external_id", rows),
                name=nm, domain=kt.repeat(domain.value, len(rows)),
                kind=per_name(nm, lambda s: classify_api(s).value),
                cbid=field(sc, "cbid", rows, I32))
    return cols


def cpu_ops(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64], dur: npt.NDArray[np.int64],
            kind: CpuOpKind) -> kt.Columns:
    cols = _host(sc, rows, ts, dur)
    if kind is CpuOpKind.PYTHON:
        ext = seq = pa.nulls(len(rows), I64)
    else:
        ext, seq = field(sc, "external_id", rows), field(sc, "sequence", rows)
    cols.update(external_id=ext, name=names(sc, rows), kind=kt.repeat(kind.value, len(rows)),
                sequence=seq)
    return cols


def memory_rows(sc: Scanned, rows: Rows) -> Rows:
    """``[memory]`` instants among ``cpu_instant_event`` rows."""
    rows = phase(sc, rows, _I, _BIG_I)
    if not len(rows):
        return rows
    is_memory = pc.equal(sc.strings, pa.scalar("[memory]", pa.string()))
    ids = np.flatnonzero(is_memory.to_numpy(zero_copy_only=False))  # at most one: interned
    return rows[sc.name[rows] == ids[0]] if len(ids) else rows[:0]


def memory_events(sc: Scanned, rows: Rows, ts: npt.NDArray[np.int64]) -> kt.Columns | None:
    if not len(rows):
        return None
    dtype = field(sc, "device_type", rows, I32)
    is_gpu = pc.not_equal(dtype, kt.ZERO)
    kind = pc.if_else(is_gpu, kt._s(DeviceType.GPU.value), kt._s(DeviceType.CPU.value))
    return {
        "ts_ns": ts, "pid": field(sc, "pid", rows), "tid": field(sc, "tid", rows),
        "device_type": kind,
        "device": pc.if_else(is_gpu, field(sc, "device_id", rows, I32), pa.scalar(None, I32)),
        "addr": field(sc, "addr", rows), "bytes": field(sc, "mem_bytes", rows),
        "total_allocated": field(sc, "total_allocated", rows),
        "total_reserved": field(sc, "total_reserved", rows),
    }


def pids(sc: Scanned, rows: Rows) -> set[int | None]:
    """The pids of ``rows`` as the object path collects them (None for none)."""
    v, ok = sc.column("pid", rows)
    out: set[int | None] = set(v[ok].tolist())
    if not ok.all():
        out.add(None)
    return out


BUILDERS = {"kernels": kernels, "memcpy": memcpy, "memset": memset, "sync": sync}


def add_chunk(b: TableBuilder, index: int, sc: Scanned, skipped: Sequence[int] = ()) -> None:
    """:meth:`TableBuilder.add` for a scanned chunk (the same steps, in the same order, so
    that drops report the same first event)."""
    drops = b.drops
    drops.set_chunk(index, (), skipped)
    b.events += sc.events
    b.comm += [e for e in sc.comm if is_call(e)]
    b.categories.update(sc.counts)
    rows = {c: sc.rows(c) for c in sc.counts if c in COLUMN_CATEGORIES}

    def x(cat: str) -> tuple[Rows, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        kept = phase(sc, rows[cat], _X)
        if len(kept) < len(rows[cat]):  # as kineto_build.phase: count those without a phase
            _drop(drops, sc, rows[cat], cat, "missing_ph", sc.ph[rows[cat]] == 0,
                  "without a phase ('ph')")
        return timed(sc, kept, cat, drops)

    for cat, table, _ in GPU_TABLES:
        if cat in rows:
            r, ts, dur = x(cat)
            if len(r):
                b.parts[table].append(BUILDERS[table](sc, r, ts, dur))
    api = [(x(c), d) for c, d in API_CATEGORIES.items() if c in rows]
    b.parts["api_calls"] += [api_calls(sc, r, ts, dur, d) for (r, ts, dur), d in api if len(r)]
    ops = [(x(c), k) for c, k in CPU_OP_CATEGORIES.items() if c in rows]
    b.parts["cpu_ops"] += [cpu_ops(sc, r, ts, dur, k) for (r, ts, dur), k in ops if len(r)]
    if "cpu_instant_event" in rows:
        mem = memory_rows(sc, rows["cpu_instant_event"])
        if len(mem):
            r, ts, _ = timed(sc, mem, "cpu_instant_event", drops, instant=True)
            memory = memory_events(sc, r, ts)
            if memory is not None:
                b.parts["memory_events"].append(memory)
    for cat, keep in (("user_annotation", b.user), ("gpu_user_annotation", b.gpu_user)):
        if cat in sc.counts:
            events = sc.objects.get(cat, [])
            drops.set_chunk(index, events, skipped, sc.object_pos.get(cat, []))
            keep.append(columns_timed(phase_of(events, "X"), 0, drops))
    for cat in GPU_CATEGORIES:
        if cat in rows:
            b.gpu_pids.update(pids(sc, rows[cat]))
        elif cat in sc.objects:
            b.gpu_pids.update(e.pid for e in sc.objects[cat])
    drops.set_chunk(index, ())
