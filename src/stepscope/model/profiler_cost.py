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

Where the numbers come from (H100, torch 2.11; traced median step minus untraced baseline, per
step, on the planted-bottleneck suite: ``benchmarks/scenarios``, CPU + CUDA + ``profile_memory``):

* 2026-11-22 and 2026-11-26, four GPU calls: 2,000 tiny CUDA ops per step (2,000 ops + 2,003
  API calls + 8,000 memory events) cost 10.2, 10.9, 12.4 and 14.6 ms; the inference loop (341
  ops, 100 calls, 290 memory events) 0.98 and 1.05 ms. The constants give 13.4 and 1.12 ms.
  ``benchmarks/scenarios/profiler_cost_fit.py`` prints these figures from the saved traces
  (``docs/data/accuracy-2026-11-26/profiler-traces/``) and re-scores the suite with any set of
  constants: with these, 19 of 19 planted rules first and within +-30%; with the earlier
  2 µs / 8 µs / 0.4 µs (fitted on an earlier call of 2026-11-22 that measured 21 ms for the 2,000
  ops), the estimate of two ``launch_bound`` traces fell to 23% and 0% of a measured 84%;
* a fresh process on the H200 (loops of 1,000 iterations): 5.1 µs per out-of-place CUDA op
  (op + launch), 1.4-2.5 µs per in-place one, 0.6-0.75 µs per CPU-only op;
* the GPT fixture (H100, all options): 3,242 ops + 2,130 Python events + 587 API calls + 917
  memory events on the critical path cost 14.8 ms (25 -> 39.8 ms): the constants give 11.9, 20%
  under. Host speed differs from process to process (DEVICE.md), and with it this cost: the
  launch loop's figure moved 44% between calls of one day.

The idle-time rules use these costs through shares of the step (``model.idle``), so an error
in them matters little when the host is the bottleneck; when the GPU is partly busy it moves
the split between host-side findings and the size of their estimates.

Runs that do not come from torch.profiler cost nothing here (``costs_for`` returns None).

The step model (``model.stepmodel``, remedies) also takes out what ``stepscope record``'s CUPTI
capture added (:func:`step_costs`): :data:`CAPTURE_API_NS` per recorded CUDA call, the lower end
of what docs/benchmarks.md's capture overhead figures give (H100, 2026-11-26): the kernel
activity records alone cost x1.17-1.21 on the launch loop (2,000 back-to-back 7 us launches:
~1.5 us per launch), the whole capture 3.3-4.8 us per launch on the RNN cell (62 ms steps of
~3,600 launches). The lower end because the cost varies with the host and the program: on an
H200 launch loop (2026-11-26 s6, ``launch_bound``, 196 launches per recorded step) the recorded
launches took 10.3 us each against 10.5 us untraced, nothing measurable, and taking 3.5 us per
call out left the CUDA-graph prediction at 1.46x the measured fixed step (1.13x with 1.5 us).
A recorded run with ``--backend torch`` is a torch.profiler trace
(shapes and stacks on, no memory events).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.graph import RunGraph, StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import bounds, column_i64, str_in
from stepscope.schema_enums import CpuOpKind

OP_NS = 2_000
SHAPES_NS = 300
STACK_NS = 0
API_NS = 3_500
PYTHON_NS = 1_000
MEMORY_NS = 300
CAPTURE_API_NS = 1_500  # stepscope record's CUPTI capture, per recorded CUDA call


@dataclass(frozen=True)
class EventCosts:
    op_ns: int
    python_ns: int
    api_ns: int
    memory_ns: int


def _flags(graph: RunGraph) -> dict[str, bool]:
    files = graph.manifest.source.details.get("files", [])
    out = {"with_stack": False, "record_shapes": False, "profile_memory": False}
    for f in files if isinstance(files, list) else []:
        if isinstance(f, dict):
            out = {k: v or bool(f.get(k)) for k, v in out.items()}
    return out


