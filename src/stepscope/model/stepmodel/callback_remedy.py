"""``remove_callback``: the host callbacks of a compiled step taken out of it (JAX's
``jax.debug.callback``, ``io_callback``, ``pure_callback``; TensorFlow's ``tf.py_function``).

XLA runs a host callback as a thunk of the step, inline on the thread that dispatches the step
(``analysis.callbacks``): the thunk copies its operands to the host, waits for the copies, runs
the Python function, and only then does the thread launch the rest of the step. In the step
model that is host work (the ``pre`` of the events during the thunk and of the first one after
it), the copies' calls and syncs (events that start inside the thunk) and the copies' GPU ops.
The remedy (:func:`drop_host_work`) removes exactly those: the host work inside the thunk
ranges, the events inside them (their own cost, their wait for the GPU, their copies' and
memsets' GPU time); every other event and op stays, the device work that computed the
callback's operand included. ``replay`` then decides what the removal buys: a callback during
which the GPU had work queued saves only what the host did not hide.

Which events fall inside a thunk is a matter of time: each event's measured start
(``HostEvents.start``) against the thunk ranges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.callbacks import CALLBACK_OP, is_callback
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import bounds, column_i64, column_str
from stepscope.analysis.steps import work_annotations
from stepscope.model.stepmodel.candidate import Candidate, Option, ms
from stepscope.model.stepmodel.steps import (
    I64,
    WAIT_NONE,
    B,
    HostKind,
    OpKind,
    StepModel,
)

ANY_THREAD = -1
HLO_OP = re.compile(r"hlo_op=([^,#\s]+)")
FINDINGS = ("host_bound", "sync_calls")


@dataclass(frozen=True)
class Ranges:
    """Host ranges (ns): start, end and the model thread they ran on (``ANY_THREAD``: any)."""

    start: I64
    end: I64
    thread: I64
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostCut:
    """What host ranges hold of a step model: per event, the ns of its ``pre`` inside them and
    whether the event starts inside one; per thread, the ns of its ``tail`` inside them."""

    pre: I64
    inside: B
    tail: I64

    @property
    def empty(self) -> bool:
        return not (self.inside.any() or self.pre.any() or self.tail.any())


def _overlap(a: int, b: int, s: I64, e: I64) -> int:
    """ns of ``[a, b)`` covered by the (disjoint) ranges ``[s, e)``."""
    if b <= a or s.size == 0:
        return 0
    return int(np.maximum(np.minimum(e, b) - np.maximum(s, a), 0).sum())


def _merged(s: I64, e: I64) -> tuple[I64, I64]:
    """The union of the ranges, sorted and disjoint."""
    if s.size == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    out_s, out_e = [int(s[o[0]])], [int(e[o[0]])]
    for a, b in zip(s[o[1:]].tolist(), e[o[1:]].tolist()):
        if a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_s.append(a)
            out_e.append(b)
    return np.asarray(out_s, dtype=np.int64), np.asarray(out_e, dtype=np.int64)


def _contained(a: int, b: int, s: I64, e: I64) -> int:
    """ns of the ranges ``[s, e)`` that lie wholly within ``[a, b)``."""
    if b <= a or s.size == 0:
        return 0
    inn = (s >= a) & (e <= b)
    return int((e[inn] - s[inn]).sum())


def host_cut(m: StepModel, start: I64, step_end: int, r: Ranges) -> HostCut:
    """The part of ``m``'s host time inside the ranges ``r``: per event (``start``: when it
    started, ns) the ``pre`` before it (``[start - pre, start)``) and whether it starts in a
    range; per thread its ``tail`` (``[step_end - tail, step_end)``).

    A range counts wholly on its own thread (``ANY_THREAD``: on every thread). On another
    thread it counts only where that thread's ``pre`` (or ``tail``) holds all of it: the
    thread issued nothing while the callback held the step, and its next call came after it
    (JAX's transfer threads, driven by the thread that runs the step); a thread that did
    issue calls meanwhile was not waiting for the callback, and keeps its time."""
    h = m.host
    pre = np.zeros(h.size, dtype=np.int64)
    inside = np.zeros(h.size, dtype=bool)
    tail = np.zeros(m.tail.size, dtype=np.int64)
    mine: dict[int, tuple[I64, I64]] = {}
    other: dict[int, tuple[I64, I64]] = {}
    for t in range(max(len(m.threads), m.tail.size, 1)):
        sel = (r.thread == t) | (r.thread == ANY_THREAD)
        mine[t] = _merged(r.start[sel], r.end[sel])
        other[t] = _merged(r.start[~sel], r.end[~sel])

    def cut(t: int, a: int, b: int) -> int:
        return _overlap(a, b, *mine[t]) + _contained(a, b, *other[t])

    for e in range(1, h.size):  # event 0 is the step's start mark
        t, st = int(h.thread[e]), int(start[e])
        pre[e] = cut(t, st - int(h.pre[e]), st)
        s, en = mine[t]
        k = int(np.searchsorted(s, st, side="right")) - 1
        inside[e] = k >= 0 and st < int(en[k])
    for t in range(tail.size):
        tail[t] = cut(t, step_end - int(m.tail[t]), step_end)
    return HostCut(pre=pre, inside=inside, tail=tail)


def drop_host_work(m: StepModel, cut: HostCut) -> StepModel:
    """``m`` without the host time of ``cut``: the ``pre`` and ``tail`` inside the ranges
    go, the events inside them cost nothing and wait for nothing, and the copies and memsets
    they issue take no GPU time (their kernels stay, launched for free)."""
    h, o = m.host, m.ops
    kind, wait, own = h.kind.copy(), h.wait.copy(), h.own.copy()
    ins = cut.inside
    kind[ins & (kind == HostKind.BLOCK)] = HostKind.LAUNCH
    wait[ins] = WAIT_NONE
    own[ins] = 0
    pre = np.maximum(h.pre - cut.pre, 0).astype(np.int64)
    tail = np.maximum(m.tail - cut.tail, 0).astype(np.int64)
    gone = ins[o.trigger] & np.isin(o.kind, (OpKind.MEMCPY, OpKind.MEMSET))
    dur = np.where(gone, 0, o.dur).astype(np.int64)
    lat = np.where(gone, 0, o.lat).astype(np.int64)
    gap = np.where(gone, 0, o.gap).astype(np.int64)
    return m.with_host(kind=kind, wait=wait, own=own, pre=pre).with_ops(
        dur=dur, lat=lat, gap=gap).with_tail(tail)


def callback_ranges(g: StepGraph, m: StepModel) -> Ranges:
    """The rank's host-callback thunk ranges (host annotations, ``analysis.callbacks``), each
    on its model thread; on any thread when none of them ran on a thread of the model."""
    ann = work_annotations(g)
    z = np.zeros(0, dtype=np.int64)
    if ann.num_rows == 0:
        return Ranges(z, z, z)
    names = column_str(ann, "name").to_pylist()
    hit = {n: is_callback(str(n)) for n in set(names)}
    keep = np.array([hit[n] for n in names], dtype=bool)
    keep &= column_i64(ann, "device", -1) < 0  # host ranges, not their GPU projections
    s, e = bounds(ann)
    key = {t: i for i, t in enumerate(m.threads)}
    th = np.array([key.get((p, t), ANY_THREAD) for p, t in
                   zip(column_i64(ann, "pid").tolist(), column_i64(ann, "tid").tolist())],
                  dtype=np.int64)[keep]
    if th.size and (th == ANY_THREAD).all():
        th[:] = ANY_THREAD
    return Ranges(s[keep], e[keep], th, tuple(str(n) for n, k in zip(names, keep) if k))


def short_name(name: str) -> str:
    """``debug_callback.1`` out of an XLA thunk annotation (``Thunk:#...hlo_op=...#``)."""
    op = HLO_OP.search(name)
    if op and is_callback(op.group(1)):
        return op.group(1)
    found = CALLBACK_OP.search(name)
    return found.group(0).lstrip("=/# \t") if found else name


def remove_callback(analysis: Analysis, ra: RankAnalysis, m: StepModel) -> Candidate | None:
    """The remedy (module docstring), or None where no callback range touches the step."""
    g = analysis.graph.rank(ra.rank)
    r = callback_ranges(g, m)
    if r.start.size == 0:
        return None
    step = ra.steps.steps[m.step_index]
    cut = host_cut(m, m.host.start, int(step.end_ns), r)
    if cut.empty:
        return None
    in_step = (r.start < step.end_ns) & (r.end > step.start_ns)
    which = sorted({short_name(n) for n, k in zip(r.names, in_step.tolist()) if k})
    steady = ra.steps.steady
    ss, se = _merged(r.start, r.end)
    per_step = (sum(_overlap(s.start_ns, s.end_ns, ss, se) for s in steady) / len(steady)
                if steady else 0.0)
    o = m.ops
    copies = cut.inside[o.trigger] & np.isin(o.kind, (OpKind.MEMCPY, OpKind.MEMSET))
    waits = int((cut.inside & (m.host.kind == HostKind.BLOCK)).sum())
    evidence = (
        f"{int(in_step.sum())} host callback thunk(s) in the modelled step "
        f"({', '.join(which)}): {ms(per_step)} of host time per steady step",
        f"inside them: {int(cut.inside.sum())} call(s) ({waits} waiting for the GPU), "
        f"{int(copies.sum())} copy(ies) of {int(o.nbytes[copies].sum()) / 1024:.1f} KiB, "
        f"{ms(float(o.dur[copies].sum()))} on the GPU",
    )
    return Candidate(
        "remove_callback", "Compute it on the device, or move the host callback out of the "
        "jitted step (jax.debug.callback, io_callback, pure_callback; tf.py_function)",
        FINDINGS, evidence,
        (Option("remove_callback", "no host callback in the step",
                lambda x: drop_host_work(x, cut)),),
        ("the callback's host work, its copies to the host and the waits for them go; the "
         "device work that computed its operands stays",
         "a value computed on the device instead costs a small fused kernel, not modelled"))


__all__ = ["ANY_THREAD", "FINDINGS", "HostCut", "Ranges", "callback_ranges",
           "drop_host_work", "host_cut", "remove_callback", "short_name"]
