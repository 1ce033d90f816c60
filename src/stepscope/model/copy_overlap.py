"""What overlapping the copies on the critical path with compute would save per step (the
method: the ``no_copy_overlap`` rule's docs page and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.results import FACT
from stepscope.analysis.syncs import sync_intervals
from stepscope.model import transfers as mt
from stepscope.model.kernels import kernel_columns

QUEUE_GAP_NS = 10_000


@dataclass(frozen=True)
class CopyOverlap:
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


def copy_overlap(g: StepGraph, ra: RankAnalysis) -> CopyOverlap | None:
    """Memoised on the rank's graph (a per-rank fact: ``advisor.rank_facts``); see ``_copy_overlap``."""
    return g.memo((FACT, "copy_overlap"), lambda: _copy_overlap(g, ra))


def _copy_overlap(g: StepGraph, ra: RankAnalysis) -> CopyOverlap | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
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
    return CopyOverlap(
        rank=ra.rank, n_steps=win.n, count=int(idx.size), nbytes=int(c.nbytes[idx].sum()),
        copy_ns=int(c.ns[idx].sum()), exposed_ns=int(exposed[idx].sum()),
        compute_ns=int(compute[hit].sum()), saving_ns=int(saving.sum()),
        same_stream=int(same.sum()), directions=dirs,
        streams=tuple(sorted({int(s) for s in c.stream[idx]})),
        steps=tuple(win.steps[int(s)] for s in hit),
        start_ns=int(c.s[first].min()), end_ns=int(c.e[first].max()),
        sites=mt.top_labels(sites.label), gpu=mt.gpu_steps(g, ra, api),
    )
