"""Collectives across ranks: each call matched over the ranks that ran it, with who arrived
last, how long the others waited for it, the transfer itself and its bus bandwidth.

A collective's kernel starts on a rank when that rank's stream reaches it, then spins until
every rank of the group has arrived; the data moves after the last arrival, and the kernels
end together. So, per instance (one call, matched over its ranks)::

    transfer  = min over ranks of the kernel duration (the last rank to arrive waits ~0)
    wait(r)   = duration(r) - transfer        (the time rank r waited for the others)
    late rank = the rank with the shortest duration
    cost      = 2nd shortest duration - shortest: how much earlier the collective would end
                if the late rank had arrived with the next-latest one
    stall     = the part of that cost the waiting ranks spent with no compute kernel running
                (median over the ranks that waited: min(cost, their exposed wait)): what
                their step would lose. A wait under compute (an FSDP all-gather prefetched on
                its own stream while the layer before still computes) costs the step nothing.

All from durations, so none of it depends on the ranks' clocks agreeing (ranks on several
hosts); the clocks are aligned on collective ends only to place ranks on one timeline
(``CrossRank.offsets_ns``).

Bus bandwidth follows nccl-tests (its PERFORMANCE.md): ``algbw = bytes / transfer`` and
``busbw = algbw x factor``, factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all, 1 for broadcast, reduce and point-to-point.

Matching: by ``(process group, sequence number)`` when every row has one; else by
``(process group, step number, position among the group's calls in the step)``, step numbers
being the source's (ProfilerStep#N, hooks), which agree across the ranks of one job.
Point-to-point calls are not matched (their partner is one rank, which a kernel name does
not say). A key found on one rank only, or with different ops on different ranks, is left
out and counted (``CrossRank.unmatched``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.graph import RunGraph
from stepscope.model import transfers as mt
from stepscope.model.comm_inputs import collective_compute
from stepscope.schema_enums import CollectiveOp

P2P_OPS = frozenset({CollectiveOp.SEND.value, CollectiveOp.RECV.value,
                     CollectiveOp.SEND_RECV.value})
SEQUENCED_SHARE = 0.9  # of a rank's calls with a sequence number, to match by it


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``op`` over ``n`` ranks."""
    if n <= 1:
        return 0.0
    if op == CollectiveOp.ALL_REDUCE.value:
        return 2.0 * (n - 1) / n
    if op in (CollectiveOp.ALL_GATHER.value, CollectiveOp.REDUCE_SCATTER.value,
              CollectiveOp.ALL_TO_ALL.value):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Instance:
    """One collective call, matched over the ranks that ran it (in rank order)."""

    op: str
    name: str
    pg: str
    step: int | None  # step number (the source's), when matched by step
    bytes: int | None
    ranks: tuple[int, ...]
    starts_ns: tuple[int, ...]  # kernel start per rank, on each rank's own clock
    durs_ns: tuple[int, ...]
    exposed_waits_ns: tuple[int, ...] = ()  # of each rank's wait, the time no compute ran

    @property
    def transfer_ns(self) -> int:
        return min(self.durs_ns)

    @property
    def waits_ns(self) -> tuple[int, ...]:
        t = self.transfer_ns
        return tuple(d - t for d in self.durs_ns)

    @property
    def late_rank(self) -> int:
        return self.ranks[int(np.argmin(self.durs_ns))]

    @property
    def cost_ns(self) -> int:
        """How much earlier the call would end if its late rank came with the next-latest."""
        if len(self.durs_ns) < 2:
            return 0
        a, b = sorted(self.durs_ns)[:2]
        return b - a

    @property
    def stall_ns(self) -> int:
        """The cost the waiting ranks spent with no compute running (module docstring)."""
        if len(self.durs_ns) < 2 or not self.exposed_waits_ns:
            return 0
        late = int(np.argmin(self.durs_ns))
        cost = self.cost_ns
        hit = [min(cost, x) for i, x in enumerate(self.exposed_waits_ns) if i != late]
        return int(np.median(hit))

    @property
    def busbw_gbs(self) -> float | None:
        if not self.bytes or self.transfer_ns <= 0:
            return None
        return self.bytes / self.transfer_ns * bus_factor(self.op, len(self.ranks))


