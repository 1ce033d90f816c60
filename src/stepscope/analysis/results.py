"""The analysis of a run: every core analysis of every rank, as frozen results
(:class:`Analysis`, :class:`RankAnalysis`), from the run's step graph built once.

The per-rank part runs rank-parallel for runs with many ranks (``analyze(run, workers=N,
engine=...)``, ``rank_pool``): a worker gets the run's folder and a rank, builds that rank's
step graph, analyses it and runs the caller's per-rank ``facts`` (the model's per-rank results
the advisor's rules ask for, memoised per rank), and sends back only the ``RankAnalysis`` and
those memoised per-rank results (:class:`RankResult`); the cross-rank work (collectives,
stragglers, the rules) then runs in the parent on them. The results are the same as the serial
path's: the same functions on the same tables, handed back in rank order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from stepscope.analysis.breakdown import (
    Breakdown,
    breakdown_from_sets,
    host_layers,
    unrecorded_host,
)
from stepscope.analysis.busy import gpu_activity, rank_union
from stepscope.analysis.copies import CopyAnalysis, analyze_copies
from stepscope.analysis.gpu_use import GpuPresence, gpu_presence
from stepscope.analysis.graph import RunGraph, StepGraph, run_graph
from stepscope.analysis.input import InputAnalysis, analyze_input
from stepscope.analysis.kernels import KernelStats, KernelSummary, kernel_summary, kernel_table
from stepscope.analysis.launches import LaunchAnalysis, analyze_launches
from stepscope.analysis.steady import StepInfo
from stepscope.analysis.steps import detect_steps
from stepscope.analysis.syncs import SyncAnalysis, analyze_syncs
from stepscope.errors import StepscopeError
from stepscope.store.run import Run

TOP_KERNELS = 50
T = TypeVar("T")


@dataclass(frozen=True)
class RankAnalysis:
    rank: int
    steps: StepInfo
    breakdown: Breakdown
    gpu_busy_ns: int  # whole trace, summed over the rank's devices
    devices_used: tuple[int, ...]  # devices with GPU records (kernels, copies, memsets)
    gpu: GpuPresence  # whether the rank used a GPU, and what is known when it recorded none
    step_busy_ns: tuple[int, ...]  # per step window, summed over the rank's devices
    marker_busy_ns: tuple[int, ...]  # inside the source's step markers (host side)
    kernel_count: int  # whole trace
    kernel_time_ns: int  # sum of kernel durations, whole trace
    devices: tuple[dict[str, Any], ...]
    kernels: tuple[KernelStats, ...]  # top kernels by time, steady steps
    kernel_summary: KernelSummary
    launches: LaunchAnalysis
    syncs: SyncAnalysis
    copies: CopyAnalysis
    input: InputAnalysis

    @property
    def steady_window(self) -> tuple[int, int] | None:
        st = self.steps.steady
        return (st[0].start_ns, st[-1].end_ns) if st else None


@dataclass(frozen=True)
class Analysis:
    ranks: tuple[RankAnalysis, ...]
    graph: RunGraph = field(compare=False, repr=False)  # what the figures were computed from
    _memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def rank(self, r: int) -> RankAnalysis:
        for ra in self.ranks:
            if ra.rank == r:
                return ra
        raise KeyError(r)

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per analysis and key (the run summary, ...)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])


def analyze_rank(g: StepGraph) -> RankAnalysis:
    rank = g.rank_id
    steps = detect_steps(g)
    acts = gpu_activity(g)
    ws, we = steps.window_starts, steps.window_ends
    busy_total = sum(a.busy.total_ns for a in acts.values())
    per_step = np.zeros(ws.size, dtype=np.int64)
    per_marker = np.zeros(ws.size, dtype=np.int64)
    for a in acts.values():
        per_step += a.busy.within(ws, we)
        per_marker += a.busy.within(steps.starts, steps.ends)
    bd = breakdown_from_sets(rank, steps, rank_union(acts), host_layers(g), unrecorded_host(g))
    steady = steps.steady
    sw = steps.starts[[s.index for s in steady]], steps.ends[[s.index for s in steady]]
    window = (steady[0].start_ns, steady[-1].end_ns) if steady else None
    devices = tuple(g.table("devices").to_pylist())
    k = g.table("kernels")
    used = tuple(sorted(acts))
    return RankAnalysis(
        rank=rank,
        steps=steps,
        breakdown=bd,
        gpu_busy_ns=int(busy_total),
        devices_used=used,
        gpu=gpu_presence(g, used, *sw),
        step_busy_ns=tuple(int(x) for x in per_step),
        marker_busy_ns=tuple(int(x) for x in per_marker),
        kernel_count=k.num_rows,
        kernel_time_ns=int(k.column("dur_ns").to_numpy().sum()) if k.num_rows else 0,
        devices=devices,
        kernels=kernel_table(g, window=window, limit=TOP_KERNELS),
        kernel_summary=kernel_summary(g, window=window),
        launches=analyze_launches(g, *sw),
        syncs=analyze_syncs(g, *sw),
        copies=analyze_copies(g, *sw),
        input=analyze_input(g, *sw),
    )


# A per-rank fact: a function of one rank (its graph, through ``analysis.graph``, and its
# RankAnalysis) that memoises its result in ``analysis.memo`` under a key ``(name, rank)`` or
# in the rank graph's memo under a key ``("fact", name, ...)``; what a worker sends back.
Facts = Callable[["Analysis", RankAnalysis], None]
FACT = "fact"  # the first element of a rank graph's memo keys a worker sends back
# Below this many events (rows of the run's tables, all ranks) the analysis is serial unless
# workers are asked for: a worker pool costs ~0.5 s of CPU to start (the fork server imports
# numpy, pyarrow and the analysis), about the time the analysis and the rules' per-rank facts
# take for 100-150 k events (64 ranks, 771 k events: ~5 s on the 2-core box; docs/benchmarks.md).
POOL_MIN_EVENTS = 250_000


# A worker analyses a chunk of consecutive ranks with one opened run and one cache of
# kernel-name classes (the ranks of a job share their kernel names; a rank alone in its chunk
# cost 3x the CPU of one in a chunk of 16, measured): at most this many ranks, so that what a worker holds (the chunk's
# tables, read once) stays bounded whatever the number of ranks.
CHUNK_RANKS = 8


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to analyse some ranks: the run's folder, the ranks, the facts."""

    run: str
    ranks: tuple[int, ...]
    facts: Facts | None = None


