"""What overlapping the exposed communication with compute would save per step (the method:
the ``exposed_communication`` rule's docs page).

Per steady step window of a rank (all its devices merged, like the step breakdown)::

    comm       = time with a communication (NCCL/RCCL) kernel running
    exposed    = comm time with no compute kernel running (the breakdown's ``communication``)
    overlapped = comm - exposed (HTA's comm/compute overlap is overlapped / comm)
    free       = compute time with no communication under it: what could still hide some
    saving     = min(exposed, free) x (1 - sm_share)

``sm_share``: the share of the GPU's SMs the communication kernels occupy (their blocks over
the SM count, weighted by their time; NCCL runs one block per channel, 24 of an H100's 132 on
the 2- and 4-GPU runs of docs/accuracy.md): compute that runs beside them runs that much
slower, so hiding ``x`` of communication under compute costs about ``sm_share x x`` of it.

With several ranks, the part of a collective spent waiting for a late rank (its kernel's first
``wait`` ns, ``model.collectives``) is the ``straggler`` finding's, not a transfer that overlap
could hide: ``waits`` (per rank, (start, end) intervals) are taken out of ``exposed`` first.

A collective can only hide under compute that does not depend on it (the last gradient
bucket's all-reduce has no backward left to run under), so ``saving`` is what perfect
overlap would give: an upper bound. Summed over the steady steps; per step in the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

import stepscope.analysis.intervals as iv
from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet, is_communication
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.kernel_names import signature_head
from stepscope.analysis.results import FACT
from stepscope.model import transfers as mt
from stepscope.model.comm_inputs import comm_inputs, steady_windows
from stepscope.model.comm_remedies import Remedy, remedies


@dataclass(frozen=True)
class CollectiveTime:
    """The communication kernels of one name over the steady steps."""

    name: str  # the kernel name without its parameter list
    count: int
    total_ns: int  # sum of kernel durations
    exposed_ns: int  # of which no compute kernel ran


@dataclass(frozen=True)
class CommOverlap:
    rank: int
    n_steps: int
    comm_ns: int  # union of communication kernel time, summed over the steady steps
    exposed_ns: int
    compute_ns: int  # union of compute kernel time
    free_ns: int  # compute time with no communication under it
    saving_ns: int  # the best remedy's saving, summed over the steps (``remedies``)
    per_step_exposed_ns: tuple[int, ...]
    waiting_ns: int  # exposed time spent waiting for a late rank (taken out of exposed_ns)
    steps: tuple[int, ...]  # step indexes of the steady steps
    worst: int  # step index with the most exposed communication
    sm_share: float  # of the SMs, what the communication kernels occupy (time-weighted)
    start_ns: int  # its window
    end_ns: int
    top: tuple[CollectiveTime, ...]  # by exposed time, largest first
    remedies: tuple[Remedy, ...] = ()  # each remedy's saving (model.comm_remedies)
    bound_ns: int = 0  # the former upper bound: sum over steps of min(exposed, free) x (1 - sm_share)

    @property
    def best(self) -> Remedy | None:
        return max(self.remedies, key=lambda x: x.saving_ns) if self.remedies else None

    @property
    def saving_ms(self) -> float:
        return self.saving_ns / self.n_steps / 1e6

    @property
    def overlap_share(self) -> float:
        """Share of the communication time during which compute also ran (HTA's figure)."""
        return (self.comm_ns - self.exposed_ns) / self.comm_ns if self.comm_ns else 0.0


def comm_overlap(g: StepGraph, ra: RankAnalysis, n_top: int = 5,
                 waits: tuple[tuple[int, int], ...] = ()) -> CommOverlap | None:
    """``None`` when the rank has no steady step or no communication kernel in them.
    ``waits``: the rank's waits for late ranks inside collectives (start, end)."""
    idx = [i for i, s in enumerate(ra.steps.steps) if s.steady]
    ci = comm_inputs(g, ra)  # None without steady steps or communication in them
    if ci is None:
        return None
    ws, we = steady_windows(ra)
    comm = ci.comm_ns
    exposed = ci.exposed_ns
    waiting = np.zeros_like(exposed)
    wait_set = IntervalSet.empty()
    if waits:
        wait_set = IntervalSet.of([a for a, _ in waits], [b for _, b in waits])
        exposed = (ci.exposed - wait_set).within(ws, we)
        waiting = ci.exposed_ns - exposed
    compute = ci.compute_ns
    free = ci.free_ns
    share, sms = sm_share(g, ra)
    bound = np.minimum(exposed, free) * (1.0 - share)
    rem = remedies(g, ra, len(idx), wait_set, share, share * sms)
    saving = max((x.saving_ns for x in rem), default=0.0)
    top = g.memo((FACT, "comm_top", n_top),
                 lambda: _top(g, mt.activity(g).compute, ws, we, n_top))
    w = int(np.argmax(exposed))
    return CommOverlap(
        rank=ra.rank, n_steps=len(idx), comm_ns=int(comm.sum()), exposed_ns=int(exposed.sum()),
        compute_ns=int(compute.sum()), free_ns=int(free.sum()), saving_ns=int(saving),
        sm_share=share, remedies=rem, bound_ns=int(bound.sum()),
        per_step_exposed_ns=tuple(int(x) for x in exposed), waiting_ns=int(waiting.sum()),
        steps=tuple(ra.steps.steps[i].index for i in idx), worst=ra.steps.steps[idx[w]].index,
        start_ns=int(ws[w]), end_ns=int(we[w]), top=top)


def comm_facts(g: StepGraph, ra: RankAnalysis, n_top: int = 5) -> None:
    """Memoise what ``comm_overlap`` reads of the rank's tables and does not depend on the
    other ranks' waits (its activity and kernels cut to what the model needs,
    ``model.comm_inputs``, with the sync and copy calls the remedies look at; the SM share,
    the top collectives): a per-rank fact (``advisor.rank_facts``), so that the parent of a
    rank-parallel analysis reads none of the rank's kernels and API calls."""
    ci = comm_inputs(g, ra)
    if ci is None:
        return
    ws, we = steady_windows(ra)
    sm_share(g, ra)
    g.memo((FACT, "comm_top", n_top), lambda: _top(g, mt.activity(g).compute, ws, we, n_top))


def sm_share(g: StepGraph, ra: RankAnalysis) -> tuple[float, int]:
    """``_sm_share``, once per rank graph."""
    return g.memo((FACT, "sm_share"), lambda: _sm_share(g, ra))


def _sm_share(g: StepGraph, ra: RankAnalysis) -> tuple[float, int]:
    """Time-weighted mean over the communication kernels of min(1, blocks / SMs) (0 when the
    grid or the device's SM count is unknown), and the SM count."""
    sms = {int(d["device"]): int(d["sm_count"]) for d in ra.devices
           if d.get("sm_count") and d.get("device") is not None}
    k = g.table("kernels")
    n_sms = max(sms.values(), default=0)
    if k.num_rows == 0 or not sms:
        return 0.0, n_sms
    m = is_communication(k.column("name"))
    if not m.any():
        return 0.0, n_sms
    sub = k.filter(pa.array(m))
    num = den = 0.0
    for d, x, y, z, t in zip(*(sub.column(c).to_pylist() for c in
                               ("device", "grid_x", "grid_y", "grid_z", "dur_ns")), strict=True):
        n = sms.get(int(d)) if d is not None else None
        if n is None or x is None:
            continue
        blocks = x * (y or 1) * (z or 1)
        num += min(1.0, blocks / n) * float(t)
        den += float(t)
    return (num / den if den > 0 else 0.0), n_sms


def _top(g: StepGraph, compute: IntervalSet, ws: np.ndarray, we: np.ndarray,
         n_top: int) -> tuple[CollectiveTime, ...]:
    k = g.table("kernels")
    if k.num_rows == 0:
        return ()
    m = is_communication(k.column("name"))
    s = k.column("ts_ns").to_numpy()[m]
    e = s + k.column("dur_ns").to_numpy()[m]
    inside = iv.assign_to_windows(s, ws, we) >= 0  # started in a steady step
    if not inside.any():
        return ()
    s, e = s[inside], e[inside]
    names = np.array(k.column("name").to_numpy(zero_copy_only=False)[m][inside], dtype=object)
    exposed = mt.uncovered(compute, s, e)
    out: dict[str, list[int]] = {}
    for n, d, x in zip(names, (e - s).tolist(), exposed.tolist(), strict=True):
        row = out.setdefault(signature_head(str(n)), [0, 0, 0])
        row[0] += 1
        row[1] += d
        row[2] += x
    rows = [CollectiveTime(name=n, count=c, total_ns=t, exposed_ns=x)
            for n, (c, t, x) in out.items()]
    rows.sort(key=lambda r: (-r.exposed_ns, -r.total_ns, r.name))
    return tuple(rows[:n_top])
