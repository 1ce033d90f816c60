"""What every reporter shows of a run's ranks and collectives: per rank its step, breakdown and
its part in the collectives; per kind of collective its calls, transfer and bus bandwidth; per
step and rank the wait inside collectives (the heat map). Built from the analysis and the
cross-rank model (``model.collectives``), never from the tables."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis import Analysis
from stepscope.model.collectives import CrossRank, Instance, run_cross_rank

MAX_GROUPS = 20


@dataclass(frozen=True)
class RankRow:
    rank: int
    step_ms: float | None  # mean steady step
    compute_ms: float  # breakdown, mean per steady step
    communication_ms: float  # exposed communication (waits included), breakdown
    host_ms: float  # input wait + sync + launch + host + idle: the GPU idle, breakdown
    wait_ms: float | None  # waiting inside collectives for others, per common steady step
    late_calls: int | None  # matched collectives it arrived last at
    calls: int | None  # matched collectives it took part in


@dataclass(frozen=True)
class CollectiveGroup:
    op: str
    name: str  # the source's name of the first call
    pg: str
    bytes: int | None
    ranks: int
    calls: int
    transfer_ms: float  # median transfer
    wait_ms: float  # median over calls of the mean wait over ranks
    busbw_gbs: float | None  # median


@dataclass(frozen=True)
class RanksView:
    rows: tuple[RankRow, ...]
    groups: tuple[CollectiveGroup, ...]  # by total transfer time, largest first
    matched_by: str | None
    matched: int
    unmatched: int
    steps: tuple[int, ...]  # heat map rows: step numbers
    wait_ms: tuple[tuple[float, ...], ...]  # [step][rank in rows order]
    late: tuple[int | None, ...]  # the late rank of each step


_HOST = ("input_wait", "sync", "launch", "host", "idle")


def ranks_view(analysis: Analysis) -> RanksView:
    """The view of ``analysis``, built once (the terminal, JSON and HTML reporters share it)."""
    return analysis.memo(("ranks_view",), lambda: _ranks_view(analysis))


def _ranks_view(analysis: Analysis) -> RanksView:
    x = run_cross_rank(analysis)
    rows = []
    for ra in analysis.ranks:
        steady = [s.span_ns for s in ra.steps.steps if s.steady]
        bd = ra.breakdown.mean_ms
        rc = x.rank(ra.rank) if x is not None else None
        per = x.n_steps if x is not None and x.n_steps else 0
        rows.append(RankRow(
            rank=ra.rank, step_ms=float(np.mean(steady)) / 1e6 if steady else None,
            compute_ms=bd.get("compute", 0.0), communication_ms=bd.get("communication", 0.0),
            host_ms=sum(bd.get(c, 0.0) for c in _HOST),
            wait_ms=(rc.wait_ns / per / 1e6) if rc is not None and per else None,
            late_calls=rc.late if rc is not None else None,
            calls=rc.calls if rc is not None else None))
    if x is None:
        return RanksView(rows=tuple(rows), groups=(), matched_by=None, matched=0, unmatched=0,
                         steps=(), wait_ms=(), late=())
    order = [r.rank for r in rows]
    steps = tuple(sorted(x.per_step_wait_ns))
    heat = tuple(tuple(x.per_step_wait_ns[s].get(r, 0) / 1e6 for r in order) for s in steps)
    return RanksView(rows=tuple(rows), groups=_groups(x), matched_by=x.matched_by,
                     matched=len(x.instances), unmatched=x.unmatched, steps=steps,
                     wait_ms=heat, late=tuple(x.per_step_late.get(s) for s in steps))


def _groups(x: CrossRank) -> tuple[CollectiveGroup, ...]:
    by: dict[tuple[str, str, int | None, int], list[Instance]] = {}
    for i in x.instances:
        by.setdefault((i.op, i.pg, i.bytes, len(i.ranks)), []).append(i)
    out = []
    for (op, pg, nbytes, n), calls in by.items():
        bw = [b for i in calls if (b := i.busbw_gbs) is not None]
        out.append(CollectiveGroup(
            op=op, name=calls[0].name, pg=pg, bytes=nbytes, ranks=n, calls=len(calls),
            transfer_ms=float(np.median([i.transfer_ns for i in calls])) / 1e6,
            wait_ms=float(np.median([np.mean(i.waits_ns) for i in calls])) / 1e6,
            busbw_gbs=float(np.median(bw)) if bw else None))
    out.sort(key=lambda g: (-g.transfer_ms * g.calls, g.op, g.pg))
    return tuple(out[:MAX_GROUPS])


__all__ = ["CollectiveGroup", "RankRow", "RanksView", "ranks_view"]
