"""What torch.profiler (or ``stepscope record``'s capture) added to each host event of a step
model (``model.profiler_cost``'s per-event costs, ``step_costs``), and the edit that takes it
out (:func:`untraced`), with the dispatch work taken at the thread's typical speed
(``host_speed``).

Per host event of the model, on its thread: the cost of the recorded host events (framework
ops, Python functions, API calls, memory events) that started in its ``pre`` interval (the
thread's host work before it), and of the call itself and the events nested in it (its
``own``); per thread, the cost in its ``tail``. A step replayed without them predicts the step
of the program run without the profiler: each ``LAUNCH`` event's ``own`` and its ``pre`` of
dispatch become ``max(0, x * speed - cost)`` (the thread's speed factor, then the events' cost
at that speed); every other interval ``max(0, x - cost)``. A launch's ``pre`` over
:data:`edits.KEEP_HOST_NS` is not dispatch (the user's CPU code before the step's first
launch: a ``sync_tf32``-style step's 6 ms of NumPy bookkeeping after its sync), as
``edits.graph_regions`` keeps it: it stays at the measured speed, as host work before a sync
does. (That work ran as fast traced as untraced: recorded at 8.4 ms behind a thread speed of
0.57, the measured untraced fixed step it sets is 8.9 ms.)
"""

from __future__ import annotations

import numpy as np

from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import bounds, column_i64, str_in
from stepscope.model.profiler_cost import EventCosts
from stepscope.model.stepmodel.edits import KEEP_HOST_NS
from stepscope.model.stepmodel.steps import F64, I64, HostKind, ProfilerCost, StepModel
from stepscope.schema_enums import CpuOpKind


def _thread_events(g: StepGraph, costs: EventCosts) -> tuple[I64, I64, I64, I64]:
    """pid, tid, start and profiler cost of every recorded host event of the rank."""
    ops, api, mem = g.table("cpu_ops"), g.table("api_calls"), g.table("memory_events")
    py = str_in(ops, "kind", (CpuOpKind.PYTHON.value,))
    pid = np.concatenate([column_i64(ops, "pid"), column_i64(api, "pid"),
                          column_i64(mem, "pid")])
    tid = np.concatenate([column_i64(ops, "tid"), column_i64(api, "tid"),
                          column_i64(mem, "tid")])
    ts = np.concatenate([bounds(ops)[0], bounds(api)[0], column_i64(mem, "ts_ns", 0)])
    cost = np.concatenate([np.where(py, costs.python_ns, costs.op_ns),
                           np.full(api.num_rows, costs.api_ns),
                           np.full(mem.num_rows, costs.memory_ns)]).astype(np.int64)
    return pid, tid, ts, cost


def profiler_cost(g: StepGraph, costs: EventCosts, threads: tuple[tuple[int, int], ...],
                  thread: I64, kind: np.ndarray, start: I64, end: I64, ready: I64,
                  t1: int, free_at: I64, speed: F64 | None = None) -> ProfilerCost:
    """The cost in each event's ``pre`` (``[ready, start)``) and ``own`` (``[start, end)``)
    interval and in each thread's tail (``[free_at, t1)``), on the event's thread; ``speed``:
    each thread's speed factor (``host_speed.thread_speed``), kept for ``untraced``."""
    pid, tid, ts, cost = _thread_events(g, costs)
    pre = np.zeros(start.size, dtype=np.int64)
    own = np.zeros(start.size, dtype=np.int64)
    tail = np.zeros(len(threads), dtype=np.int64)
    for i, (p, t) in enumerate(threads):
        m = (pid == p) & (tid == t)
        o = np.argsort(ts[m], kind="stable")
        s, c = ts[m][o], np.concatenate(([0], np.cumsum(cost[m][o])))

        def within(a: I64, b: I64, s: I64 = s, c: I64 = c) -> I64:
            return np.asarray(c[np.searchsorted(s, b, side="left")]
                              - c[np.searchsorted(s, a, side="left")], dtype=np.int64)

        ev = np.flatnonzero(thread == i)
        pre[ev] = within(ready[ev], start[ev])
        calls = ev[kind[ev] != HostKind.INPUT]
        own[calls] = within(start[calls], end[calls])
        tail[i] = int(within(np.array([free_at[i]]), np.array([t1]))[0])
    return ProfilerCost(pre, own, tail, speed)


def untraced(m: StepModel) -> StepModel:
    """The model without the profiler's or the capture's host cost, its dispatch at each
    thread's typical speed (unchanged when it has none); host work longer than
    ``KEEP_HOST_NS`` before a launch is not dispatch and keeps its speed."""
    p = m.profiler
    if p is None:
        return m
    h = m.host
    pre, own = h.pre, h.own
    if p.speed is not None:
        r = np.where(h.kind == HostKind.LAUNCH, p.speed[h.thread], 1.0)
        pre = np.round(pre * np.where(pre > KEEP_HOST_NS, 1.0, r)).astype(np.int64)
        own = np.round(own * r).astype(np.int64)
    return m.with_host(pre=np.maximum(pre - p.pre, 0), own=np.maximum(own - p.own, 0)
                       ).with_tail(np.maximum(m.tail - p.tail, 0))


__all__ = ["ProfilerCost", "profiler_cost", "untraced"]
