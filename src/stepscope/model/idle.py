"""What the GPU's idle time would give back, per remedy: the idle split of one rank.

GPU idle time of a rank's steady steps, split among the idle-time rules.

Shared by ``input_bound``, ``sync_calls``, ``step_gaps``, ``launch_bound`` and
``host_bound`` so that no nanosecond of GPU idle time is claimed by two of them
(their savings can be added up). Over the GPU-idle time inside the steady step
windows (idle = no kernel, memcpy or memset on any device of the rank), first
claim wins:

1. ``input``         a thread waits for the next batch (``input_waits``);
   ``callback``      inside an XLA host-callback thunk (``analysis.callbacks``: the step's
                     program calls back into Python, inline on the executing thread, copy
                     and wait included): claimed by ``host`` (5.), not by the copy's sync;
                     the thunk's own copies (GPU busy copying, no kernel running, inside
                     the thunk) are not idle time but are the callback's too:
                     ``callback_copy``, kept apart (``host_bound`` adds it; the
                     ``pageable_memcpy`` rule leaves these copies out);
2. ``sync_blocked``  a host thread is blocked in a sync or a blocking copy
                     (``analysis.syncs.sync_intervals``);
   ``sync_drain``    after each sync point, the idle time it causes once it returns: the
                     host must refill an empty queue, and every host delay until it is
                     ahead again leaves the GPU idle. Claimed: the first ``head`` ns of
                     idle time after the point's end, before the next sync point that waits
                     on a busy GPU (>= 50 µs), where ``head`` = the GPU busy time *during*
                     the point, i.e. the head start the host gave away by waiting: without
                     the sync it would have been that far ahead of the GPU and could have
                     hidden that much host delay. When the trace starts inside the loop (no
                     sync point before the first steady step), the first step's idle before
                     its first waiting sync is claimed with that sync's head start (the
                     steady state: it follows the previous step's sync, outside the trace);
3. ``gaps``          the idle interval that touches a step boundary (from the last GPU
                     activity before the boundary to the first after it);
4. ``launch``        a launch-bound wait of at most 100 µs (the GPU finished its work and
                     waits for the next launch: the launch-overhead signature) while a
                     host thread is in the launch path (launch call or the framework op
                     issuing it, ``analysis.launches.launch_intervals``) or runs nothing
                     recorded (the interpreter between two launching ops);
5. ``host``          the callbacks' time (1.) and the rest: host work (framework ops,
                     Python functions, user annotations,
                     ``analysis.breakdown.host_work_intervals``), launch-path time in longer
                     waits (CPU work before a launch), and idle time with no host event at
                     all (``other``, a subset of ``host``: Python work the trace did not
                     record, sleeps, I/O).
   4. and 5. are ``analysis.breakdown.host_idle``, the rule the step-time breakdown also
   applies to the GPU idle time of a rank without host ops (a live capture's run).

Profiler cost on the critical path
----------------------------------
A torch.profiler trace inflates every recorded host event (``model.profiler_cost`` has the
per-event costs). An event only delays the GPU when the GPU has little launched work ahead of
it: its *slack* = (end of all GPU work issued by launch/copy calls that returned before the
event) - (event start) is below 100 µs. ``P`` = the summed cost of the steady steps' host
events with slack < 100 µs: what the traced steps are longer than untraced ones.

Host-side claims (``sync_drain``, ``gaps``, ``launch``, ``host``) are scaled by
``host_factor = f x T / (T - P)`` with ``f = max(0, 1 - P / H)``, ``H`` = GPU idle time
outside input waits and blocked syncs and ``T`` = the traced steps' wall time: ``f`` turns
traced idle time into untraced idle time, and ``T / (T - P)`` expresses it in the traced
step's units, so that its share of the (traced) step equals its share of the untraced step.
The saving's *percentage* is therefore the estimate of the real speed-up, and its
milliseconds are in the traced run's time like every other figure of the report. Claims the
profiler does not inflate (input waits, idle while blocked in a sync) are scaled by
``share_keep = T / (T - P)`` alone, for the same reason. When the
host is the bottleneck (``H`` close to ``T``) the factor is close to 1 whatever ``P`` is.

A sync point that waited (head >= 50 µs) gets its ``head`` grown by the cost of the host events
since the previous sync point that were *off* the critical path (slack >= 100 µs: the untraced host reaches the sync
that much earlier while the GPU finishes at the same time), at most the GPU busy time since
then; the claim after it is ``head / f`` of traced idle time. All factors are 1 for runs that
do not come from torch.profiler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis import intervals as iv
from stepscope.analysis.breakdown import host_idle
from stepscope.analysis.busy import IntervalSet, gpu_activity, rank_union
from stepscope.analysis.callbacks import callback_set
from stepscope.analysis.input import input_wait_intervals
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import LONG_GAP_NS
from stepscope.analysis.steady import Step
from stepscope.analysis.syncs import sync_intervals
from stepscope.model.profiler_cost import costs_for, gpu_slack, host_events

MIN_HEAD_NS = 50_000  # a sync point that waited less on a busy GPU did not wait for it


@dataclass(frozen=True)
class IdleSplit:
    """Claimed GPU-idle time of one rank's steady steps (module docstring)."""

    rank: int
    steps: tuple[Step, ...]  # steady steps, aligned with the windows
    win_start: I64
    win_end: I64
    input: IntervalSet
    sync_blocked: IntervalSet
    sync_drain: IntervalSet
    gaps: IntervalSet
    launch: IntervalSet
    host: IntervalSet
    other: IntervalSet  # part of ``host`` with no host event
    callback: IntervalSet  # part of ``host`` inside host-callback thunks
    callback_copy: IntervalSet  # copy-only GPU time inside the thunks (not idle: not in host)
    host_factor: float  # f x T / (T - P), module docstring
    share_keep: float  # T / (T - P): untraced time in traced-step units
    profiler_ns_per_step: float  # P per step

    @property
    def n(self) -> int:
        return len(self.steps)

    def per_step(self, s: IntervalSet) -> I64:
        """Length of ``s`` inside each steady window (ns)."""
        return s.within(self.win_start, self.win_end)

    def mean_ms(self, s: IntervalSet) -> float:
        return float(self.per_step(s).mean()) / 1e6 if self.n else 0.0

    @property
    def wall_ns(self) -> I64:
        return self.win_end - self.win_start


