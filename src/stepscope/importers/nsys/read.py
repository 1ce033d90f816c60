"""Read an Nsight Systems export as rank bundles: one rank per process that drove a GPU.

>>> for bundle in read_nsys("report.sqlite.gz", first_rank=0): ...  # doctest: +SKIP

A multi-process report (``nsys profile torchrun ...``) holds every process of the job; each
process with kernels, copies or memsets is a rank, numbered in the order of the first GPU it
used (then its pid): torchrun's rank ``i`` drives GPU ``i``. Host-only processes (the launcher,
data-loader workers) are not ranks. Timestamps: the export's nanoseconds plus
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (Unix time; the offset is the bundle's
``clock_offset_ns``). Steps are left to the analysis (NVTX ranges named like steps, else the
kernel stream's period). Tables are built one process at a time, each from the export's rows
in batches (``source.BATCH_ROWS``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from stepscope.errors import TraceFormatError
from stepscope.importers.nsys.columns import I32, I64, STR, Scope, pid_of
from stepscope.importers.nsys.devices import devices as device_table
from stepscope.importers.nsys.devices import gpu_rows
from stepscope.importers.nsys.devices import streams as stream_table
from stepscope.importers.nsys.gpu import api_calls, kernels, memcpy, memset, sync
from stepscope.importers.nsys.host import NvtxFacts, annotation_table, processes, threads
from stepscope.importers.nsys.layout import GPU_TABLES, KERNEL, NVTX, OSRT, RUNTIME, Layout
from stepscope.importers.nsys.source import Export, open_export
from stepscope.importers.nsys.strings import Strings
from stepscope.progress import report as say_progress
from stepscope.schema_enums import SourceKind
from stepscope.store.manifest import Diagnostic, RankInfo
from stepscope.store.produce.bundle import RankBundle
from stepscope.store.writer import conform

META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 3.13+ / up to 3.1


def read_nsys(path: str | Path, *, first_rank: int = 0, release: bool = False
              ) -> Iterator[RankBundle]:
    """The export's ranks, one bundle at a time (the export stays open, and a decompressed
    copy of a gzipped one exists, until the iteration ends). ``release``: a bundle's tables are
    emptied when the next bundle is asked for (the import writes each rank before asking for the
    next, so only one rank's tables are ever in memory)."""
    name = str(path)
    export = open_export(path)
    try:
        for bundle in _bundles(export, name, first_rank):
            yield bundle
            if release and isinstance(bundle.tables, dict):
                bundle.tables.clear()
            del bundle
    finally:
        export.close()


def read_nsys_ranks(path: Path, *, first_rank: int) -> Iterator[RankBundle]:
    """``read_nsys`` as the import reads it (``registry``): each rank's tables released once the
    next is asked for."""
    return read_nsys(path, first_rank=first_rank, release=True)


def read_one(path: Path, *, default_rank: int) -> RankBundle:
    """An export of one GPU process as one bundle (``registry``'s per-file reader); an export
    of several is refused (``read_nsys`` reads each as a rank)."""
    got = list(read_nsys(path, first_rank=default_rank))
    if len(got) != 1:
        raise TraceFormatError(str(path), f"{len(got)} GPU processes in one export: import it "
                                          "with stepscope import, which reads each as a rank")
    return got[0]


def gpu_processes(export: Export) -> list[tuple[int, int]]:
    """``(first device, globalPid)`` of every process with GPU records, in rank order."""
    first: dict[int, int] = {}
    for table in GPU_TABLES:
        for t in export.scan(table, {"globalPid": I64, "deviceId": I64}):
            g = t.group_by("globalPid").aggregate([("deviceId", "min")])
            for gp, d in zip(g.column("globalPid").to_pylist(),
                             g.column("deviceId_min").to_pylist()):
                if gp is None:
                    continue
                d = d if d is not None else 1 << 30
                first[gp] = min(first.get(gp, d), d)
    return sorted(((d, gp) for gp, d in first.items()), key=lambda x: (x[0], pid_of(x[1])))


def _meta(export: Export) -> dict[str, str]:
    for table in META_TABLES:
        if {"name", "value"} <= set(export.columns(table)):
            out: dict[str, str] = {}
            for t in export.scan(table, {"name": STR, "value": STR}):
                for k, v in zip(t.column("name").to_pylist(), t.column("value").to_pylist()):
                    if k and v is not None:
                        out.setdefault(k, v)
            return out
    return {}


def _system(export: Export, key: str) -> str | None:
    if {"name", "value"} <= set(export.columns("TARGET_INFO_SYSTEM_ENV")):
        for t in export.scan("TARGET_INFO_SYSTEM_ENV", {"name": STR, "value": STR}):
            hit = t.filter(pc.equal(t.column("name"), key))
            if len(hit):
                v = hit.column("value")[0].as_py()
                return v if isinstance(v, str) else None
    return None


def _session_start(export: Export) -> int:
    for t in export.scan("TARGET_INFO_SESSION_START_TIME", {"utcEpochNs": I64}):
        vals = [v for v in t.column("utcEpochNs").to_pylist() if v]
        if vals:
            return int(vals[0])
    return 0


def _check(export: Export, name: str) -> None:
    if not export.columns(KERNEL):
        tables = [t for t in (RUNTIME, NVTX, "StringIds") if export.columns(t)]
        what = ("an Nsight Systems export without GPU kernels (CUPTI_ACTIVITY_KIND_KERNEL): "
                "profile with --trace=cuda") if tables else \
            "an SQLite database without Nsight Systems tables (no CUPTI_ACTIVITY_KIND_KERNEL)"
        raise TraceFormatError(name, what)
    if not export.columns("StringIds"):
        raise TraceFormatError(name, "an Nsight Systems export without its StringIds table")


def _bundles(export: Export, name: str, first_rank: int) -> Iterator[RankBundle]:
    _check(export, name)
    layout = Layout.of(export)
    strings = Strings(export, layout.strings)
    meta = _meta(export)
    offset = _session_start(export)
    hostname = _system(export, "Hostname") or meta.get("EXPORT_HOST")
    gpus = gpu_rows(export)
    procs = gpu_processes(export)
    if not procs:
        raise TraceFormatError(name, "an Nsight Systems export with no GPU kernels, copies "
                                     "or memsets recorded")
    version = meta.get("EXPORT_PRODUCT_VERSION") or meta.get("EXPORT_VERSION") or ""
    schema_version = meta.get("EXPORT_SCHEMA_VERSION", "")
    tool = "NVIDIA Nsight Systems" + (f" {version}" if version else "") + \
        f" ({export.kind} export" + (f", schema {schema_version})" if schema_version else ")")
    for i, (_, gp) in enumerate(procs):
        rank = first_rank + i
        s = Scope(global_pid=gp, pid=pid_of(gp), offset_ns=offset)
        say_progress(f"reading process {s.pid} of {Path(name).name}", i, len(procs))
        tables, facts, diags = _tables(export, layout, strings, s, gpus, hostname, name,
                                       first=i == 0)
        rank_info = RankInfo(rank=rank, host=hostname or "", pid=s.pid, file=name,
                             world_size=len(procs) if len(procs) > 1 else None)
        details: dict[str, Any] = {
            "file": name, "format": f"nsys-{export.kind}", "compressed": export.compressed,
            "nsys_version": version or None, "schema_version": schema_version or None,
            "rank_source": "process_order", "process": s.pid, "gpu_processes": len(procs),
            "session_start_utc_ns": offset or None,
            "rows": {k: v.num_rows for k, v in tables.items()}, **facts,
        }
        bundle = RankBundle(kind=SourceKind.NSYS, rank=rank_info,
                            tables={k: _rank(v, rank) for k, v in tables.items()},
                            diagnostics=tuple(diags), tool=tool, clock_offset_ns=offset,
                            details=details)
        del tables  # the bundle holds them alone (read_nsys may release them)
        yield bundle
        del bundle
    say_progress(f"reading {Path(name).name}", len(procs), len(procs))


def _tables(export: Export, layout: Layout, strings: Strings, s: Scope,
            gpus: list[dict[str, Any]], hostname: str | None, name: str, first: bool
            ) -> tuple[dict[str, pa.Table], dict[str, Any], list[Diagnostic]]:
    out: dict[str, pa.Table] = {}
    diags: list[Diagnostic] = []
    k = kernels(export, layout, strings, s)
    mc = memcpy(export, layout, s)
    ms = memset(export, layout, s)
    used: set[int] = set()
    for cols in (k, mc, ms):
        if cols:
            used.update(int(d) for d in pc.unique(cols["device"].drop_null()).to_pylist())
    devices = device_table(export, s, used, gpus)
    if devices:
        out["devices"] = conform("devices", devices)
        if first and all(v is None for v in devices["sm_count"]):  # said once per file
            diags.append(Diagnostic("info", "no_device_properties", (
                "the export has no TARGET_INFO_GPU table: the GPUs are known by index only "
                "(no occupancy limits, no peak bandwidth)"), name))
    streams = stream_table(export, s, (k, mc, ms))
    if streams:
        out["streams"] = conform("streams", streams)
    for table, cols in (("kernels", k), ("memcpy", mc), ("memset", ms),
                        ("sync", sync(export, layout, s)),
                        ("api_calls", api_calls(export, strings, s))):
        if cols:
            out[table] = conform(table, cols)
    nvtx = NvtxFacts()
    ann = annotation_table(export, layout, strings, s, nvtx)
    if ann:
        out["annotations"] = conform("annotations", ann)
    th = threads(export, strings, s)
    if th:
        out["threads"] = conform("threads", th)
    out["processes"] = conform("processes", processes(export, s, hostname))
    if "kernels" in out and "api_calls" in out:
        unlaunched = _unlaunched(out["kernels"], out["api_calls"])
        if unlaunched:
            diags.append(Diagnostic("info", "kernels_without_launch", (
                f"process {s.pid}: {unlaunched} kernel(s) have no launching call in the export "
                "(launched before its window began, or the call was not traced): kept without "
                "a launch"),
                name, unlaunched))
    facts: dict[str, Any] = {
        "nvtx_domains": {nvtx.domains.get(d, "default" if d == 0 else str(d)): n
                         for d, n in sorted(nvtx.by_domain.items())},
        "nvtx_other_events": nvtx.other_events,
        "os_runtime": bool(export.columns(OSRT)),
    }
    return out, facts, diags


def _unlaunched(kernels: pa.Table, calls: pa.Table) -> int:
    corr = calls.column("correlation").drop_null()
    have = pc.is_in(kernels.column("correlation"), value_set=pc.unique(corr))
    return int(len(kernels) - pc.sum(pc.fill_null(have, False).cast(I64)).as_py()) \
        if len(kernels) else 0


def _rank(t: pa.Table, rank: int) -> pa.Table:
    i = t.schema.get_field_index("rank")
    return t.set_column(i, "rank", pa.repeat(pa.scalar(rank, I32), t.num_rows)) if i >= 0 else t


__all__ = ["gpu_processes", "read_nsys", "read_nsys_ranks", "read_one"]
