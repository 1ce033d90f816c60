"""Decode what a captured process kept raw into Parquet chunks of its staging partition, before
the merge reads the partition: the ``cupti`` backend's records (``capture.cupti.spill``) and the
``torch`` backend's Kineto trace (``capture.torch_backend``), read by the ``TraceReader`` the
merge's caller gives (the Kineto importer's: capture does not import importers).

Runs in whichever process merges (``stepscope record`` after the program ended, or the end of
``stepscope.record()``'s block), never inside the capture window. The records are clipped to the
window the partition's meta names (the window's start is written when it opens, so a process
killed mid-window still has one); what decoding found is added to that meta (the GPU backend's
settings and diagnostics), and the raw files are removed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.capture.chunks import clip
from stepscope.capture.staging import META_NAME, PartitionMeta, StagingPartition
from stepscope.capture.torch_backend import TRACE_GLOB, trace_tables
from stepscope.store.manifest import Diagnostic
from stepscope.store.produce import TraceReader

GROUP_BYTES = 64 << 20  # raw bytes decoded per chunk written (and per progress report)


def raw_bytes(folder: Path) -> int:
    """The size of ``folder``'s raw record files (what decoding it reads)."""
    try:
        return sum(p.stat().st_size for p in folder.glob("cupti.*.bin") if p.is_file())
    except OSError:
        return 0


def materialize(folder: Path, progress: Callable[[float], None] | None = None, *,
                read_trace: TraceReader | None = None) -> bool:
    """Decode what ``folder`` kept raw, if anything; True when it had. ``progress``: told the
    raw CUPTI bytes decoded so far (roughly: a group of ``GROUP_BYTES`` at a time);
    ``read_trace``: reads a ``torch`` backend's Kineto trace."""
    traces = sorted(folder.glob(TRACE_GLOB))
    if traces:
        _import_traces(folder, traces, read_trace)
    return _decode_cupti(folder, progress) or bool(traces)


def _import_traces(folder: Path, traces: list[Path], read: TraceReader | None) -> None:
    """The ``torch`` backend's traces as chunks (``torch_backend.trace_tables``), what reading
    them found in the partition's meta, and the trace files removed; without a reader, the
    traces stay and a diagnostic says the run lacks their GPU records."""
    meta = _read_meta(folder)
    part = StagingPartition(folder, prefix="kineto")
    settings = dict(meta.settings) if meta is not None else {}
    diags: list[Diagnostic] = []
    gpu = dict(settings.get("gpu", {})) if isinstance(settings.get("gpu"), dict) else {}
    if read is None:
        diags.append(Diagnostic("error", "torch_trace_not_read", "the torch backend's trace "
                                "was not read (the merge was given no trace reader): this "
                                "process's GPU records are missing"))
    else:
        t0 = time.perf_counter()
        events = 0
        lo, hi = _int(settings.get("window_start_ns")), _int(settings.get("window_end_ns"))
        for path in traces:
            tables, found, n = trace_tables(read, path, _staged_devices(folder))
            part.write_chunk(tables if lo is None else clip(tables, lo, hi))  # as raw records
            diags.extend(found)
            events += n
            path.unlink(missing_ok=True)
        gpu.update(events=events, import_s=round(time.perf_counter() - t0, 4),
                   decoded="at merge")
    if meta is not None:
        settings["gpu"] = gpu
        part.write_meta(replace(meta, settings=settings, diagnostics=(*meta.diagnostics, *diags)))


def _staged_devices(folder: Path) -> dict[int, dict[str, Any]]:
    """device -> the ``devices`` row the process staged (the driver's)."""
    rows: dict[int, dict[str, Any]] = {}
    for f in sorted(folder.glob("devices.*.parquet")):
        try:
            for r in pq.read_table(f).to_pylist():
                rows.setdefault(int(r["device"]), r)
        except (OSError, pa.ArrowInvalid):
            continue
    return rows


def _decode_cupti(folder: Path, progress: Callable[[float], None] | None) -> bool:
    from stepscope.capture.cupti.raw import RawResult, decode_folder, has_raw, raw_files

    if not has_raw(folder):
        return False
    meta = _read_meta(folder)
    settings = dict(meta.settings) if meta is not None else {}
    lo, hi = settings.get("window_start_ns"), settings.get("window_end_ns")
    part = StagingPartition(folder, prefix="gpu")
    total = raw_bytes(folder)
    groups = [0]

    def write(tables: dict[str, Any]) -> int:
        rows = part.write_chunk(tables)
        groups[0] += 1
        if progress is not None:
            progress(float(min(total, groups[0] * GROUP_BYTES)))
        return rows

    try:
        result = decode_folder(folder, _int(lo), _int(hi), write, group_bytes=GROUP_BYTES)
    except Exception as exc:  # damaged records must not cost the rest of the run
        result = RawResult(0, 0, 0, 0.0, diagnostics=(Diagnostic(
            "error", "cupti_raw_decode_failed",
            f"decoding this process's raw CUPTI records failed ({exc!r}): part or all of its "
            "GPU records are missing"),))
    if meta is not None:
        gpu = settings.get("gpu", {})
        if isinstance(gpu, dict):
            settings["gpu"] = {**gpu, "records_decoded": result.records, "raw_frames": result.frames,
                               "decode_s": result.decode_s, "decoded": "at merge",
                               "cupti_overhead_ns": result.cupti_overhead_ns}
        part.write_meta(replace(meta, settings=settings,
                                diagnostics=(*meta.diagnostics, *result.diagnostics)))
    for f in raw_files(folder):
        f.unlink(missing_ok=True)
    if progress is not None:
        progress(float(total))
    return True


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) else None


def _read_meta(folder: Path) -> PartitionMeta | None:
    try:
        return PartitionMeta.from_dict(json.loads((folder / META_NAME).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no meta (killed before its first write): read_partition makes one up


__all__ = ["materialize"]
