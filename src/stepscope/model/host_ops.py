"""What the host was doing: host time by op, and a rank's host ops in time order.

:func:`host_time_by_op` answers "what was the host doing while the GPU was idle": each
instant of an interval set is given to the *innermost* op of one kind (framework op,
user Python frame or user annotation) open on the training thread at that instant, and
the time is summed by name (exclusive time: a parent only gets what no child covers).
The training thread is the one that issued the most launch calls in the windows (the
most host events when there are none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import intervals as iv
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import LAUNCH_KINDS, bounds, column_i64, column_str, str_in
from stepscope.analysis.results import FACT
from stepscope.analysis.steps import STEP_NAME
from stepscope.analysis.syncs import is_user_frame
from stepscope.schema_enums import AnnotationSource, ApiKind, CpuOpKind

GPU_WORK_KINDS = (*LAUNCH_KINDS, ApiKind.MEMCPY.value, ApiKind.MEMSET.value)


@dataclass(frozen=True)
class OpTime:
    name: str
    ns: int  # exclusive time inside the interval set, summed over threads
    cpu_only_ns: int  # part of it in op instances that issued no GPU work (framework ops)


# the columns host_time_by_op reads: only these are copied by the filter
_USED = ("ts_ns", "dur_ns", "pid", "tid", "name")


def _containers(g: StepGraph, kind: str) -> pa.Table:
    if kind == "annotation":
        t = g.table("annotations")
        if t.num_rows == 0:
            return t
        keep = str_in(t, "source", (AnnotationSource.USER.value, AnnotationSource.NVTX.value))
        keep &= _name_mask(t, lambda n: not STEP_NAME.match(n.strip()))
        return t.select(_USED).filter(pa.array(keep, type=pa.bool_()))
    t = g.table("cpu_ops")
    if t.num_rows == 0:
        return t
    keep = str_in(t, "kind", (kind,))
    if kind == CpuOpKind.PYTHON.value:
        keep &= _name_mask(t, lambda n: is_user_frame(n) and not n.startswith("<"))
    return t.select(_USED).filter(pa.array(keep, type=pa.bool_()))


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


IDLE_KINDS = (CpuOpKind.FRAMEWORK.value, CpuOpKind.PYTHON.value, "annotation")


def idle_ops(g: StepGraph, part: str, s: IntervalSet, kind: str) -> list[OpTime]:
    """``host_time_by_op(g, s, kind=kind)`` of the rank's idle time ``part`` (``"host"``,
    ``"gaps"``: ``s`` is that attribute of the rank's ``model.idle.IdleSplit``), once per rank
    graph: a per-rank fact (``advisor.rank_facts``), the rules read it for one rank."""
    return g.memo((FACT, "idle_ops", part, kind), lambda: host_time_by_op(g, s, kind=kind))


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


@dataclass(frozen=True)
class HostOps:
    """The rank's host ops sorted by start (read once per rank)."""

    table: pa.Table
    order: I64  # row of the table at each sorted position
    s: I64
    e: I64
    tid: I64

    @staticmethod
    def of(g: StepGraph) -> HostOps:
        ops = g.table("cpu_ops")
        s, e = bounds(ops)
        order = np.argsort(s, kind="stable")
        return HostOps(ops, order, s[order], e[order], column_i64(ops, "tid")[order])

    def outermost(self, tid: int, lo: int, hi: int) -> list[tuple[str, int]]:
        """Outermost ops of thread ``tid`` inside ``[lo, hi)``: time per name, most first."""
        if hi <= lo or self.s.size == 0:
            return []
        a, b = np.searchsorted(self.s, [lo, hi])
        idx = a + np.flatnonzero((self.tid[a:b] == tid) & (self.e[a:b] <= hi))
        if idx.size == 0:
            return []
        names = column_str(self.table, "name").take(pa.array(self.order[idx])).to_pylist()
        out: dict[str, int] = {}
        reach = -1
        for i, name in zip(idx.tolist(), names):
            if self.s[i] < reach:  # nested in an earlier op
                continue
            reach = int(self.e[i])
            out[str(name)] = out.get(str(name), 0) + int(self.e[i] - self.s[i])
        return sorted(out.items(), key=lambda kv: -kv[1])
