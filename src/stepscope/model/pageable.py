"""What pinning the pageable host copies would save per step (the method: the
``pageable_memcpy`` rule's docs page and module docstring).

Copies made inside an XLA host-callback thunk (``analysis.callbacks``) are left out: XLA
allocates their host buffers, so the user cannot pin them; they go with the callback
(``host_bound``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.callbacks import inside_callbacks
from stepscope.analysis.copies import pageable_at_pinned_ns
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.results import FACT
from stepscope.model import transfers as mt

PINNED_CALL_NS = 10_000  # host cost of an async pinned copy call when the run shows none


@dataclass(frozen=True)
class PageableCopies:
    rank: int
    n_steps: int
    count: int  # pageable copies >= 64 KiB in the steady steps
    nbytes: int
    gpu_ns: int  # their GPU copy time
    blocked_ns: int  # host time in their calls (incl. the syncs waiting for them)
    exposed_ns: int  # no-kernel time in their spans
    pinned_ns: int  # the same bytes at pinned bandwidth
    saving_ns: int  # over the steady steps
    directions: tuple[str, ...]
    bandwidth_gbs: float  # pinned bandwidth used
    basis: str
    pinned_samples: int
    compute: str  # "9.0"
    call_ns: int
    steps: tuple[int, ...]  # StepInfo indexes with offending copies
    start_ns: int
    end_ns: int
    sites: tuple[str, ...]

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6


def pageable_copies(g: StepGraph, ra: RankAnalysis) -> PageableCopies | None:
    """Memoised on the rank's graph (a per-rank fact: ``advisor.rank_facts``); see ``_pageable_copies``."""
    return g.memo((FACT, "pageable_copies"), lambda: _pageable_copies(g, ra))


def _pageable_copies(g: StepGraph, ra: RankAnalysis) -> PageableCopies | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
    api = mt.load_api(g)
    c = mt.load_copies(g, win, api)
    sel = (c.step >= 0) & c.pageable & (c.htod | c.dtoh) & ~c.tiny
    if sel.any():  # not the callbacks' own copies (module docstring)
        sel &= ~inside_callbacks(g, c.issue)
    if not mt.recurring(c.step[sel], win.n):
        return None
    idx = np.flatnonzero(sel)
    # pinned bandwidth per direction (this run's pinned copies, else nominal PCIe)
    est = np.zeros(c.s.size, dtype=np.int64)
    bw_used, basis, samples = 0.0, "", 0
    call = np.full(c.s.size, PINNED_CALL_NS, dtype=np.int64)
    directions = []
    for d, m in (("HtoD", c.htod), ("DtoH", c.dtoh)):
        dm = sel & m
        if not dm.any():
            continue
        directions.append(d)
        pe = pageable_at_pinned_ns(g, win.starts, win.ends, d)
        est[dm] = np.minimum(c.ns[dm], np.ceil(c.nbytes[dm] / pe.bandwidth_gbs).astype(np.int64))
        if not basis or pe.pageable_ns > 0:
            bw_used, basis, samples = pe.bandwidth_gbs, pe.basis, pe.pinned_samples
        pinned_calls = m & c.pinned & c.has_api & (c.step >= 0)
        if pinned_calls.any():
            call[dm] = int(np.median((c.api_e - c.api_s)[pinned_calls]))
    host = mt.on_launch_thread(c, api)
    end_call = mt.call_end(c, mt.sync_ends(ra))
    # the host call (with the sync waiting for it) and the GPU copy: two intervals
    call_s = np.where(host, c.api_s, c.s)
    call_e = np.where(host, end_call, c.s)
    span_s, span_e = np.minimum(call_s, c.s), np.maximum(call_e, c.e)
    act = mt.activity(g)
    kern, busy = act.kernels, act.busy
    exposed = mt.uncovered_pair(kern, call_s, call_e, c.s, c.e)
    step_end = win.ends[np.maximum(c.step, 0)]
    refill = np.where(host, mt.gap_to_next(busy, span_e, step_end), 0)
    per_call = np.where(host, call, 0)
    saving = np.maximum(0, exposed - per_call - np.maximum(0, est - refill))
    # per step, never more than the non-kernel time of the union of calls and copies
    per_step = np.zeros(win.n, dtype=np.int64)
    np.add.at(per_step, c.step[idx], saving[idx])
    spans = IntervalSet.of(np.concatenate((call_s[idx], c.s[idx])),
                           np.concatenate((call_e[idx], c.e[idx]))) - kern
    per_step = np.minimum(per_step, spans.within(win.starts, win.ends))
    blocked = np.where(host, call_e - call_s, 0)
    hit_steps = sorted({int(win.steps[int(k)]) for k in np.unique(c.step[idx])})
    first = idx[c.step[idx] == c.step[idx].min()]
    sites = mt.call_sites(g, c.pid[idx], c.tid[idx],
                          np.where(c.has_api[idx], c.api_s[idx], c.s[idx]),
                          np.where(c.has_api[idx], c.api_e[idx], c.e[idx]))
    dev = ra.devices[0] if ra.devices else {}
    cc = (f"{dev.get('compute_major')}.{dev.get('compute_minor')}"
          if dev.get("compute_major") is not None else "")
    pinned_call = call[idx]
    return PageableCopies(
        rank=ra.rank, n_steps=win.n, count=int(idx.size), nbytes=int(c.nbytes[idx].sum()),
        gpu_ns=int(c.ns[idx].sum()), blocked_ns=int(blocked[idx].sum()),
        exposed_ns=int(exposed[idx].sum()), pinned_ns=int(est[idx].sum()),
        saving_ns=int(per_step.sum()), directions=tuple(directions), bandwidth_gbs=bw_used,
        basis=basis, pinned_samples=samples, compute=cc,
        call_ns=int(np.median(pinned_call)) if pinned_call.size else PINNED_CALL_NS,
        steps=tuple(hit_steps), start_ns=int(span_s[first].min()),
        end_ns=int(span_e[first].max()), sites=mt.top_labels(sites.label),
    )
