"""Which kernels ``stepscope kernels`` asks Nsight Compute to profile, and which launches.

The kernels that cost the most time per steady step on one rank (``top``), each by its base
name (what ncu's ``--kernel-name-base function`` matches); the launches: after the matching
launches that came before the first steady step (``launch_skip``: the warm-up, which a
re-run of the same program repeats), as many as one steady step has, capped at
``max_launches`` (every profiled launch is replayed ~40 times under ``--set full``). A run
without steps (a CuPy script, a benchmark loop) is one window: its top kernels by total time,
from the first launch on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.kernel_profiles import base_name
from stepscope.analysis.results import RankAnalysis


@dataclass(frozen=True)
class PlannedKernel:
    name: str  # as the run has it
    base: str  # the function name ncu matches
    ms_per_step: float
    launches_per_step: float


@dataclass(frozen=True)
class KernelPlan:
    kernels: tuple[PlannedKernel, ...]
    launch_skip: int
    launch_count: int
    capped: bool  # one step has more matching launches than max_launches

    @property
    def name_regex(self) -> str:
        """``--kernel-name regex:...`` for ncu: the base names, exactly."""
        names = sorted({k.base for k in self.kernels})
        return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def plan_kernels(g: StepGraph, ra: RankAnalysis, top: int, max_launches: int = 20
                 ) -> KernelPlan | None:
    """The plan for rank ``ra``'s ``top`` kernels by time per steady step (None without
    kernels)."""
    if not ra.kernels:
        return None
    steady = ra.steps.steady
    n = max(1, len(steady))
    chosen = [k for k in ra.kernels if k.category != "communication"][:top]
    planned = tuple(PlannedKernel(name=k.name, base=base_name(k.name),
                                  ms_per_step=k.total_ns / 1e6 / n,
                                  launches_per_step=k.calls / n) for k in chosen)
    bases = {k.base for k in planned}
    t = g.table("kernels")
    names = [base_name(str(x)) for x in t.column("name").to_pylist()]
    ts = np.asarray(t.column("ts_ns").to_numpy(), dtype=np.int64)
    match = np.array([b in bases for b in names], dtype=bool)
    if steady:
        first = steady[0]
        skip = int((match & (ts < first.start_ns)).sum())
        in_step = int((match & (ts >= first.start_ns) & (ts < first.end_ns)).sum())
    else:
        skip, in_step = 0, int(match.sum())
    count = max(1, min(in_step, max_launches))
    return KernelPlan(kernels=planned, launch_skip=skip, launch_count=count,
                      capped=in_step > max_launches)
