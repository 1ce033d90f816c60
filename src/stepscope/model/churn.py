"""What the allocator's churn (cudaMalloc/cudaFree and the like in the steps) costs per step
(the method: the ``memory_pressure`` rule's docs page and module docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.input import input_wait_intervals
from stepscope.analysis.launches import column_str
from stepscope.analysis.results import FACT
from stepscope.analysis.syncs import sync_intervals
from stepscope.model import transfers as mt
from stepscope.schema_enums import ApiKind

BURST_GAP_NS = 100_000


@dataclass(frozen=True)
class Churn:
    rank: int
    n_steps: int
    count: int  # alloc/free calls over the steady steps
    names: tuple[tuple[str, int], ...]  # (API name, count), most first
    call_ns: int  # their total duration
    calls_idle_ns: int
    refill_ns: int
    saving_ns: int
    sites: tuple[str, ...]
    bare_frees: int  # synchronising frees outside any framework op (explicit cache release)
    steps: tuple[int, ...]
    start_ns: int
    end_ns: int

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6


def _is_sync_free(name: str) -> bool:
    return ("Free" in name and "Async" not in name) or "MemRelease" in name


def churn(g: StepGraph, ra: RankAnalysis) -> Churn | None:
    """The rank's allocator churn over its steady steps; once per rank graph (a per-rank
    fact, ``advisor.rank_facts``)."""
    return g.memo((FACT, "churn"), lambda: _churn(g, ra))


def _churn(g: StepGraph, ra: RankAnalysis) -> Churn | None:
    win = mt.steady_windows(ra)
    if win.n == 0:
        return None
    api = mt.load_api(g)
    m = api.kind_is(ApiKind.ALLOC.value, ApiKind.FREE.value)
    step = win.assign(api.s)
    m &= step >= 0
    if not mt.recurring(step[m], win.n):
        return None
    idx = np.flatnonzero(m)
    idx = idx[np.lexsort((api.s[idx], api.tid[idx]))]
    names = column_str(api.table, "name").take(pa.array(idx)).to_pylist()
    busy = mt.activity(g).busy
    s, e, tid, st = api.s[idx], api.e[idx], api.tid[idx], step[idx]
    calls = IntervalSet.of(s, e) - busy
    calls_idle = calls.within(win.starts, win.ends)
    # bursts: consecutive calls of one thread less than BURST_GAP_NS apart
    new = np.ones(idx.size, dtype=bool)
    new[1:] = ((tid[1:] != tid[:-1]) | (st[1:] != st[:-1])
               | (s[1:] - np.maximum.accumulate(e)[:-1] > BURST_GAP_NS))
    bid = np.cumsum(new) - 1
    nb = int(bid[-1]) + 1
    b_s = np.full(nb, mt.NONE, dtype=np.int64)
    b_e = np.zeros(nb, dtype=np.int64)
    np.minimum.at(b_s, bid, s)
    np.maximum.at(b_e, bid, e)
    b_step = np.zeros(nb, dtype=np.int64)
    b_step[bid] = st
    syncing = np.zeros(nb, dtype=bool)
    for b, name in zip(bid.tolist(), names):
        syncing[b] |= _is_sync_free(str(name))
    waited = busy.within(b_s, b_e)  # GPU work the host waited through in the burst
    gap = mt.gap_to_next(busy, b_e, win.ends[b_step])
    w_s, w_e = input_wait_intervals(g)
    y_s, y_e = sync_intervals(g)
    other = (IntervalSet.of(w_s, w_e) | IntervalSet.of(y_s, y_e)) - IntervalSet.of(s, e)
    gap = gap - other.within(b_e, b_e + gap)
    refill = np.where(syncing, np.minimum(np.maximum(gap, 0), waited), 0)
    refill_step = np.zeros(win.n, dtype=np.int64)
    np.add.at(refill_step, b_step, refill)
    saving = calls_idle + refill_step
    counts: dict[str, int] = {}
    for name in names:
        counts[str(name)] = counts.get(str(name), 0) + 1
    sites = mt.call_sites(g, api.pid[idx], tid, s, e)
    bare = sum(1 for nm, lab in zip(names, sites.label) if _is_sync_free(str(nm)) and not lab)
    first = st == st.min()
    return Churn(
        rank=ra.rank, n_steps=win.n, count=int(idx.size),
        names=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        call_ns=int((e - s).sum()), calls_idle_ns=int(calls_idle.sum()),
        refill_ns=int(refill_step.sum()), saving_ns=int(saving.sum()),
        sites=mt.top_labels(sites.label), bare_frees=bare,
        steps=tuple(win.steps[int(k)] for k in np.unique(st)),
        start_ns=int(s[first].min()), end_ns=int(e[first].max()),
    )
