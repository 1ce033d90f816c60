"""GPU idle time of a rank's steady steps, split among the idle-time rules.

Shared by ``input_bound``, ``sync_calls``, ``step_gaps``, ``launch_bound`` and
``host_bound`` so that no nanosecond of GPU idle time is claimed by two of them
(their savings can be added up). Over the GPU-idle time inside the steady step
windows (idle = no kernel, memcpy or memset on any device of the rank), first
claim wins:

1. ``input``         a thread waits for the next batch (``input_waits``);
2. ``sync_blocked``  a host thread is blocked in a sync or a blocking copy
                     (``analysis.syncs.sync_intervals``);
   ``sync_drain``    after each sync point, the idle time from the point's end until
                     the GPU gets work again, capped at the GPU busy time *during* the
                     point (the head start the host gave away by waiting: without the
                     sync the host would have been that far ahead of the GPU, and could
                     have hidden that much host work);
3. ``gaps``          the idle interval that touches a step boundary (from the last GPU
                     activity before the boundary to the first after it);
4. ``launch``        a host thread is in the launch path (launch call or the framework
                     op issuing it, ``analysis.launches.launch_intervals``) during a
                     launch-bound wait of at most 100 µs (the GPU finished its work and
                     waits for the next launch: the launch-overhead signature);
5. ``host``          a host thread runs framework ops, Python functions or user
                     annotations (``analysis.breakdown.host_work_intervals``), or is in
                     the launch path during a longer wait (CPU work before a launch);
6. ``other``         nothing known on the host.

Profiler cost on the critical path
----------------------------------
A torch.profiler trace inflates every host event (``advisor.overhead``: ~2.7 µs each
with stacks, ~2.0 µs without). An event only delays the GPU when the GPU has little
launched work ahead of it: its *slack* = (end of all GPU work issued by launch/copy calls
that returned before the event) - (event start) is below 100 µs. Host-side claims
(``sync_drain``, ``gaps``, ``launch``, ``host``) are scaled by
``host_factor = max(0, 1 - profiler_ns / host_idle_ns)``, where ``profiler_ns`` =
(host events of the steady steps with slack < 100 µs) x (per-event cost) and
``host_idle_ns`` = GPU idle time outside input waits and blocked syncs. The factor is 1
for runs that do not come from torch.profiler. On this project's H100 GPT fixture
(with_stack) it turns 27.5 ms of traced host-side idle per step into 12.9 ms; the
untraced step measured 25 ms with 12.1 ms of GPU time, i.e. 12.9 ms idle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import Context
from stepscope.advisor.overhead import COST_PER_EVENT_NS, COST_PER_EVENT_WITH_STACK_NS, host_trust
from stepscope.analysis import RankAnalysis
from stepscope.analysis import intervals as iv
from stepscope.analysis.breakdown import host_work_intervals
from stepscope.analysis.busy import IntervalSet, gpu_activity, rank_union
from stepscope.analysis.input import input_wait_intervals
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import (
    LONG_GAP_NS,
    bounds,
    column_i64,
    gpu_records,
    launch_bound_gaps,
    launch_intervals,
)
from stepscope.analysis.steps import Step
from stepscope.analysis.syncs import sync_intervals
from stepscope.store.run import Run

HEALTHY_BUSY_SHARE = 0.90  # at or above this GPU busy share, idle-time findings stay info


@dataclass(frozen=True)
class IdleSplit:
    """Claimed GPU-idle time of one rank's steady steps (module docstring)."""

    rank: int
    steps: tuple[Step, ...]  # steady steps, aligned with the windows
    win_start: I64
    win_end: I64
    busy: IntervalSet  # GPU busy, all devices of the rank, whole trace
    idle: IntervalSet  # GPU idle inside the steady windows
    input: IntervalSet
    sync_blocked: IntervalSet
    sync_drain: IntervalSet
    gaps: IntervalSet
    launch: IntervalSet
    host: IntervalSet
    other: IntervalSet
    host_factor: float
    profiler_ns_per_step: float

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

    @property
    def busy_share(self) -> float:
        """GPU busy time / wall time over the steady steps."""
        wall = int(self.wall_ns.sum())
        return 1.0 - self.idle.total_ns / wall if wall else 0.0

    def worst(self, per_step: I64) -> Step:
        """The steady step with the largest value."""
        return self.steps[int(np.argmax(per_step))]


def _touching(s: IntervalSet, edges: I64) -> IntervalSet:
    """Intervals of ``s`` that contain or touch one of the sorted ``edges``."""
    if s.starts.size == 0 or edges.size == 0:
        return IntervalSet.empty()
    lo = np.searchsorted(edges, s.starts, side="left")
    hi = np.searchsorted(edges, s.ends, side="right")
    m = hi > lo
    return IntervalSet(s.starts[m], s.ends[m])


