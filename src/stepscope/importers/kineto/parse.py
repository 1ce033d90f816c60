"""Import a PyTorch profiler (Kineto) Chrome trace into the run tables.

One file is one rank. Times in the file are microseconds relative to
``baseTimeNanoseconds`` (or epoch microseconds when it is absent); tables get
integer Unix nanoseconds. ``reader`` decodes the file (fast, in chunks),
``build`` and ``tables`` map the categories onto tables.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from stepscope.errors import DamagedFileError, TraceFormatError
from stepscope.importers.kineto.build import (
    IGNORED_CATEGORIES,
    TABLE_CATEGORIES,
    NeedFlows,
    TableBuilder,
    vendor,
)
from stepscope.importers.kineto.columns import arrow
from stepscope.importers.kineto.events import TraceDoc
from stepscope.importers.kineto.native import Scanned
from stepscope.importers.kineto.reader import CHUNK_BYTES, EventReader, SplitFailed
from stepscope.importers.kineto.scanned import add_chunk
from stepscope.importers.kineto.trace_file import JAX_JSON_PROBLEM, load_bytes
from stepscope.progress import report as say_progress
from stepscope.schema_enums import SourceKind
from stepscope.store.manifest import Diagnostic, RankInfo
from stepscope.store.produce.bundle import RankBundle
from stepscope.store.writer import conform


def parse_kineto(path: str | Path, *, default_rank: int,
                 chunk_bytes: int = CHUNK_BYTES, native: bool | None = None) -> RankBundle:
    """Read one Kineto trace (``.json`` or gzip, by content) as one rank's bundle: its tables
    (schema-conformed Arrow) and what the manifest needs (``tool``, ``clock_offset_ns``,
    ``details``).

    ``default_rank`` is used when the file has no ``distributedInfo.rank``. ``native``:
    use the compiled scanner for the chunks it can read (default: when it is built and
    ``STEPSCOPE_KINETO_NATIVE`` is not ``0``; the tables are the same either way).
    Raises ``TraceFormatError`` when the file cannot be used at all; events that
    cannot be used are dropped and reported in ``diagnostics``.
    """
    p = Path(path)
    name = str(p)
    loaded = load_bytes(p)
    try:
        read = None
        try:
            read = _read(loaded.data, name, chunk_bytes, flows=False, native=native)
        except NeedFlows:  # an old trace: start over (below), decoding the flows too
            pass
        except RecursionError:
            raise DamagedFileError(name, "invalid JSON (nested too deeply to be read)") from None
        # Outside the except clause: the first attempt's traceback (whose frames still hold
        # views of a mapped file, which would then not close) is gone by now.
        try:
            reader, builder = read or _read(loaded.data, name, chunk_bytes, flows=True,
                                            native=native)
        except RecursionError:
            raise DamagedFileError(name, "invalid JSON (nested too deeply to be read)") from None
    finally:
        loaded.close()
    doc = reader.meta
    _check_is_kineto(doc, builder, name, len(reader.skipped))
    _check_numbers(doc, name)
    base = doc.baseTimeNanoseconds or 0
    tables = builder.finish(base, doc.deviceProperties)
    diags = reader.diagnostics + builder.drops.diagnostics()
    unknown = {k: n for k, n in builder.categories.items()
               if k and k not in TABLE_CATEGORIES and k not in IGNORED_CATEGORIES}
    if unknown:
        total = sum(unknown.values())
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(unknown.items(), key=lambda kv: -kv[1]))
        diags.append(Diagnostic("info", "unknown_category",
                                f"{total} event(s) of categories stepscope does not import were "
                                f"skipped: {listed}", name, total))
    mtia = builder.categories.get("mtia_ccp_events", 0)
    if mtia:
        diags.append(Diagnostic("warning", "device_events_skipped",
                                f"{mtia} MTIA device event(s) (mtia_ccp_events) were not "
                                "imported: stepscope reads CUDA and ROCm GPU activity, so this "
                                "trace has no device time (GPU busy, kernels) in the report",
                                name, mtia))
    if not builder.events:
        diags.append(Diagnostic("warning", "empty_trace", "the trace has no events", name))
    dist = doc.distributedInfo
    rank = dist.rank if dist is not None and dist.rank is not None else default_rank
    has_rank = dist is not None and dist.rank is not None
    info = RankInfo(rank=rank, pid=builder.host_pid, file=name,
                    world_size=dist.world_size if dist is not None else None,
                    backend=(dist.backend or "") if dist is not None else "")
    vend = vendor(doc.deviceProperties[0]) if doc.deviceProperties else "unknown"
    details: dict[str, Any] = {
        "file": name, "bytes": loaded.size, "compressed": loaded.compressed,
        "events": builder.events, "categories": dict(sorted(builder.categories.items())),
        "rank_source": "distributedInfo" if has_rank else "file_order",
        "base_time_ns": doc.baseTimeNanoseconds, "trace_id": doc.trace_id,
        "schema_version": doc.schemaVersion, "display_time_unit": doc.displayTimeUnit,
        "with_stack": _flag(doc.with_stack), "profile_memory": _flag(doc.profile_memory),
        "record_shapes": _flag(doc.record_shapes), "vendor": vend,
        "nccl_version": dist.nccl_version if dist is not None else None,
    }
    return RankBundle(
        kind=SourceKind.KINETO,
        tables={k: _conformed(k, cols, rank) for k, cols in tables.items()},
        rank=info, diagnostics=tuple(diags), clock_offset_ns=base,
        tool=_tool(doc, vend), details=details)


def _read(data: bytes | bytearray | mmap.mmap, name: str, chunk_bytes: int,
          flows: bool, native: bool | None) -> tuple[EventReader, TableBuilder]:
    """Decode and build, in chunks (else, when the file cannot be split, whole)."""
    try:
        reader = EventReader(data, name, chunk_bytes=chunk_bytes, flows=flows, native=native)
        builder = TableBuilder(name, flows=flows)
        what, total = f"reading {Path(name).name}", len(data)
        for index, events in reader.chunks():
            if isinstance(events, Scanned):
                add_chunk(builder, index, events, reader.skipped)
            else:
                builder.add(index, events, reader.skipped)
            del events
            say_progress(what, reader.at, total)
        say_progress(what, total, total)
        return reader, builder
    except SplitFailed:  # start over (below, outside this clause) with one whole decode
        pass
    reader = EventReader(data, name, flows=flows)
    builder = TableBuilder(name, flows=flows)
    for index, events in reader.whole():
        builder.add(index, events, reader.skipped)
        del events
    return reader, builder


def _conformed(table: str, cols: dict[str, Any], rank: int) -> pa.Table:
    """Columns -> the table's schema (numpy columns as zero-copy Arrow, rank filled in)."""
    data = {c: arrow(v) if isinstance(v, np.ndarray) else v for c, v in cols.items()}
    n = len(next(iter(data.values()))) if data else 0
    data["rank"] = arrow(np.full(n, rank, dtype=np.int32))
    return conform(table, data)