@dataclass(frozen=True)
class RankComm:
    """One rank's part in the matched collectives of the common steady steps."""

    rank: int
    calls: int  # matched calls it took part in
    wait_ns: int  # summed over those calls
    transfer_ns: int  # summed
    late: int  # calls where it arrived last
    late_cost_ns: int  # sum of the cost of those calls (Instance.cost_ns)
    late_stall_ns: int  # sum of their stall (Instance.stall_ns): what the others' steps lose
    exposed_wait_ns: int  # of wait_ns, the time no compute kernel ran on this rank
    wait_intervals: tuple[tuple[int, int], ...]  # (start, end) of each wait, its own clock


@dataclass(frozen=True)
class CrossRank:
    instances: tuple[Instance, ...]  # matched, in the common steady steps
    ranks: tuple[RankComm, ...]
    steps: tuple[int, ...]  # the step numbers steady on every rank that ran collectives
    n_steps: int  # steps the sums are over (len(steps); else the fewest steady steps of a rank)
    per_step_wait_ns: Mapping[int, Mapping[int, int]]  # step number -> rank -> wait
    per_step_late: Mapping[int, int]  # step number -> the rank with the largest stall in it
    unmatched: int  # calls of the ranks left out (one rank only, ops disagree, p2p)
    matched_by: str  # "sequence" | "step" | "order" (position, when step numbers differ)
    offsets_ns: Mapping[int, int]  # add to a rank's times to put it on rank 0's clock
    hosts: int  # distinct hosts the ranks ran on (1 = one clock)

    def rank(self, r: int) -> RankComm | None:
        for x in self.ranks:
            if x.rank == r:
                return x
        return None


@dataclass(frozen=True)
class _Calls:
    """One rank's collectives with GPU times, as columns."""

    rank: int
    op: list[str]
    name: list[str]
    pg: list[str]
    seq: list[int | None]
    bytes: list[int | None]
    ts: np.ndarray
    dur: np.ndarray


def _calls(rank: int, t: pa.Table) -> _Calls | None:
    if t.num_rows == 0:
        return None
    kern = t.column("kernels").to_pylist()
    keep = [i for i, k in enumerate(kern) if k]
    if not keep:
        return None
    sub = t.take(pa.array(keep, type=pa.int64()))

    def col(name: str) -> list[object]:
        return list(sub.column(name).to_pylist())

    return _Calls(rank=rank, op=[str(x) for x in col("op")], name=[str(x) for x in col("name")],
                  pg=["" if x is None else str(x) for x in col("pg")],
                  seq=[None if x is None else int(str(x)) for x in col("seq")],
                  bytes=[None if x is None else int(str(x)) for x in col("bytes")],
                  ts=np.asarray(sub.column("ts_ns").to_numpy(), dtype=np.int64),
                  dur=np.asarray(sub.column("dur_ns").to_numpy(), dtype=np.int64))


def _step_numbers(ra: RankAnalysis, ts: np.ndarray) -> list[int | None]:
    """The number of the steady step whose timeline window holds each start (None: none)."""
    steady = [s for s in ra.steps.steps if s.steady]
    if not steady:
        return [None] * int(ts.size)
    ws = np.array([s.window[0] for s in steady], dtype=np.int64)
    we = np.array([s.window[1] for s in steady], dtype=np.int64)
    i = np.searchsorted(ws, ts, side="right") - 1
    out: list[int | None] = []
    for k, t in zip(i.tolist(), ts.tolist(), strict=True):
        out.append(steady[k].number if k >= 0 and t < we[k] else None)
    return out


Key = tuple[object, ...]


def _sequenced(c: _Calls) -> bool:
    """Whether a rank's collectives are matched by sequence number: at least
    ``SEQUENCED_SHARE`` of its calls (point-to-point aside) carry one. A few without (kernels
    the flight recorder had no entry for, e.g. before its buffer started) are left unmatched;
    matching everything by step and position instead misaligned the calls of a rank whose
    step boundaries fall elsewhere (a 4-rank straggler run, 2026-11-26: 2 of 503 calls per
    rank without a number, half the steps' waits then unmatched)."""
    seqs = [s for s, o in zip(c.seq, c.op, strict=True) if o not in P2P_OPS]
    return bool(seqs) and sum(s is not None for s in seqs) >= SEQUENCED_SHARE * len(seqs)


