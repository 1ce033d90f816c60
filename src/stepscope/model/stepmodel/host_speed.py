"""How fast a traced host thread ran in the modelled step, against its own typical speed:
the speed factor by which the step model's dispatch work is taken at the speed of the
untraced program (``profiler.untraced``).

A traced host is slower where it has just waited: after a long sync or input wait, the same
calls and framework ops take several times as long as elsewhere in the trace (H100,
2026-11-26, torch.profiler trace of ``benchmarks/scenarios/fp32_no_tf32.py``: the first
``aten::t`` after a 9 ms ``cudaEventSynchronize`` 73 us, later ones 10-30 us; its launches
26-62 us against 5-12 us in the backward pass of the same step). A remedy that removes the wait
(the GPU is then no longer the bottleneck) leaves a host that runs warm, as the measured fixed
programs do. Per-event profiler costs (``model.profiler_cost``) do not cover this: they were
fitted on host-bound loops, which never wait.

The probe is the kernel launch call: it does the same work every time, so its duration against
the median duration of calls of the same name in the rank's steady steps says how fast the
thread ran. Per thread: ``speed = min(1, sum(median[name]) / sum(duration))`` over its launch
events in the step (names with at least :data:`MIN_CALLS` launches in the steady steps; a thread
with fewer than :data:`MIN_EVENTS` of them keeps 1). ``untraced`` multiplies the thread's
dispatch work (the ``pre`` and ``own`` of its ``LAUNCH`` events) by it; host work before a
sync, a blocking copy or an input wait (CPU compute the user wrote, a loader) is left as
measured.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from stepscope.analysis import RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import bounds, column_str, str_in
from stepscope.model.stepmodel.steps import I64, HostKind
from stepscope.schema_enums import ApiKind

F64 = npt.NDArray[np.float64]
MIN_CALLS = 5  # launches of a name in the steady steps for its median to be a reference
MIN_EVENTS = 5  # launch events of a thread in the step for its speed to be measured


def launch_reference(g: StepGraph, ra: RankAnalysis) -> dict[str, float]:
    """Call name -> median duration (ns) of the rank's kernel launch calls of that name in
    its steady steps (names with at least ``MIN_CALLS`` of them)."""
    api = g.table("api_calls")
    if api.num_rows == 0 or not ra.steps.steady:
        return {}
    s, e = bounds(api)
    steady = sorted(ra.steps.steady, key=lambda st: st.start_ns)
    starts = np.array([st.start_ns for st in steady], dtype=np.int64)
    ends = np.array([st.end_ns for st in steady], dtype=np.int64)
    k = np.searchsorted(starts, s, side="right") - 1  # the last steady step starting by then
    inside = (k >= 0) & (s < ends[np.maximum(k, 0)])
    sel = np.flatnonzero(inside & str_in(api, "kind", (ApiKind.LAUNCH.value,)))
    if sel.size == 0:
        return {}
    names = np.asarray(column_str(api, "name").to_pylist(), dtype=object)[sel]
    dur = (e - s)[sel]
    out: dict[str, float] = {}
    for n in set(names.tolist()):
        d = dur[names == n]
        if d.size >= MIN_CALLS:
            out[str(n)] = float(np.median(d))
    return out


def thread_speed(n_threads: int, thread: I64, kind: npt.NDArray[np.int8], names: list[str],
                 own: I64, reference: dict[str, float]) -> F64:
    """Per thread, the speed factor (module docstring) of its launch events: ``names`` is
    each event's call name, ``own`` its duration."""
    speed = np.ones(n_threads, dtype=np.float64)
    probe = np.array([kind[i] == HostKind.LAUNCH and names[i] in reference
                      for i in range(kind.size)], dtype=bool)
    for t in range(n_threads):
        ev = np.flatnonzero(probe & (thread == t))
        took = float(own[ev].sum())
        if ev.size < MIN_EVENTS or took <= 0:
            continue
        typical = sum(reference[names[i]] for i in ev.tolist())
        speed[t] = min(1.0, typical / took)
    return speed


__all__ = ["MIN_CALLS", "MIN_EVENTS", "launch_reference", "thread_speed"]
