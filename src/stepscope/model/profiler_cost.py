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

**The host's speed, read from the trace** (:func:`host_scale`). The profiler's work per event
runs on the program's own host thread, as fast or as slow as that host runs: the same 2,000-op
launch loop cost 10.2 ms per step in one process and 22.8 ms in another (H100s, 2026-11-22 to
26). A kernel-launch call does the same driver and CUPTI work every time, so the duration of a
rank's fast CUDA launch calls is a clock of its host (HIP's are not: a ROCm trace keeps the
constants). The clock is their :data:`LAUNCH_QUANTILE`-th percentile: the median also holds
the launches of kernels with large arguments and the calls slowed after a wait. Part of a
launch call (:data:`LAUNCH_BASE_NS`) does not grow with the profiler's work; the rest does,
and the costs are multiplied by ``(p10 - LAUNCH_BASE_NS) / LAUNCH_SPAN_NS`` within
[:data:`MIN_SCALE`, :data:`MAX_SCALE`]: 1 at a p10 of 4.75 us, 2 at 7.75 us.

The two constants were fitted on 2026-11-27, offline, over the 50 torch.profiler traces then at
hand whose untraced step was measured in the process that made them. Those are the planted
suites of seven H100 device calls of 2026-11-26 and 27 (at least two machines) and the
H100/H200 fixtures. The fit picked the
clock that put the most of these traces' untraced-step estimates within ±20%:
``benchmarks/scenarios/host_clock_fit.py``. Leaving each call out in turn, six of the eight
fits are these constants; the other two are base 1 us / span 3.75 us and 2.25 / 2.25.

* It replaced a median clock that read only downwards (``median / 5.63 us``, at most 1).
  Over those 50 traces, the estimates within ±20% went from 42 to 45 (±30%: 48 to 50). The
  worst over-estimate, the launch loop's, went from 1.45x to 1.19x; the worst under-estimates
  (0.70x, an H200 fixture of 64 tiny copies a step, and 0.75x) did not move.
* Out of sample, on the three H100 calls of 2026-11-27 12:32-12:51 UTC on another machine,
  23 traces: the launch loop and the micro-step sync trap went from 1.58 and 1.52x to 1.38 and
  1.26x, and nothing else moved by more than 0.03. That call's remedy rows through traces went
  from 15 to 18 of 18 within ±30%.
* The trace that moves away is the GPT fixture (with stacks): 0.95 -> 0.76 of its measured
  25 ms. Its fast launches read as a slow host, yet its events cost less than the constants
  say at that speed.
* Two traces of the launch loop alike (traced steps of 30.38 and 30.36 ms, launch medians of
  5.2 and 4.9 us) came from processes whose untraced steps were 20.0 and 15.7 ms
  (docs/accuracy.md, "torch.profiler's cost at the trace's host speed"). That spread is the
  untraced program's own, and no clock in the trace can remove it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from stepscope.analysis.graph import RunGraph, StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import bounds, column_i64, column_str, str_in
from stepscope.analysis.results import FACT
from stepscope.schema_enums import ApiKind, CpuOpKind

OP_NS = 2_000
SHAPES_NS = 300
STACK_NS = 0
API_NS = 3_500
PYTHON_NS = 1_000
MEMORY_NS = 300
LAUNCH_QUANTILE = 10  # the percentile of the launch calls' durations read as the clock
LAUNCH_BASE_NS = 1_750  # the part of that launch call that does not scale with the costs
LAUNCH_SPAN_NS = 3_000  # clock - base at which the constants above hold (module doc)
MIN_SCALE, MAX_SCALE = 0.5, 2.0
CAPTURE_API_NS = 1_500  # stepscope record's CUPTI capture, per recorded CUDA call


@dataclass(frozen=True)
class EventCosts:
    op_ns: int
    python_ns: int
    api_ns: int
    memory_ns: int
    scale: float = 1.0  # the host-speed factor already applied to the costs (``host_scale``)