def _keys(c: _Calls, steps: list[int | None], mode: str) -> list[Key | None]:
    """Each call's matching key (None: not matched). Only calls inside steady steps."""
    out: list[Key | None] = []
    pos: dict[tuple[str, int | None], int] = {}
    for i in range(len(c.op)):
        s = steps[i]
        if c.op[i] in P2P_OPS or s is None:
            out.append(None)
            continue
        if mode == "sequence":  # a call without a number (its kernel only) is not matched
            out.append((c.pg[i], c.seq[i]) if c.seq[i] is not None else None)
            continue
        at = (c.pg[i], s if mode == "step" else None)
        k = pos.get(at, 0)
        pos[at] = k + 1
        out.append((*at, k))
    return out


def cross_rank(analysis: Analysis, graph: RunGraph) -> CrossRank | None:
    """The matched collectives of a run's steady steps; ``None`` with fewer than two ranks
    with collectives that have GPU times."""
    calls: dict[int, _Calls] = {}
    steps_of: dict[int, list[int | None]] = {}
    for ra in analysis.ranks:
        c = _calls(ra.rank, graph.rank(ra.rank).table("collectives"))
        if c is not None:
            calls[ra.rank] = c
            steps_of[ra.rank] = _step_numbers(ra, c.ts)
    if len(calls) < 2:
        return None
    common = _common_steps(analysis, set(calls))
    if all(_sequenced(c) for c in calls.values()):
        mode = "sequence"
    else:
        mode = "step" if common else "order"
    keyed = {r: _keys(c, steps_of[r], mode) for r, c in calls.items()}
    table: dict[Key, list[tuple[int, int]]] = {}
    for r, ks in keyed.items():
        for i, k in enumerate(ks):
            if k is not None:
                table.setdefault(k, []).append((r, i))
    instances: list[Instance] = []
    unmatched = 0
    for rows in table.values():
        inst = _instance(rows, calls, steps_of)
        if inst is None or (common and inst.step not in common):
            unmatched += len(rows)
            continue
        instances.append(inst)
    instances.sort(key=lambda x: (x.step if x.step is not None else -1, min(x.starts_ns)))
    instances = _with_exposure(instances, graph)
    if common:
        n_steps = len(common)
    else:
        n_steps = min(len([s for s in ra.steps.steps if s.steady]) for ra in analysis.ranks
                      if ra.rank in calls)
    return _summarize(instances, calls, tuple(sorted(common)), n_steps, unmatched, mode,
                      _offsets(instances), _hosts(graph, list(calls)))


def _instance(rows: list[tuple[int, int]], calls: Mapping[int, _Calls],
              steps_of: Mapping[int, list[int | None]]) -> Instance | None:
    if len(rows) < 2 or len({r for r, _ in rows}) != len(rows):
        return None
    rows = sorted(rows)
    ops = {calls[r].op[i] for r, i in rows}
    if len(ops) != 1:
        return None
    sizes = [b for r, i in rows if (b := calls[r].bytes[i]) is not None]
    r0, i0 = rows[0]
    return Instance(
        op=calls[r0].op[i0], name=calls[r0].name[i0], pg=calls[r0].pg[i0],
        step=_step_of([steps_of[r][i] for r, i in rows]),
        bytes=max(sizes) if sizes else None, ranks=tuple(r for r, _ in rows),
        starts_ns=tuple(int(calls[r].ts[i]) for r, i in rows),
        durs_ns=tuple(int(calls[r].dur[i]) for r, i in rows))


def _step_of(steps: list[int | None]) -> int | None:
    """The step of a call matched across ranks: the one most of its ranks put it in (the
    lowest on a tie). Matched by sequence number, a late rank's own step boundaries can put
    the same call in the step before or after the others' (its step starts late)."""
    known = [s for s in steps if s is not None]
    if not known:
        return None
    counts = Counter(known)
    best = max(counts.values())
    return min(s for s, n in counts.items() if n == best)