def costs_for(graph: RunGraph) -> EventCosts | None:
    """Per-event profiler cost of this run's trace (None when it is not a torch.profiler one)."""
    if graph.manifest.source.kind != "kineto":
        return None
    f = _flags(graph)
    op = OP_NS + (SHAPES_NS if f["record_shapes"] else 0) + (STACK_NS if f["with_stack"] else 0)
    return EventCosts(op_ns=op, python_ns=PYTHON_NS, api_ns=API_NS,
                      memory_ns=MEMORY_NS if f["profile_memory"] else 0)


def step_costs(graph: RunGraph) -> EventCosts | None:
    """What the capture added per host event, for the step model: torch.profiler's costs
    (:func:`costs_for`) on a Kineto trace; on a recorded run, CUPTI's per call
    (:data:`CAPTURE_API_NS`), or torch.profiler's where a rank used ``--backend torch``;
    None elsewhere (JAX, nsys)."""
    kind = graph.manifest.source.kind
    if kind == "kineto":
        return costs_for(graph)
    if kind != "capture":
        return None
    if "torch" in _gpu_backends(graph):
        return EventCosts(op_ns=OP_NS + SHAPES_NS + STACK_NS, python_ns=PYTHON_NS,
                          api_ns=API_NS, memory_ns=0)
    return EventCosts(op_ns=0, python_ns=0, api_ns=CAPTURE_API_NS, memory_ns=0)


def _gpu_backends(graph: RunGraph) -> set[str]:
    ranks = graph.manifest.settings.get("ranks")
    out: set[str] = set()
    for r in ranks.values() if isinstance(ranks, dict) else ():
        gpu = r.get("gpu") if isinstance(r, dict) else None
        if isinstance(gpu, dict) and isinstance(gpu.get("backend"), str):
            out.add(gpu["backend"])
    return out


def host_events(g: StepGraph, costs: EventCosts) -> tuple[I64, I64]:
    """Start time and estimated profiler cost of every recorded host event, sorted by time;
    once per graph and costs (the idle split and the host-timing trust both read it),
    read-only."""
    def compute() -> tuple[I64, I64]:
        ts, cost = _host_events(g, costs)
        ts.setflags(write=False)
        cost.setflags(write=False)
        return ts, cost

    return g.memo(("host_events", costs), compute)


def _host_events(g: StepGraph, costs: EventCosts) -> tuple[I64, I64]:
    ops = g.table("cpu_ops")
    o_s = bounds(ops)[0]
    py = str_in(ops, "kind", (CpuOpKind.PYTHON.value,))
    o_c = np.where(py, costs.python_ns, costs.op_ns).astype(np.int64)
    a_s = bounds(g.table("api_calls"))[0]
    m_s = column_i64(g.table("memory_events"), "ts_ns", 0)
    ts = np.concatenate((o_s, a_s, m_s))
    cost = np.concatenate((o_c, np.full(a_s.size, costs.api_ns, dtype=np.int64),
                           np.full(m_s.size, costs.memory_ns, dtype=np.int64)))
    order = np.argsort(ts, kind="stable")
    return ts[order], cost[order]


def gpu_slack(g: StepGraph, ts: I64) -> I64:
    """For each time: how much GPU work issued before it was still ahead of it (ns): the
    latest end of the GPU work of every launch/copy call that returned by then, minus the
    time (negative: the GPU had run out of work)."""
    by = g.gpu_by_correlation
    if by.keys.size == 0 or ts.size == 0:
        return np.zeros(ts.size, dtype=np.int64)
    a_e = bounds(g.table("api_calls"))[1]
    pos = by.lookup(g.keys("api_calls"))  # the GPU work of each API call
    hit = pos >= 0
    issued, done = a_e[hit], by.last_end[pos[hit]]
    o = np.argsort(issued, kind="stable")
    issued, ahead = issued[o], np.maximum.accumulate(done[o])
    i = np.searchsorted(issued, ts, side="right") - 1
    return np.where(i >= 0, ahead[np.maximum(i, 0)] - ts, 0).astype(np.int64)
