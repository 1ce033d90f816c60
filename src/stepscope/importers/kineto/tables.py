"""Kineto event categories -> schema tables (one builder per table)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import chain
from operator import attrgetter, index
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.call_kinds import classify_api
from stepscope.importers.kineto.columns import (
    Timed,
    args_of,
    arrow,
    float_array,
    get,
    int_array,
    int_or_fallback,
    parse_memcpy_name,
    parse_memset_name,
    per_name,
    with_nulls,
)
from stepscope.importers.kineto.events import Event
from stepscope.schema_enums import (
    AnnotationSource,
    ApiDomain,
    CopyKind,
    CpuOpKind,
    DeviceType,
    InputWaitSource,
    StepSource,
    SyncKind,
)
from stepscope.store.produce.nesting import nest

Columns = dict[str, Any]

I32, I64 = pa.int32(), pa.int64()
# Typed scalars: an untyped Python value makes pyarrow infer its type, which tries
# (and, without pandas/dateutil installed, fails) an import on every call.
ZERO = pa.scalar(0, I64)
FIRST, SECOND, THIRD = (pa.scalar(i, I64) for i in range(3))


def _s(value: str) -> pa.Scalar:
    return pa.scalar(value, pa.string())


DATALOADER_PREFIX = "enumerate(DataLoader)"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_SYNC_KINDS = {
    "stream sync": SyncKind.STREAM, "event sync": SyncKind.EVENT,
    "context sync": SyncKind.CONTEXT, "stream wait event": SyncKind.STREAM_WAIT_EVENT,
}
# When the copy-engine ran far behind the launch the queue time is meaningless;
# beyond this bound the 'queued' stamp is taken to be on another clock.
_MAX_QUEUED_NS = 60_000_000_000


_NAME, _PID, _TID = attrgetter("name"), attrgetter("pid"), attrgetter("tid")


_NAMES = pa.dictionary(pa.int32(), pa.string())


def names_of(events: Sequence[Event]) -> pa.Array:
    # Built as a dictionary array at once (same dictionary, in first-appearance
    # order, as ``dictionary_encode`` of a string array, without that array).
    return pa.array(list(map(_NAME, events)), type=_NAMES)


_INT32 = (-(1 << 31), (1 << 31) - 1)


def _ints(items: Sequence[Any], field: Any, typ: pa.DataType = I64) -> pa.Array:
    """An int64/int32 column of ``field`` (an attrgetter) of ``items``: straight into
    numpy when every value is an int (``index`` rejects None and strings) in range,
    else (same result, slower) :func:`int_array`."""
    try:
        v = np.fromiter(map(index, map(field, items)), np.int64, len(items))
    except (TypeError, OverflowError):
        return int_array(list(map(field, items)), typ)
    if typ == I64:
        return arrow(v)
    if typ == I32 and (not len(v) or (_INT32[0] <= v.min() and v.max() <= _INT32[1])):
        return arrow(v.astype(np.int32))
    return int_array(v.tolist(), typ)


def ints(args: Sequence[Any], name: str, typ: pa.DataType = I64) -> pa.Array:
    """One integer ``Args`` field of every event as a column (see :func:`_ints`)."""
    return _ints(args, attrgetter(name), typ)


def pids(events: Sequence[Event]) -> pa.Array:
    return _ints(events, _PID)


def tids(events: Sequence[Event]) -> pa.Array:
    return _ints(events, _TID)


def repeat(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(arrow(np.zeros(n, dtype=np.int8)), pa.array([value], pa.string()))


def _host(t: Timed) -> Columns:
    ev = t.events
    return {"ts_ns": t.ts_ns, "dur_ns": t.dur_ns,
            "pid": pids(ev), "tid": tids(ev)}


def _or_fallback(args: Sequence[Any], name: str, events: Sequence[Event], field: Any,
                 typ: pa.DataType) -> pa.Array:
    """``args.<name>``, else ``field`` of the event (the fallback only read when needed)."""
    primary = get(args, name)
    if None not in primary:
        return int_array(primary, typ)
    return int_or_fallback(primary, list(map(field, events)), typ)


def _gpu(t: Timed) -> tuple[Columns, list[Any]]:
    ev = t.events
    a = args_of(ev)
    cols = {
        "ts_ns": t.ts_ns, "dur_ns": t.dur_ns,
        "device": _or_fallback(a, "device", ev, _PID, I32),
        "stream": _or_fallback(a, "stream", ev, _TID, I64),
        "correlation": ints(a, "correlation"),
        "external_id": ints(a, "external_id"),
    }
    return cols, a


def _xyz(values: list[Any]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``[x, y, z]`` lists -> three int32 columns (null where not a 3-list)."""
    n = len(values)
    if n and set(map(type, values)) == {list} and set(map(len, values)) == {3}:
        try:
            flat = np.fromiter(chain.from_iterable(values), np.int64, 3 * n).reshape(-1, 3)
            if flat.min() >= 0 and flat.max() < 2**31:
                x, y, z = (arrow(flat[:, i].astype(np.int32)) for i in range(3))
                return x, y, z
        except (TypeError, ValueError, OverflowError):
            pass
    ok = [v if v.__class__ is list and len(v) == 3 else None for v in values]
    return tuple(int_array([None if v is None else v[i] for v in ok], I32) for i in range(3))