def _with_exposure(instances: list[Instance], graph: RunGraph) -> list[Instance]:
    """Each instance with the part of each rank's wait that no compute kernel covered."""
    ranks = sorted({r for x in instances for r in x.ranks})
    exposed: dict[tuple[int, int], int] = {}
    for r in ranks:
        compute = collective_compute(graph.rank(r))
        idx = [(k, x.ranks.index(r)) for k, x in enumerate(instances) if r in x.ranks]
        if not idx:
            continue
        s = np.array([instances[k].starts_ns[j] for k, j in idx], dtype=np.int64)
        w = np.array([instances[k].waits_ns[j] for k, j in idx], dtype=np.int64)
        for (k, _), v in zip(idx, mt.uncovered(compute, s, s + w).tolist(), strict=True):
            exposed[(k, r)] = int(v)
    return [dataclasses.replace(x, exposed_waits_ns=tuple(exposed[(k, r)] for r in x.ranks))
            for k, x in enumerate(instances)]


def _common_steps(analysis: Analysis, ranks: set[int]) -> set[int]:
    sets = [{s.number for s in ra.steps.steps if s.steady} for ra in analysis.ranks
            if ra.rank in ranks]
    return set.intersection(*sets) if sets else set()


def _offsets(instances: Sequence[Instance]) -> dict[int, int]:
    """Per rank, the median of (the lowest rank's collective end - this rank's end)."""
    if not instances:
        return {}
    ref = min(r for x in instances for r in x.ranks)
    diffs: dict[int, list[int]] = {}
    for x in instances:
        ends = {r: s + d for r, s, d in zip(x.ranks, x.starts_ns, x.durs_ns, strict=True)}
        if ref in ends:
            for r, e in ends.items():
                diffs.setdefault(r, []).append(ends[ref] - e)
    return {r: int(np.median(v)) for r, v in sorted(diffs.items())}


def _hosts(graph: RunGraph, ranks: Sequence[int]) -> int:
    names: set[str] = set()
    for r in ranks:
        t = graph.rank(r).table("processes")
        names.update(str(h) for h in t.column("host").to_pylist() if h)
    return max(1, len(names))


def _summarize(instances: Sequence[Instance], calls: Mapping[int, _Calls],
               steps: tuple[int, ...], n_steps: int, unmatched: int, matched_by: str,
               offsets: Mapping[int, int], hosts: int) -> CrossRank:
    # per rank: calls, wait, transfer, late, late cost, late stall, exposed wait
    acc: dict[int, list[int]] = {r: [0] * 7 for r in calls}
    waits: dict[int, list[tuple[int, int]]] = {r: [] for r in calls}
    per_step: dict[int, dict[int, int]] = {}
    step_stall: dict[int, dict[int, int]] = {}
    for x in instances:
        late = x.late_rank
        ex = x.exposed_waits_ns or (0,) * len(x.ranks)
        for r, s, w, d, e in zip(x.ranks, x.starts_ns, x.waits_ns, x.durs_ns, ex, strict=True):
            a = acc[r]
            a[0] += 1
            a[1] += w
            a[2] += d - w
            a[6] += e
            if w > 0:
                waits[r].append((s, s + w))
            if x.step is not None:
                per_step.setdefault(x.step, {}).setdefault(r, 0)
                per_step[x.step][r] += w
        stall = x.stall_ns
        acc[late][3] += 1
        acc[late][4] += x.cost_ns
        acc[late][5] += stall
        if x.step is not None:
            sc = step_stall.setdefault(x.step, {})
            sc[late] = sc.get(late, 0) + stall
    ranks = tuple(RankComm(rank=r, calls=a[0], wait_ns=a[1], transfer_ns=a[2], late=a[3],
                           late_cost_ns=a[4], late_stall_ns=a[5], exposed_wait_ns=a[6],
                           wait_intervals=tuple(sorted(waits[r])))
                  for r, a in sorted(acc.items()))
    per_step_late = {s: max(c.items(), key=lambda kv: (kv[1], -kv[0]))[0]
                     for s, c in step_stall.items() if any(c.values())}
    return CrossRank(instances=tuple(instances), ranks=ranks, steps=steps, n_steps=n_steps,
                     per_step_wait_ns=per_step, per_step_late=per_step_late,
                     unmatched=unmatched, matched_by=matched_by, offsets_ns=dict(offsets),
                     hosts=hosts)


def run_cross_rank(analysis: Analysis) -> CrossRank | None:
    """:func:`cross_rank` of ``analysis``, computed once per analysis."""
    return analysis.memo(("cross_rank",), lambda: cross_rank(analysis, analysis.graph))


__all__ = ["CrossRank", "Instance", "P2P_OPS", "RankComm", "bus_factor", "cross_rank",
           "run_cross_rank"]
