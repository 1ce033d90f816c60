"""One process's host-side tables from an nsys export: ``annotations`` (NVTX push/pop and
start/end ranges; OS runtime calls from ``OSRT_API`` where the capture traced them), ``threads``
(``ThreadNames``) and ``processes`` (``PROCESSES``).

An NVTX range's text is in ``NVTX_EVENTS.text`` or behind ``textId`` in ``StringIds``; both occur
in one file. Ranges nest per thread (NVTX and OS runtime calls separately: an OS call never
becomes the parent of an NVTX range). NVTX marks and thread/domain naming events are not ranges
and are not imported; domain names are counted for the run's details.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.importers.nsys.columns import (
    I64,
    STR,
    Scope,
    concat,
    gather,
    pid_of,
    pids_of,
    tid_of,
    times,
)
from stepscope.importers.nsys.layout import NVTX, OSRT, Layout
from stepscope.importers.nsys.source import Export
from stepscope.importers.nsys.strings import Strings
from stepscope.schema_enums import AnnotationSource
from stepscope.store.produce.nesting import nest

Columns = dict[str, pa.Array]
UNNAMED_RANGE = "(unnamed range)"


@dataclass
class NvtxFacts:
    """What the NVTX scan saw besides its ranges (for the run's details)."""

    domains: dict[int, str] = field(default_factory=dict)
    by_domain: Counter[int] = field(default_factory=Counter)
    other_events: int = 0  # marks, thread names, domain creation ...


def annotation_table(export: Export, layout: Layout, strings: Strings, s: Scope,
                facts: NvtxFacts) -> Columns | None:
    parts = [p for p in (_nvtx(export, layout, strings, s, facts), _osrt(export, strings, s))
             if p]
    cols = concat(parts)
    if not cols:
        return None
    ts = cols["ts_ns"].to_numpy()
    dur = cols["dur_ns"].to_numpy()
    # one nesting group per thread and source (ints, not tuples: a million ranges are common)
    osrt = pc.equal(cols["source"], AnnotationSource.OS_RUNTIME.value).to_numpy(
        zero_copy_only=False)
    group = cols["tid"].to_numpy(zero_copy_only=False) * 2 + osrt
    parent, depth = nest(group.tolist(), ts, dur)
    ids = np.arange(len(ts), dtype=np.int64)  # rows are sorted by start: ids follow it
    cols["id"] = pa.array(ids)
    cols["parent_id"] = pa.array(parent, mask=parent < 0)
    cols["depth"] = pa.array(depth)
    return cols


def _nvtx(export: Export, layout: Layout, strings: Strings, s: Scope,
          facts: NvtxFacts) -> Columns | None:
    cols = export.columns(NVTX)
    if not cols:
        return None
    want = {"start": I64, "end": I64, "eventType": I64, "text": STR, "textId": I64,
            "globalTid": I64, "domainId": I64}
    ranges = pa.array(layout.nvtx_ranges, I64)

    def build(t: pa.Table) -> Columns | None:
        kind = t.column("eventType")
        text = pc.coalesce(t.column("text").combine_chunks(), strings.take(t.column("textId")))
        created = pc.equal(kind, layout.nvtx_domain_create).combine_chunks()
        for d, name in zip(t.column("domainId").filter(created).to_pylist(),
                           text.filter(pc.fill_null(created, False)).to_pylist()):
            if d is not None and name:
                facts.domains[int(d)] = name
        keep = pc.and_(pc.fill_null(pc.is_in(kind, ranges), False), pc.is_valid(t.column("end")))
        keep = pc.fill_null(keep, False)
        facts.other_events += len(t) - pc.sum(keep.cast(I64)).as_py() if len(t) else 0
        t, text = t.filter(keep), text.filter(keep)
        if not len(t):
            return None
        facts.by_domain.update(pc.fill_null(t.column("domainId"), 0).to_pylist())
        ts, dur = times(t, s.offset_ns)
        gtid = t.column("globalTid").combine_chunks()
        return {"ts_ns": ts, "dur_ns": dur, "pid": pids_of(gtid), "tid": tid_of(gtid),
                "name": pc.fill_null(text, UNNAMED_RANGE),
                "source": pa.repeat(pa.scalar(AnnotationSource.NVTX.value), len(t)).cast(STR)}

    return gather(export, NVTX, want, s.key("globalTid"), build)


def _osrt(export: Export, strings: Strings, s: Scope) -> Columns | None:
    if "nameId" not in export.columns(OSRT):
        return None
    want = {"start": I64, "end": I64, "globalTid": I64, "nameId": I64}

    def build(t: pa.Table) -> Columns:
        ts, dur = times(t, s.offset_ns)
        gtid = t.column("globalTid").combine_chunks()
        return {"ts_ns": ts, "dur_ns": dur, "pid": pids_of(gtid), "tid": tid_of(gtid),
                "name": strings.names(t.column("nameId"), "(unnamed call)"),
                "source": pa.repeat(pa.scalar(AnnotationSource.OS_RUNTIME.value),
                                    len(t)).cast(STR)}

    return gather(export, OSRT, want, s.key("globalTid"), build)


def threads(export: Export, strings: Strings, s: Scope) -> Columns | None:
    if "globalTid" not in export.columns("ThreadNames"):
        return None
    want = {"globalTid": I64, "nameId": I64}

    def build(t: pa.Table) -> Columns:
        gtid = t.column("globalTid").combine_chunks()
        return {"pid": pids_of(gtid), "tid": tid_of(gtid), "name": strings.take(t.column("nameId"))}

    cols = gather(export, "ThreadNames", want, s.key("globalTid"), build)
    if not cols:
        return None
    seen: dict[int, int] = {}  # one row per thread: the last name given
    for i, tid in enumerate(cols["tid"].to_pylist()):
        seen[tid] = i
    take = pa.array(sorted(seen.values()), I64)
    return {k: v.take(take) for k, v in cols.items()}


def processes(export: Export, s: Scope, host: str | None) -> Columns:
    name = None
    if "globalPid" in export.columns("PROCESSES"):
        for t in export.scan("PROCESSES", {"globalPid": I64, "name": STR}, s.key("globalPid")):
            for gp, nm in zip(t.column("globalPid").to_pylist(), t.column("name").to_pylist()):
                if gp is not None and pid_of(gp) == s.pid and nm:
                    name = nm
    return {"pid": pa.array([s.pid], I64), "name": pa.array([name], STR),
            "host": pa.array([host], STR)}


__all__ = ["NvtxFacts", "annotation_table", "processes", "threads"]