def _touching(s: IntervalSet, edges: I64) -> IntervalSet:
    """Intervals of ``s`` that contain or touch one of the sorted ``edges``."""
    if s.starts.size == 0 or edges.size == 0:
        return IntervalSet.empty()
    lo = np.searchsorted(edges, s.starts, side="left")
    hi = np.searchsorted(edges, s.ends, side="right")
    m = hi > lo
    return IntervalSet(s.starts[m], s.ends[m])


def _first_after(s: IntervalSet, start: I64, amount: I64, limit: I64) -> IntervalSet:
    """For each ``i``: the first ``amount[i]`` ns of ``s`` after ``start[i]``, not beyond
    ``limit[i]``; their union."""
    if s.starts.size == 0 or start.size == 0:
        return IntervalSet.empty()
    cum = np.concatenate(([0], np.cumsum(s.ends - s.starts)))
    before = iv.overlap_with_windows(s.starts, s.ends, np.full(start.size, s.starts[0]), start)
    target = before + np.maximum(amount, 0)
    k = np.searchsorted(cum, target, side="right") - 1
    inside = k < s.starts.size
    kk = np.minimum(k, s.starts.size - 1)
    stop = np.where(inside, s.starts[kk] + (target - cum[kk]), s.ends[-1])
    stop = np.minimum(stop, limit)
    return s & IntervalSet.of(start, np.maximum(stop, start))


def sync_claim(ra: RankAnalysis, busy: IntervalSet, eligible: IntervalSet, origin: int, *,
               factor: float = 1.0, ev_ts: I64 | None = None, ev_off_cost: I64 | None = None
               ) -> IntervalSet:
    """The idle time each sync point causes after it, inside ``eligible`` (module docstring):
    the first ``head / factor`` ns of ``eligible`` idle time after the point's end, before the
    next point that waits on a busy GPU. ``head`` = GPU busy time during the point, plus, for a
    point that waited (head >= 50 µs), the profiler cost of the off-critical-path host events
    since the previous point (``ev_off_cost``: the untraced host reaches the sync that much
    earlier while the GPU finishes at the same time), at most the GPU busy time since then."""
    if not ra.syncs.events or busy.starts.size == 0 or eligible.starts.size == 0:
        return IntervalSet.empty()
    all_ts = np.array([e.ts_ns for e in ra.syncs.events], dtype=np.int64)
    all_end = np.array([e.end_ns for e in ra.syncs.events], dtype=np.int64)
    all_head = iv.overlap_with_windows(busy.starts, busy.ends, all_ts, all_end)
    waits = np.flatnonzero(all_head >= MIN_HEAD_NS)  # points that waited on a busy GPU
    # every point, also those just before the steady windows: their idle lands in them
    idx = np.flatnonzero(all_end <= eligible.ends[-1]).astype(np.int64)
    ts, end, head = all_ts[idx], all_end[idx], all_head[idx]
    prev_end = np.where(idx > 0, all_end[np.maximum(idx - 1, 0)], np.minimum(origin, ts))
    j = np.searchsorted(waits, idx, side="right")
    nxt = np.where(j < waits.size, all_ts[waits[np.minimum(j, max(waits.size - 1, 0))]]
                   if waits.size else 0, np.iinfo(np.int64).max)
    if ev_ts is not None and ev_off_cost is not None and ev_ts.size:
        cum = np.concatenate(([0], np.cumsum(ev_off_cost)))
        extra = cum[np.searchsorted(ev_ts, ts)] - cum[np.searchsorted(ev_ts, prev_end)]
        since = iv.overlap_with_windows(busy.starts, busy.ends, np.minimum(prev_end, ts), end)
        waited = head >= MIN_HEAD_NS  # returned at once: the untraced host would not wait either
        head = np.where(waited, np.minimum(head + np.maximum(extra, 0), np.maximum(since, head)),
                        head)
    amount = (head / factor).astype(np.int64) if factor > 0 else np.zeros_like(head)
    starts, limits = end, nxt
    first = int(np.argmax(head >= MIN_HEAD_NS)) if (head >= MIN_HEAD_NS).any() else -1
    if first >= 0 and not (all_end <= origin).any():
        # the trace starts inside the loop: the first step's idle before its first sync
        # follows a sync of the step before, outside the trace; assume the same head start
        starts = np.append(starts, origin)
        limits = np.append(limits, ts[first])
        amount = np.append(amount, amount[first])
    return _first_after(eligible, starts, amount, limits)