def _check_is_kineto(doc: TraceDoc, builder: TableBuilder, path: str, skipped: int) -> None:
    """A JAX/TensorFlow or other Chrome trace has none of Kineto's categories or keys."""
    if any(k in TABLE_CATEGORIES or k in IGNORED_CATEGORIES for k in builder.categories):
        return
    if doc.schemaVersion is not None or doc.deviceProperties is not None \
            or doc.baseTimeNanoseconds is not None or doc.distributedInfo is not None:
        return
    procs = [e.args.name or "" for e in builder.metadata if e.name == "process_name"]
    if any(p.startswith(("/device:", "/host:")) for p in procs):
        raise TraceFormatError(path, JAX_JSON_PROBLEM)
    if not builder.events:
        if skipped:
            raise TraceFormatError(path, f"none of its {skipped} events could be read as trace "
                                         "events, and there is no PyTorch profiler metadata")
        raise TraceFormatError(path, "not a trace: 'traceEvents' is empty and there is no "
                                     "PyTorch profiler metadata")
    raise TraceFormatError(path, "a Chrome trace-event file without PyTorch profiler (Kineto) "
                                 "events; stepscope imports torch.profiler traces")


MAX_RANK = (1 << 31) - 1  # the tables' rank column is int32
MAX_BASE_NS = 1 << 62  # with times up to kineto_columns.MAX_US added, still within int64


def _check_numbers(doc: TraceDoc, path: str) -> None:
    """The top-level numbers that every row depends on: a rank or a base time that is out of
    range would overflow (a traceback) or shift every timestamp (a wrong report)."""
    dist = doc.distributedInfo
    if dist is not None and dist.rank is not None and not 0 <= dist.rank <= MAX_RANK:
        raise TraceFormatError(path, f"distributedInfo.rank {dist.rank} is not a rank "
                                     f"(0 to {MAX_RANK})")
    if dist is not None and dist.world_size is not None and not 0 < dist.world_size <= 1 << 31:
        raise TraceFormatError(path, f"distributedInfo.world_size {dist.world_size} is out of "
                                     "range")
    base = doc.baseTimeNanoseconds
    if base is not None and not 0 <= base <= MAX_BASE_NS:
        raise TraceFormatError(path, f"baseTimeNanoseconds {base} is out of range "
                                     f"(0 to {MAX_BASE_NS})")


def _flag(v: int | bool | None) -> bool | None:
    return None if v is None else bool(v)


def _tool(doc: TraceDoc, vendor: str) -> str:
    parts = ["PyTorch profiler (Kineto)"]
    if doc.cupti_version:
        parts.append(f"CUPTI {doc.cupti_version}")
    if doc.cuda_runtime_version:
        parts.append(f"CUDA runtime {doc.cuda_runtime_version}")
    if vendor == "amd" and not doc.cupti_version:
        parts.append("ROCm")
    return ", ".join(parts)
