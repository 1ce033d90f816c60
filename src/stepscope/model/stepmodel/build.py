"""Build a rank's :class:`StepModel` from its step graph (``steps`` module docstring).

The modelled step is the steady step closest to the median of the steady steps, both in its
GPU-anchored length and in its markers' window (``representative_step``). Its host events are
the rank's launches, copies, memsets, syncs (``api_calls``) and input waits (``input_waits``)
that start inside the step's markers; its GPU ops are the GPU records the step issued
(``StepGraph.issued_ns`` inside the markers), each triggered by the call that launched it (else
by the last host event before it, else the step's start mark). A step recovered from the kernel
stream's periodicity has GPU times for markers: its host window runs from one launch of the
main thread to the same launch a period later (``host_window``).

Measured inputs, per op: the latency from its launch to its start when its stream was idle at
the launch; for an op launched while its stream was busy (queued), the rank's median latency
and the gap after its stream predecessor; and a dependency on an op of another stream of the
same step that ended within ``DEP_TOL_NS`` before it started (the latest such), when it started more than
``DEP_SLACK_NS`` later than its launch and stream allow (an event wait). Per blocking call: the
time it spent after the GPU work it waited for had finished (``own``), so that a replay of the
measured model waits as long as the measurement did.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import bounds, column_i64, column_str, str_in
from stepscope.analysis.syncs import blocking_calls
from stepscope.call_kinds import COMM_KERNEL
from stepscope.model.profiler_cost import EventCosts
from stepscope.model.stepmodel.handover import drop_nested, steps_handovers, typical_handovers
from stepscope.model.stepmodel.host_speed import launch_reference, thread_speed
from stepscope.model.stepmodel.profiler import profiler_cost
from stepscope.model.stepmodel.steps import (
    I64,
    WAIT_ALL,
    WAIT_NONE,
    CopyDir,
    GpuOps,
    HostEvents,
    HostKind,
    StepModel,
    SyncRole,
    i64,
)
from stepscope.model.stepmodel.unseen import MAX_LATENCY_NS, with_unseen
from stepscope.model.stepmodel.waits import (
    EVENT_SYNC,
    Awaited,
    busy_at_start,
    event_sync_back,
    steps_back,
    sync_streams,
)
from stepscope.model.stepmodel.window import HAND_BACK, hands_back, host_window
from stepscope.schema_enums import ApiKind, CopyKind, MemoryKind

DEP_SLACK_NS = 20_000
DEP_TOL_NS = 50_000  # an event wait starts its op this soon after the awaited op ends
HANDOFF_RUN = 4  # a thread that ran this many events alone hands over to the next one
DEFAULT_LATENCY_NS = 5_000
_ISSUING = (ApiKind.LAUNCH.value, ApiKind.GRAPH_LAUNCH.value, ApiKind.MEMCPY.value,
            ApiKind.MEMSET.value, ApiKind.SYNC.value)


def representative_step(ra: RankAnalysis) -> int | None:
    """The StepInfo index of the steady step closest to the median steady step, not the
    trace's first or last step where others are steady (their neighbours, which launched the
    GPU work they wait for or ran ahead into them, are outside the trace). Closest in both of
    its lengths: its GPU-anchored span and its markers' window (the model's host events are
    those that start inside the markers), each relative to its median, the worse of the two: a
    step whose span is typical but whose markers hold a long input wait (the GPU-anchored window
    of the step before took the idle time) is not typical."""
    steady = ra.steps.steady
    if not steady:
        return None
    n = len(ra.steps.steps)
    inner = tuple(s for s in steady if 0 < s.index < n - 1)
    steady = inner or steady
    spans = np.array([s.span_ns for s in steady], dtype=np.float64)
    marks = np.array([s.end_ns - s.start_ns for s in steady], dtype=np.float64)
    off = np.maximum(_relative_off(spans), _relative_off(marks))
    return steady[int(np.argmin(off))].index


def _relative_off(x: np.ndarray) -> np.ndarray:
    med = float(np.median(x))
    return np.abs(x - med) / med if med > 0 else np.zeros_like(x)


def build_step_model(g: StepGraph, ra: RankAnalysis, costs: EventCosts | None = None
                     ) -> StepModel | None:
    """The rank's step model, or None without steady steps or GPU work in the chosen step.
    With ``costs`` (a torch.profiler trace or a recorded run: ``model.profiler_cost.step_costs``),
    the model carries what the profiler or capture added to each host event and each thread's
    speed factor (``host_speed``); ``profiler.untraced`` takes them out."""
    idx = representative_step(ra)
    if idx is None:
        return None
    step = ra.steps.steps[idx]
    t0, t1 = host_window(g, ra, idx)
    if t1 <= t0:
        return None
    spans = np.array([s.span_ns for s in ra.steps.steady], dtype=np.float64)
    gp = g.gpu
    if gp.size == 0:
        return None
    issued = g.issued_ns
    in_step = np.flatnonzero((issued >= t0) & (issued < t1))
    paired = g.gpu_api_row[in_step] >= 0
    if paired.any():  # unpaired records were launched before the trace began: not this step's
        in_step = in_step[paired]
    if in_step.size == 0:
        return None
    names: dict[str, int] = {}

    def name_id(n: str) -> int:
        return names.setdefault(n, len(names))

    # -- GPU records: streams, kinds, bytes, measured predecessor end ----------------------
    parts = [g.table(n) for n in ("kernels", "memcpy", "memset")]
    stream = np.concatenate([column_i64(t, "stream", -1) for t in parts])
    kindcol = np.concatenate([np.full(t.num_rows, k, dtype=np.int8) for k, t in enumerate(parts)])
    rows = np.concatenate([np.arange(t.num_rows, dtype=np.int64) for t in parts])
    nbytes = np.concatenate([np.zeros(parts[0].num_rows, dtype=np.int64),
                             column_i64(parts[1], "bytes", 0), column_i64(parts[2], "bytes", 0)])
    skey = gp.device * np.int64(1 << 40) + stream
    order = np.lexsort((gp.start, skey))
    prev_end = np.full(gp.size, np.iinfo(np.int64).min // 4, dtype=np.int64)
    for a, b in _runs(skey[order]):  # the latest end before each record on its stream
        seg = order[a:b]
        if seg.size > 1:
            prev_end[seg[1:]] = np.maximum.accumulate(gp.end[seg])[:-1]
    # -- host events ------------------------------------------------------------------------
    api = g.table("api_calls")
    a_s, a_e = bounds(api)
    a_kind = str_in(api, "kind", _ISSUING)
    sel_api = np.flatnonzero(a_kind & (a_s >= t0) & (a_s < t1))
    blk = blocking_calls(g)
    waits = g.table("input_waits")
    w_s, w_e = bounds(waits)
    sel_w = np.flatnonzero((w_s >= t0) & (w_s < t1))
    pid = np.concatenate([column_i64(api, "pid")[sel_api], column_i64(waits, "pid")[sel_w]])
    tid = np.concatenate([column_i64(api, "tid")[sel_api], column_i64(waits, "tid")[sel_w]])
    ev_s = np.concatenate([a_s[sel_api], w_s[sel_w]])
    ev_e = np.concatenate([a_e[sel_api], w_e[sel_w]])
    ev_api = np.concatenate([sel_api, np.full(sel_w.size, -1, dtype=np.int64)])
    api_names = column_str(api, "name").to_pylist() if sel_api.size else []
    api_kinds = column_str(api, "kind").to_pylist() if sel_api.size else []
    threads_l = sorted(set(zip(pid.tolist(), tid.tolist())))
    if not threads_l:
        threads_l = [(-1, -1)]
    th_index = {t: i for i, t in enumerate(threads_l)}
    ev_t = np.array([th_index[(p, t)] for p, t in zip(pid.tolist(), tid.tolist())],
                    dtype=np.int64)
    # the main thread: the process's own (tid == pid: the training loop's), else the one that
    # starts the step (autograd's backward thread may have more events, and a step recovered
    # from the kernel stream's periodicity may start inside the backward pass)
    own_main = [i for i, (p, t) in enumerate(threads_l) if p == t and p >= 0]
    main = own_main[0] if own_main else int(ev_t[np.argmin(ev_s)]) if ev_t.size else 0
    o = np.lexsort((ev_e, ev_s))
    ev_s, ev_e, ev_api, ev_t = ev_s[o], ev_e[o], ev_api[o], ev_t[o]
    # drop events inside an earlier event of their thread (nested calls)
    keep = drop_nested(ev_s, ev_e, ev_t)
    ev_s, ev_e, ev_api, ev_t = ev_s[keep], ev_e[keep], ev_api[keep], ev_t[keep]
    n_ev = ev_s.size + 1  # event 0: the step's start mark on the main thread
    e_start = np.concatenate(([t0], ev_s))
    e_end = np.concatenate(([t0], ev_e))
    e_api = np.concatenate(([-1], ev_api))
    e_thread = np.concatenate(([main], ev_t))
    if hands_back(ra.steps.source, e_thread, main, HANDOFF_RUN):  # the main thread resumes before the end
        e_start, e_end = np.append(e_start, t1), np.append(e_end, t1)
        e_api, e_thread = np.append(e_api, HAND_BACK), np.append(e_thread, main)
        n_ev += 1
    api_to_ev = {int(r): i for i, r in enumerate(e_api.tolist()) if r >= 0}
    # -- the step's GPU ops and their triggers ---------------------------------------------
    op_api = g.gpu_api_row[in_step]
    trig = np.array([api_to_ev.get(int(r), -1) for r in op_api.tolist()], dtype=np.int64)
    orphan = trig < 0
    if orphan.any():  # the last host event that started before the op, else the mark
        pos = np.searchsorted(e_start, gp.start[in_step][orphan], side="right") - 1
        trig[orphan] = np.maximum(pos, 0)
    oo = np.lexsort((gp.start[in_step], trig))
    in_step, trig = in_step[oo], trig[oo]
    o_start, o_end = gp.start[in_step], gp.end[in_step]
    keys = sorted(set(zip(gp.device[in_step].tolist(), stream[in_step].tolist())))
    st_index = {k: i for i, k in enumerate(keys)}
    o_stream = np.array([st_index[(d, s)] for d, s in zip(gp.device[in_step].tolist(),
                                                          stream[in_step].tolist())],
                        dtype=np.int64)
    launch = e_start[trig]
    since = np.maximum(o_start - launch, 0)
    pe = prev_end[in_step]
    queued = pe > launch  # the stream was still busy when the op was launched
    idle = ~queued & (since < MAX_LATENCY_NS)
    med_lat = int(np.median(since[idle])) if idle.any() else DEFAULT_LATENCY_NS
    lat = np.where(queued, np.minimum(since, med_lat), since).astype(np.int64)
    gap = np.where(queued, np.maximum(o_start - pe, 0), 0).astype(np.int64)
    dep = np.full(in_step.size, -1, dtype=np.int64)
    late = np.where(queued, o_start - np.maximum(pe, launch + med_lat), since - med_lat)
    for j in np.flatnonzero(late > DEP_SLACK_NS).tolist():
        cand = np.flatnonzero((o_stream != o_stream[j]) & (trig <= trig[j])
                              & (o_end <= o_start[j]) & (o_end >= o_start[j] - DEP_TOL_NS))
        cand = cand[cand < j] if cand.size else cand
        if cand.size:
            dep[j] = int(cand[np.argmax(o_end[cand])])
            lat[j] = min(int(since[j]), med_lat)
            gap[j] = 0
    o_kind = kindcol[in_step]
    o_rows = rows[in_step]
    comm = np.zeros(in_step.size, dtype=bool)
    kj = np.flatnonzero(o_kind == 0)
    if kj.size:  # communication kernels, by name (the names themselves are not kept)
        kn = column_str(parts[0], "name").take(pa.array(o_rows[kj]))
        words = pc.unique(kn).to_pylist()
        comm_names = [w for w in words if w is not None and COMM_KERNEL.search(str(w))]
        if comm_names:
            comm[kj] = np.asarray(pc.fill_null(pc.is_in(kn, value_set=pa.array(
                comm_names, type=pa.string())), False).to_numpy(zero_copy_only=False), dtype=bool)
    # -- host event columns -----------------------------------------------------------------
    mc = g.table("memcpy")
    m_kind = column_str(mc, "kind").to_pylist() if mc.num_rows else []
    m_src = column_str(mc, "src_kind").to_pylist() if mc.num_rows else []
    m_dst = column_str(mc, "dst_kind").to_pylist() if mc.num_rows else []
    m_row = g.memcpy_row(g.keys("api_calls")) if api.num_rows else np.zeros(0, np.int64)
    sync_stream = sync_streams(g)
    kind = np.zeros(n_ev, dtype=np.int8)
    role = np.zeros(n_ev, dtype=np.int8)
    copy = np.zeros(n_ev, dtype=np.int8)
    pageable = np.zeros(n_ev, dtype=bool)
    wait = np.full(n_ev, WAIT_NONE, dtype=np.int64)
    back = np.zeros(n_ev, dtype=np.int64)
    ev_name = np.zeros(n_ev, dtype=np.int64)
    ev_name[0] = name_id("step start")
    first_op = np.searchsorted(trig, np.arange(n_ev), side="left")
    last_op = np.searchsorted(trig, np.arange(n_ev), side="right")
    a_key = g.keys("api_calls") if api.num_rows else np.zeros(0, np.int64)
    for e in range(1, n_ev):
        r = int(e_api[e])
        if r == HAND_BACK:
            kind[e] = HostKind.MARK
            ev_name[e] = name_id("hand back")
            continue
        if r < 0:
            kind[e] = HostKind.INPUT
            ev_name[e] = name_id("input wait")
            continue
        ev_name[e] = name_id(str(api_names[r]))
        k = api_kinds[r]
        kind[e] = HostKind.LAUNCH
        if k == ApiKind.MEMCPY.value and m_row.size and m_row[r] >= 0:
            mr = int(m_row[r])
            copy[e] = (CopyDir.HTOD if m_kind[mr] == CopyKind.HTOD.value else
                       CopyDir.DTOH if m_kind[mr] == CopyKind.DTOH.value else CopyDir.OTHER)
            pageable[e] = MemoryKind.PAGEABLE.value in (m_src[mr], m_dst[mr])
        if blk.blocking_copy[r]:
            kind[e], role[e] = HostKind.BLOCK, SyncRole.BLOCKING_COPY
            mine = np.arange(first_op[e], last_op[e])
            wait[e] = int(o_stream[mine[-1]]) if mine.size else WAIT_ALL
        elif blk.is_sync[r]:
            kind[e] = HostKind.BLOCK
            s_ = sync_stream.get(int(a_key[r]))
            wait[e] = st_index.get(s_, WAIT_ALL) if s_ is not None else WAIT_ALL
            prev = _previous(e_thread, kind, e)
            pc_ = copy[prev] if prev > 0 else CopyDir.NONE
            role[e] = (SyncRole.READBACK if pc_ == CopyDir.DTOH else
                       SyncRole.COPY_SYNC if pc_ == CopyDir.HTOD else SyncRole.EXPLICIT)
            copy[e] = pc_
    # pre / own per thread; the wait each BLOCK event saw, in measured terms
    pre = np.zeros(n_ev, dtype=np.int64)
    own = np.maximum(e_end - e_start, 0).astype(np.int64)
    free_at = busy_at_start(threads_l, t0, t1, [(api, a_s, a_e, a_kind),
                                                 (waits, w_s, w_e, np.ones(w_s.size, bool))])
    awaited = Awaited(gp.end, skey, issued, keys)
    m_names = list(names)
    typical_back = event_sync_back(g, issued, ra, api_names, a_s, a_e)
    after = np.full(n_ev, -1, dtype=np.int64)
    ready_at = np.zeros(n_ev, dtype=np.int64)
    run = 0  # consecutive events of the thread of the event before
    for e in range(n_ev):
        t = int(e_thread[e])
        ready = int(free_at[t])
        if e > 0 and e_thread[e - 1] != t and run >= HANDOFF_RUN:
            # a hand-over: the other thread ran alone for a while before this one went on
            # (autograd's backward thread after loss.backward(), and back); threads whose
            # calls interleave (TensorFlow's executors) run side by side
            after[e] = e - 1
            ready = max(ready, int(e_end[e - 1]))
        run = run + 1 if e > 0 and e_thread[e - 1] == t else 1
        ready_at[e] = ready
        pre[e] = max(0, int(e_start[e]) - ready)
        if kind[e] == HostKind.BLOCK:
            sb = steps_back(g, issued, ra, idx, int(e_start[e]), int(e_end[e]))
            if EVENT_SYNC in m_names[int(ev_name[e])] and (sb is None or sb < 0):
                # an event sync that did not wait, or waited for work launched before the
                # trace, says nothing of its event here: it waits as the event syncs of the
                # other steady steps did (a loop keeping N steps in flight)
                back[e] = typical_back
                w = 0 if sb is None else int(own[e])  # not waiting: its duration is its own
            else:
                back[e] = max(sb or 0, 0)
                w_end = awaited(int(wait[e]), int(e_start[e])) if back[e] == 0 \
                    else int(e_end[e])
                w = min(max(0, w_end - int(e_start[e])), int(own[e]))
            own[e] -= w
        free_at[t] = max(int(free_at[t]), int(e_end[e]))
    hand = np.flatnonzero(after >= 0)
    if hand.size:  # each hand-over at most its typical length (``handover``)
        key = np.concatenate([column_i64(api, "pid")[a_kind], column_i64(waits, "pid")]) \
            * np.int64(1 << 32) + np.concatenate([column_i64(api, "tid")[a_kind],
                                                  column_i64(waits, "tid")])
        gaps = steps_handovers([(s.start_ns, s.end_ns) for s in ra.steps.steady],
                               np.concatenate([a_s[a_kind], w_s]),
                               np.concatenate([a_e[a_kind], w_e]), key, HANDOFF_RUN)
        pre[hand] = typical_handovers(pre[hand].tolist(), gaps)
    # the step ends with the main thread (above); another thread's
    # time after its last event is idle (autograd's backward thread waits for the next step)
    tail = np.where(np.arange(free_at.size) == main, np.maximum(t1 - free_at, 0), 0
                    ).astype(np.int64)
    prof = None if costs is None else profiler_cost(
        g, costs, tuple(threads_l), i64(e_thread), kind, i64(e_start), i64(e_end), ready_at,
        t1, free_at, thread_speed(len(threads_l), i64(e_thread), kind,
                                  [m_names[int(n)] for n in ev_name.tolist()],
                                  np.maximum(e_end - e_start, 0).astype(np.int64),
                                  launch_reference(g, ra)))
    host = HostEvents(thread=i64(e_thread), kind=kind, pre=pre, own=own, wait=wait, back=back, after=after,
                      role=role,
                      copy=copy, pageable=pageable, name=ev_name, start=i64(e_start))
    ops = with_unseen(GpuOps(
        trigger=i64(trig), stream=o_stream, kind=o_kind.astype(np.int8),
        dur=i64(o_end - o_start), lat=lat, gap=gap, dep=dep, row=i64(o_rows),
        nbytes=i64(nbytes[in_step]), comm=comm), i64(o_start), since, pe, med_lat, e_start,
        np.array([r >= 0 and api_kinds[r] == ApiKind.LAUNCH.value for r in e_api.tolist()],
                 dtype=bool), e_thread)
    return StepModel(rank=ra.rank, step_index=idx, measured_ns=int(np.median(spans)),
                     step_ns=int(step.span_ns), steady_steps=len(ra.steps.steady),
                     threads=tuple(threads_l), streams=tuple(keys), names=tuple(names),
                     host=host, ops=ops, tail=tail, launch_latency_ns=med_lat, profiler=prof)


def _runs(k: I64) -> list[tuple[int, int]]:
    if k.size == 0:
        return []
    cut = np.flatnonzero(k[1:] != k[:-1]) + 1
    b = np.concatenate(([0], cut, [k.size]))
    return list(zip(b[:-1].tolist(), b[1:].tolist()))


def _previous(thread: I64, kind: np.ndarray, e: int) -> int:
    """The event before ``e`` on its thread (0 when none)."""
    for p in range(e - 1, 0, -1):
        if thread[p] == thread[e]:
            return p
    return 0


__all__ = ["build_step_model", "representative_step"]
