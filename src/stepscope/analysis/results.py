"""The analysis of a run: every core analysis of every rank, as frozen results
(:class:`Analysis`, :class:`RankAnalysis`), from the run's step graph built once."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from stepscope.analysis.breakdown import Breakdown, breakdown_from_sets, host_layers
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
    bd = breakdown_from_sets(rank, steps, rank_union(acts), host_layers(g))
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


def analyze_graph(graph: RunGraph) -> Analysis:
    """Every core analysis for every rank of a run's step graph."""
    return Analysis(ranks=tuple(analyze_rank(graph.rank(r)) for r in graph.ranks), graph=graph)


def analyze(run: Run) -> Analysis:
    """Every core analysis for every rank of the run (its step graph is built once)."""
    return analyze_graph(run_graph(run))