def flags_of(graph: RunGraph) -> dict[str, bool]:
    """The torch.profiler options the trace files were taken with (``record_shapes``,
    ``with_stack``, ``profile_memory``; False where no file says)."""
    files = graph.manifest.source.details.get("files", [])
    out = {"with_stack": False, "record_shapes": False, "profile_memory": False}
    for f in files if isinstance(files, list) else []:
        if isinstance(f, dict):
            out = {k: v or bool(f.get(k)) for k, v in out.items()}
    return out


def launch_median_ns(g: StepGraph, q: float = 50.0) -> float | None:
    """The median (or the ``q``-th percentile) duration (ns) of the CUDA kernel-launch calls of
    ``g``; None without any (HIP's calls are not read: the clock was read on CUDA's)."""
    api = g.table("api_calls")
    launch = str_in(api, "kind", (ApiKind.LAUNCH.value,))
    if launch.any():
        names = pc.utf8_lower(column_str(api, "name"))
        cuda = pc.fill_null(pc.starts_with(names, "cu"), False).to_numpy(zero_copy_only=False)
        launch = launch & np.asarray(cuda, dtype=bool)
    if not launch.any():
        return None
    s, e = bounds(api)
    return float(np.percentile((e - s)[launch], q))


def host_scale(g: StepGraph) -> float:
    """How much work per recorded event the profiler did on this rank's traced host, against
    the constants: ``(p10 - LAUNCH_BASE_NS) / LAUNCH_SPAN_NS`` within [MIN_SCALE, MAX_SCALE],
    p10 the :data:`LAUNCH_QUANTILE`-th percentile of its CUDA launch calls' durations (module
    doc); 1 without CUDA launch calls (a HIP trace keeps the constants). A per-rank
    fact, computed where the rank's tables are read (the worker of a rank-parallel analysis)
    and sent back with the others."""
    def compute() -> float:
        clock = launch_median_ns(g, LAUNCH_QUANTILE)
        if clock is None:
            return 1.0
        return float(np.clip((clock - LAUNCH_BASE_NS) / LAUNCH_SPAN_NS, MIN_SCALE, MAX_SCALE))

    return g.memo((FACT, "profiler_host_scale"), compute)


def _torch_costs(g: StepGraph, shapes: bool, stack: bool, memory: bool) -> EventCosts:
    return torch_costs_at(host_scale(g), shapes, stack, memory)


def torch_costs_at(k: float, shapes: bool, stack: bool, memory: bool) -> EventCosts:
    """torch.profiler's per-event costs with these options, at host-speed factor ``k`` (what
    ``host_scale`` reads from a trace; ``benchmarks/scenarios/host_clock_fit.py`` tries
    others)."""
    op = OP_NS + (SHAPES_NS if shapes else 0) + (STACK_NS if stack else 0)
    return EventCosts(op_ns=round(k * op), python_ns=round(k * PYTHON_NS),
                      api_ns=round(k * API_NS), memory_ns=round(k * MEMORY_NS) if memory else 0,
                      scale=k)


def torch_profiler_trace(graph: RunGraph) -> bool:
    """Whether the run is an imported torch.profiler (Kineto) trace: the runs whose host events
    carry torch.profiler's costs (:func:`costs_for`)."""
    return graph.manifest.source.kind == "kineto"


def costs_for(graph: RunGraph, g: StepGraph) -> EventCosts | None:
    """Per-event profiler cost of the events of ``g`` (a rank of ``graph``), at its host's
    speed (``host_scale``); None when the run is not a torch.profiler trace."""
    if not torch_profiler_trace(graph):
        return None
    f = flags_of(graph)
    return _torch_costs(g, f["record_shapes"], f["with_stack"], f["profile_memory"])


def step_costs(graph: RunGraph, g: StepGraph) -> EventCosts | None:
    """What the capture added per host event of ``g`` (a rank of ``graph``), for the step
    model: torch.profiler's costs (:func:`costs_for`) on a Kineto trace; on a recorded run,
    CUPTI's per call (:data:`CAPTURE_API_NS`), or torch.profiler's where a rank used
    ``--backend torch``; None elsewhere (JAX, nsys)."""
    if torch_profiler_trace(graph):
        return costs_for(graph, g)
    if graph.manifest.source.kind != "capture":
        return None
    if "torch" in _gpu_backends(graph):
        return _torch_costs(g, shapes=True, stack=True, memory=False)
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
