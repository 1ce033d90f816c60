"""``no_copy_overlap``: copies serialised with compute instead of running under it.

A HtoD (or DtoH) copy of at least 64 KiB from pinned (or device-registered) host memory that
no kernel overlaps, while GPU work waits for it: the copy sits on the compute stream (or
was issued too late) and the copy engine works while the SMs idle. Pageable copies are
left to ``pageable_memcpy`` (they cannot overlap anything until pinned); copies < 64 KiB
to ``excess_transfers``. See docs/rules/no_copy_overlap.md.

A copy is *on the critical path* when GPU work queued behind it: the next kernel on its
device starts at or after the copy's end and was launched (its API call ended) before the
copy ended; or, with no launch call in the trace, it starts within 10 us of the copy's
end; or a host thread was blocked in a sync / blocking call at the copy's end (waiting
for it). Estimate::

    exposed(step) = sum over critical copies issued in the step of their time with no
                    kernel running
    saving(step)  = min(exposed, compute time issued in the step)

(prefetching the next batch on a copy stream hides a copy under the step's kernels, at
most as much as there is compute to hide it under). Mean over steady steps, then ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stepscope.advisor.base import Context, Finding, Fix, Where
from stepscope.advisor.rules import _transfers as tr
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.intervals import I64
from stepscope.analysis.syncs import sync_intervals
from stepscope.model import transfers as mt
from stepscope.model.kernels import kernel_columns

ID = "no_copy_overlap"
CATEGORY = "memcpy"
QUEUE_GAP_NS = 10_000

FIX = Fix(
    pytorch=("Overlap the copy with compute: keep host tensors pinned, copy with "
             "non_blocking=True on a side stream (s = torch.cuda.Stream(); with "
             "torch.cuda.stream(s): nxt = batch.to(dev, non_blocking=True)), and before using "
             "it call torch.cuda.current_stream().wait_stream(s) and nxt.record_stream("
             "torch.cuda.current_stream()); issue the next batch's copy before running this "
             "step (the data-prefetcher pattern)."),
    tensorflow=("Stage batches ahead of the step: tf.data.experimental.prefetch_to_device("
                "'/gpu:0') (or copy_to_device + prefetch(2)) at the end of the input pipeline."),
    jax=("Double-buffer: jax.device_put the next batch before calling the jitted step on the "
         "current one (device_put is asynchronous), e.g. flax.jax_utils.prefetch_to_device("
         "iterator, 2)."),
    cuda=("Issue cudaMemcpyAsync from pinned memory on a second stream, record an event "
          "and cudaStreamWaitEvent on the compute stream; copy batch i+1 while batch i "
          "computes."),
)


@dataclass(frozen=True)
class RankResult:
    rank: int
    n_steps: int
    count: int  # critical copies over the steady steps
    nbytes: int
    copy_ns: int
    exposed_ns: int
    compute_ns: int  # compute issued in the steps with critical copies
    saving_ns: int
    same_stream: int  # critical copies on a stream that also runs compute kernels
    directions: tuple[str, ...]
    streams: tuple[int, ...]
    steps: tuple[int, ...]
    start_ns: int
    end_ns: int
    sites: tuple[str, ...]
    gpu: mt.GpuSteps | None

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6


def _queued_behind(run_kernels: tuple[I64, I64, I64, I64], copy_e: I64, copy_dev: I64,
                   launch_end: I64, has_launch: np.ndarray) -> np.ndarray:
    """Per copy: did the next kernel on its device wait for it (module docstring)?"""
    ks, _ke, kd, _ = run_kernels
    out = np.zeros(copy_e.size, dtype=bool)
    for dev in np.unique(copy_dev):
        km = np.flatnonzero(kd == dev)
        if km.size == 0:
            continue
        order = km[np.argsort(ks[km], kind="stable")]
        cm = np.flatnonzero(copy_dev == dev)
        j = np.searchsorted(ks[order], copy_e[cm], side="left")
        ok = j < order.size
        nxt = order[np.minimum(j, order.size - 1)]
        waited = np.where(has_launch[nxt], launch_end[nxt] < copy_e[cm],
                          ks[nxt] - copy_e[cm] <= QUEUE_GAP_NS)
        out[cm] = ok & waited
    return out


def analyze_rank(ctx: Context, ra: RankAnalysis) -> RankResult | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
    g = ctx.graph_of(ra.rank)
    api = mt.load_api(g)
    c = mt.load_copies(g, win, api)
    sel = (c.step >= 0) & (c.htod | c.dtoh) & ~c.pageable & ~c.tiny
    if not sel.any():
        return None
    act = mt.activity(g)
    kern = act.kernels
    exposed = mt.uncovered(kern, c.s, c.e)
    sel &= exposed > 0
    if not sel.any():
        return None
    kc = kernel_columns(g)
    ks, ke, kd = kc.start, kc.end, kc.device
    krow = kc.api_row  # the launch call of each kernel
    has_launch = krow >= 0
    launch_end = np.where(has_launch, api.e[np.maximum(krow, 0)] if api.e.size else 0, 0)
    queued = _queued_behind((ks, ke, kd, krow), c.e, c.device, launch_end, has_launch)
    ss, se = sync_intervals(g)
    waited = IntervalSet(ss, se).within(c.e - 1, c.e) > 0
    crit = sel & (queued | waited)
    if not mt.recurring(c.step[crit], win.n):
        return None
    idx = np.flatnonzero(crit)
    # compute issued per step: kernels assigned to steps by their launch call's start
    comp = ~kc.communication
    k_issue = np.where(has_launch, api.s[np.maximum(krow, 0)] if api.s.size else 0, ks)
    k_step = win.assign(k_issue)
    if mt.linked_mostly(has_launch):
        k_step = np.where(has_launch, k_step, -1)
    compute = mt.union_per_group(ks, ke, np.where(comp, k_step, -1), win.n)
    exp_step = np.zeros(win.n, dtype=np.int64)
    np.add.at(exp_step, c.step[idx], exposed[idx])
    saving = np.minimum(exp_step, compute)
    hit = np.unique(c.step[idx])
    streams_with_compute = set(kc.stream[comp].tolist())
    same = np.array([int(s) in streams_with_compute for s in c.stream[idx]], dtype=bool)
    first = idx[c.step[idx] == c.step[idx].min()]
    api_s = np.where(c.has_api[idx], c.api_s[idx], c.s[idx])
    api_e = np.where(c.has_api[idx], c.api_e[idx], c.e[idx])
    sites = mt.call_sites(g, c.pid[idx], c.tid[idx], api_s, api_e)
    dirs = tuple(d for d, m in (("HtoD", c.htod), ("DtoH", c.dtoh)) if (m[idx]).any())
    return RankResult(
        rank=ra.rank, n_steps=win.n, count=int(idx.size), nbytes=int(c.nbytes[idx].sum()),
        copy_ns=int(c.ns[idx].sum()), exposed_ns=int(exposed[idx].sum()),
        compute_ns=int(compute[hit].sum()), saving_ns=int(saving.sum()),
        same_stream=int(same.sum()), directions=dirs,
        streams=tuple(sorted({int(s) for s in c.stream[idx]})),
        steps=tuple(win.steps[int(s)] for s in hit),
        start_ns=int(c.s[first].min()), end_ns=int(c.e[first].max()),
        sites=mt.top_labels(sites.label), gpu=mt.gpu_steps(g, ra, api),
    )


def check(ctx: Context) -> Sequence[Finding]:
    best = tr.mean_over_ranks(ctx, (analyze_rank(ctx, ra) for ra in ctx.ranks))
    if best is None:
        return []
    saving_ms, r, results = best
    n_ranks = max(1, len(ctx.ranks))
    n = r.n_steps
    gbs = r.nbytes / r.copy_ns if r.copy_ns else 0.0
    where_stream = (f"on the compute stream ({', '.join(str(s) for s in r.streams)})"
                    if r.same_stream == r.count else
                    f"on stream(s) {', '.join(str(s) for s in r.streams)}; "
                    f"{r.same_stream} of {r.count} on a stream that also runs compute")
    kind = "/".join(r.directions)
    ev = [
        (f"{tr.plural(r.count / n, kind + ' copy', kind + ' copies')} per step "
        f"({tr.fmt_bytes(r.nbytes / n)}, {tr.fmt_ms(r.copy_ns / n / 1e6)} ms at {gbs:.1f} GB/s) "
        f"{where_stream}"),
        (f"{tr.fmt_ms(r.exposed_ns / n / 1e6)} ms per step of them overlap no kernel while GPU "
        "work waited for them (kernels queued behind, or the host blocked on them)"),
        f"{tr.fmt_ms(r.compute_ns / n / 1e6)} ms of compute per step to hide them under",
    ]
    if r.sites:
        ev.append("issued from: " + "; ".join(r.sites))
    if n_ranks > 1:
        ev.append(f"{len(results)} of {n_ranks} ranks; the largest is rank {r.rank}")
    cap, note = tr.host_ahead_cap(saving_ms, ctx.step_ms, r.gpu)
    return [ctx.finding(
        id=ID, category=CATEGORY,
        title=(f"{tr.fmt_bytes(r.nbytes / n)} of copies per step run with no compute under them "
               f"({tr.fmt_ms(r.exposed_ns / n / 1e6)} ms exposed): prefetching on a copy stream "
               f"saves ~{tr.fmt_ms(saving_ms)} ms per step"),
        saving_ms=saving_ms,
        method=("time with no kernel running of the pinned >= 64 KiB HtoD/DtoH copies that GPU "
                "work waited for (the next kernel was launched before the copy ended, or the "
                "host was blocked on it), capped per step at the compute time issued in the "
                f"step; mean over {n} steady steps" + (" and over ranks" if n_ranks > 1 else "")),
        evidence=ev, fix=FIX,
        where=Where(rank=r.rank, steps=r.steps, start_ns=r.start_ns, end_ns=r.end_ns,
                    call_sites=r.sites),
        max_severity=cap, note=note,
    )]


@dataclass(frozen=True)
class _Rule:
    id: str = ID
    title: str = "Copies serialised with compute"
    category: str = CATEGORY
    requires: tuple[str, ...] = ("memcpy", "kernels")

    def check(self, ctx: Context) -> Sequence[Finding]:
        return check(ctx)


RULE = _Rule()

__all__ = ["RULE", "RankResult", "analyze_rank"]