@dataclass(frozen=True)
class RankResult:
    """One rank's analysis and its memoised per-rank facts (``(key, value)`` pairs of the
    analysis's memo, then of the rank graph's memo)."""

    analysis: RankAnalysis
    memo: tuple[tuple[Hashable, Any], ...] = ()
    graph_memo: tuple[tuple[Hashable, Any], ...] = ()


@dataclass(frozen=True)
class ChunkResult:
    """A task's ranks, in order; ``error``: a ``StepscopeError``'s message (it does not pickle
    as itself)."""

    ranks: tuple[RankResult, ...]
    error: str = ""


# What of a rank graph's memo a worker sends back: the facts (keys ``(FACT, ...)``), nothing
# else. The intermediate results the facts are computed from (the kernel frame, the GPU
# activity sets, the profiler's per-event costs: tens to hundreds of kB a rank) stay in the
# worker: the rules' per-rank parts that read them are facts themselves (the kernel rules'
# savings per steady step before the run-wide profiler inflation, the communication model's
# inputs cut to the steady windows, ...: ``advisor.rank_facts``).
SHIPPED = (FACT,)


def _shipped(key: Hashable) -> bool:
    name = key[0] if isinstance(key, tuple) and key else key
    return isinstance(name, str) and name in SHIPPED


def _rank_keys(memo: dict[Hashable, Any], rank: int) -> tuple[tuple[Hashable, Any], ...]:
    # only what is of this rank alone: a one-rank Analysis's run-wide entries would be wrong
    return tuple((k, v) for k, v in memo.items()
                 if isinstance(k, tuple) and len(k) == 2 and k[1] == rank)