def kernels(t: Timed) -> Columns:
    cols, a = _gpu(t)
    grid, block = get(a, "grid"), get(a, "block")
    graph = ints(a, "graph_id")
    (gx, gy, gz), (bx, by, bz) = _xyz(grid), _xyz(block)
    cols.update(
        name=names_of(t.events),
        grid_x=gx, grid_y=gy, grid_z=gz, block_x=bx, block_y=by, block_z=bz,
        registers=ints(a, "registers", I32),
        shared_memory=ints(a, "shared_memory"),
        graph_id=pc.if_else(pc.equal(graph, ZERO), pa.scalar(None, I64), graph),
        source_occupancy_pct=float_array(get(a, "occupancy"), pa.float32()),
        _queued_us=ints(a, "queued"),  # made queued_ns once the clock base is known
    )
    return cols


def queued_ns(ts_ns: npt.NDArray[np.int64], queued_us: pa.Array) -> pa.Array:
    """Kineto writes CUPTI's 'queued' stamp as whole microseconds on the kernel's
    own (absolute) clock, 0 when not collected (the default). Queue time =
    start - queued; implausible values (another clock) become null."""
    q = queued_us.fill_null(0).to_numpy()
    if not (q > 0).any():
        return pa.nulls(len(q), I64)
    wait = ts_ns - q * 1000
    ok = (q > 0) & (wait >= 0) & (wait < _MAX_QUEUED_NS)
    return with_nulls(wait, ~ok, I64)


def memcpy(t: Timed) -> Columns:
    cols, a = _gpu(t)
    names = names_of(t.events)
    parsed = per_name(names, parse_memcpy_name, pa.list_(pa.string(), 3))
    kind = pc.list_element(parsed, FIRST)
    peer = ints(a, "to_device", I32)
    cols.update(
        kind=kind, src_kind=pc.list_element(parsed, SECOND), dst_kind=pc.list_element(parsed, THIRD),
        bytes=ints(a, "bytes"),
        dst_device=pc.if_else(pc.equal(kind, _s(CopyKind.PTOP.value)), peer, pa.scalar(None, I32)),
    )
    return cols


def memset(t: Timed) -> Columns:
    cols, a = _gpu(t)
    cols.update(bytes=ints(a, "bytes"),
                dst_kind=per_name(names_of(t.events), parse_memset_name))
    return cols


def sync(t: Timed) -> Columns:
    cols, a = _gpu(t)
    kinds = [k or e.name for k, e in zip(get(a, "sync_kind"), t.events)]
    kind = per_name(pa.array(kinds, pa.string()),
                    lambda s: _SYNC_KINDS.get((s or "").lower(), SyncKind.UNKNOWN).value)
    stream = cols["stream"]
    event = ints(a, "wait_event")
    cols.update(
        stream=pc.if_else(pc.less(stream, ZERO), pa.scalar(None, I64), stream),
        kind=kind,
        event_id=pc.if_else(pc.greater_equal(event, ZERO), event, pa.scalar(None, I64)),
    )
    return cols


