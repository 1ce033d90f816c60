"""``excess_transfers``: host-device traffic beyond the input batch inside the step.

Two patterns, one finding each (see docs/rules/excess_transfers.md):

**Round trips.** A DtoH copy, then host work with no kernel launch on that thread, then an
HtoD copy on the same thread in the same step: data went to the CPU to be computed on
(NumPy, a CPU-placed op) and came back. Conditions, all required: both copies issued in
the same steady step by the same thread (when the trace links their calls); some kernel
ran in the step before the DtoH (the data read back was produced in this step, not the
previous step's result); no kernel launch from that thread between the two copies (else
the GPU was given other work); no data-loader wait in between (that is the next batch,
not a round trip). Several DtoH copies before one HtoD form one round trip.

    span    = [first DtoH start, max(HtoD end, its call end, the sync waiting for it)]
    saving  = time in span with no kernel running
              + GPU idle after the span until the GPU gets work again (the host
                refilling the queue the round trip drained)

**Many tiny host-to-device copies.** At least 8 HtoD copies of < 64 KiB per step (not part
of a round trip): small tensors made from host values one by one. Each costs a call, a
framework op and often a sync, while the GPU may wait.

    host_i  = [start of the framework op issuing copy i (<= 200 us, else the call),
               max(op end, call end, the sync waiting for it)]
    saving  = time with no kernel running in the union of the host_i and of the GPU
              copies of the step - that of one median copy (the batched copy that remains)

Both: summed per step, mean over steady steps, then over ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.input import input_wait_intervals
from stepscope.analysis.intervals import I64
from stepscope.model import transfers as mt
from stepscope.model.host_ops import HostOps

ID = "excess_transfers"
CATEGORY = "memcpy"
MIN_TINY_PER_STEP = 8

FIX_ROUND_TRIP = Fix(
    pytorch=("Keep the computation on the GPU: replace the NumPy/CPU code between "
             ".cpu()/.numpy() and the copy back with torch ops on the device tensor "
             "(torch.clamp, torch.where, torch.sort ...); avoid .cpu(), .numpy(), .tolist() "
             "and torch.from_numpy(...).to(device) inside the step."),
    tensorflow=("Find the op that runs on the CPU with "
                "tf.debugging.set_log_device_placement(True); avoid tf.numpy_function / "
                "tf.py_function and ops without a GPU kernel inside the step, or move them "
                "into the tf.data pipeline."),
    jax=("Keep arrays on the device inside the step: use jax.numpy instead of numpy, no "
         "np.asarray()/jax.device_get() of intermediate values; jit the whole step so "
         "nothing leaves the device."),
    cuda=("Do the host-side computation in a kernel (or a library call) so the data "
          "stays in device memory."),
)
FIX_TINY = Fix(
    pytorch=("Batch small host values into one tensor and copy once "
             "(torch.tensor(list_of_values, device=...) instead of one torch.tensor per "
             "value); create constants on the device once, outside the loop; keep "
             "counters and scalars as device tensors."),
    tensorflow=("Build constants once outside the step function (tf.function captures them); "
                "pass small values as one tensor."),
    jax=("Pass small host values as one array argument, or close over constants in the "
         "jitted step, instead of device_put of each scalar."),
    cuda="Pack the small host buffers into one pinned buffer and issue one cudaMemcpyAsync.",
)


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


def round_trips(ctx: Context, ra: RankAnalysis, c: mt.Copies, win: mt.Windows, api: mt.Api,
                busy: IntervalSet, kern: IntervalSet) -> tuple[RoundTrips | None, I64]:
    """The round trips of a rank, and the copies (indexes) that make them up."""
    g = ctx.graph_of(ra.rank)
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


def tiny_copies(ctx: Context, ra: RankAnalysis, c: mt.Copies, win: mt.Windows,
                kern: IntervalSet, exclude: I64) -> TinyCopies | None:
    sel = (c.step >= 0) & c.htod & c.tiny
    sel[exclude] = False
    if sel.sum() < MIN_TINY_PER_STEP * win.n or not mt.recurring(c.step[sel], win.n):
        return None
    idx = np.flatnonzero(sel)
    ends = mt.call_end(c, mt.sync_ends(ra))
    api_s = np.where(c.has_api[idx], c.api_s[idx], c.s[idx])
    api_e = np.where(c.has_api[idx], c.api_e[idx], c.e[idx])
    sites = mt.call_sites(ctx.graph_of(ra.rank), c.pid[idx], c.tid[idx], api_s, api_e)
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
class RankResult:
    rank: int
    n_steps: int
    traffic: Traffic
    trips: RoundTrips | None
    tiny: TinyCopies | None


def analyze_rank(ctx: Context, ra: RankAnalysis) -> RankResult | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
    api = mt.load_api(ctx.graph_of(ra.rank))
    c = mt.load_copies(ctx.graph_of(ra.rank), win, api)
    if not ((c.step >= 0) & (c.htod | c.dtoh)).any():
        return None
    act = mt.activity(ctx.graph_of(ra.rank))
    rt, in_trips = round_trips(ctx, ra, c, win, api, act.busy, act.kernels)
    tiny = tiny_copies(ctx, ra, c, win, act.kernels, in_trips)
    return RankResult(ra.rank, win.n, traffic(c, win, api), rt, tiny)


def _where(x: RoundTrips | TinyCopies) -> Where:
    return Where(rank=x.rank, steps=x.steps, start_ns=x.start_ns, end_ns=x.end_ns,
                 call_sites=x.sites)


def _traffic_line(t: Traffic) -> str:
    return (f"per step: HtoD {tr.fmt_bytes(t.htod)} ({tr.fmt_bytes(t.htod_input)} of it issued "
            f"before the step's first kernel launch, usually the input batch), DtoH "
            f"{tr.fmt_bytes(t.dtoh)}")


def check(ctx: Context) -> Sequence[Finding]:
    results = [r for r in (analyze_rank(ctx, ra) for ra in ctx.ranks) if r is not None]
    n_ranks = max(1, len(ctx.ranks))
    out: list[Finding] = []
    trips = [r for r in results if r.trips is not None]
    if trips:
        saving = sum(r.trips.saving_ms for r in trips if r.trips) / n_ranks
        top = max(trips, key=lambda r: r.trips.saving_ns / r.n_steps if r.trips else 0.0)
        rt = top.trips
        if rt is not None and ctx.worth_reporting(saving):
            n = rt.n_steps
            ops = (f"{tr.fmt_ms(rt.host_ns / n / 1e6)} ms per step, "
                   f"{tr.fmt_ms(rt.op_ns / n / 1e6)} ms of it in framework ops"
                   + (f" ({', '.join(rt.ops)})" if rt.ops else "")
                   + ("; the rest is Python/NumPy code the trace does not break down"
                      if rt.op_ns < 0.5 * rt.host_ns else ""))
            ev = [
                (f"{tr.plural(rt.count / n, 'round trip', 'round trips')} per step: "
                f"{tr.fmt_bytes(rt.dtoh_bytes / n)} DtoH, then "
                f"{tr.fmt_ms(rt.host_ns / n / 1e6)} ms of host work with no kernel launch, then "
                f"{tr.fmt_bytes(rt.htod_bytes / n)} HtoD back"),
                f"host work between the copies: {ops}",
                (f"the copies take {tr.fmt_ms(rt.copy_ns / n / 1e6)} ms of GPU time per step; "
                f"the GPU ran no kernel for {tr.fmt_ms(rt.saving_ns / n / 1e6)} ms per step "
                "from the first copy until it got work again"),
                _traffic_line(top.traffic),
            ]
            if rt.sites:
                ev.append("read back at: " + "; ".join(rt.sites))
            if n_ranks > 1:
                ev.append(f"{len(trips)} of {n_ranks} ranks; the largest is rank {rt.rank}")
            out.append(ctx.finding(
                id=ID, category=CATEGORY,
                title=(f"Data goes to the CPU and back inside the step "
                       f"({tr.plural(rt.count / n, 'round trip', 'round trips')}, "
                       f"{tr.fmt_bytes((rt.dtoh_bytes + rt.htod_bytes) / n)} per step): "
                       f"keeping it on the GPU saves ~{tr.fmt_ms(saving)} ms per step"),
                saving_ms=saving,
                method=("time with no kernel running from the DtoH copy's start to the end of "
                        "the HtoD copy (its call and any sync waiting for it), plus the GPU "
                        "idle gap after it until the GPU got work again; summed per step, mean "
                        f"over {n} steady steps" + (" and over ranks" if n_ranks > 1 else "")
                        + "; the GPU op replacing the CPU work is assumed to cost little"),
                evidence=ev, fix=FIX_ROUND_TRIP, where=_where(rt),
                confidence=ctx.host_confidence, note=ctx.host_note,
            ))
    tinies = [r for r in results if r.tiny is not None]
    if tinies:
        saving = sum(r.tiny.saving_ms for r in tinies if r.tiny) / n_ranks
        top = max(tinies, key=lambda r: r.tiny.saving_ns / r.n_steps if r.tiny else 0.0)
        tc = top.tiny
        if tc is not None and ctx.worth_reporting(saving):
            n = tc.n_steps
            ev = [
                (f"{tr.plural(tc.count / n, 'HtoD copy', 'HtoD copies')} of < 64 KiB per step "
                f"({tr.fmt_bytes(tc.nbytes / n)} in all)"),
                (f"the GPU ran no kernel for {tr.fmt_ms(tc.span_ns / n / 1e6)} ms per step while "
                "the host issued them (framework op, copy call, sync)"),
                _traffic_line(top.traffic),
            ]
            if tc.sites:
                ev.append("issued from: " + "; ".join(tc.sites))
            out.append(ctx.finding(
                id=ID, category=CATEGORY,
                title=(f"{tr.fmt_count(tc.count / n)} tiny host-to-device copies per step: "
                       f"batching them saves ~{tr.fmt_ms(saving)} ms per step"),
                saving_ms=saving,
                method=("time with no kernel running while the host issued the tiny copies "
                        "(the framework op around each copy call, the call, the copy and any "
                        "sync waiting for it), minus one median copy (the batched copy that "
                        f"remains); summed per step, mean over {n} steady steps"
                        + (" and over ranks" if n_ranks > 1 else "")),
                evidence=ev, fix=FIX_TINY, where=_where(tc),
                confidence=ctx.host_confidence, note=ctx.host_note,
            ))
    return out


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Host-device traffic beyond the inputs"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("memcpy",)

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE", "RankResult", "analyze_rank", "round_trips", "tiny_copies", "traffic"]
