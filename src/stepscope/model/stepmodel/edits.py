"""Edits: data transformations of a :class:`StepModel`, each returning a changed copy.

What a remedy changes is one or more of these; ``replay`` then decides what the change buys
(an edit never states a saving itself):

* :func:`scale_ops`        GPU ops take ``dur * factor`` (kernels never shorter than
  ``speedups.MIN_KERNEL_NS``): TF32, bf16 AMP, channels_last, communication compression;
* :func:`unblock`          host events stop waiting for the GPU (a sync or a blocking copy
  removed, a copy made non-blocking), with a new own cost;
* :func:`copies_at`        copy ops take ``bytes / bandwidth`` (pinned memory);
* :func:`graph_regions`    each run of at least ``min_launches`` launches between two host
  waits on a thread becomes one CUDA graph launch: the launches' and the host's dispatch
  cost in between go (host work longer than ``keep_host_ns`` between two launches stays: it
  is not dispatch), the graph's launch costs ``launch_ns``, its kernels follow each other
  ``node_gap_ns`` apart;
* :func:`shorten_input`    input waits take ``wait * factor``;
* :func:`input_at_period`  the input waits take what a loader delivering a batch every
  ``period_ns`` leaves: the step replays at that period, or with no wait where the rest of
  the step is slower;
* :func:`ops_to_gpu`       each round trip (:func:`round_trips`: a device-to-host copy, host
  work, the copy back) becomes one kernel launch: the copies, their syncs and the host work
  between them go, one GPU op of a given cost takes their place.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepscope.model.speedups import MIN_KERNEL_NS
from stepscope.model.stepmodel.replay import replay
from stepscope.model.stepmodel.steps import (
    I64,
    WAIT_NONE,
    B,
    CopyDir,
    HostKind,
    OpKind,
    StepModel,
    SyncRole,
)

F64 = npt.NDArray[np.float64]
GRAPH_LAUNCH_NS = 10_000  # host cost of one cudaGraphLaunch
GRAPH_NODE_GAP_NS = 200  # GPU gap between two kernels of a replayed graph (measured: docs/remedies.md)
KEEP_HOST_NS = 1_000_000  # host work between two launches that is not dispatch
MIN_GRAPH_LAUNCHES = 20


def scale_ops(m: StepModel, factor: F64) -> StepModel:
    """Ops take ``dur * factor`` (``factor`` per op; 1 leaves an op alone)."""
    d = m.ops.dur.astype(np.float64)
    new = np.where(factor < 1.0, np.maximum(d * factor, np.minimum(d, MIN_KERNEL_NS)), d * factor)
    return m.with_ops(dur=np.round(new).astype(np.int64))


def unblock(m: StepModel, mask: B, own_ns: I64 | int | None = None) -> StepModel:
    """Events of ``mask`` wait for nothing; their own cost becomes ``own_ns`` (None: kept)."""
    kind = m.host.kind.copy()
    kind[mask & (kind == HostKind.BLOCK)] = HostKind.LAUNCH
    wait = m.host.wait.copy()
    wait[mask] = WAIT_NONE
    own = m.host.own.copy()
    if own_ns is not None:
        own[mask] = np.broadcast_to(np.asarray(own_ns, dtype=np.int64), own.shape)[mask]
    return m.with_host(kind=kind, wait=wait, own=own)


def copies_at(m: StepModel, mask: B, gbs: float) -> StepModel:
    """Copy ops of ``mask`` move their bytes at ``gbs`` GB/s (never slower than measured)."""
    o = m.ops
    sel = mask & (o.kind == OpKind.MEMCPY) & (o.nbytes > 0)
    new = np.minimum(o.dur, np.ceil(o.nbytes / gbs).astype(np.int64))
    return m.with_ops(dur=np.where(sel, new, o.dur).astype(np.int64))


def launch_regions(m: StepModel, min_launches: int = MIN_GRAPH_LAUNCHES) -> list[list[int]]:
    """Runs of consecutive ``LAUNCH`` events of one thread, no wait inside, of at least
    ``min_launches`` events: what a CUDA graph could capture. A hand-over from another
    thread (``after``: the thread waited for it, as autograd's backward thread waits for
    ``loss.backward()``) ends a run: each backward pass of a step is a graph of its own."""
    h = m.host
    out: list[list[int]] = []
    cur: dict[int, list[int]] = {}
    for e in range(h.size):
        t = int(h.thread[e])
        if h.after[e] >= 0:
            run = cur.pop(t, [])
            if len(run) >= min_launches:
                out.append(run)
        if h.kind[e] == HostKind.LAUNCH:
            cur.setdefault(t, []).append(e)
        elif h.kind[e] in (HostKind.BLOCK, HostKind.INPUT):
            run = cur.pop(t, [])
            if len(run) >= min_launches:
                out.append(run)
    out += [r for r in cur.values() if len(r) >= min_launches]
    return sorted(out)


def graph_regions(m: StepModel, regions: list[list[int]], launch_ns: int = GRAPH_LAUNCH_NS,
                  node_gap_ns: int = GRAPH_NODE_GAP_NS,
                  keep_host_ns: int = KEEP_HOST_NS) -> StepModel:
    """Each region (event indexes, :func:`launch_regions`) replayed as one CUDA graph."""
    h, o = m.host, m.ops
    pre, own = h.pre.copy(), h.own.copy()
    lat, gap = o.lat.copy(), o.gap.copy()
    for region in regions:
        r = np.asarray(region, dtype=np.int64)
        inner = r[1:]
        pre[inner] = np.where(pre[inner] > keep_host_ns, pre[inner], 0)
        own[r] = 0
        own[r[0]] = launch_ns
        ops = np.flatnonzero(np.isin(o.trigger, r))
        if ops.size:
            lat[ops] = m.launch_latency_ns
            gap[ops[1:]] = node_gap_ns
    return m.with_host(pre=pre, own=own).with_ops(lat=lat, gap=gap)


def shorten_input(m: StepModel, factor: float) -> StepModel:
    """Input waits take ``wait * factor``."""
    own = m.host.own.copy()
    inp = m.host.kind == HostKind.INPUT
    own[inp] = np.round(own[inp] * factor).astype(np.int64)
    return m.with_host(own=own)


def input_at_period(m: StepModel, period_ns: float, tries: int = 8,
                    tolerance: float = 0.002) -> StepModel:
    """The input waits set so that the step replays at ``period_ns`` (the loader's: a step
    cannot come faster than its batches), shared out as the waits were; none where the step
    without them is already that slow. The step grows with the wait, at most as fast (the GPU
    may run through part of it): from no wait, and from the wait that fills the waiting
    threads' own work up to the period (the step is at least that), a regula falsi between
    the two to ``tolerance``."""
    inp = np.flatnonzero(m.host.kind == HostKind.INPUT)
    if not inp.size:
        return m
    own = m.host.own.astype(np.float64)
    total = float(own[inp].sum())
    share = own[inp] / total if total > 0 else np.eye(1, inp.size).ravel()

    def with_wait(w: float) -> StepModel:
        o = m.host.own.copy()
        o[inp] = np.round(share * w).astype(np.int64)
        return m.with_host(own=o)

    def waiting(w: float) -> tuple[StepModel, float]:
        x = with_wait(w)
        return x, replay(x).step_ns

    x_lo = with_wait(0.0)
    r = replay(x_lo)
    s_lo = r.step_ns
    if s_lo >= period_ns * (1.0 - tolerance):
        return x_lo
    busy = max((r.host_busy_ns[t] for t in set(m.host.thread[inp].tolist())
                if t < len(r.host_busy_ns)), default=0)
    lo, hi = 0.0, max(period_ns - busy, period_ns - s_lo)
    x_hi, s_hi = waiting(hi)
    for _ in range(tries):
        if abs(s_hi - period_ns) <= tolerance * period_ns:
            return x_hi
        if s_hi < period_ns:  # not bracketed yet: the step grows at most as the wait
            lo, x_lo, s_lo = hi, x_hi, s_hi
            hi += period_ns - s_hi
            x_hi, s_hi = waiting(hi)
            continue
        w = lo + (period_ns - s_lo) * (hi - lo) / (s_hi - s_lo)
        x, s = waiting(w)
        if s < period_ns:
            lo, x_lo, s_lo = w, x, s
            if abs(s - period_ns) <= tolerance * period_ns:
                return x
        else:
            hi, x_hi, s_hi = w, x, s
    return x_hi


def round_trips(m: StepModel) -> list[list[int]]:
    """Host events of each round trip: a device-to-host copy, then on the same thread only
    syncs and more device-to-host copies (no kernel launch, no input wait), then the
    host-to-device copy that brings the result back, and the sync right after it if any (a
    blocking ``.to(device)``). The host work between the copies is the ``pre`` of the events
    after the first."""
    h, o = m.host, m.ops
    copy_ev = np.zeros(h.size, dtype=np.int8)  # the direction of the copy an event issues
    mc = o.kind == OpKind.MEMCPY
    copy_ev[o.trigger[mc]] = h.copy[o.trigger[mc]]
    issues = np.zeros(h.size, dtype=bool)
    issues[o.trigger] = True
    out: list[list[int]] = []
    used = np.zeros(h.size, dtype=bool)
    for d in np.flatnonzero(copy_ev == CopyDir.DTOH).tolist():
        if used[d]:
            continue
        t = int(h.thread[d])
        trip = [d]
        for e in range(d + 1, h.size):
            if h.thread[e] != t:
                continue
            if copy_ev[e] == CopyDir.HTOD:
                trip.append(e)
                nxt = [k for k in range(e + 1, h.size) if h.thread[k] == t]
                if nxt and h.role[nxt[0]] == SyncRole.COPY_SYNC and not issues[nxt[0]]:
                    trip.append(nxt[0])
                out.append(trip)
                used[trip] = True
                break
            if copy_ev[e] == CopyDir.DTOH or (h.kind[e] == HostKind.BLOCK and not issues[e]):
                trip.append(e)
                continue
            break  # a kernel launch, another copy or an input wait: not a round trip
    return out


def ops_to_gpu(m: StepModel, trips: list[list[int]], op_ns: I64 | list[int],
               launch_ns: int) -> StepModel:
    """Each round trip (:func:`round_trips`) done on the GPU: its events stop waiting and
    cost nothing but one launch (``launch_ns``, on the first), the host work between them
    goes, its copies take no GPU time and its first copy becomes the GPU op that replaces
    the host computation (``op_ns[i]`` for trip ``i``)."""
    h, o = m.host, m.ops
    kind, wait, pre, own = h.kind.copy(), h.wait.copy(), h.pre.copy(), h.own.copy()
    dur, lat, gap = o.dur.copy(), o.lat.copy(), o.gap.copy()
    for trip, cost in zip(trips, np.asarray(op_ns, dtype=np.int64).tolist()):
        r = np.asarray(trip, dtype=np.int64)
        kind[r[kind[r] == HostKind.BLOCK]] = HostKind.LAUNCH
        wait[r] = WAIT_NONE
        own[r] = 0
        own[r[0]] = launch_ns
        pre[r[1:]] = 0
        ops = np.flatnonzero(np.isin(o.trigger, r))
        dur[ops], gap[ops] = 0, 0
        lat[ops[1:]] = 0
        if ops.size:
            dur[ops[0]] = cost
    return m.with_host(kind=kind, wait=wait, pre=pre, own=own).with_ops(dur=dur, lat=lat,
                                                                        gap=gap)


__all__ = ["GRAPH_LAUNCH_NS", "GRAPH_NODE_GAP_NS", "KEEP_HOST_NS", "MIN_GRAPH_LAUNCHES",
           "copies_at", "graph_regions", "launch_regions", "ops_to_gpu", "round_trips",
           "scale_ops", "shorten_input", "unblock"]
