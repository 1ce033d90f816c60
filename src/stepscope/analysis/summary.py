"""Run-level figures derived from the per-rank analyses (what the overview shows).

GPU busy share of one rank = GPU busy time inside its step windows (the union of kernels,
copies and memsets per device, summed over devices) / (its step windows' wall time x the
devices it *used*: those with GPU records). A rank lists every GPU it could see in
``devices`` (often all eight of a node) but usually works on one; dividing by all of them
would report 83.6% busy as 10.4%. A rank with no GPU records has no GPU busy share (0).

Across ranks: counts and GPU time are summed over ranks; the run's GPU busy share is the
pooled one, ``sum(busy in steps) / sum(wall x devices used)`` over ranks: the share of the
GPU time the steps had that was busy (a true aggregate: its numerator and denominator are
both GPU time over all ranks, never a sum over ranks divided by one rank's wall). Per-step
figures (step time, breakdown) are the mean over ranks of each rank's steady-state mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.breakdown import CATEGORIES
from stepscope.analysis.results import Analysis, RankAnalysis


@dataclass(frozen=True)
class StepTimeStats:
    mean_ms: float
    median_ms: float
    p95_ms: float
    min_ms: float
    max_ms: float
    cv: float  # coefficient of variation (std / mean)


@dataclass(frozen=True)
class RankSummary:
    rank: int
    steps: int
    steady_steps: int
    step_source: str
    wall_ms: float  # sum of all step windows (the timeline the breakdown covers)
    step_time: StepTimeStats | None  # step windows, over steady steps
    gpu_busy_ms: float  # whole trace, summed over devices
    gpu_busy_in_steps_ms: float  # inside step windows, summed over devices
    gpu_busy_pct: float  # busy inside step windows / (windows * devices used); 0 without GPU
    devices_used: int  # devices with GPU records (what gpu_busy_pct divides by)
    gpu_use: str  # GpuUse value: recorded | none | no_gpu | unknown (analysis.gpu_use)
    gpu_note: str  # why, one line
    step_detail: str  # how the steps were found, one line (StepInfo.detail)
    marker_wall_ms: float  # sum of the source's step markers (e.g. ProfilerStep durations)
    gpu_busy_in_markers_ms: float  # GPU busy inside those markers, summed over devices
    kernels: int
    kernel_time_ms: float
    breakdown_ms: dict[str, float]


@dataclass(frozen=True)
class RunSummary:
    ranks: tuple[RankSummary, ...]
    steps: int
    steady_steps: int
    wall_ms: float
    step_time: StepTimeStats | None
    gpu_busy_ms: float
    gpu_busy_in_steps_ms: float  # summed over ranks and devices
    gpu_busy_pct: float  # pooled over ranks (module docstring)
    gpu_time_ms: float  # sum over ranks of step-window wall x devices used: the pct's denominator
    devices_used: int  # summed over ranks
    kernels: int
    kernel_time_ms: float
    breakdown_ms: dict[str, float]
    tensor_core_share: float
    est_sm_efficiency: float | None
    step_source: str
    marker_wall_ms: float
    gpu_busy_in_markers_ms: float
    gpu_use: str  # the ranks' GpuUse when they agree, else "mixed"
    step_detail: str  # how the steps were found (per rank when the ranks differ)


def step_time_stats(walls_ns: np.ndarray) -> StepTimeStats | None:
    if walls_ns.size == 0:
        return None
    ms = walls_ns.astype(np.float64) / 1e6
    mean = float(ms.mean())
    return StepTimeStats(mean_ms=mean, median_ms=float(np.median(ms)),
                         p95_ms=float(np.percentile(ms, 95)), min_ms=float(ms.min()),
                         max_ms=float(ms.max()), cv=float(ms.std() / mean) if mean else 0.0)


def rank_summary(ra: RankAnalysis) -> RankSummary:
    walls = ra.steps.spans_ns
    steady_walls = np.array([s.span_ns for s in ra.steps.steady], dtype=np.int64)
    n_used = len(ra.devices_used)
    in_steps = float(sum(ra.step_busy_ns)) / 1e6
    wall = float(walls.sum()) / 1e6
    return RankSummary(
        rank=ra.rank,
        steps=len(ra.steps.steps),
        steady_steps=len(ra.steps.steady),
        step_source=ra.steps.source,
        wall_ms=wall,
        step_time=step_time_stats(steady_walls),
        gpu_busy_ms=ra.gpu_busy_ns / 1e6,
        gpu_busy_in_steps_ms=in_steps,
        gpu_busy_pct=100.0 * in_steps / (wall * n_used) if wall and n_used else 0.0,
        devices_used=n_used,
        gpu_use=ra.gpu.use.value,
        gpu_note=ra.gpu.reason,
        step_detail=ra.steps.detail,
        kernels=ra.kernel_count,
        kernel_time_ms=ra.kernel_time_ns / 1e6,
        breakdown_ms=dict(ra.breakdown.mean_ms),
        marker_wall_ms=float(ra.steps.walls_ns.sum()) / 1e6,
        gpu_busy_in_markers_ms=float(sum(ra.marker_busy_ns)) / 1e6,
    )


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0


def _weighted_mean(pairs: list[tuple[float | None, int]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None


def summarize(analysis: Analysis) -> RunSummary:
    """The run-level figures of ``analysis``, computed once per analysis."""
    return analysis.memo("summary", lambda: _summarize(analysis))


def _summarize(analysis: Analysis) -> RunSummary:
    rs = tuple(rank_summary(ra) for ra in analysis.ranks)
    stats = [r.step_time for r in rs if r.step_time is not None]
    step_time = None
    if stats:
        step_time = StepTimeStats(
            mean_ms=_mean([s.mean_ms for s in stats]), median_ms=_mean([s.median_ms for s in stats]),
            p95_ms=_mean([s.p95_ms for s in stats]), min_ms=min(s.min_ms for s in stats),
            max_ms=max(s.max_ms for s in stats), cv=_mean([s.cv for s in stats]))
    ks = [ra.kernel_summary for ra in analysis.ranks]
    k_total = sum(k.total_ns for k in ks)
    busy_in = sum(r.gpu_busy_in_steps_ms for r in rs)
    gpu_time = sum(r.wall_ms * r.devices_used for r in rs)
    sources = sorted({r.step_source for r in rs})
    uses = {r.gpu_use for r in rs}
    return RunSummary(
        ranks=rs,
        steps=max((r.steps for r in rs), default=0),
        steady_steps=max((r.steady_steps for r in rs), default=0),
        wall_ms=_mean([r.wall_ms for r in rs]),
        step_time=step_time,
        gpu_busy_ms=sum(r.gpu_busy_ms for r in rs),
        gpu_busy_in_steps_ms=busy_in,
        gpu_busy_pct=100.0 * busy_in / gpu_time if gpu_time else 0.0,
        gpu_time_ms=gpu_time,
        devices_used=sum(r.devices_used for r in rs),
        kernels=sum(r.kernels for r in rs),
        kernel_time_ms=sum(r.kernel_time_ms for r in rs),
        breakdown_ms={c: _mean([r.breakdown_ms.get(c, 0.0) for r in rs]) for c in CATEGORIES},
        tensor_core_share=(sum(k.tensor_core_ns for k in ks) / k_total) if k_total else 0.0,
        est_sm_efficiency=_weighted_mean([(k.est_sm_efficiency, k.total_ns) for k in ks]),
        step_source="+".join(sources),
        marker_wall_ms=_mean([r.marker_wall_ms for r in rs]),
        gpu_busy_in_markers_ms=sum(r.gpu_busy_in_markers_ms for r in rs),
        gpu_use=uses.pop() if len(uses) == 1 else ("mixed" if uses else "unknown"),
        step_detail=_details(rs),
    )


def _details(rs: tuple[RankSummary, ...]) -> str:
    """The ranks' step detection, once when they say the same (counts aside)."""
    if not rs or len({r.step_detail for r in rs}) == 1:
        return rs[0].step_detail if rs else ""
    if len({re.sub(r"\d+", "N", r.step_detail) for r in rs}) == 1:
        return f"{rs[0].step_detail} (rank {rs[0].rank}; the other ranks alike)"
    return "; ".join(f"rank {r.rank}: {r.step_detail}" for r in rs)
