"""One process's GPU records and CUDA calls from an nsys export: ``kernels``, ``memcpy``,
``memset``, ``sync`` (CUPTI activity tables, keyed by ``globalPid``) and ``api_calls``
(``CUPTI_ACTIVITY_KIND_RUNTIME`` / ``_DRIVER``, keyed by ``globalTid``). Kernels and calls are
linked by ``correlationId``, as in CUPTI; a kernel whose launch is not in the file (launched
before a cut window began) is kept without it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from stepscope.call_kinds import classify_api
from stepscope.importers.nsys.columns import (
    I32,
    I64,
    STR,
    Scope,
    call_name,
    coded,
    concat,
    gather,
    per_value,
    pids_of,
    tid_of,
    times,
)
from stepscope.importers.nsys.layout import (
    DRIVER,
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    SYNC,
    Layout,
)
from stepscope.importers.nsys.source import Export
from stepscope.importers.nsys.strings import Strings
from stepscope.schema_enums import ApiDomain, CopyKind, MemoryKind, SyncKind

Columns = dict[str, pa.Array]
UNKNOWN_KERNEL = "(unnamed kernel)"
UNNAMED_CALL = "(unnamed call)"
_GPU = {"start": I64, "end": I64, "deviceId": I32, "streamId": I64, "correlationId": I64}


def _gpu(t: pa.Table, s: Scope) -> Columns:
    ts, dur = times(t, s.offset_ns)
    return {"ts_ns": ts, "dur_ns": dur, "device": t.column("deviceId").combine_chunks(),
            "stream": t.column("streamId").combine_chunks(),
            "correlation": t.column("correlationId").combine_chunks()}


def kernels(export: Export, layout: Layout, strings: Strings, s: Scope) -> Columns | None:
    name_col = layout.kernel_name
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    want = {**_GPU, name_col: I64, **{d: I32 for d in dims}, "registersPerThread": I32,
            "staticSharedMemory": I64, "dynamicSharedMemory": I64, "graphId": I64}

    def build(t: pa.Table) -> Columns:
        cols = _gpu(t, s)
        static, dynamic = t.column("staticSharedMemory"), t.column("dynamicSharedMemory")
        cols.update({
            "name": strings.names(t.column(name_col), UNKNOWN_KERNEL),
            **{f"{d[:-1].lower()}_{d[-1].lower()}": t.column(d).combine_chunks() for d in dims},
            "registers": t.column("registersPerThread").combine_chunks(),
            "static_smem": static.combine_chunks(), "dynamic_smem": dynamic.combine_chunks(),
            "shared_memory": pc.add(pc.fill_null(static, 0), pc.fill_null(dynamic, 0))
            .combine_chunks(),
            "graph_id": t.column("graphId").combine_chunks(),
        })
        return cols

    return gather(export, KERNEL, want, s.key("globalPid"), build)


def memcpy(export: Export, layout: Layout, s: Scope) -> Columns | None:
    want = {**_GPU, "bytes": I64, "copyKind": I64, "srcKind": I64, "dstKind": I64,
            "dstDeviceId": I32}
    unknown = MemoryKind.UNKNOWN.value

    def build(t: pa.Table) -> Columns:
        cols = _gpu(t, s)
        kind = coded(t.column("copyKind"), layout.copy_kinds, CopyKind.UNKNOWN.value)
        peer = pc.equal(kind, pa.scalar(CopyKind.PTOP.value))
        cols.update({
            "bytes": t.column("bytes").combine_chunks(), "kind": kind,
            "src_kind": coded(t.column("srcKind"), layout.memory_kinds, unknown),
            "dst_kind": coded(t.column("dstKind"), layout.memory_kinds, unknown),
            "dst_device": pc.if_else(peer, t.column("dstDeviceId").combine_chunks(),
                                     pa.scalar(None, I32)),
        })
        return cols

    return gather(export, MEMCPY, want, s.key("globalPid"), build)


def memset(export: Export, layout: Layout, s: Scope) -> Columns | None:
    want = {**_GPU, "bytes": I64, "memKind": I64}

    def build(t: pa.Table) -> Columns:
        cols = _gpu(t, s)
        cols.update({"bytes": t.column("bytes").combine_chunks(),
                     "dst_kind": coded(t.column("memKind"), layout.memory_kinds,
                                       MemoryKind.UNKNOWN.value)})
        return cols

    return gather(export, MEMSET, want, s.key("globalPid"), build)


def sync(export: Export, layout: Layout, s: Scope) -> Columns | None:
    want = {**_GPU, "syncType": I64, "eventId": I64}

    def build(t: pa.Table) -> Columns:
        cols = _gpu(t, s)
        stream = cols["stream"]
        cols.update({"kind": coded(t.column("syncType"), layout.sync_kinds,
                                   SyncKind.UNKNOWN.value),
                     "event_id": t.column("eventId").combine_chunks(),
                     "stream": pc.if_else(pc.less(stream, 0), pa.scalar(None, I64), stream)})
        return cols

    return gather(export, SYNC, want, s.key("globalPid"), build)


def api_calls(export: Export, strings: Strings, s: Scope) -> Columns | None:
    """Runtime and driver calls of the process's threads (names without nsys's ``_vNNNN``)."""
    chunks: list[Columns] = []
    for table, domain in ((RUNTIME, ApiDomain.RUNTIME), (DRIVER, ApiDomain.DRIVER)):
        cols = export.columns(table)
        if not cols:
            continue
        by_id = "nameId" in cols
        want = {"start": I64, "end": I64, "globalTid": I64, "correlationId": I64,
                ("nameId" if by_id else "name"): (I64 if by_id else STR)}

        def build(t: pa.Table, by_id: bool = by_id, domain: ApiDomain = domain) -> Columns:
            ts, dur = times(t, s.offset_ns)
            raw = strings.names(t.column("nameId"), UNNAMED_CALL) if by_id else \
                pc.fill_null(t.column("name").combine_chunks(), UNNAMED_CALL)
            names = per_value(raw, call_name).dictionary_encode()
            gtid = t.column("globalTid").combine_chunks()
            return {"ts_ns": ts, "dur_ns": dur, "pid": pids_of(gtid), "tid": tid_of(gtid),
                    "correlation": t.column("correlationId").combine_chunks(), "name": names,
                    "domain": pa.repeat(pa.scalar(domain.value), len(t)).cast(STR),
                    "kind": per_value(names, lambda n: classify_api(n).value)}

        got = gather(export, table, want, s.key("globalTid"), build)
        if got:
            chunks.append(got)
    return concat(chunks)


__all__ = ["UNKNOWN_KERNEL", "api_calls", "kernels", "memcpy", "memset", "sync"]