def sync_drain(ra: RankAnalysis, busy: IntervalSet) -> IntervalSet:
    """``[end, end + min(drain, busy during the point))`` for every sync point in a steady
    window, where ``drain`` = time from the point's end to the next GPU activity."""
    evs = [e for e in ra.syncs.events if e.step >= 0]
    if not evs or busy.starts.size == 0:
        return IntervalSet.empty()
    ts = np.array([e.ts_ns for e in evs], dtype=np.int64)
    end = np.array([e.end_ns for e in evs], dtype=np.int64)
    head = iv.overlap_with_windows(busy.starts, busy.ends, ts, end)
    j = np.searchsorted(busy.starts, end, side="right") - 1
    inside = (j >= 0) & (end < busy.ends[np.maximum(j, 0)])
    k = np.searchsorted(busy.starts, end, side="left")
    nxt = np.where(k < busy.starts.size, busy.starts[np.minimum(k, busy.starts.size - 1)], end)
    drain = np.where(inside, 0, nxt - end)
    return IntervalSet.of(end, end + np.minimum(drain, head))


def events_on_path(run: Run, rank: int, win_start: I64, win_end: I64, *,
                   slack_ns: int = LONG_GAP_NS) -> int:
    """Host events (``cpu_ops``) starting in the windows while the GPU had less than
    ``slack_ns`` of issued work ahead (module docstring)."""
    ts, _ = bounds(run.table("cpu_ops", rank))
    ts = ts[iv.assign_to_windows(ts, win_start, win_end) >= 0]
    if ts.size == 0:
        return 0
    api = run.table("api_calls", rank)
    a_e = bounds(api)[1]
    corr = column_i64(api, "correlation", -1)
    _, g_e, _, g_c = gpu_records(run, rank)
    keep = g_c >= 0
    g_c, g_e = g_c[keep], g_e[keep]
    if g_c.size == 0:
        return int(ts.size)
    order = np.argsort(g_c, kind="stable")
    uniq, first = np.unique(g_c[order], return_index=True)
    last_end = np.maximum.reduceat(g_e[order], first)
    pos = np.minimum(np.searchsorted(uniq, corr), uniq.size - 1)
    hit = (corr >= 0) & (uniq[pos] == corr)
    issued, done = a_e[hit], last_end[pos[hit]]
    o = np.argsort(issued, kind="stable")
    issued, ahead = issued[o], np.maximum.accumulate(done[o])
    i = np.searchsorted(issued, ts, side="right") - 1
    slack = np.where(i >= 0, ahead[np.maximum(i, 0)] - ts, 0)
    return int((slack < slack_ns).sum())


def split_idle(ctx: Context, ra: RankAnalysis) -> IdleSplit:
    """The claims of every idle-time rule on rank ``ra`` (module docstring)."""
    run, rank = ctx.run, ra.rank
    steps = ra.steps.steady
    ws = np.array([s.start_ns for s in steps], dtype=np.int64)
    we = np.array([s.end_ns for s in steps], dtype=np.int64)
    window = IntervalSet.of(ws, we)
    busy = rank_union(gpu_activity(run, rank)).busy
    idle = window - busy
    inp = idle & IntervalSet.of(*input_wait_intervals(run, rank))
    rest = idle - inp
    blocked = rest & IntervalSet.of(*sync_intervals(run, rank))
    rest = rest - blocked
    host_idle = rest
    drain = rest & sync_drain(ra, busy)
    rest = rest - drain
    edges = np.unique(np.concatenate((ws, we)))
    gaps = rest & _touching(idle, edges)
    rest = rest - gaps
    g_s, g_e = launch_bound_gaps(run, rank)
    short = (g_e - g_s) <= LONG_GAP_NS
    launch_path = IntervalSet.of(*launch_intervals(run, rank))
    launch = rest & launch_path & IntervalSet.of(g_s[short], g_e[short])
    rest = rest - launch
    host = rest & (host_work_intervals(run, rank) | launch_path)
    other = rest - host

    factor, prof = 1.0, 0.0
    if run.manifest.source.kind == "kineto" and steps:
        trust = host_trust(run, ctx.analysis)
        cost = COST_PER_EVENT_WITH_STACK_NS if trust.with_stack else COST_PER_EVENT_NS
        prof_ns = events_on_path(run, rank, ws, we) * cost
        prof = prof_ns / len(steps)
        factor = max(0.0, 1.0 - prof_ns / host_idle.total_ns) if host_idle.total_ns else 1.0
    return IdleSplit(rank=rank, steps=steps, win_start=ws, win_end=we, busy=busy, idle=idle,
                     input=inp, sync_blocked=blocked, sync_drain=drain, gaps=gaps, launch=launch,
                     host=host, other=other, host_factor=factor, profiler_ns_per_step=prof)
