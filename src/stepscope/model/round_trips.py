"""What removing host-device round trips and batching tiny copies would save per step (the
method: the ``excess_transfers`` rule's docs page and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.input import input_wait_intervals
from stepscope.analysis.intervals import I64
from stepscope.analysis.results import FACT
from stepscope.model import transfers as mt
from stepscope.model.host_ops import HostOps

MIN_TINY_PER_STEP = 8


@dataclass(frozen=True)
class RoundTrips:
    rank: int
    n_steps: int
    count: int
    saving_ns: int
    dtoh_bytes: int
    htod_bytes: int
    copy_ns: int  # GPU time of the copies in the round trips
    host_ns: int  # from the DtoH end to the HtoD issue: host work between them
    op_ns: int  # of which in (outermost) framework ops / Python functions
    ops: tuple[str, ...]  # host ops between the copies, most time first
    sites: tuple[str, ...]
    steps: tuple[int, ...]
    start_ns: int
    end_ns: int

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6


@dataclass(frozen=True)
class TinyCopies:
    rank: int
    n_steps: int
    count: int
    nbytes: int
    span_ns: int  # no-kernel time in their spans, per run
    saving_ns: int
    sites: tuple[str, ...]
    steps: tuple[int, ...]
    start_ns: int
    end_ns: int

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6


@dataclass(frozen=True)
class Traffic:
    """Bytes per step per direction, and the batch-like part of HtoD."""

    htod: float
    htod_input: float  # HtoD issued before the step's first kernel launch
    dtoh: float


def _launch_calls(api: mt.Api) -> tuple[I64, I64]:
    m = api.kind_is("launch", "graph_launch")
    order = np.argsort(api.s[m], kind="stable")
    return api.s[m][order], api.tid[m][order]


def traffic(c: mt.Copies, win: mt.Windows, api: mt.Api) -> Traffic:
    n = max(win.n, 1)
    ls, _ = _launch_calls(api)
    first_launch = np.full(win.n, mt.NONE, dtype=np.int64)
    if ls.size:
        j = np.searchsorted(ls, win.starts, side="left")
        ok = (j < ls.size)
        cand = ls[np.minimum(j, ls.size - 1)]
        first_launch = np.where(ok & (cand < win.ends), cand, mt.NONE)
    inside = c.step >= 0
    before = inside & (c.issue < first_launch[np.maximum(c.step, 0)])
    return Traffic(htod=float(c.nbytes[inside & c.htod].sum()) / n,
                   htod_input=float(c.nbytes[before & c.htod].sum()) / n,
                   dtoh=float(c.nbytes[inside & c.dtoh].sum()) / n)


def round_trips(g: StepGraph, ra: RankAnalysis, c: mt.Copies, win: mt.Windows, api: mt.Api,
                busy: IntervalSet, kern: IntervalSet) -> tuple[RoundTrips | None, I64]:
    """The round trips of a rank, and the copies (indexes) that make them up."""
    none = np.zeros(0, dtype=np.int64)
    sel = np.flatnonzero((c.step >= 0) & (c.htod | c.dtoh))
    if sel.size == 0 or not c.dtoh[sel].any():
        return None, none
    sel = sel[np.lexsort((c.s[sel], c.issue[sel]))]
    ls, ltid = _launch_calls(api)
    no_api = not c.has_api[sel].all()
    ws, we = input_wait_intervals(g)
    waits = IntervalSet.of(ws, we)
    ends = mt.call_end(c, mt.sync_ends(ra))
    kstarts = kern.starts

    def launches_between(tid: int, lo: int, hi: int) -> bool:
        if no_api or ls.size == 0:
            a, b = np.searchsorted(kstarts, [lo, hi])
            return bool(b > a)
        a, b = np.searchsorted(ls, [lo, hi])
        return bool((ltid[a:b] == tid).any())

    trips: list[tuple[int, int]] = []  # (first DtoH index, HtoD index)
    pending = -1
    for i in sel.tolist():
        if c.dtoh[i]:
            if pending >= 0 and (c.step[pending] != c.step[i] or c.tid[pending] != c.tid[i]
                                 or launches_between(int(c.tid[i]), _done(c, pending),
                                                     int(c.issue[i]))):
                pending = -1
            if pending < 0:
                # the data read back must come from this step's kernels
                produced = kern.within(win.starts[[c.step[i]]], np.array([c.s[i]]))[0] > 0
                pending = i if produced else -1
            continue
        if pending < 0:
            continue
        d = pending
        pending = -1
        lo, hi = _done(c, d), int(c.issue[i])
        if (c.step[d] != c.step[i] or c.tid[d] != c.tid[i] or hi < int(c.e[d])
                or launches_between(int(c.tid[i]), lo, hi)
                or waits.within(np.array([lo]), np.array([max(hi, lo)]))[0] > 0):
            continue
        trips.append((d, i))
    if not mt.recurring(c.step[np.array([h for _, h in trips], dtype=np.int64)], win.n):
        return None, none
    d_idx = np.array([d for d, _ in trips], dtype=np.int64)
    h_idx = np.array([h for _, h in trips], dtype=np.int64)
    span_s = np.minimum(c.s[d_idx], np.where(c.has_api[d_idx], c.api_s[d_idx], c.s[d_idx]))
    span_e = np.maximum(c.e[h_idx], ends[h_idx])
    step_end = win.ends[c.step[h_idx]]
    idle = mt.uncovered(kern, span_s, span_e) + mt.gap_to_next(busy, span_e, step_end)
    # several DtoH copies feeding one round trip: count their bytes and copy time too
    members = np.zeros(c.s.size, dtype=bool)
    for d, h in trips:
        m = ((c.step == c.step[d]) & (c.issue >= c.issue[d]) & (c.issue < c.issue[h])
             & c.dtoh)
        members |= m
        members[h] = True
    ops: dict[str, int] = {}
    host_ns = op_ns = 0
    host_ops = HostOps.of(g)
    for d, h in trips:
        lo, hi = _done(c, d), int(c.issue[h])
        host_ns += max(0, hi - lo)
        for name, ns in host_ops.outermost(int(c.tid[h]), lo, hi):
            ops[name] = ops.get(name, 0) + ns
            op_ns += ns
    sites = mt.call_sites(g, c.pid[d_idx], c.tid[d_idx],
                          np.where(c.has_api[d_idx], c.api_s[d_idx], c.s[d_idx]),
                          np.where(c.has_api[d_idx], c.api_e[d_idx], c.e[d_idx]))
    first = int(np.argmin(span_s))
    return RoundTrips(
        rank=ra.rank, n_steps=win.n, count=len(trips), saving_ns=int(idle.sum()),
        dtoh_bytes=int(c.nbytes[members & c.dtoh].sum()),
        htod_bytes=int(c.nbytes[members & c.htod].sum()),
        copy_ns=int(c.ns[members].sum()), host_ns=host_ns, op_ns=op_ns,
        ops=tuple(n for n, _ in sorted(ops.items(), key=lambda kv: -kv[1])[:4]),
        sites=mt.top_labels(sites.label),
        steps=tuple(sorted({win.steps[int(k)] for k in c.step[h_idx]})),
        start_ns=int(span_s[first]), end_ns=int(span_e[first]),
    ), np.flatnonzero(members)


def _done(c: mt.Copies, i: int) -> int:
    """When the host could go on after copy ``i``: its call's end, or the copy's end."""
    return int(max(c.e[i], c.api_e[i])) if c.has_api[i] else int(c.e[i])


def tiny_copies(g: StepGraph, ra: RankAnalysis, c: mt.Copies, win: mt.Windows,
                kern: IntervalSet, exclude: I64) -> TinyCopies | None:
    sel = (c.step >= 0) & c.htod & c.tiny
    sel[exclude] = False
    if sel.sum() < MIN_TINY_PER_STEP * win.n or not mt.recurring(c.step[sel], win.n):
        return None
    idx = np.flatnonzero(sel)
    ends = mt.call_end(c, mt.sync_ends(ra))
    api_s = np.where(c.has_api[idx], c.api_s[idx], c.s[idx])
    api_e = np.where(c.has_api[idx], c.api_e[idx], c.e[idx])
    sites = mt.call_sites(g, c.pid[idx], c.tid[idx], api_s, api_e)
    host_s = np.where(sites.op_s >= 0, np.minimum(sites.op_s, api_s), api_s)
    host_e = np.maximum.reduce([sites.op_e, api_e, ends[idx]])
    each = mt.uncovered_pair(kern, host_s, host_e, c.s[idx], c.e[idx])
    spans = IntervalSet.of(np.concatenate((host_s, c.s[idx])),
                           np.concatenate((host_e, c.e[idx])))
    per_step = (spans - kern).within(win.starts, win.ends)
    span_s, span_e = np.minimum(host_s, c.s[idx]), np.maximum(host_e, c.e[idx])
    one = int(np.median(each)) if each.size else 0
    steps_hit = np.unique(c.step[idx])
    saving = np.maximum(0, per_step - np.where(np.isin(np.arange(win.n), steps_hit), one, 0))
    first = idx[c.step[idx] == c.step[idx].min()]
    fi = np.isin(idx, first)
    return TinyCopies(
        rank=ra.rank, n_steps=win.n, count=int(idx.size), nbytes=int(c.nbytes[idx].sum()),
        span_ns=int(per_step.sum()), saving_ns=int(saving.sum()),
        sites=mt.top_labels(sites.label),
        steps=tuple(win.steps[int(k)] for k in steps_hit),
        start_ns=int(span_s[fi].min()), end_ns=int(span_e[fi].max()),
    )


@dataclass(frozen=True)
class ExcessTransfers:
    rank: int
    n_steps: int
    traffic: Traffic
    trips: RoundTrips | None
    tiny: TinyCopies | None


def excess_transfers(g: StepGraph, ra: RankAnalysis) -> ExcessTransfers | None:
    """Memoised on the rank's graph (a per-rank fact: ``advisor.rank_facts``); see ``_excess_transfers``."""
    return g.memo((FACT, "excess_transfers"), lambda: _excess_transfers(g, ra))


def _excess_transfers(g: StepGraph, ra: RankAnalysis) -> ExcessTransfers | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
    api = mt.load_api(g)
    c = mt.load_copies(g, win, api)
    if not ((c.step >= 0) & (c.htod | c.dtoh)).any():
        return None
    act = mt.activity(g)
    rt, in_trips = round_trips(g, ra, c, win, api, act.busy, act.kernels)
    tiny = tiny_copies(g, ra, c, win, act.kernels, in_trips)
    return ExcessTransfers(ra.rank, win.n, traffic(c, win, api), rt, tiny)
