"""Decode raw CUPTI activity buffers into the run's tables, vectorised with numpy.

Input: the bytes of completed activity buffers and, per buffer, the kind and offset of every
record (``walk``; the shim does it in C, ``walk_py`` is the fallback). Records of one kind are
gathered into an ``(n, record size)`` byte matrix and each field is a column slice of it viewed
as its dtype (``layouts``). Strings (kernel names, NVTX names) are pointers into CUPTI's memory:
they are resolved in the profiled process, once per distinct pointer, through ``strings``.
Kernel names arrive mangled and are demangled once per distinct name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from stepscope.call_kinds import classify_api
from stepscope.capture.cupti import layouts as L
from stepscope.schema_enums import AnnotationSource, ApiDomain, ApiKind
from stepscope.store.produce.nesting import nest

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Columns = dict[str, Any]
_VERSION_SUFFIX = re.compile(r"_v\d+$")
# runtime/driver calls whose records the analysis uses (launches, syncs, copies, allocations)
KEEP_API = frozenset({ApiKind.LAUNCH, ApiKind.GRAPH_LAUNCH, ApiKind.SYNC, ApiKind.MEMCPY,
                      ApiKind.MEMSET, ApiKind.ALLOC, ApiKind.FREE})


def api_base_name(raw: str) -> str:
    """A CUPTI callback name without its version suffix: ``cudaLaunchKernel_v7000`` ->
    ``cudaLaunchKernel``."""
    return _VERSION_SUFFIX.sub("", raw)


def wanted_call(raw: str) -> bool:
    """Whether the records of this runtime/driver call are kept (``--gpu-api filtered``)."""
    return classify_api(api_base_name(raw)) in KEEP_API


def walk_py(buf: bytes | memoryview | U8, sizes: list[int]) -> tuple[npt.NDArray[np.uint32],
                                                                       npt.NDArray[np.uint64], int]:
    """Pure-Python record walk (same contract as the shim's ``ss_walk``)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    valid = len(raw)
    kinds: list[int] = []
    offs: list[int] = []
    off = 0
    while off + 4 <= valid:
        kind = int(raw[off:off + 4].view("<u4")[0])
        size = sizes[kind] if kind < len(sizes) else 0
        if size == 0 or off + size > valid:
            break
        kinds.append(kind)
        offs.append(off)
        off += size
    return np.array(kinds, dtype=np.uint32), np.array(offs, dtype=np.uint64), off


@dataclass
class _Pending:
    """Record matrices gathered so far, per kind."""

    by_kind: dict[int, list[U8]] = field(default_factory=dict)

    def add(self, kind: int, rows: U8) -> None:
        self.by_kind.setdefault(kind, []).append(rows)

    def take(self, kind: int) -> U8 | None:
        parts = self.by_kind.pop(kind, None)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _col(rows: U8, fld: L.Field) -> npt.NDArray[Any]:
    off, dt = fld
    d = np.dtype(dt)
    return np.ascontiguousarray(rows[:, off:off + d.itemsize]).view(d).reshape(-1)


def _i64(a: npt.NDArray[Any]) -> I64:
    return a.astype(np.int64)


def _complete(rows: U8, f: dict[str, L.Field]) -> tuple[U8, I64, I64]:
    """The records that have both timestamps (CUPTI leaves 0 where it could not take one), with
    their start and end."""
    start, end = _i64(_col(rows, f["start"])), _i64(_col(rows, f["end"]))
    ok = (start > 0) & (end >= start)
    return rows[ok], start[ok], end[ok]


def _enum(table: Mapping[int, Enum], values: npt.NDArray[Any]) -> list[str]:
    """Schema enum values of CUPTI enum codes (unknown codes map like code 0)."""
    return [table.get(c, table[0]).value for c in values.tolist()]


def _nullable(a: npt.NDArray[Any], null: int = 0) -> list[int | None]:
    return [None if v == null else v for v in a.tolist()]


def drop_nested(rt: Columns, dr: Columns) -> tuple[Columns | None, dict[int, int]]:
    """Drop driver calls nested in a runtime call on the same thread (the runtime's own
    cuLaunchKernel…); returns the kept driver calls and {driver correlation: runtime correlation}."""
    r_tid, r_s = np.asarray(rt["tid"], dtype=np.int64), np.asarray(rt["ts_ns"], dtype=np.int64)
    r_e, r_c = r_s + np.asarray(rt["dur_ns"], dtype=np.int64), np.asarray(rt["correlation"], dtype=np.int64)
    d_tid, d_s = np.asarray(dr["tid"], dtype=np.int64), np.asarray(dr["ts_ns"], dtype=np.int64)
    d_e, d_c = d_s + np.asarray(dr["dur_ns"], dtype=np.int64), np.asarray(dr["correlation"], dtype=np.int64)
    keep = np.ones(len(d_s), dtype=bool)
    remap: dict[int, int] = {}
    for tid in np.unique(d_tid).tolist():
        m = r_tid == tid
        if not m.any():
            continue
        order = np.argsort(r_s[m], kind="stable")
        s, e, c = r_s[m][order], r_e[m][order], r_c[m][order]
        idx = np.flatnonzero(d_tid == tid)
        j = np.searchsorted(s, d_s[idx], side="right") - 1
        jj = np.clip(j, 0, None)
        inside = (j >= 0) & (e[jj] >= d_e[idx])
        keep[idx[inside]] = False
        remap.update(zip(d_c[idx[inside]].tolist(), c[jj[inside]].tolist()))
    if keep.all():
        return dr, remap
    if not keep.any():
        return None, remap
    kept = keep.tolist()
    return {k: [x for x, ok in zip(v, kept) if ok] for k, v in dr.items()}, remap


@dataclass(frozen=True)
class DecodeContext:
    """What decoding needs from the live process (or a recording of it, in tests)."""

    strings: Callable[[int], str | None]  # char* in CUPTI memory -> text
    api_name: Callable[[int, int], str | None]  # (callback domain, cbid) -> function name
    demangle: Callable[[str], str] = lambda s: s
    pid: int = 0


class Decoder:
    """Accumulates buffers; ``tables()`` returns the decoded tables and resets."""

    def __init__(self, layouts: dict[int, L.Layout], ctx: DecodeContext) -> None:
        self.layouts = layouts
        self.ctx = ctx
        self._pending = _Pending()
        self._names: dict[int, str] = {}
        self._api: dict[tuple[int, int], str] = {}
        self.records = 0
        self.unknown_kinds: dict[int, int] = {}
        self._open_markers: dict[int, tuple[int, str, int | None, int | None]] = {}
        self._context_device: dict[int, int] = {}
        self._next_id = 0
        self.cupti_overhead_ns: dict[str, int] = {}

    def add(self, buf: U8, kinds: npt.NDArray[np.uint32], offsets: npt.NDArray[np.uint64]) -> None:
        """Gather the records of one buffer (copied: the buffer can be reused afterwards)."""
        if not len(kinds):
            return
        self.records += len(kinds)
        offs = offsets.astype(np.int64)
        for kind in np.unique(kinds).tolist():
            lay = self.layouts.get(kind)
            if lay is None:
                self.unknown_kinds[kind] = self.unknown_kinds.get(kind, 0) + int((kinds == kind).sum())
                continue
            sel = offs[kinds == kind]
            self._pending.add(kind, buf[sel[:, None] + np.arange(lay.size, dtype=np.int64)])

    # -- strings ------------------------------------------------------------------------------
    def _string(self, ptr: int, *, kernel: bool) -> str:
        got = self._names.get(ptr)
        if got is None:
            text = self.ctx.strings(ptr) if ptr else None
            got = "<unknown>" if text is None else (self.ctx.demangle(text) if kernel else text)
            self._names[ptr] = got
        return got

    def _strings(self, ptrs: npt.NDArray[np.uint64], *, kernel: bool) -> list[str]:
        uniq, inverse = np.unique(ptrs, return_inverse=True)
        names = [self._string(int(p), kernel=kernel) for p in uniq.tolist()]
        return [names[i] for i in inverse.reshape(-1).tolist()]

    def _api_names(self, domain: int, cbids: npt.NDArray[np.uint32]) -> list[str]:
        uniq, inverse = np.unique(cbids, return_inverse=True)
        names = []
        for c in uniq.tolist():
            key = (domain, int(c))
            if key not in self._api:
                raw = self.ctx.api_name(domain, int(c))
                self._api[key] = api_base_name(raw) if raw else f"cbid_{c}"
            names.append(self._api[key])
        return [names[i] for i in inverse.reshape(-1).tolist()]

    # -- tables -------------------------------------------------------------------------------
    def tables(self) -> dict[str, Columns]:
        out: dict[str, Columns] = {}
        p = self._pending
        k = p.take(L.CONCURRENT_KERNEL)
        if k is not None:
            out["kernels"] = self._kernels(k)
        copies = [c for c in (self._memcpy(p.take(L.MEMCPY), L.MEMCPY),
                              self._memcpy(p.take(L.MEMCPY2), L.MEMCPY2)) if c]
        if copies:
            out["memcpy"] = {key: [x for c in copies for x in c[key]] for key in copies[0]}
        m = p.take(L.MEMSET)
        if m is not None:
            out["memset"] = self._memset(m)
        rt = self._api_calls(p.take(L.RUNTIME), L.RUNTIME)
        dr = self._api_calls(p.take(L.DRIVER), L.DRIVER)
        if rt and dr:
            dr, remap = drop_nested(rt, dr)
            if remap:
                for name in ("kernels", "memcpy"):
                    if name in out:
                        out[name]["correlation"] = [remap.get(c, c) for c in
                                                    np.asarray(out[name]["correlation"]).tolist()]
        apis = [a for a in (rt, dr) if a]
        if apis:
            out["api_calls"] = {key: [x for a in apis for x in a[key]] for key in apis[0]}
        s = p.take(L.SYNCHRONIZATION)
        if s is not None:
            out["sync"] = self._sync(s)
        mk = p.take(L.MARKER)
        if mk is not None:
            ann = self._markers(mk)
            if ann:
                out["annotations"] = ann
        o = p.take(L.OVERHEAD)
        if o is not None:
            self._add_overhead(o)
        p.by_kind.clear()  # MARKER_DATA, EXTERNAL_CORRELATION: counted, not stored
        return {name: cols for name, cols in out.items() if cols and len(next(iter(cols.values())))}

    def _add_overhead(self, rows: U8) -> None:
        """CUPTI's own overhead records, summed by kind (ns)."""
        f = self.layouts[L.OVERHEAD].fields
        kinds = _col(rows, f["overhead_kind"]).tolist()
        durs = (_i64(_col(rows, f["end"])) - _i64(_col(rows, f["start"]))).tolist()
        for kd, d in zip(kinds, durs):
            key = L.OVERHEAD_KINDS.get(kd, f"kind_{kd}")
            self.cupti_overhead_ns[key] = self.cupti_overhead_ns.get(key, 0) + max(int(d), 0)

    def _device_of(self, contexts: npt.NDArray[np.uint32]) -> list[int | None]:
        return [self._context_device.get(c) for c in contexts.tolist()]

    def _kernels(self, rows: U8) -> Columns:
        f = self.layouts[L.CONCURRENT_KERNEL].fields
        rows, start, end = _complete(rows, f)
        dev, ctx = _col(rows, f["device"]), _col(rows, f["context"])
        for c, d in zip(ctx.tolist(), dev.tolist()):
            self._context_device.setdefault(c, d)
        st, dy = _i64(_col(rows, f["static_smem"])), _i64(_col(rows, f["dynamic_smem"]))
        queued = _i64(_col(rows, f["queued"]))
        return {
            "ts_ns": start, "dur_ns": end - start, "device": _i64(dev),
            "stream": _i64(_col(rows, f["stream"])), "correlation": _i64(_col(rows, f["correlation"])),
            "name": self._strings(_col(rows, f["name"]), kernel=True),
            **{a: _i64(_col(rows, f[a])) for a in ("grid_x", "grid_y", "grid_z",
                                                    "block_x", "block_y", "block_z")},
            "registers": _i64(_col(rows, f["registers"])), "shared_memory": st + dy,
            "static_smem": st, "dynamic_smem": dy,
            "queued_ns": [None if q <= 0 or q > s else s - q
                          for q, s in zip(queued.tolist(), start.tolist())],
            "graph_id": _nullable(_col(rows, f["graph_id"])),
        }

    def _timed(self, rows: U8 | None, kind: int) -> tuple[dict[str, L.Field], U8, I64, I64] | None:
        """The field table and the complete records of ``kind`` (None when there are none)."""
        if rows is None:
            return None
        f = self.layouts[kind].fields
        rows, start, end = _complete(rows, f)
        return (f, rows, start, end) if len(rows) else None

    def _memcpy(self, rows: U8 | None, kind: int) -> Columns | None:
        timed = self._timed(rows, kind)
        if timed is None:
            return None
        f, rows, start, end = timed
        n = len(rows)
        return {
            "ts_ns": start.tolist(), "dur_ns": (end - start).tolist(),
            "device": _col(rows, f["device"]).tolist(), "stream": _col(rows, f["stream"]).tolist(),
            "correlation": _col(rows, f["correlation"]).tolist(),
            "kind": _enum(L.COPY_KINDS, _col(rows, f["copy_kind"])),
            "bytes": _col(rows, f["bytes"]).astype(np.int64).tolist(),
            "src_kind": _enum(L.MEMORY_KINDS, _col(rows, f["src_kind"])),
            "dst_kind": _enum(L.MEMORY_KINDS, _col(rows, f["dst_kind"])),
            "dst_device": (_col(rows, f["dst_device"]).tolist() if "dst_device" in f else [None] * n),
        }

    def _memset(self, rows: U8) -> Columns:
        f = self.layouts[L.MEMSET].fields
        rows, start, end = _complete(rows, f)
        return {
            "ts_ns": start, "dur_ns": end - start, "device": _i64(_col(rows, f["device"])),
            "stream": _i64(_col(rows, f["stream"])), "correlation": _i64(_col(rows, f["correlation"])),
            "bytes": _col(rows, f["bytes"]).astype(np.int64),
            "dst_kind": _enum(L.MEMORY_KINDS, _col(rows, f["memory_kind"])),
        }

    def _api_calls(self, rows: U8 | None, kind: int) -> Columns | None:
        timed = self._timed(rows, kind)
        if timed is None:
            return None
        f, rows, start, end = timed
        domain = L.DOMAIN_RUNTIME_API if kind == L.RUNTIME else L.DOMAIN_DRIVER_API
        names = self._api_names(domain, _col(rows, f["cbid"]))
        kinds = {n: classify_api(n).value for n in set(names)}
        dom = (ApiDomain.RUNTIME if kind == L.RUNTIME else ApiDomain.DRIVER).value
        return {
            "ts_ns": start.tolist(), "dur_ns": (end - start).tolist(),
            "pid": _col(rows, f["pid"]).tolist(), "tid": _col(rows, f["tid"]).tolist(),
            "correlation": _col(rows, f["correlation"]).tolist(), "name": names,
            "domain": [dom] * len(names), "kind": [kinds[n] for n in names],
            "cbid": _col(rows, f["cbid"]).tolist(),
        }

    def _sync(self, rows: U8) -> Columns:
        f = self.layouts[L.SYNCHRONIZATION].fields
        rows, start, end = _complete(rows, f)
        stream = _col(rows, f["stream"])
        event = _col(rows, f["event"])
        return {
            "ts_ns": start, "dur_ns": end - start,
            "device": self._device_of(_col(rows, f["context"])),
            "stream": [None if s == 0xFFFFFFFF else s for s in stream.tolist()],
            "correlation": _i64(_col(rows, f["correlation"])),
            "kind": _enum(L.SYNC_KINDS, _col(rows, f["type"])),
            "event_id": [None if e == 0xFFFFFFFF else e for e in event.tolist()],
        }

    def _markers(self, rows: U8) -> Columns:
        """NVTX ranges (start/end records paired by id; pairs may span flushes) and marks."""
        f = self.layouts[L.MARKER].fields
        flags, ts, ids = _col(rows, f["flags"]), _i64(_col(rows, f["timestamp"])), _col(rows, f["id"])
        okind, pid, tid = _col(rows, f["object_kind"]), _col(rows, f["pid"]), _col(rows, f["tid"])
        names = self._strings(_col(rows, f["name"]), kernel=False)
        order = np.argsort(ts, kind="stable").tolist()
        out_ts: list[int] = []
        out_dur: list[int] = []
        out_pid: list[int | None] = []
        out_tid: list[int | None] = []
        out_name: list[str] = []
        fl, tsl, idl = flags.tolist(), ts.tolist(), ids.tolist()
        ok_l, pid_l, tid_l = okind.tolist(), pid.tolist(), tid.tolist()
        for i in order:
            thread = ok_l[i] == L.OBJECT_THREAD
            p = pid_l[i] if thread else None
            t = tid_l[i] if thread else None
            if fl[i] & L.MARKER_START:
                self._open_markers[idl[i]] = (tsl[i], names[i], p, t)
            elif fl[i] & L.MARKER_END:
                opened = self._open_markers.pop(idl[i], None)
                if opened is not None:
                    t0, name, p0, tid0 = opened
                    out_ts.append(t0)
                    out_dur.append(max(tsl[i] - t0, 0))
                    out_pid.append(p0)
                    out_tid.append(tid0)
                    out_name.append(name)
            elif fl[i] & L.MARKER_INSTANTANEOUS:
                out_ts.append(tsl[i])
                out_dur.append(0)
                out_pid.append(p)
                out_tid.append(t)
                out_name.append(names[i])
        if not out_ts:
            return {}
        ts_a, dur_a = np.array(out_ts, dtype=np.int64), np.array(out_dur, dtype=np.int64)
        parent, depth = nest(list(zip(out_pid, out_tid)), ts_a, dur_a)
        base = self._next_id
        self._next_id += len(out_ts)
        return {"ts_ns": ts_a, "dur_ns": dur_a, "pid": out_pid, "tid": out_tid,
                "id": np.arange(base, base + len(out_ts), dtype=np.int64),
                "parent_id": [None if q < 0 else q + base for q in parent.tolist()],
                "depth": depth, "name": out_name, "source": [AnnotationSource.NVTX.value] * len(out_ts)}
