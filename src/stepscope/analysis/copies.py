"""Memory copies: direction, size, bandwidth, pageable vs pinned, sync vs async, overlap.

Per copy (``memcpy`` row of the rank)::

    ns          = dur_ns
    overlap_ns  = |[ts, ts + dur) ∩ union(kernels on the same device, any stream)|
    exposed_ns  = ns - overlap_ns          (copy time during which no kernel ran)
    host end    = src_kind for HtoD, dst_kind for DtoH (pageable | pinned | ...)
    api_async   = the call with the same correlation has "Async" in its name
    host_blocking = that call is synchronous (call_kinds.is_blocking_call), or the host end is
                    pageable (the driver stages pageable memory and returns when done,
                    whatever the call's name)
    tiny        = bytes < 64 KiB (latency-bound: batch them)

Per direction: ``bandwidth_gbs = sum(bytes) / sum(ns)`` (1 B/ns = 1 GB/s, decimal),
``median_bytes``; pageable/pinned figures for HtoD and DtoH only. Copies whose API call
is not in the trace count in ``no_api`` and are neither api_async nor host_blocking
unless pageable.

:func:`pageable_at_pinned_ns` estimates the time the pageable copies of a direction
would take pinned: ``est_i = min(ns_i, bytes_i / bw)`` (``est_i = ns_i`` for tiny copies:
their time is latency, which pinning does not remove), where ``bw`` is the median
achieved bandwidth (``bytes / ns`` per copy) of the run's pinned copies of the same
direction of at least 64 KiB (smaller ones measure latency, not bandwidth); with none,
a nominal achieved PCIe x16 figure by compute capability (:data:`NOMINAL_PCIE_GBS`:
CC >= 9.0 Gen5 ~50 GB/s, CC 8.x Gen4 ~25 GB/s, older Gen3 ~12 GB/s; unknown: Gen4).
``basis`` says which was used. Only GPU copy time is estimated: the host time a
pageable copy call blocks for (staging) is in the sync analysis.

Steps: a copy belongs to the step window containing its start (counts, bytes, ns,
overlap and exposed time all follow the copy). Scope figures (per direction) are over
the copies inside the windows; with no windows, the whole rank (per-step tuples empty).
The pinned bandwidth of the estimate is measured over the whole rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import stepscope.analysis.intervals as iv
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import (
    bounds,
    column_i64,
    count_window,
    distinct_names,
    ints,
    mean_of,
    median_of,
    per_window,
    str_in,
)
from stepscope.call_kinds import is_blocking_call
from stepscope.schema_enums import CopyKind, MemoryKind

TINY_BYTES = 64 * 1024
DIRECTIONS = (CopyKind.HTOD, CopyKind.DTOH, CopyKind.DTOD, CopyKind.PTOP, CopyKind.HTOH)
NOMINAL_PCIE_GBS = {"pcie_gen3": 12.0, "pcie_gen4": 25.0, "pcie_gen5": 50.0}

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class MemoryStats:
    count: int
    bytes: int
    ns: int


@dataclass(frozen=True)
class DirectionStats:
    direction: str  # CopyKind value
    count: int
    bytes: int
    ns: int
    bandwidth_gbs: float
    median_bytes: float
    pageable: MemoryStats  # host end pageable (HtoD/DtoH only)
    pinned: MemoryStats  # host end pinned (HtoD/DtoH only)
    api_async: int
    host_blocking: int
    no_api: int
    tiny_count: int
    tiny_ns: int
    overlap_ns: int
    exposed_ns: int


@dataclass(frozen=True)
class CopyAnalysis:
    rank: int
    n_steps: int
    tiny_bytes: int
    directions: tuple[DirectionStats, ...]  # HtoD, DtoH, DtoD, PtoP, HtoH (+ unknown if any)
    # per step, aligned with the windows
    count_per_step: tuple[int, ...]
    ns_per_step: tuple[int, ...]
    htod_bytes_per_step: tuple[int, ...]
    htod_ns_per_step: tuple[int, ...]
    dtoh_bytes_per_step: tuple[int, ...]
    dtoh_ns_per_step: tuple[int, ...]
    overlap_ns_per_step: tuple[int, ...]
    exposed_ns_per_step: tuple[int, ...]
    # means per step
    mean_count_per_step: float
    mean_ns_per_step: float
    mean_htod_bytes_per_step: float
    mean_htod_ns_per_step: float
    mean_dtoh_bytes_per_step: float
    mean_dtoh_ns_per_step: float
    mean_overlap_ns_per_step: float
    mean_exposed_ns_per_step: float
    # over the scope
    count: int
    bytes: int
    ns: int
    overlap_ns: int
    exposed_ns: int
    tiny_count: int
    tiny_ns: int

    def direction(self, kind: str | CopyKind) -> DirectionStats:
        k = kind.value if isinstance(kind, CopyKind) else kind
        for d in self.directions:
            if d.direction == k:
                return d
        raise KeyError(k)


@dataclass(frozen=True)
class PinnedEstimate:
    direction: str
    basis: str  # "measured_pinned" | "pcie_gen3" | "pcie_gen4" | "pcie_gen5"
    bandwidth_gbs: float
    pinned_samples: int  # pinned copies (>= 64 KiB) the bandwidth was measured on
    pageable_count: int  # over the scope
    pageable_ns: int
    estimated_ns: int
    saving_ns: int
    pageable_ns_per_step: tuple[int, ...]
    estimated_ns_per_step: tuple[int, ...]
    mean_saving_ns_per_step: float


@dataclass(frozen=True)
class _Copies:
    s: I64
    ns: I64
    nbytes: I64
    device: I64
    kind: dict[str, BoolArray]
    pageable: BoolArray  # host end pageable (HtoD src / DtoH dst)
    pinned: BoolArray
    api_async: BoolArray
    api_blocking: BoolArray
    no_api: BoolArray


def _copies(g: StepGraph) -> _Copies:
    mc = g.table("memcpy")
    s, e = bounds(mc)
    kinds = {k.value: str_in(mc, "kind", (k.value,)) for k in CopyKind}
    htod, dtoh = kinds[CopyKind.HTOD.value], kinds[CopyKind.DTOH.value]

    def host_end(mem: str) -> BoolArray:
        return (htod & str_in(mc, "src_kind", (mem,))) | (dtoh & str_in(mc, "dst_kind", (mem,)))

    api = g.table("api_calls")
    names = distinct_names(api, "name")
    a_async = str_in(api, "name", tuple(n for n in names if "Async" in n))
    a_block = str_in(api, "name", tuple(n for n in names if is_blocking_call(n)))
    row = g.api_row(g.keys("memcpy"))  # the API call of each copy
    hit = row >= 0
    idx = np.maximum(row, 0)
    return _Copies(
        s=s, ns=e - s, nbytes=column_i64(mc, "bytes", 0), device=column_i64(mc, "device", 0),
        kind=kinds, pageable=host_end(MemoryKind.PAGEABLE.value),
        pinned=host_end(MemoryKind.PINNED.value),
        api_async=hit & a_async[idx] if api.num_rows else hit,
        api_blocking=hit & a_block[idx] if api.num_rows else hit,
        no_api=~hit,
    )


def _overlap_with_kernels(g: StepGraph, c: _Copies) -> I64:
    k = g.table("kernels")
    ks, ke = bounds(k)
    kd = column_i64(k, "device", 0)
    out = np.zeros(c.s.size, dtype=np.int64)
    for dev in np.unique(c.device):
        m = c.device == dev
        us, ue = iv.union(ks[kd == dev], ke[kd == dev])
        out[m] = iv.overlap_with_windows(us, ue, c.s[m], c.s[m] + c.ns[m])
    return out


def _mem(m: BoolArray, c: _Copies) -> MemoryStats:
    return MemoryStats(count=int(m.sum()), bytes=int(c.nbytes[m].sum()), ns=int(c.ns[m].sum()))


def analyze_copies(
    g: StepGraph, win_start: I64, win_end: I64, *, tiny_bytes: int = TINY_BYTES
) -> CopyAnalysis:
    """Copy figures of ``rank`` per direction and per step (module docstring)."""
    ws, we = iv.as_i64(win_start), iv.as_i64(win_end)
    n = ws.size
    c = _copies(g)
    overlap = _overlap_with_kernels(g, c)
    exposed = c.ns - overlap
    step = iv.assign_to_windows(c.s, ws, we)
    scope = step >= 0 if n else np.ones(c.s.size, dtype=bool)
    tiny = c.nbytes < tiny_bytes
    blocking = c.api_blocking | c.pageable

    directions = []
    for k in (*DIRECTIONS, CopyKind.UNKNOWN):
        m = scope & c.kind[k.value]
        if k is CopyKind.UNKNOWN and not m.any():
            continue
        host = k in (CopyKind.HTOD, CopyKind.DTOH)
        none = np.zeros_like(m)
        ns, nbytes = int(c.ns[m].sum()), int(c.nbytes[m].sum())
        directions.append(DirectionStats(
            direction=k.value, count=int(m.sum()), bytes=nbytes, ns=ns,
            bandwidth_gbs=nbytes / ns if ns else 0.0,
            median_bytes=median_of(c.nbytes[m]),
            pageable=_mem(m & c.pageable if host else none, c),
            pinned=_mem(m & c.pinned if host else none, c),
            api_async=int((m & c.api_async).sum()),
            host_blocking=int((m & blocking).sum()),
            no_api=int((m & c.no_api).sum()),
            tiny_count=int((m & tiny).sum()), tiny_ns=int(c.ns[m & tiny].sum()),
            overlap_ns=int(overlap[m].sum()), exposed_ns=int(exposed[m].sum()),
        ))

    htod, dtoh = c.kind[CopyKind.HTOD.value], c.kind[CopyKind.DTOH.value]
    ps = {
        "count": count_window(step, n),
        "ns": per_window(c.ns, step, n),
        "htod_bytes": per_window(np.where(htod, c.nbytes, 0), step, n),
        "htod_ns": per_window(np.where(htod, c.ns, 0), step, n),
        "dtoh_bytes": per_window(np.where(dtoh, c.nbytes, 0), step, n),
        "dtoh_ns": per_window(np.where(dtoh, c.ns, 0), step, n),
        "overlap": per_window(overlap, step, n),
        "exposed": per_window(exposed, step, n),
    }
    return CopyAnalysis(
        rank=g.rank_id, n_steps=n, tiny_bytes=tiny_bytes, directions=tuple(directions),
        count_per_step=ints(ps["count"]), ns_per_step=ints(ps["ns"]),
        htod_bytes_per_step=ints(ps["htod_bytes"]), htod_ns_per_step=ints(ps["htod_ns"]),
        dtoh_bytes_per_step=ints(ps["dtoh_bytes"]), dtoh_ns_per_step=ints(ps["dtoh_ns"]),
        overlap_ns_per_step=ints(ps["overlap"]), exposed_ns_per_step=ints(ps["exposed"]),
        mean_count_per_step=mean_of(ps["count"]), mean_ns_per_step=mean_of(ps["ns"]),
        mean_htod_bytes_per_step=mean_of(ps["htod_bytes"]),
        mean_htod_ns_per_step=mean_of(ps["htod_ns"]),
        mean_dtoh_bytes_per_step=mean_of(ps["dtoh_bytes"]),
        mean_dtoh_ns_per_step=mean_of(ps["dtoh_ns"]),
        mean_overlap_ns_per_step=mean_of(ps["overlap"]),
        mean_exposed_ns_per_step=mean_of(ps["exposed"]),
        count=int(scope.sum()), bytes=int(c.nbytes[scope].sum()), ns=int(c.ns[scope].sum()),
        overlap_ns=int(overlap[scope].sum()), exposed_ns=int(exposed[scope].sum()),
        tiny_count=int((scope & tiny).sum()), tiny_ns=int(c.ns[scope & tiny].sum()),
    )


def nominal_pcie(g: StepGraph) -> str:
    """PCIe generation assumed from the rank's first device (module docstring)."""
    dev = g.table("devices")
    if dev.num_rows == 0:
        return "pcie_gen4"
    row = dev.sort_by("device").slice(0, 1).to_pylist()[0]
    major = row.get("compute_major")
    if str(row.get("vendor") or "nvidia") != "nvidia" or major is None:
        return "pcie_gen4"
    return "pcie_gen5" if major >= 9 else "pcie_gen4" if major >= 8 else "pcie_gen3"


