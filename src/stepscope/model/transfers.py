"""Copies, their API calls and steps, and the GPU time around them: what the copy and memory
rules (``pageable_memcpy``, ``excess_transfers``, ``no_copy_overlap``, ``memory_pressure``,
``memory_underused``) measure their savings with.

Conventions of these rules
--------------------------
* Steps are the rank's steady steps. An event belongs to the step in which it was *issued*:
  the start of its API call when the trace links one (by correlation), else its own start.
  When most records of a kind have their call, those without one were issued before the
  capture began (their step is unknown): they are left out.
  When the host runs ahead of the GPU, the GPU work of step *i* runs long after the host's
  step window; issue time still puts it in step *i*.
* "Critical-path time" is time in which no kernel ran on the rank's devices (``kernel
  busy`` = union of compute and communication kernels, as the step breakdown uses).
  Time a copy or a blocked host call spends while kernels run is hidden and never counted.
* Savings are per step: summed over the steady steps, divided by their number, then
  averaged over ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stepscope.analysis import RankAnalysis
from stepscope.analysis import intervals as iv
from stepscope.analysis.busy import DeviceActivity, IntervalSet, gpu_activity, rank_union
from stepscope.analysis.copies import TINY_BYTES
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import (
    LAUNCH_KINDS,
    bounds,
    column_i64,
    distinct_names,
    str_in,
)
from stepscope.analysis.syncs import SyncPointKind, is_user_frame, names_at, ops_of_kind
from stepscope.schema_enums import CopyKind, CpuOpKind, MemoryKind

__all__ = ["TINY_BYTES"]

Bool = npt.NDArray[np.bool_]
NONE = np.iinfo(np.int64).max
# a host op longer than this is not "the dispatch of one copy" (call-site spans)
MAX_COPY_OP_NS = 200_000


# -- steps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Windows:
    """The steady steps of a rank: StepInfo indexes and host-side windows."""

    steps: tuple[int, ...]
    starts: I64
    ends: I64

    @property
    def n(self) -> int:
        return int(self.starts.size)

    def assign(self, ts: I64) -> I64:
        """Position (0..n-1) of the window containing each timestamp, or -1."""
        return iv.assign_to_windows(iv.as_i64(ts), self.starts, self.ends)


def recurring(step_positions: I64, n: int) -> bool:
    """A per-step pattern: seen in at least 2 steady steps and in at least half of them.
    One-off events (model load, checkpoint, the first iteration's allocations) are not."""
    k = int(np.unique(step_positions[step_positions >= 0]).size)
    return k >= 2 and 2 * k >= n


def steady_windows(ra: RankAnalysis) -> Windows:
    st = ra.steps.steady
    return Windows(steps=tuple(s.index for s in st),
                   starts=np.array([s.start_ns for s in st], dtype=np.int64),
                   ends=np.array([s.end_ns for s in st], dtype=np.int64))


# -- API calls -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    table: pa.Table
    s: I64
    e: I64
    pid: I64
    tid: I64
    corr: I64

    def kind_is(self, *kinds: str) -> Bool:
        return str_in(self.table, "kind", kinds)


def load_api(g: StepGraph) -> Api:
    t = g.table("api_calls")
    s, e = bounds(t)
    return Api(table=t, s=s, e=e, pid=column_i64(t, "pid"), tid=column_i64(t, "tid"),
               corr=column_i64(t, "correlation"))


def launch_threads(api: Api) -> I64:
    """Threads that issue kernel launches (the training thread, autograd's device thread...).
    A copy called from another thread (a prefetcher) does not hold up kernel launches."""
    m = api.kind_is(*LAUNCH_KINDS)
    return np.unique(api.tid[m]) if m.any() else np.zeros(0, dtype=np.int64)


def on_launch_thread(c: Copies, api: Api) -> Bool:
    """Copies whose API call is known and made by a thread that launches kernels; when the
    trace has no launch calls at all, every copy with a known call."""
    tids = launch_threads(api)
    return c.has_api & np.isin(c.tid, tids) if tids.size else c.has_api.copy()


# -- copies --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Copies:
    """The rank's memcpy rows with their API calls and steps (see module docstring)."""

    s: I64
    e: I64
    nbytes: I64
    device: I64
    stream: I64
    htod: Bool
    dtoh: Bool
    pageable: Bool  # host end pageable (HtoD source, DtoH destination)
    pinned: Bool
    has_api: Bool
    api_s: I64  # -1 without an API call
    api_e: I64
    pid: I64
    tid: I64
    issue: I64  # api_s where known, else s
    step: I64  # steady-window position by issue time, -1 outside

    @property
    def ns(self) -> I64:
        return self.e - self.s

    @property
    def tiny(self) -> Bool:
        return self.nbytes < TINY_BYTES


def linked_mostly(has_api: Bool) -> bool:
    """True when most GPU records have their API call in the trace: the ones without one
    were issued before the capture started (their step is unknown) and are left out."""
    return bool(has_api.size) and 2 * int(has_api.sum()) >= has_api.size


def load_copies(g: StepGraph, win: Windows, api: Api) -> Copies:
    mc = g.table("memcpy")
    s, e = bounds(mc)
    htod = str_in(mc, "kind", (CopyKind.HTOD.value,))
    dtoh = str_in(mc, "kind", (CopyKind.DTOH.value,))

    def host_end(mem: str) -> Bool:
        return (htod & str_in(mc, "src_kind", (mem,))) | (dtoh & str_in(mc, "dst_kind", (mem,)))

    row = g.api_row(g.keys("memcpy"))  # the API call of each copy
    has = row >= 0
    r = np.maximum(row, 0)

    def pick(x: I64) -> I64:
        return np.where(has, x[r], -1) if x.size else np.full(s.size, -1, dtype=np.int64)

    api_s = pick(api.s)
    issue = np.where(has, api_s, s)
    step = win.assign(issue)
    if linked_mostly(has):
        step = np.where(has, step, -1)
    return Copies(
        s=s, e=e, nbytes=column_i64(mc, "bytes", 0), device=column_i64(mc, "device", 0),
        stream=column_i64(mc, "stream"), htod=htod, dtoh=dtoh,
        pageable=host_end(MemoryKind.PAGEABLE.value), pinned=host_end(MemoryKind.PINNED.value),
        has_api=has, api_s=api_s, api_e=pick(api.e), pid=pick(api.pid), tid=pick(api.tid),
        issue=issue, step=step,
    )


def sync_ends(ra: RankAnalysis) -> dict[tuple[int, int], int]:
    """``(copy call start, tid) -> end`` of the sync point a copy call opens (a blocking
    ``.to()`` is ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``; see ``analysis.syncs``)."""
    kinds = {SyncPointKind.BLOCKING_COPY.value, SyncPointKind.SCALAR_READ.value}
    out: dict[tuple[int, int], int] = {}
    for ev in ra.syncs.events:
        if ev.kind in kinds:
            key = (ev.ts_ns, ev.tid)
            out[key] = max(out.get(key, ev.end_ns), ev.end_ns)
    return out


def call_end(c: Copies, ends: dict[tuple[int, int], int]) -> I64:
    """End of each copy's host call including the sync that waits for it (-1 without API)."""
    merged = np.array([ends.get((int(a), int(t)), -1) for a, t in zip(c.api_s, c.tid)],
                      dtype=np.int64) if c.s.size else np.zeros(0, dtype=np.int64)
    return np.where(c.has_api, np.maximum(c.api_e, merged), -1)


# -- GPU activity --------------------------------------------------------------------------


def activity(g: StepGraph) -> DeviceActivity:
    """All devices of the rank merged (what the step breakdown looks at)."""
    return rank_union(gpu_activity(g))


def uncovered(busy: IntervalSet, s: I64, e: I64) -> I64:
    """Per interval ``[s, e)``: the time not covered by ``busy``."""
    s, e = iv.as_i64(s), iv.as_i64(e)
    e = np.maximum(e, s)
    return (e - s) - busy.within(s, e)


def uncovered_pair(busy: IntervalSet, a_s: I64, a_e: I64, b_s: I64, b_e: I64) -> I64:
    """Per item: the time of ``[a_s, a_e) | [b_s, b_e)`` not covered by ``busy`` (a host
    call and the GPU copy it issued, which need not touch when the copy was queued)."""
    a_s, a_e, b_s, b_e = (iv.as_i64(x) for x in (a_s, a_e, b_s, b_e))
    o_s, o_e = np.maximum(a_s, b_s), np.minimum(a_e, b_e)
    return iv.as_i64(uncovered(busy, a_s, a_e) + uncovered(busy, b_s, b_e)
                     - uncovered(busy, o_s, np.maximum(o_e, o_s)))


def gap_to_next(busy: IntervalSet, t: I64, limit: I64) -> I64:
    """Per time ``t``: how long until ``busy`` next covers an instant (0 when ``t`` is
    inside a busy interval), clipped to ``limit - t``."""
    t, limit = iv.as_i64(t), iv.as_i64(limit)
    if busy.starts.size == 0:
        return iv.as_i64(np.maximum(limit - t, 0))
    k = np.searchsorted(busy.starts, t, side="right") - 1
    inside = (k >= 0) & (busy.ends[np.maximum(k, 0)] > t)
    j = np.searchsorted(busy.starts, t, side="left")
    nxt = np.where(j < busy.starts.size, busy.starts[np.minimum(j, busy.starts.size - 1)], NONE)
    gap = np.where(inside, 0, np.minimum(nxt, limit) - t)
    return iv.as_i64(np.maximum(gap, 0))


def union_per_group(s: I64, e: I64, group: I64, n: int) -> I64:
    """Length of the union of the intervals of each group ``0..n-1`` (group -1: ignored).

    Vectorised: each group's intervals are shifted into a range of their own, so one
    union over all of them never merges two groups."""
    m = (group >= 0) & (e > s)
    out = np.zeros(n, dtype=np.int64)
    if not m.any():
        return out
    s, e, g = s[m], e[m], group[m]
    lo = int(s.min())
    width = int(e.max()) - lo + 1
    us, ue = iv.union(s - lo + g * width, e - lo + g * width)
    np.add.at(out, us // width, ue - us)
    return out


@dataclass(frozen=True)
class GpuSteps:
    """Device-side steps: step *i* runs from the first GPU record issued in host step *i*
    to the first one issued in step *i + 1*. Steady steps with no next step to bound them
    are left out (their GPU idle time at the end is unknown) unless that leaves none; then
    the step runs to the later of its last record's end and its host window's end."""

    starts: I64
    ends: I64

    @property
    def mean_ns(self) -> float:
        return float(np.mean(self.ends - self.starts)) if self.starts.size else 0.0


def gpu_steps(g: StepGraph, ra: RankAnalysis, api: Api) -> GpuSteps | None:
    """None when some steady step has no GPU record linked to an API call."""
    s, e = g.gpu.start, g.gpu.end
    row = g.gpu_api_row  # the API call of each GPU record
    has = row >= 0
    all_s, all_e = ra.steps.starts, ra.steps.ends
    issue = np.where(has, api.s[np.maximum(row, 0)] if api.s.size else 0, 0)
    step = np.where(has, iv.assign_to_windows(issue, all_s, all_e), -1)
    n = all_s.size
    first = np.full(n, NONE, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    m = step >= 0
    np.minimum.at(first, step[m], s[m])
    np.maximum.at(last, step[m], e[m])
    idx = [st.index for st in ra.steps.steady]
    if not idx or any(first[i] == NONE for i in idx):
        return None
    bounded = [i for i in idx if i + 1 < n and first[i + 1] != NONE]
    if bounded:
        return GpuSteps(np.array([first[i] for i in bounded], dtype=np.int64),
                        np.array([max(first[i + 1], first[i]) for i in bounded], dtype=np.int64))
    return GpuSteps(np.array([first[i] for i in idx], dtype=np.int64),
                    np.array([max(last[i], all_e[i], first[i]) for i in idx], dtype=np.int64))


# -- call sites ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sites:
    """For host calls: the enclosing framework ops and user Python frame."""

    label: tuple[str, ...]  # best name per call: frame, else "outer > inner", else op
    op_s: I64  # span of the outermost enclosing framework op no longer than MAX_COPY_OP_NS
    op_e: I64  # (else of the innermost one, else -1)


def call_sites(g: StepGraph, pid: I64, tid: I64, s: I64, e: I64) -> Sites:
    n = iv.as_i64(s).size
    fw, fs, fe = ops_of_kind(g, CpuOpKind.FRAMEWORK.value)
    py, ps, pe = ops_of_kind(g, CpuOpKind.PYTHON.value)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Sites((), z, z)
    fg, qg = iv.group_ids((column_i64(fw, "pid"), column_i64(fw, "tid")), (pid, tid))
    inner = iv.containing_by_group(fg, fs, fe, qg, s, e, innermost=True)
    outer = iv.containing_by_group(fg, fs, fe, qg, s, e, innermost=False)
    user = str_in(py, "name", tuple(x for x in distinct_names(py, "name") if is_user_frame(x)))
    ui = np.flatnonzero(user)
    pg, qg2 = iv.group_ids((column_i64(py, "pid")[ui], column_i64(py, "tid")[ui]), (pid, tid))
    fr = iv.containing_by_group(pg, ps[ui], pe[ui], qg2, s, e)
    frame = names_at(py, "name", np.where(fr >= 0, ui[np.maximum(fr, 0)] if ui.size else -1, -1))
    inn, out = names_at(fw, "name", inner), names_at(fw, "name", outer)
    labels = tuple(f or (f"{o} > {i}" if o and i and o != i else i or o)
                   for f, o, i in zip(frame, out, inn))
    o_ok = (outer >= 0) & ((fe - fs)[np.maximum(outer, 0)] <= MAX_COPY_OP_NS if fs.size
                           else False)
    i_ok = (inner >= 0) & ((fe - fs)[np.maximum(inner, 0)] <= MAX_COPY_OP_NS if fs.size
                           else False)
    pick = np.where(o_ok, outer, np.where(i_ok, inner, -1))
    op_s = np.where(pick >= 0, fs[np.maximum(pick, 0)] if fs.size else -1, -1)
    op_e = np.where(pick >= 0, fe[np.maximum(pick, 0)] if fs.size else -1, -1)
    return Sites(labels, op_s, op_e)


def top_labels(labels: list[str] | tuple[str, ...], k: int = 3) -> tuple[str, ...]:
    """The ``k`` most frequent non-empty labels, most frequent first."""
    counts: dict[str, int] = {}
    for x in labels:
        if x:
            counts[x] = counts.get(x, 0) + 1
    return tuple(x for x, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k])
