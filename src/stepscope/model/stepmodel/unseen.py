"""Kernels a trace or capture lacks: the launches of a step with no GPU record (CuPy's
``cuLaunchKernel`` under some captures, a record lost by the tracer) found from the delay they
left in front of the next op of their stream, and put back as ``UNSEEN`` ops."""

from __future__ import annotations

import numpy as np

from stepscope.model.stepmodel.steps import I64, GpuOps, OpKind

MAX_LATENCY_NS = 1_000_000  # launch-to-start delays above this are not latencies


def with_unseen(o: GpuOps, start: I64, since: I64, prev_end: I64, med_lat: int,
                 ev_start: I64, is_launch: np.ndarray, thread: I64) -> GpuOps:
    """Kernel launches of the step that have no GPU record (the trace lacks it) get an
    ``UNSEEN`` op: where an op started ``MAX_LATENCY_NS`` or more after its launch on a stream
    that was idle (no latency is that long), and the thread issued such a launch before it
    (after its stream predecessor ended), the stream ran the missing kernel from that launch
    (+ the median latency) until the op started; the op then follows it."""
    has_op = np.zeros(ev_start.size, dtype=bool)
    has_op[o.trigger] = True
    blind = np.flatnonzero(is_launch & ~has_op)
    if blind.size == 0:
        return o
    lat, gap = o.lat.copy(), o.gap.copy()
    new: list[tuple[int, int, int, int]] = []  # trigger, stream, dur, lat
    for j in np.flatnonzero(since >= MAX_LATENCY_NS).tolist():
        t = int(o.trigger[j])
        u = blind[(blind < t) & (thread[blind] == thread[t])
                  & (ev_start[blind] + med_lat >= prev_end[j])]
        if u.size == 0 or prev_end[j] > ev_start[t]:
            continue
        u0 = int(u[-1])
        began = max(int(prev_end[j]), int(ev_start[u0]) + med_lat)
        if start[j] <= began:
            continue
        new.append((u0, int(o.stream[j]), int(start[j]) - began, med_lat))
        lat[j], gap[j] = min(int(lat[j]), med_lat), 0
    if not new:
        return o
    k = len(new)
    z = np.zeros(k, dtype=np.int64)
    trig = np.concatenate([o.trigger, [n[0] for n in new]]).astype(np.int64)
    order = np.argsort(trig, kind="stable")
    back = np.empty(order.size, dtype=np.int64)
    back[order] = np.arange(order.size)
    dep = np.concatenate([o.dep, z - 1])
    dep = np.where(dep >= 0, back[np.maximum(dep, 0)], -1)

    def cat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate([a, b])[order]

    return GpuOps(
        trigger=trig[order], stream=cat(o.stream, np.array([n[1] for n in new], np.int64)),
        kind=cat(o.kind, np.full(k, OpKind.UNSEEN, dtype=np.int8)),
        dur=cat(o.dur, np.array([n[2] for n in new], np.int64)),
        lat=cat(lat, np.array([n[3] for n in new], np.int64)), gap=cat(gap, z),
        dep=dep[order], row=cat(o.row, z - 1), nbytes=cat(o.nbytes, z),
        comm=cat(o.comm, np.zeros(k, dtype=bool)))


__all__ = ["MAX_LATENCY_NS", "with_unseen"]