def api_calls(parts: Sequence[tuple[Timed, ApiDomain]]) -> list[Columns]:
    """One set of columns per part (concatenated, and sorted by time, at the end)."""
    parts = [(t, d) for t, d in parts if t.events]
    chunks: list[Columns] = []
    for t, domain in parts:
        a = args_of(t.events)
        cols = _host(t)
        names = names_of(t.events)
        cols.update(correlation=ints(a, "correlation"),
                    external_id=ints(a, "external_id"),
                    name=names, domain=repeat(domain.value, len(t.events)),
                    kind=per_name(names, lambda s: classify_api(s).value),
                    cbid=ints(a, "cbid", I32))
        chunks.append(cols)
    return chunks


def cpu_ops(parts: Sequence[tuple[Timed, CpuOpKind]]) -> list[Columns]:
    """One set of columns per part (concatenated, and sorted by time, at the end)."""
    chunks: list[Columns] = []
    for t, kind in parts:
        if not t.events:
            continue
        cols = _host(t)
        if kind is CpuOpKind.PYTHON:  # python_function args carry no op ids
            ext = seq = pa.nulls(len(t.events), I64)
        else:
            a = args_of(t.events)
            ext, seq = ints(a, "external_id"), ints(a, "sequence")
        cols.update(external_id=ext, name=names_of(t.events),
                    kind=repeat(kind.value, len(t.events)), sequence=seq)
        chunks.append(cols)
    return chunks


def take(cols: Columns, order: npt.NDArray[np.int64]) -> Columns:
    """The rows of ``cols`` in ``order``."""
    idx = arrow(order.astype(np.int64, copy=False))
    return {k: (v[order] if isinstance(v, np.ndarray) else v.take(idx)) for k, v in cols.items()}


def concat(chunks: Sequence[Columns]) -> Columns:
    if len(chunks) == 1:
        return chunks[0]
    out: Columns = {}
    for key in chunks[0]:
        values = [c[key] for c in chunks]
        if isinstance(values[0], np.ndarray):
            out[key] = np.concatenate(values)
        elif any(pa.types.is_dictionary(v.type) for v in values):
            values = [v if pa.types.is_dictionary(v.type) else v.dictionary_encode()
                      for v in values]
            out[key] = pa.chunked_array(values).unify_dictionaries().combine_chunks()
        else:
            out[key] = pa.concat_arrays(values)
    return out


def annotation_tables(user: Timed, gpu: Timed) -> tuple[Columns | None, Columns | None]:
    """(annotations, steps): host ranges and their GPU projections, nested per
    thread/stream; ``ProfilerStep#N`` host ranges are also steps."""
    n_user, n_gpu = len(user.events), len(gpu.events)
    if not n_user + n_gpu:
        return None, None
    evs = user.events + gpu.events
    names = [e.name for e in evs]
    ts = np.concatenate([user.ts_ns, gpu.ts_ns])
    dur = np.concatenate([user.dur_ns, gpu.dur_ns])
    a = args_of(evs)
    pid, tid = [e.pid for e in evs], [e.tid for e in evs]
    is_step = [_STEP.match(nm) is not None for nm in names[:n_user]]
    source = [AnnotationSource.PROFILER_STEP.value if s else AnnotationSource.USER.value
              for s in is_step] + [AnnotationSource.GPU_USER.value] * n_gpu
    groups = [(i >= n_user, p, t) for i, (p, t) in enumerate(zip(pid, tid))]
    parent, depth = nest(groups, ts, dur)
    order = np.argsort(ts, kind="stable")  # ids follow start time
    ids = np.empty(len(ts), dtype=np.int64)
    ids[order] = np.arange(len(ts), dtype=np.int64)
    parent_id = np.where(parent >= 0, ids[np.maximum(parent, 0)], -1)
    device = [None] * n_user + get(a[n_user:], "device")
    stream = [None] * n_user + get(a[n_user:], "stream")
    device_fb = [None] * n_user + pid[n_user:]
    stream_fb = [None] * n_user + tid[n_user:]
    cols: Columns = {
        "ts_ns": ts, "dur_ns": dur, "pid": int_array(pid), "tid": int_array(tid),
        "id": ids, "parent_id": with_nulls(parent_id, parent < 0, I64),
        "depth": depth, "name": pa.array(names, pa.string()).dictionary_encode(),
        "source": pa.array(source, pa.string()).dictionary_encode(),
        "device": int_or_fallback(device, device_fb, I32),
        "stream": int_or_fallback(stream, stream_fb, I64),
        "external_id": ints(a, "external_id"),
    }
    cols = take(cols, order)
    steps = _steps(user, is_step)
    return cols, steps