def analyze_rank_at(task: RankTask) -> ChunkResult:
    """The worker's job: the ranks ``task.ranks`` of the run at ``task.run``, each analysed
    with its facts (module docstring)."""
    try:
        run = Run(task.run, check=False)  # the parent opened it, its files checked
        graph = run_graph(run)
        out = []
        for r in task.ranks:
            g = graph.rank(r)
            ra = analyze_rank(g)
            one = Analysis(ranks=(ra,), graph=graph)
            if task.facts is not None:
                task.facts(one, ra)
            facts = tuple((k, v) for k, v in g._memo.items() if _shipped(k))
            out.append(RankResult(ra, _rank_keys(one._memo, r), facts))
            graph._graphs.pop(r, None)  # the next rank's work does not need this one's
            run.forget(r)
        return ChunkResult(tuple(out))
    except StepscopeError as exc:
        return ChunkResult((), error=str(exc))


def chunks(ranks: Sequence[int], workers: int) -> list[tuple[int, ...]]:
    """``ranks`` cut into consecutive chunks of at most ``CHUNK_RANKS``, at least two per
    worker where there are enough ranks (so that a slow chunk does not leave workers idle)."""
    size = max(1, min(CHUNK_RANKS, -(-len(ranks) // (2 * max(1, workers)))))
    return [tuple(ranks[i:i + size]) for i in range(0, len(ranks), size)]


def plan_workers(run: Run, requested: int | None, cores: int | None = None) -> int:
    """How many workers analyse ``run``'s ranks: ``requested`` when given (at most one per
    rank); otherwise 1 below ``POOL_MIN_EVENTS`` events or for one rank, else the fewer of
    the ranks and the cores."""
    from stepscope.analysis.rank_pool import cpus

    n = len(run.ranks)
    if requested is not None:
        return max(1, min(requested, n))
    if n < 2 or sum(run.manifest.tables.values()) < POOL_MIN_EVENTS:
        return 1
    return max(1, min(n, cores or cpus()))


def analyze_ranks(run: Run, graph: RunGraph, ranks: Sequence[int], *, workers: int,
                  engine: str = "process", address: str = "",
                  facts: Facts | None = None) -> Analysis:
    """Every rank of ``ranks`` analysed on ``workers`` workers of ``engine``, their facts
    adopted into the analysis's and the rank graphs' memos."""
    from stepscope.analysis.rank_pool import run_ordered

    path = str(Path(run.path).resolve())
    memo: dict[Hashable, Any] = {}
    out: list[RankAnalysis] = []
    tasks = (RankTask(path, c, facts) for c in chunks(ranks, workers))
    preload = (facts.__module__,) if facts is not None else ()
    for chunk in run_ordered(analyze_rank_at, tasks, workers=workers, engine=engine,
                             address=address, preload=preload):
        if chunk.error:
            raise StepscopeError(chunk.error)
        for res in chunk.ranks:
            out.append(res.analysis)
            memo.update(res.memo)
            graph.rank(res.analysis.rank)._memo.update(res.graph_memo)
    return Analysis(ranks=tuple(out), graph=graph, _memo=memo)


def analyze_graph(graph: RunGraph) -> Analysis:
    """Every core analysis for every rank of a run's step graph."""
    return Analysis(ranks=tuple(analyze_rank(graph.rank(r)) for r in graph.ranks), graph=graph)


def analyze(run: Run, *, workers: int | None = 1, engine: str = "process", address: str = "",
            facts: Facts | None = None) -> Analysis:
    """Every core analysis for every rank of the run (its step graph is built once).
    ``workers``: 1, serial; N, a pool of N workers of ``engine`` (``rank_pool``); None, chosen
    by the run's size (``plan_workers``). ``facts``: per-rank results to compute with each
    rank (module docstring)."""
    graph = run_graph(run)
    n = plan_workers(run, workers)
    if n <= 1 and engine == "process":
        analysis = analyze_graph(graph)
        if facts is not None:
            for ra in analysis.ranks:
                facts(analysis, ra)
        return analysis
    return analyze_ranks(run, graph, graph.ranks, workers=n, engine=engine, address=address,
                         facts=facts)
