"""Assemble the run tables of one Kineto file from its event chunks.

Each chunk of decoded events is grouped by category and turned into columns
at once (the events are then dropped); the few events that need the whole file
(annotations, metadata) are kept until :meth:`TableBuilder.finish`. Times stay
relative to ``baseTimeNanoseconds`` until the end, because Kineto writes that
key after the events.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import stepscope.importers.kineto.comms as comms
import stepscope.importers.kineto.tables as kt
from stepscope.importers.kineto.columns import Drops, Timed, timed
from stepscope.importers.kineto.events import DeviceProps, Event
from stepscope.importers.kineto.fast import Decoders
from stepscope.schema_enums import AnnotationSource, ApiDomain, CpuOpKind
from stepscope.store.produce.devices import DeviceProperties, device_row
from stepscope.store.produce.devices import device_columns as device_columns_of

API_CATEGORIES: dict[str, ApiDomain] = {
    "cuda_runtime": ApiDomain.RUNTIME, "cuda_driver": ApiDomain.DRIVER,
    "xpu_runtime": ApiDomain.RUNTIME, "mtia_runtime": ApiDomain.RUNTIME,
    "privateuse1_runtime": ApiDomain.RUNTIME, "privateuse1_driver": ApiDomain.DRIVER,
}
CPU_OP_CATEGORIES: dict[str, CpuOpKind] = {
    "cpu_op": CpuOpKind.FRAMEWORK, "operator": CpuOpKind.FRAMEWORK,
    "Operator": CpuOpKind.FRAMEWORK, "python_function": CpuOpKind.PYTHON,
}
GPU_TABLES = (("kernel", "kernels", kt.kernels), ("gpu_memcpy", "memcpy", kt.memcpy),
              ("gpu_memset", "memset", kt.memset), ("cuda_sync", "sync", kt.sync))
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
# torch 1.8/1.9 (Kineto before late 2021) wrote these categories capitalised: read as today's
CATEGORY_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
                    "Runtime": "cuda_runtime"}
TABLE_CATEGORIES = frozenset(
    {"user_annotation", "cpu_instant_event", *GPU_CATEGORIES, *API_CATEGORIES, *CPU_OP_CATEGORIES,
     *CATEGORY_ALIASES})
# Kineto categories with nothing to import (flows link by correlation already).
IGNORED_CATEGORIES = frozenset({
    "Trace", "ac2g", "fwdbwd", "overhead", "external_correlation", "cuda_profiler_range",
    "glow_runtime", "gpu_pm_counter", "mtia_ccp_events",
})
_PH, _PID = attrgetter("ph"), attrgetter("pid")
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")

_CODES: dict[type, int] = {}  # fast-decode class -> its code in bucket()
_CATS: list[str] = []  # code -> category


@functools.cache
def decoders(flows: bool = False) -> Decoders:
    """The fast decode (fast): one Struct per category, with what its table uses.
    ``ac2g`` flows are only needed for GPU events without a correlation id (old traces):
    decoded with ``flows``, else only counted (:class:`NeedFlows`)."""
    d = Decoders(
        full=(*GPU_CATEGORIES, "user_annotation", *API_CATEGORIES, *CATEGORY_ALIASES),
        ops=tuple(c for c, k in CPU_OP_CATEGORIES.items() if k is CpuOpKind.FRAMEWORK),
        python=tuple(c for c, k in CPU_OP_CATEGORIES.items() if k is CpuOpKind.PYTHON),
        memory=("cpu_instant_event",), flows=("ac2g",) if flows else (),
        skipped=tuple(sorted(IGNORED_CATEGORIES - ({"ac2g"} if flows else set()))))
    for cat, cls in d.classes.items():
        _CODES[cls] = len(_CATS)
        _CATS.append(cat)
    return d


class NeedFlows(Exception):
    """GPU events without a correlation id: read the file again, with the flows."""


def bucket(events: list[Event]) -> dict[str, list[Event]]:
    """Events by category (``""`` for none: metadata and global instants), in
    file order. Consumers pick the phases they need (:func:`phase`).

    Events from the fast decode are grouped by their class (a stable sort of
    class codes, no Python loop); a chunk holding generic :class:`Event` objects
    (the decode's fallback) is grouped event by event."""
    n = len(events)
    try:
        codes = np.fromiter(map(_CODES.__getitem__, map(type, events)), np.int16, n)
    except KeyError:
        return _bucket_by_cat(events)
    counts = np.bincount(codes, minlength=len(_CATS))
    order = np.argsort(codes, kind="stable").tolist()
    get = events.__getitem__
    out: dict[str, list[Event]] = {}
    start = 0
    for code in np.flatnonzero(counts).tolist():
        end = start + int(counts[code])
        out[_CATS[code]] = list(map(get, order[start:end]))
        start = end
    return out


def _bucket_by_cat(events: list[Event]) -> dict[str, list[Event]]:
    out: defaultdict[str | None, list[Event]] = defaultdict(list)
    for e in events:
        out[e.cat].append(e)
    merged: dict[str, list[Event]] = {cat: b for cat, b in out.items() if cat}
    uncategorized = [e for cat in (None, "") for e in out.get(cat, ())]
    if uncategorized:
        merged[""] = uncategorized
    return merged


def phase(events: list[Event] | None, *phases: str, drops: Drops | None = None) -> list[Event]:
    """The events with one of ``phases`` (the list itself when all are); ``drops`` counts the
    events without a phase (``ph``) that are dropped."""
    if not events:
        return []
    if set(map(_PH, events)).issubset(phases):
        return events
    if drops is not None:
        drops.add("missing_ph", events, np.fromiter((not e.ph for e in events), bool, len(events)),
                  "without a phase ('ph')")
    return [e for e in events if e.ph in phases]


def fill_correlation_from_flows(buckets: dict[str, list[Event]], flows: bool) -> None:
    """Old traces: a GPU event without ``args.correlation`` gets the id of the
    ``ac2g`` flow that ends on it (same pid, tid and ts; Kineto writes the flow
    next to the event, so both are in the same chunk). Raises :class:`NeedFlows`
    when there is one and the flows were not decoded."""
    missing = [e for cat in ("kernel", "gpu_memcpy", "gpu_memset") for e in buckets.get(cat, ())
               if e.args.correlation is None]
    if not missing:
        return
    if not flows:
        raise NeedFlows
    ids = {(e.pid, e.tid, e.ts): e.id for e in phase(buckets.get("ac2g"), "f")
           if e.id is not None}
    for e in missing:
        fid = ids.get((e.pid, e.tid, e.ts))
        if fid is None:
            continue
        e.args = msgspec.structs.replace(e.args, correlation=fid)


class TableBuilder:
    """Columns of one file's tables, fed chunk by chunk."""

    def __init__(self, path: str, *, flows: bool = False) -> None:
        self.flows = flows  # the events were decoded with their flows (decoders(flows=True))
        self.drops = Drops(path)
        self.parts: defaultdict[str, list[kt.Columns]] = defaultdict(list)
        self.user: list[Timed] = []
        self.gpu_user: list[Timed] = []
        self.metadata: list[Event] = []
        self.gpu_pids: set[Any] = set()
        self.categories: Counter[str] = Counter()
        self.events = 0
        self.host_pid: int | None = None
        self.comm: list[Event] = []  # communication calls' events (kineto.comms)

    def add(self, index: int, events: list[Event], skipped: Sequence[int] = ()) -> None:
        """Turn one chunk of events (the first is event ``index`` of the file) into
        columns; ``skipped`` are the file indices of events the decoder dropped."""
        self.drops.set_chunk(index, events, skipped)
        self.events += len(events)
        buckets = bucket(events)
        self.categories.update({k: len(v) for k, v in buckets.items()})
        for old, new in CATEGORY_ALIASES.items():
            if old in buckets:
                buckets[new] = buckets.get(new, []) + buckets.pop(old)
        fill_correlation_from_flows(buckets, self.flows)
        self.comm += comms.calls_of(buckets)

        def x(cat: str) -> Timed:
            return timed(phase(buckets.get(cat), "X", drops=self.drops), 0, self.drops)

        for cat, table, build in GPU_TABLES:
            if cat in buckets:
                t = x(cat)
                if t.events:
                    self.parts[table].append(build(t))
        self.parts["api_calls"] += kt.api_calls(
            [(x(c), d) for c, d in API_CATEGORIES.items() if c in buckets])
        self.parts["cpu_ops"] += kt.cpu_ops(
            [(x(c), k) for c, k in CPU_OP_CATEGORIES.items() if c in buckets])
        mem = [e for e in phase(buckets.get("cpu_instant_event"), "i", "I") if e.name == "[memory]"]
        memory = kt.memory_events(timed(mem, 0, self.drops, instant=True)) if mem else None
        if memory is not None:
            self.parts["memory_events"].append(memory)
        for cat, keep in (("user_annotation", self.user), ("gpu_user_annotation", self.gpu_user)):
            if cat in buckets:
                keep.append(x(cat))
        self.metadata.extend(phase(buckets.get(""), "M"))
        for cat in GPU_CATEGORIES:
            if cat in buckets:
                self.gpu_pids.update(map(_PID, buckets[cat]))
        self.drops.set_chunk(index, ())  # let the chunk's events go

    def finish(self, base_ns: int, devices: Sequence[DeviceProps] | None) -> dict[str, kt.Columns]:
        """All tables (times shifted by ``base_ns`` onto the Unix clock)."""
        out = {name: kt.concat(chunks) for name, chunks in self.parts.items() if chunks}
        self.parts.clear()
        if "cpu_ops" in out and not any(_PROFILER_STEP.match(e.name)
                                        for t in self.user for e in t.events):
            self.user.append(_steps_from_ops(out))
        for table, column, first in (("api_calls", "domain", ApiDomain.RUNTIME.value),
                                     ("cpu_ops", "kind", CpuOpKind.FRAMEWORK.value)):
            if table in out:  # several categories: one time order, whatever the chunking
                cols = out[table]
                later = pc.not_equal(kt.plain(cols[column]), pa.scalar(first, pa.string())).to_numpy(zero_copy_only=False)
                out[table] = kt.take(cols, np.lexsort((later, cols["ts_ns"])))
        if "kernels" in out:
            k = out["kernels"]
            k["queued_ns"] = kt.queued_ns(k["ts_ns"] + base_ns, k.pop("_queued_us"))
        ann, steps = kt.annotation_tables(_concat_timed(self.user), _concat_timed(self.gpu_user))
        for table, built in (("annotations", ann), ("steps", steps)):
            if built is not None:
                out[table] = built
        waits = kt.input_waits([ann, out.get("cpu_ops")])
        if waits is not None:
            out["input_waits"] = waits
        if base_ns:
            for cols in out.values():
                if "ts_ns" in cols:
                    cols["ts_ns"] = cols["ts_ns"] + np.int64(base_ns)
        coll = comms.collective_columns(self.comm, base_ns)
        self.comm = []
        if coll is not None:
            out["collectives"] = coll
        procs, threads, stream_names = self._processes_threads()
        if procs:
            out["processes"] = {"pid": [p for p, _ in procs], "name": [n for _, n in procs]}
        if threads:
            out["threads"] = {"pid": [p for p, _, _ in threads], "tid": [t for _, t, _ in threads],
                              "name": [n for _, _, n in threads]}
        st = kt.streams([out[t] for t in ("kernels", "memcpy", "memset") if t in out], stream_names)
        if st is not None:
            out["streams"] = st
        if devices:
            out["devices"] = device_columns(devices)
        self.host_pid = host_pid(out, procs)
        return out

    def _processes_threads(self) -> tuple[
            list[tuple[int, str]], list[tuple[int, int, str]], dict[tuple[int, int], str]]:
        """Host processes and threads; GPU 'processes' (devices) give stream names."""
        gpu_pids = set(self.gpu_pids)
        names: dict[int, str] = {}
        threads: dict[tuple[int, int], str] = {}
        for e in self.metadata:
            a = e.args
            if not isinstance(e.pid, int) or isinstance(e.pid, bool):
                continue
            if e.name == "process_labels" and (a.labels or "").startswith("GPU"):
                gpu_pids.add(e.pid)
            elif e.name == "process_name" and a.name is not None:
                names[e.pid] = a.name
            elif e.name == "thread_name" and a.name is not None and isinstance(e.tid, int):
                threads[(e.pid, e.tid)] = a.name
        procs = [(pid, nm) for pid, nm in sorted(names.items()) if pid not in gpu_pids]
        host_threads = [(pid, tid, nm) for (pid, tid), nm in sorted(threads.items())
                        if pid not in gpu_pids]
        streams = {k: v.strip() for k, v in threads.items() if k[0] in gpu_pids}
        return procs, host_threads, streams


def _steps_from_ops(out: dict[str, kt.Columns]) -> Timed:
    """torch 1.8/1.9 wrote ``ProfilerStep#N`` as an op (category ``Operator``), today's
    torch as a ``user_annotation``: such ops leave ``cpu_ops`` and become the step
    annotations (the same tables as a new trace's)."""
    ops = out["cpu_ops"]
    names = ops["name"]
    if not pa.types.is_dictionary(names.type):
        names = names.dictionary_encode()
    hits = pc.match_substring_regex(names.dictionary, _PROFILER_STEP.pattern)
    if not pc.any(hits).as_py():
        return Timed([], np.zeros(0, np.int64), np.zeros(0, np.int64))
    is_step = pc.fill_null(hits.take(names.indices), False).to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(is_step)
    sel = kt.take(ops, idx)
    out["cpu_ops"] = kt.take(ops, np.flatnonzero(~is_step))
    events = [Event(ph="X", cat="Operator", name=n, pid=p, tid=t) for n, p, t in zip(
        kt.plain(sel["name"]).to_pylist(), sel["pid"].to_pylist(), sel["tid"].to_pylist())]
    return Timed(events, np.asarray(sel["ts_ns"]), np.asarray(sel["dur_ns"]))


def _concat_timed(parts: list[Timed]) -> Timed:
    if len(parts) == 1:
        return parts[0]
    return Timed([e for p in parts for e in p.events],
                 np.concatenate([p.ts_ns for p in parts]) if parts else np.zeros(0, np.int64),
                 np.concatenate([p.dur_ns for p in parts]) if parts else np.zeros(0, np.int64))


def host_pid(tables: dict[str, kt.Columns], procs: list[tuple[int, str]]) -> int | None:
    """The training process: the one with profiler steps, else the busiest host pid."""
    ann = tables.get("annotations")
    if ann is not None:
        is_step = pc.equal(kt.plain(ann["source"]),
                           pa.scalar(AnnotationSource.PROFILER_STEP.value, pa.string()))
        steps = pc.filter(ann["pid"], is_step).drop_null()
        if len(steps):
            return int(pc.mode(steps)[0]["mode"].as_py())
    for table in ("cpu_ops", "api_calls"):
        cols = tables.get(table)
        if cols is not None and len(cols["pid"].drop_null()):
            return int(pc.mode(cols["pid"])[0]["mode"].as_py())
    return procs[0][0] if procs else None


def vendor(d: DeviceProps) -> str:
    text = d.name.lower()
    if any(w in text for w in ("amd", "radeon", "instinct")) or d.warpSize == 64:
        return "amd"
    return "nvidia"


def device_columns(props: Sequence[DeviceProps]) -> kt.Columns:
    """Kineto's ``deviceProperties`` as ``devices`` rows (``store.produce.devices``)."""
    rows = [device_row(DeviceProperties(
        device=d.id, name=d.name, compute_major=d.computeMajor, compute_minor=d.computeMinor,
        sm_count=d.numSms, warp_size=d.warpSize, max_threads_per_block=d.maxThreadsPerBlock,
        max_threads_per_sm=d.maxThreadsPerMultiprocessor, regs_per_block=d.regsPerBlock,
        regs_per_sm=d.regsPerMultiprocessor, smem_per_block=d.sharedMemPerBlock,
        smem_per_block_optin=d.sharedMemPerBlockOptin,
        smem_per_sm=d.sharedMemPerMultiprocessor if d.sharedMemPerMultiprocessor is not None
        else d.maxSharedMemoryPerMultiProcessor,
        total_memory=d.totalGlobalMem), vendor=vendor(d)) for d in props]
    return device_columns_of(rows) or {}