def split_idle(analysis: Analysis, ra: RankAnalysis) -> IdleSplit:
    """The split of ``ra``'s idle time, computed once per analysis."""
    return analysis.memo(("split_idle", ra.rank), lambda: _split_idle(analysis, ra))


def _split_idle(analysis: Analysis, ra: RankAnalysis) -> IdleSplit:
    """The claims of every idle-time remedy on rank ``ra`` (module docstring)."""
    g = analysis.graph.rank(ra.rank)
    steps = ra.steps.steady
    # the steps' windows on the GPU timeline (the markers unless the GPU lags the host)
    ws = np.array([s.window[0] for s in steps], dtype=np.int64)
    we = np.array([s.window[1] for s in steps], dtype=np.int64)
    window = IntervalSet.of(ws, we)
    act = rank_union(gpu_activity(g))
    busy = act.busy
    idle = window - busy
    inp = idle & IntervalSet.of(*input_wait_intervals(g))
    rest = idle - inp
    thunks = callback_set(g)
    callback = rest & thunks  # host work, the wait for its copy included
    callback_copy = ((window & thunks) & busy) - act.kernels if thunks.starts.size else \
        IntervalSet.empty()
    rest = rest - callback
    blocked = rest & IntervalSet.of(*sync_intervals(g))
    rest = rest - blocked
    costs = costs_for(analysis.graph, g)
    factor, prof, share_keep = 1.0, 0.0, 1.0
    ev_ts = ev_off = None
    if costs is not None and steps:
        ev_ts, ev_cost = host_events(g, costs)
        in_win = iv.assign_to_windows(ev_ts, ws, we) >= 0
        path = gpu_slack(g, ev_ts) < LONG_GAP_NS
        prof_ns = float(ev_cost[in_win & path].sum())
        ev_off = np.where(path, 0, ev_cost)
        prof = prof_ns / len(steps)
        factor = max(0.0, 1.0 - prof_ns / rest.total_ns) if rest.total_ns else 1.0
        traced = float((we - ws).sum())
        share_keep = traced / (traced - prof_ns) if traced > prof_ns else 1.0
    drain = sync_claim(ra, busy, rest, int(ws[0]) if steps else 0, factor=factor, ev_ts=ev_ts,
                       ev_off_cost=ev_off)
    rest = rest - drain
    edges = np.unique(np.concatenate((ws, we)))
    gaps = rest & _touching(idle, edges)
    rest = rest - gaps
    split = host_idle(g, rest)  # the breakdown's rule too (analysis.breakdown)
    launch = split.launch
    host = split.host | callback
    other = host - split.known
    # neither the busy nor the idle set is kept: the rules read the claims, and the busy set
    # (the whole trace's GPU activity again) and the idle set (its complement in the windows)
    # would be most of what a worker of a rank-parallel analysis sends back for the split
    return IdleSplit(rank=ra.rank, steps=steps, win_start=ws, win_end=we,
                     input=inp, sync_blocked=blocked, sync_drain=drain, gaps=gaps, launch=launch,
                     host=host, other=other, callback=callback, callback_copy=callback_copy,
                     host_factor=factor * share_keep,
                     share_keep=share_keep, profiler_ns_per_step=prof)
