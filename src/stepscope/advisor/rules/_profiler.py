"""What torch.profiler costs the host, per recorded event, for the idle-time rules.

A Kineto trace is taken with the profiler on: every recorded host event made the host slower
than it is untraced. Estimated cost per event (ns):

===============================  ===================================================
event                            cost
===============================  ===================================================
framework op (``cpu_op``)        :data:`OP_NS`, + :data:`SHAPES_NS` with ``record_shapes``,
                                 + :data:`STACK_NS` with ``with_stack``
runtime / driver API call        :data:`API_NS` (CUPTI callback + the GPU activity record)
``python_function``              :data:`PYTHON_NS` (``with_stack`` only)
memory event                     :data:`MEMORY_NS` (``profile_memory`` only; stands for the
                                 allocator work the profiler adds to ops that allocate)
===============================  ===================================================

Measured on an H200 with torch 2.11 (``profile(activities=[CPU, CUDA])``, loops of 1,000
iterations of two tiny ops, traced vs untraced host time, 2026-11-22): CPU-only ops
0.6-0.75 µs each; out-of-place CUDA ops (op + launch + 2 allocations) 5.1 µs per op,
in-place ones 1.4-2.5 µs; ``record_shapes`` +0.1-0.9 µs per op; ``python_function`` events
2-6 µs each. The same loop traced by the planted-bottleneck suite cost 10.5 µs per op (host
speed differs from process to process, DEVICE.md), and the GPT fixture's 3,286 ops + 604 API
calls + 2,199 Python events + 1,028 memory events per step cost 14.8 ms (25 -> 39.8 ms): the
constants below reproduce the GPT figure within 5% and the tiny-op loops within a factor 1.5.
The idle-time rules only use them through shares of the step (``rules._idle``), which makes
an error in them matter little when the host is the bottleneck.

Runs that do not come from torch.profiler cost nothing here (``costs_for`` returns None).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import bounds, column_i64, gpu_records, str_in
from stepscope.schema import CpuOpKind
from stepscope.store.run import Run

OP_NS = 1_000
SHAPES_NS = 500
STACK_NS = 300
API_NS = 7_000
PYTHON_NS = 2_500
MEMORY_NS = 500


@dataclass(frozen=True)
class EventCosts:
    op_ns: int
    python_ns: int
    api_ns: int
    memory_ns: int


def _flags(run: Run) -> dict[str, bool]:
    files = run.manifest.source.details.get("files", [])
    out = {"with_stack": False, "record_shapes": False, "profile_memory": False}
    for f in files if isinstance(files, list) else []:
        if isinstance(f, dict):
            out = {k: v or bool(f.get(k)) for k, v in out.items()}
    return out


def costs_for(run: Run) -> EventCosts | None:
    """Per-event profiler cost of this run's trace (None when it is not a torch.profiler one)."""
    if run.manifest.source.kind != "kineto":
        return None
    f = _flags(run)
    op = OP_NS + (SHAPES_NS if f["record_shapes"] else 0) + (STACK_NS if f["with_stack"] else 0)
    return EventCosts(op_ns=op, python_ns=PYTHON_NS, api_ns=API_NS,
                      memory_ns=MEMORY_NS if f["profile_memory"] else 0)


def host_events(run: Run, rank: int, costs: EventCosts) -> tuple[I64, I64]:
    """Start time and estimated profiler cost of every recorded host event, sorted by time."""
    ops = run.table("cpu_ops", rank)
    o_s = bounds(ops)[0]
    py = str_in(ops, "kind", (CpuOpKind.PYTHON.value,))
    o_c = np.where(py, costs.python_ns, costs.op_ns).astype(np.int64)
    a_s = bounds(run.table("api_calls", rank))[0]
    m_s = column_i64(run.table("memory_events", rank), "ts_ns", 0)
    ts = np.concatenate((o_s, a_s, m_s))
    cost = np.concatenate((o_c, np.full(a_s.size, costs.api_ns, dtype=np.int64),
                           np.full(m_s.size, costs.memory_ns, dtype=np.int64)))
    order = np.argsort(ts, kind="stable")
    return ts[order], cost[order]


def gpu_slack(run: Run, rank: int, ts: I64) -> I64:
    """For each time: how much GPU work issued before it was still ahead of it (ns): the
    latest end of the GPU work of every launch/copy call that returned by then, minus the
    time (negative: the GPU had run out of work)."""
    api = run.table("api_calls", rank)
    a_e = bounds(api)[1]
    corr = column_i64(api, "correlation", -1)
    _, g_e, _, g_c = gpu_records(run, rank)
    keep = g_c >= 0
    g_c, g_e = g_c[keep], g_e[keep]
    if g_c.size == 0 or ts.size == 0:
        return np.zeros(ts.size, dtype=np.int64)
    order = np.argsort(g_c, kind="stable")
    uniq, first = np.unique(g_c[order], return_index=True)
    last_end = np.maximum.reduceat(g_e[order], first)
    pos = np.minimum(np.searchsorted(uniq, corr), uniq.size - 1)
    hit = (corr >= 0) & (uniq[pos] == corr)
    issued, done = a_e[hit], last_end[pos[hit]]
    o = np.argsort(issued, kind="stable")
    issued, ahead = issued[o], np.maximum.accumulate(done[o])
    i = np.searchsorted(issued, ts, side="right") - 1
    return np.where(i >= 0, ahead[np.maximum(i, 0)] - ts, 0).astype(np.int64)
