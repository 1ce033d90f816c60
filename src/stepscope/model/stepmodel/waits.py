"""What the blocking calls of a step waited for, measured on the step graph (for
``build``): how many steps back the GPU work a blocking call waited for was issued
(:func:`steps_back`, :func:`event_sync_back`), the measured end of the GPU work issued before a
time (:class:`Awaited`), the stream a stream-sync waited on (:func:`sync_streams`), and when each
thread was first free in the step (:func:`busy_at_start`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stepscope.analysis import RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import column_i64, str_in
from stepscope.model.stepmodel.steps import I64
from stepscope.schema_enums import SyncKind

STREAM_TOL_NS = 2_000
MIN_WAIT_NS = 20_000  # a blocking call shorter than this did not wait for the GPU
EVENT_SYNC = "EventSynchronize"
UNSEEN_EVENT_BACK = 2


def busy_at_start(threads: list[tuple[int, int]], t0: int, t1: int,
                   tables: list[tuple[pa.Table, I64, I64, np.ndarray]]) -> I64:
    """Per thread, when it is first free in the step: the end of a call (or input wait) of
    its own that began before the step and was still running at its start (a blocking copy
    of the step before), else the step's start. That time is the earlier call's, not host
    work before the step's first event: the replay gives it to that call's copy in the step
    before."""
    free_at = np.full(len(threads), t0, dtype=np.int64)
    index = {t: i for i, t in enumerate(threads)}
    for t, s, e, sel in tables:
        if t.num_rows == 0:
            continue
        m = sel & (s < t0) & (e > t0)
        pid, tid = column_i64(t, "pid"), column_i64(t, "tid")
        for r in np.flatnonzero(m).tolist():
            i = index.get((int(pid[r]), int(tid[r])))
            if i is not None:
                free_at[i] = max(int(free_at[i]), min(int(e[r]), t1))
    return free_at


def event_sync_back(g: StepGraph, issued: I64, ra: RankAnalysis,
                     api_names: list[str], a_s: I64, a_e: I64) -> int:
    """How many steps back the event syncs of the steady steps waited for (the most common
    non-zero count). When none waited, ``UNSEEN_EVENT_BACK``: an event sync that never held
    the host is taken to let it run one step ahead (a loop keeping two steps in flight), not
    to serialise the steps; the replay of the measured step is the same either way, only what
    other remedies leave to it changes."""
    found: dict[int, int] = {}
    starts = ra.steps.starts
    for st in ra.steps.steady:
        rows = np.flatnonzero((a_s >= st.start_ns) & (a_s < st.end_ns))
        for r in rows.tolist():
            if EVENT_SYNC not in str(api_names[r]) if api_names else True:
                continue
            k = int(np.searchsorted(starts, a_s[r], side="right")) - 1
            b = steps_back(g, issued, ra, k, int(a_s[r]), int(a_e[r]))
            if b is not None and b > 0:
                found[b] = found.get(b, 0) + 1
    return max(found, key=lambda b: (found[b], -b)) if found else UNSEEN_EVENT_BACK


def steps_back(g: StepGraph, issued: I64, ra: RankAnalysis, idx: int, s: int, e: int
                ) -> int | None:
    """How many steps back the GPU work a blocking call waited for was issued: the record
    issued before the call that ended last before the call returned (0: this step's; None:
    no GPU work ended during the call, it did not wait; -1: that record's launch is not in
    the trace, so its step is not known)."""
    gp = g.gpu
    if e - s < MIN_WAIT_NS:
        return None  # as long as a call costs: whatever ended meanwhile, it did not wait
    m = (issued < s) & (gp.end <= e + STREAM_TOL_NS) & (gp.end >= s)
    if not m.any():
        return None
    j = np.flatnonzero(m)[int(np.argmax(gp.end[m]))]
    if g.gpu_api_row[j] < 0:
        return -1
    starts = ra.steps.starts
    k = int(np.searchsorted(starts, issued[j], side="right")) - 1
    return max(0, idx - k) if k >= 0 else -1


def sync_streams(g: StepGraph) -> dict[int, tuple[int, int]]:
    """Correlation key of a stream-sync record -> its (device, stream)."""
    t = g.table("sync")
    if t.num_rows == 0:
        return {}
    ks = g.keys("sync")
    is_stream = str_in(t, "kind", (SyncKind.STREAM.value,))
    dev, st = column_i64(t, "device", 0), column_i64(t, "stream", -1)
    return {int(k): (int(d), int(s)) for k, d, s, m in zip(ks.tolist(), dev.tolist(),
                                                           st.tolist(), is_stream.tolist())
            if m and k >= 0 and s >= 0}


class Awaited:
    """The measured end of the GPU work issued before ``t`` on one stream (or all)."""

    def __init__(self, end: I64, skey: I64, issued: I64, keys: list[tuple[int, int]]) -> None:
        o = np.argsort(issued, kind="stable")
        self._iss = issued[o]
        self._all = np.maximum.accumulate(end[o]) if o.size else end[o]
        self._per: dict[int, tuple[I64, I64]] = {}
        sk_sorted = skey[o]
        for i, (d, s) in enumerate(keys):
            m = sk_sorted == d * np.int64(1 << 40) + s
            self._per[i] = (self._iss[m], np.maximum.accumulate(end[o][m]) if m.any()
                            else end[o][m])

    def __call__(self, stream: int, t: int) -> int:
        iss, mx = self._per.get(stream, (self._iss, self._all)) if stream >= 0 \
            else (self._iss, self._all)
        p = int(np.searchsorted(iss, t, side="right")) - 1
        return int(mx[p]) if p >= 0 else -(1 << 62)


__all__ = ["EVENT_SYNC", "MIN_WAIT_NS", "STREAM_TOL_NS", "UNSEEN_EVENT_BACK", "Awaited",
           "busy_at_start", "event_sync_back", "steps_back", "sync_streams"]
