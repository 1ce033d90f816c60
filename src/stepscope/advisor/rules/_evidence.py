"""Formatting and host-side evidence shared by the idle-time rules.

:func:`host_time_by_op` answers "what was the host doing while the GPU was idle": each
instant of an interval set is given to the *innermost* op of one kind (framework op,
user Python frame or user annotation) open on the training thread at that instant, and
the time is summed by name (exclusive time: a parent only gets what no child covers).
The training thread is the one that issued the most launch calls in the windows (the
most host events when there are none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.advisor.base import Context, Severity, Where
from stepscope.advisor.rules._idle import HEALTHY_BUSY_SHARE
from stepscope.analysis import RankAnalysis
from stepscope.analysis import intervals as iv
from stepscope.analysis.breakdown import GPU_CATEGORIES
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import LAUNCH_KINDS, bounds, column_i64, column_str, str_in
from stepscope.analysis.steps import STEP_NAME
from stepscope.analysis.syncs import is_user_frame
from stepscope.model.confidence import Confidence
from stepscope.model.idle import IdleSplit
from stepscope.schema import AnnotationSource, ApiKind, CpuOpKind

GPU_WORK_KINDS = (*LAUNCH_KINDS, ApiKind.MEMCPY.value, ApiKind.MEMSET.value)


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


@dataclass(frozen=True)
class OpTime:
    name: str
    ns: int  # exclusive time inside the interval set, summed over threads
    cpu_only_ns: int  # part of it in op instances that issued no GPU work (framework ops)


def _containers(g: StepGraph, kind: str) -> pa.Table:
    if kind == "annotation":
        t = g.table("annotations")
        if t.num_rows == 0:
            return t
        keep = str_in(t, "source", (AnnotationSource.USER.value, AnnotationSource.NVTX.value))
        keep &= _name_mask(t, lambda n: not STEP_NAME.match(n.strip()))
        return t.filter(pa.array(keep, type=pa.bool_()))
    t = g.table("cpu_ops")
    if t.num_rows == 0:
        return t
    keep = str_in(t, "kind", (kind,))
    if kind == CpuOpKind.PYTHON.value:
        keep &= _name_mask(t, lambda n: is_user_frame(n) and not n.startswith("<"))
    return t.filter(pa.array(keep, type=pa.bool_()))


def _name_mask(t: pa.Table, test: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
    """``test`` of each row's name, evaluated once per distinct name."""
    enc = pc.dictionary_encode(column_str(t, "name").combine_chunks())
    flags = np.array([test(str(n or "")) for n in enc.dictionary.to_pylist()] + [False],
                     dtype=bool)
    idx = enc.indices.fill_null(len(flags) - 1).to_numpy(zero_copy_only=False)
    return np.asarray(flags[idx], dtype=bool)


def _segments(s: IntervalSet, o_s: I64, o_e: I64) -> tuple[I64, I64]:
    """``s`` cut at every op boundary inside it."""
    def inside(p: I64) -> npt.NDArray[np.bool_]:  # strictly within one of s's intervals
        j = np.searchsorted(s.starts, p, side="right") - 1
        return np.asarray((j >= 0) & (p < s.ends[np.maximum(j, 0)]), dtype=bool)

    pts = np.sort(np.concatenate((s.starts, s.ends, o_s[inside(o_s)], o_e[inside(o_e)])))
    pts = pts[np.concatenate(([True], pts[1:] != pts[:-1]))]
    seg_s, seg_e = pts[:-1], pts[1:]
    j = np.searchsorted(s.starts, seg_s, side="right") - 1
    keep = (j >= 0) & (seg_e <= s.ends[np.maximum(j, 0)])
    return seg_s[keep], seg_e[keep]


def host_time_by_op(g: StepGraph, s: IntervalSet, *,
                    kind: str = CpuOpKind.FRAMEWORK.value, top: int = 5,
                    min_share: float = 0.01) -> list[OpTime]:
    """Exclusive time of ``s`` by innermost op of ``kind`` ("framework", "python" = user
    frames only, or "annotation") per host thread, summed over threads; largest first,
    names under ``min_share`` of ``s`` left out (module docstring)."""
    if s.starts.size == 0:
        return []
    ops = _containers(g, kind)
    if ops.num_rows == 0:
        return []
    o_s, o_e = bounds(ops)
    seg_s, seg_e = _segments(s, o_s, o_e)
    if seg_s.size == 0:
        return []
    pid, tid = column_i64(ops, "pid"), column_i64(ops, "tid")
    (grp,) = iv.group_ids((pid, tid))
    enc = pc.dictionary_encode(column_str(ops, "name").combine_chunks())
    dictionary = [str(x) for x in enc.dictionary.to_pylist()]
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    framework = kind == CpuOpKind.FRAMEWORK.value
    api = g.table("api_calls")
    work = str_in(api, "kind", GPU_WORK_KINDS)
    a_s, a_pid, a_tid = bounds(api)[0][work], column_i64(api, "pid")[work], \
        column_i64(api, "tid")[work]
    total = np.zeros(len(dictionary))
    cpu_only = np.zeros(len(dictionary))
    dur = (seg_e - seg_s).astype(np.float64)
    for g in np.unique(grp).tolist():  # a few host threads
        mg = np.flatnonzero(grp == g)
        idx = iv.innermost_containing(o_s[mg], o_e[mg], seg_s, seg_e)
        hit = idx >= 0
        op = mg[idx[hit]]
        total += np.bincount(codes[op], weights=dur[hit], minlength=len(dictionary))
        if framework:  # op instances that issued GPU work (a launch/copy call inside)
            mine = np.sort(a_s[(a_pid == pid[mg[0]]) & (a_tid == tid[mg[0]])])
            issued = np.searchsorted(mine, o_e[op], side="right") > np.searchsorted(mine, o_s[op])
            cpu_only += np.bincount(codes[op][~issued], weights=dur[hit][~issued],
                                    minlength=len(dictionary))
    floor = min_share * s.total_ns
    order = sorted(np.flatnonzero(total > floor).tolist(),
                   key=lambda i: (-total[i], dictionary[i]))
    return [OpTime(dictionary[i], int(total[i]), int(cpu_only[i])) for i in order[:top]]


def op_list(ops: Sequence[OpTime], per: int, *, mark_cpu: bool = False) -> str:
    """``"aten::copy_ 1.20 ms, train.py(3): f 0.40 ms"`` per step (``per`` steps)."""
    parts = []
    for o in ops:
        tag = " (ran on the CPU: no GPU work)" if mark_cpu and o.cpu_only_ns * 2 > o.ns else ""
        parts.append(f"{o.name} {ms(o.ns / max(per, 1))}{tag}")
    return ", ".join(parts)
