"""The step-time breakdown: where each nanosecond of a step went. Sums to wall time.

Every instant of a step window gets exactly one category, by priority (first
that applies wins):

GPU side (any device of the rank is busy):
  1. ``compute``        a non-communication kernel is running;
  2. ``communication``  only collective (NCCL/RCCL) kernels run: exposed communication;
  3. ``copies``         only memcpy/memset run: exposed copies.
GPU idle, attributed to what the host was doing at that instant:
  4. ``input_wait``     a thread waits for the next batch (data loader ``__next__``);
  5. ``sync``           a host thread is blocked in a device sync or blocking copy;
  6. ``launch``         a host thread is in a kernel-launch call or in the framework
                        op that issues it (the per-kernel dispatch cost);
  7. ``host``           a host thread runs other framework ops / Python functions /
                        user annotations (not step markers): CPU-bound work;
  8. ``idle``           none of the above is known: unattributed GPU idle time.

So ``sum(categories) == wall`` for every step, exactly (integer ns).

A rank that recorded no host ops (no ``cpu_ops`` row: a live capture records the CUDA calls,
not the framework's ops or the Python between them) but recorded GPU work leaves no GPU idle
time ``idle``: what no layer explains is split as the idle model splits it
(:func:`host_idle`, the one rule ``model.idle`` and so ``host_bound``, ``launch_bound`` and
the diff's causes use): a launch-bound wait of at most 100 µs is ``launch`` (the interpreter
between two launches), the rest ``host`` (Python the capture did not record, sleeps, I/O).
Where host ops were recorded, GPU idle time outside all of them stays ``idle``.

A rank without GPU records (``Breakdown.gpu_recorded`` False: a CPU-only program, or a
capture that did not see the GPU, ``analysis.gpu_use``) has no GPU categories: every
nanosecond of its steps is host time, split by the same host layers, and ``idle`` is host
time with no recorded event (on a CPU-only program, typically the model's own compute,
which the capture does not record as ops). Reporters say so instead of calling it GPU idle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stepscope.analysis.busy import DeviceActivity, IntervalSet, gpu_activity, rank_union
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
from stepscope.analysis.launches import LONG_GAP_NS, launch_bound_gaps, launch_intervals
from stepscope.analysis.steady import StepInfo
from stepscope.analysis.steps import work_annotations

CATEGORIES: tuple[str, ...] = (
    "compute", "communication", "copies", "input_wait", "sync", "launch", "host", "idle",
)
GPU_CATEGORIES = ("compute", "communication", "copies")


@dataclass(frozen=True)
class Breakdown:
    """Per-step ns per category, and the mean over steady-state steps in ms."""

    rank: int
    per_step: tuple[dict[str, int], ...]  # aligned with StepInfo.steps; sums to Step.span_ns
    mean_ms: dict[str, float]  # over steady steps
    steady_steps: int
    gpu_recorded: bool = True  # False: no GPU records, every category is host time

    def share(self) -> dict[str, float]:
        total = sum(self.mean_ms.values())
        return {c: (v / total if total else 0.0) for c, v in self.mean_ms.items()}


def attribute(
    win_start: I64, win_end: I64, layers: Sequence[tuple[str, IntervalSet]]
) -> dict[str, I64]:
    """Split each window among ``layers`` by priority; the rest is ``idle``.

    Returns ns per window for every layer name plus ``"idle"``.
    """
    return _attribute(win_start, win_end, layers)[0]


def _attribute(
    win_start: I64, win_end: I64, layers: Sequence[tuple[str, IntervalSet]]
) -> tuple[dict[str, I64], IntervalSet]:
    """:func:`attribute`, and the time of the windows no layer covers."""
    remaining = IntervalSet.of(win_start, win_end)
    out: dict[str, I64] = {}
    for name, layer in layers:
        covered = remaining & layer
        out[name] = covered.within(win_start, win_end)
        remaining = remaining - layer
    out["idle"] = remaining.within(win_start, win_end)
    return out, remaining


def _bounds(t: pa.Table) -> tuple[I64, I64]:
    s = t.column("ts_ns").to_numpy()
    return s, s + t.column("dur_ns").to_numpy()


def host_work_intervals(g: StepGraph) -> IntervalSet:
    """Framework ops, Python functions and user annotations on host threads.

    Step markers (ProfilerStep#N and names like a step) are excluded: they span
    the whole step and say nothing about what the host is doing.
    """
    ops = g.table("cpu_ops")
    s, e = _bounds(ops)
    ann = work_annotations(g)
    if ann.num_rows:
        a_s, a_e = _bounds(ann)
        s, e = np.concatenate((s, a_s)), np.concatenate((e, a_e))
    return IntervalSet.of(s, e)


@dataclass(frozen=True)
class HostIdle:
    """GPU idle time split by what the host did (:func:`host_idle`)."""

    launch: IntervalSet
    host: IntervalSet
    known: IntervalSet  # the host's recorded events: host work and the launch path


def host_idle(g: StepGraph, idle: IntervalSet) -> HostIdle:
    """Split GPU idle time ``idle`` (what input waits, syncs and the like left) between the
    launch path and host work; the one rule of the idle model (``model.idle``) and of the
    breakdown on a rank without host ops (module docstring).

    ``launch``: launch-bound waits of at most 100 µs (the GPU finished its work and waits
    for the next launch, ``analysis.launches.launch_bound_gaps``) while a host thread is in
    the launch path (``launch_intervals``) or runs nothing recorded (the interpreter between
    two launching ops). ``host``: the rest: host work (:func:`host_work_intervals`),
    launch-path time in longer waits (CPU work before a launch), and idle time with no host
    event at all.
    """
    g_s, g_e = launch_bound_gaps(g)
    short = (g_e - g_s) <= LONG_GAP_NS
    launch_path = IntervalSet.of(*launch_intervals(g))
    known = host_work_intervals(g) | launch_path
    launch = (idle & IntervalSet.of(g_s[short], g_e[short])) - (known - launch_path)
    return HostIdle(launch=launch, host=idle - launch, known=known)


def unrecorded_host(g: StepGraph) -> Callable[[IntervalSet], HostIdle] | None:
    """:func:`host_idle` on the rank where the breakdown applies it to the GPU idle time no
    layer explains: a rank without host ops (no ``cpu_ops`` row); ``None`` elsewhere."""
    if g.table("cpu_ops").num_rows:
        return None
    return lambda idle: host_idle(g, idle)


def host_layers(g: StepGraph) -> list[tuple[str, IntervalSet]]:
    # imported here: these modules build on the same primitives and are optional inputs
    from stepscope.analysis.input import input_wait_intervals
    from stepscope.analysis.syncs import sync_intervals

    return [
        ("input_wait", IntervalSet.of(*input_wait_intervals(g))),
        ("sync", IntervalSet.of(*sync_intervals(g))),
        ("launch", IntervalSet.of(*launch_intervals(g))),
        ("host", host_work_intervals(g)),
    ]


def breakdown_from_sets(
    rank: int, steps: StepInfo, gpu: DeviceActivity, host: Sequence[tuple[str, IntervalSet]],
    unexplained: Callable[[IntervalSet], HostIdle] | None = None,
) -> Breakdown:
    """The breakdown of the windows of ``steps`` by the GPU's activity, then the ``host``
    layers; ``unexplained`` (:func:`unrecorded_host`) splits the GPU idle time no layer
    explains between ``launch`` and ``host`` (module docstring)."""
    ws, we = steps.window_starts, steps.window_ends
    layers: list[tuple[str, IntervalSet]] = [
        ("compute", gpu.compute),
        ("communication", gpu.communication),
        ("copies", gpu.copies),
        *host,
    ]
    ns, rest = _attribute(ws, we, layers)
    recorded = bool(gpu.compute.starts.size or gpu.communication.starts.size
                    or gpu.copies.starts.size)
    if unexplained is not None and recorded and rest.starts.size:
        split = unexplained(rest)
        for name, part in (("launch", split.launch), ("host", split.host)):
            ns[name] = ns.get(name, np.zeros(ws.size, dtype=np.int64)) + part.within(ws, we)
        ns["idle"] = (rest - split.launch - split.host).within(ws, we)
    per_step = tuple({c: int(ns[c][i]) if c in ns else 0 for c in CATEGORIES}
                     for i in range(ws.size))
    steady = [i for i, st in enumerate(steps.steps) if st.steady]
    mean_ms = {c: (float(np.mean([per_step[i][c] for i in steady])) / 1e6 if steady else 0.0)
               for c in CATEGORIES}
    return Breakdown(rank=rank, per_step=per_step, mean_ms=mean_ms, steady_steps=len(steady),
                     gpu_recorded=recorded)


def step_breakdown(g: StepGraph, steps: StepInfo) -> Breakdown:
    """The breakdown of every step of ``rank`` (module docstring has the rules)."""
    gpu = rank_union(gpu_activity(g))
    return breakdown_from_sets(g.rank_id, steps, gpu, host_layers(g), unrecorded_host(g))
