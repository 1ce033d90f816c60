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

A rank without GPU records (``Breakdown.gpu_recorded`` False: a CPU-only program, or a
capture that did not see the GPU, ``analysis.gpu_use``) has no GPU categories: every
nanosecond of its steps is host time, split by the same host layers, and ``idle`` is host
time with no recorded event (on a CPU-only program, typically the model's own compute,
which the capture does not record as ops). Reporters say so instead of calling it GPU idle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stepscope.analysis.busy import DeviceActivity, IntervalSet, gpu_activity, rank_union
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64
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
    remaining = IntervalSet.of(win_start, win_end)
    out: dict[str, I64] = {}
    for name, layer in layers:
        covered = remaining & layer
        out[name] = covered.within(win_start, win_end)
        remaining = remaining - layer
    out["idle"] = remaining.within(win_start, win_end)
    return out


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


def host_layers(g: StepGraph) -> list[tuple[str, IntervalSet]]:
    # imported here: these modules build on the same primitives and are optional inputs
    from stepscope.analysis.input import input_wait_intervals
    from stepscope.analysis.launches import launch_intervals
    from stepscope.analysis.syncs import sync_intervals

    return [
        ("input_wait", IntervalSet.of(*input_wait_intervals(g))),
        ("sync", IntervalSet.of(*sync_intervals(g))),
        ("launch", IntervalSet.of(*launch_intervals(g))),
        ("host", host_work_intervals(g)),
    ]


def breakdown_from_sets(
    rank: int, steps: StepInfo, gpu: DeviceActivity, host: Sequence[tuple[str, IntervalSet]]
) -> Breakdown:
    ws, we = steps.window_starts, steps.window_ends
    layers: list[tuple[str, IntervalSet]] = [
        ("compute", gpu.compute),
        ("communication", gpu.communication),
        ("copies", gpu.copies),
        *host,
    ]
    ns = attribute(ws, we, layers)
    per_step = tuple({c: int(ns[c][i]) if c in ns else 0 for c in CATEGORIES}
                     for i in range(ws.size))
    steady = [i for i, st in enumerate(steps.steps) if st.steady]
    mean_ms = {c: (float(np.mean([per_step[i][c] for i in steady])) / 1e6 if steady else 0.0)
               for c in CATEGORIES}
    recorded = bool(gpu.compute.starts.size or gpu.communication.starts.size
                    or gpu.copies.starts.size)
    return Breakdown(rank=rank, per_step=per_step, mean_ms=mean_ms, steady_steps=len(steady),
                     gpu_recorded=recorded)


def step_breakdown(g: StepGraph, steps: StepInfo) -> Breakdown:
    """The breakdown of every step of ``rank`` (module docstring has the rules)."""
    gpu = rank_union(gpu_activity(g))
    return breakdown_from_sets(g.rank_id, steps, gpu, host_layers(g))
