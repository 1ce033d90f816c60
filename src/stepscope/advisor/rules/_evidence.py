"""Formatting and evidence shared by the idle-time rules.

``model.host_ops.host_time_by_op`` answers "what was the host doing while the GPU was idle": each
instant of an interval set is given to the *innermost* op of one kind (framework op,
user Python frame or user annotation) open on the training thread at that instant, and
the time is summed by name (exclusive time: a parent only gets what no child covers).
The training thread is the one that issued the most launch calls in the windows (the
most host events when there are none).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepscope.advisor.base import Context, Severity, Where
from stepscope.advisor.rules._idle import HEALTHY_BUSY_SHARE
from stepscope.analysis import RankAnalysis
from stepscope.analysis.breakdown import GPU_CATEGORIES
from stepscope.analysis.intervals import I64
from stepscope.model.confidence import Confidence
from stepscope.model.host_ops import OpTime
from stepscope.model.idle import IdleSplit


def ms(ns: float) -> str:
    """``1234567`` ns -> ``"1.23 ms"`` (three decimals under 0.1 ms)."""
    v = ns / 1e6
    return f"{v:.2f} ms" if abs(v) >= 0.1 or v == 0 else f"{v:.3f} ms"


def us(ns: float) -> str:
    return f"{ns / 1e3:.1f} µs"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def where_worst(split: IdleSplit, per_step: I64, *, kernels: Sequence[str] = (),
                call_sites: Sequence[str] = ()) -> Where:
    """Where to look: the rank, the steps with the most of ``per_step`` (worst first, at
    most 5), and the time range of the worst one."""
    order = np.argsort(-per_step, kind="stable")
    top = [int(i) for i in order[:5] if per_step[int(i)] > 0] or [int(order[0])]
    worst = split.steps[top[0]]
    return Where(rank=split.rank, steps=tuple(split.steps[i].index for i in top),
                 start_ns=worst.window[0], end_ns=worst.window[1], kernels=tuple(kernels),
                 call_sites=tuple(call_sites))


def busy_share(ra: RankAnalysis) -> float:
    """GPU busy share of the rank's steady steps (compute + communication + copies of the
    step-time breakdown over the step)."""
    bd = ra.breakdown.mean_ms
    total = sum(bd.values())
    return sum(bd[c] for c in GPU_CATEGORIES) / total if total else 0.0


def max_severity(ctx: Context, ra: RankAnalysis, *, host_side: bool) -> Severity:
    """Info on a nearly saturated GPU (>= 90% busy: a healthy run); a trace whose host
    timings cannot be trusted (low confidence) gets at most a warning."""
    if busy_share(ra) >= HEALTHY_BUSY_SHARE:
        return Severity.INFO
    if host_side and ctx.host_confidence == Confidence.LOW:
        return Severity.WARNING
    return Severity.CRITICAL


def profiler_line(split: IdleSplit) -> str:
    """Evidence line for the profiler correction ("" when none was applied)."""
    if split.profiler_ns_per_step <= 0 or abs(split.host_factor - 1.0) < 0.01:
        return ""
    return (f"host times scaled by {split.host_factor:.2f} for the profiler's own cost on the "
            f"critical path (about {ms(split.profiler_ns_per_step)} per step): the percentage "
            f"estimates the untraced speed-up")


def op_list(ops: Sequence[OpTime], per: int, *, mark_cpu: bool = False) -> str:
    """``"aten::copy_ 1.20 ms, train.py(3): f 0.40 ms"`` per step (``per`` steps)."""
    parts = []
    for o in ops:
        tag = " (ran on the CPU: no GPU work)" if mark_cpu and o.cpu_only_ns * 2 > o.ns else ""
        parts.append(f"{o.name} {ms(o.ns / max(per, 1))}{tag}")
    return ", ".join(parts)