def _steps(user: Timed, is_step: list[bool]) -> Columns | None:
    idx = [i for i, s in enumerate(is_step) if s]
    if not idx:
        return None
    names = [user.events[i].name for i in idx]
    return {
        "ts_ns": user.ts_ns[idx], "dur_ns": user.dur_ns[idx],
        "step": [int(_STEP.match(nm).group(1)) for nm in names],  # type: ignore[union-attr]
        "source": repeat(StepSource.PROFILER_STEP.value, len(idx)), "name": names,
    }


def plain(arr: pa.Array) -> pa.Array:
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def input_waits(parts: Sequence[Columns | None]) -> Columns | None:
    """``enumerate(DataLoader)#...__next__`` host ranges (annotations or ops)."""
    chunks: list[Columns] = []
    for cols in parts:
        if cols is None:
            continue
        names = cols["name"]
        if not pa.types.is_dictionary(names.type):
            names = names.dictionary_encode()
        hits = pc.starts_with(names.dictionary, DATALOADER_PREFIX)
        if not pc.any(hits).as_py():
            continue
        mask = pc.fill_null(hits.take(names.indices), False)
        if "source" in cols:  # not the GPU-projected copies
            gpu_copy = pc.equal(plain(cols["source"]), _s(AnnotationSource.GPU_USER.value))
            mask = pc.and_(mask, pc.invert(gpu_copy))
        idx = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if not len(idx):
            continue
        sel = arrow(idx.astype(np.int64, copy=False))
        chunks.append({
            "ts_ns": np.asarray(cols["ts_ns"])[idx], "dur_ns": np.asarray(cols["dur_ns"])[idx],
            "pid": cols["pid"].take(sel), "tid": cols["tid"].take(sel),
            "source": repeat(InputWaitSource.DATALOADER.value, len(idx)),
            "name": plain(names.take(sel)),
        })
    return concat(chunks) if chunks else None


def memory_events(t: Timed) -> Columns | None:
    """Allocator instants; c10 device type 0 is the CPU, every other is an accelerator."""
    if not t.events:
        return None
    a = args_of(t.events)
    dtype = ints(a, "device_type", I32)
    is_gpu = pc.not_equal(dtype, ZERO)
    kind = pc.if_else(is_gpu, _s(DeviceType.GPU.value), _s(DeviceType.CPU.value))
    return {
        "ts_ns": t.ts_ns, "pid": pids(t.events), "tid": tids(t.events),
        "device_type": kind,
        "device": pc.if_else(is_gpu, ints(a, "device_id", I32), pa.scalar(None, I32)),
        "addr": ints(a, "addr"), "bytes": ints(a, "mem_bytes"),
        "total_allocated": ints(a, "total_allocated"),
        "total_reserved": ints(a, "total_reserved"),
    }


def streams(gpu_tables: Sequence[Columns], names: Mapping[tuple[int, int], str]) -> Columns | None:
    pairs: set[tuple[int, int]] = set()
    for cols in gpu_tables:
        t = pa.table({"d": cols["device"], "s": cols["stream"]}).drop_null()
        u = t.group_by(["d", "s"]).aggregate([])
        pairs.update(zip(u.column("d").to_pylist(), u.column("s").to_pylist()))
    if not pairs:
        return None
    rows = sorted(pairs)
    return {"device": [d for d, _ in rows], "stream": [s for _, s in rows],
            "name": [names.get(r) for r in rows]}