def pageable_at_pinned_ns(
    g: StepGraph, win_start: I64, win_end: I64,
    direction: str | CopyKind = CopyKind.HTOD, *, tiny_bytes: int = TINY_BYTES,
) -> PinnedEstimate:
    """Estimated time of the pageable copies of ``direction`` had they been pinned."""
    d = direction.value if isinstance(direction, CopyKind) else str(direction)
    ws, we = iv.as_i64(win_start), iv.as_i64(win_end)
    n = ws.size
    c = _copies(g)
    kind = c.kind.get(d, np.zeros(c.s.size, dtype=bool))
    ref = kind & c.pinned & (c.nbytes >= tiny_bytes) & (c.ns > 0)
    if ref.any():
        basis, bw = "measured_pinned", float(np.median(c.nbytes[ref] / c.ns[ref]))
    else:
        basis = nominal_pcie(g)
        bw = NOMINAL_PCIE_GBS[basis]
    step = iv.assign_to_windows(c.s, ws, we)
    scope = (step >= 0 if n else np.ones(c.s.size, dtype=bool)) & kind & c.pageable
    est = np.minimum(c.ns, np.ceil(c.nbytes / bw).astype(np.int64)) if bw > 0 else c.ns
    est = np.where(c.nbytes < tiny_bytes, c.ns, est)  # latency-bound: no saving claimed
    pg_ps = per_window(np.where(scope, c.ns, 0), step, n)
    est_ps = per_window(np.where(scope, est, 0), step, n)
    pageable_ns, est_ns = int(c.ns[scope].sum()), int(est[scope].sum())
    return PinnedEstimate(
        direction=d, basis=basis, bandwidth_gbs=bw, pinned_samples=int(ref.sum()),
        pageable_count=int(scope.sum()), pageable_ns=pageable_ns, estimated_ns=est_ns,
        saving_ns=pageable_ns - est_ns, pageable_ns_per_step=ints(pg_ps),
        estimated_ns_per_step=ints(est_ps), mean_saving_ns_per_step=mean_of(pg_ps - est_ps),
    )
