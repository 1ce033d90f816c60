"""How a kernel saving turns into a step saving (the kernel rules' scaling).

A kernel's saving only shortens the step when the GPU is the bottleneck. Per steady step,
``backlog`` = end of the last GPU work issued by the step's kernel launches (``api_calls`` of
kind launch / graph_launch, paired with kernels by correlation) minus the end of the step's
last launch call: how long the GPU still had queued work after the host had finished issuing
the step. Shortening the step's kernels by ``s`` shortens the step by at most that backlog
(after it the step waits on the host); so per step ``counted = min(raw kernel saving,
backlog)``. A GPU-bound step (the host runs ahead, or waits in a sync) has a backlog of about
its GPU time and keeps its savings; a host-bound step (the GPU drains each launch at once)
keeps almost none. Profiler overhead on the host is added back (``scaling_for``). Without
launch records (``Scaling.backlog_ns`` is None) the saving is scaled by the steady steps'
GPU-busy share instead (union of GPU activity / wall time).

Why not always the busy share: in ``benchmarks/rule_scenarios.py`` (H200, 2026-11-22) a
kernel-heavy step synchronised every step and traced with CPU activity showed 66% GPU busy;
scaling by that gave half the measured saving (2.30 of 4.09 ms), the backlog cap 3.49 ms.
No kernel gets shorter than ``MIN_KERNEL_NS``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stepscope.analysis import RankAnalysis
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.intervals import I64, assign_to_windows
from stepscope.analysis.launches import LAUNCH_KINDS, bounds, str_in
from stepscope.model.kernels import SteadyKernels

HOST_WAITS = ("input_wait", "launch", "host", "idle")
"""Breakdown categories in which the GPU is idle waiting for the host (not for a sync)."""


def gpu_bound_share(ra: RankAnalysis) -> float:
    """Share of the steady steps' wall time the GPU was busy (union over streams, mean over
    the devices the rank used: those with GPU records, not every device it listed), 0..1."""
    steady = ra.steps.steady
    wall = sum(s.wall_ns for s in steady)
    if wall <= 0:
        return 0.0
    busy = sum(ra.step_busy_ns[s.index] for s in steady if s.index < len(ra.step_busy_ns))
    n_dev = max(1, len(ra.devices_used))
    return float(min(1.0, busy / (wall * n_dev)))


@dataclass(frozen=True)
class Scaling:
    """How kernel savings become step savings for one rank (module doc)."""

    backlog_ns: npt.NDArray[np.float64] | None  # per steady step (slot order)
    busy_share: float

    def counted(self, sk: SteadyKernels, saving_ns: npt.NDArray[np.float64]
                ) -> tuple[float, float]:
        """(raw, counted) saving in ms per steady step for per-launch savings ``saving_ns``."""
        return self.counted_steps(raw_per_step(sk, saving_ns))

    def counted_steps(self, raw: npt.NDArray[np.float64]) -> tuple[float, float]:
        """(raw, counted) saving in ms per steady step for the raw savings of each steady step
        (``raw_per_step``)."""
        if self.backlog_ns is not None:
            kept = np.minimum(raw, self.backlog_ns)
        else:
            kept = raw * self.busy_share
        return float(raw.sum()) / raw.size / 1e6, float(kept.sum()) / raw.size / 1e6

    def evidence(self, raw_ms: float, counted_ms: float) -> str:
        if self.backlog_ns is not None:
            return (f"GPU-bound check: when the host had issued a step's last launch, the GPU "
                    f"still had {float(np.mean(self.backlog_ns)) / 1e6:.2f} ms of its work queued "
                    f"(mean over steady steps); savings count up to that per step "
                    f"({raw_ms:.3f} -> {counted_ms:.3f} ms)")
        return (f"GPU busy {self.busy_share:.0%} of the steady steps (no launch records to tell "
                f"queued work): the kernel saving ({raw_ms:.3f} ms) is scaled by it")

    @property
    def method(self) -> str:
        if self.backlog_ns is not None:
            return "capped per step by the GPU work still queued after the step's last launch"
        return f"x GPU-busy share {self.busy_share:.2f}"


def raw_per_step(sk: SteadyKernels, saving_ns: npt.NDArray[np.float64]
                 ) -> npt.NDArray[np.float64]:
    """Per-launch savings summed per steady step (slot order)."""
    return np.asarray(np.bincount(sk.slot, weights=saving_ns, minlength=sk.n_steps),
                      dtype=np.float64)


@dataclass(frozen=True)
class ScalingBase:
    """What ``Scaling`` needs of one rank alone (a per-rank fact, ``advisor.rank_facts``):
    per steady step (slot order) the backlog before the profiler's cost is added back and the
    GPU's waits for the host (None when launches cannot be paired), and the busy share. The
    run-wide profiler inflation is added in ``with_inflation``."""

    backlog_ns: npt.NDArray[np.float64] | None
    host_waits_ns: npt.NDArray[np.float64] | None
    busy_share: float

    def with_inflation(self, inflation_ms: float) -> Scaling:
        """The rank's ``Scaling`` given the run's profiler inflation (``scaling_for``)."""
        if self.backlog_ns is None or self.host_waits_ns is None:
            return Scaling(None, self.busy_share)
        backlog = self.backlog_ns.copy()
        inflation = inflation_ms * 1e6
        if inflation > 0:
            backlog += np.maximum(inflation - self.host_waits_ns, 0.0)
        return Scaling(backlog, self.busy_share)


def scaling_for(g: StepGraph, ra: RankAnalysis, sk: SteadyKernels, inflation_ms: float = 0.0
                ) -> Scaling:
    """The backlog of every steady step, or the busy share when launches cannot be paired.

    Profiler overhead (``inflation_ms``, ``model.overhead``: ``X`` ms of host time per step) makes the host
    look slower than it is; without it the host would finish issuing a step earlier, and the
    GPU's waits for the host (breakdown: ``input_wait`` + ``launch`` + ``host`` + ``idle``)
    would shrink by as much as they can. So each step's backlog grows by
    ``max(0, X - GPU time waiting on the host)``: nothing for a host-bound step whose GPU waits
    longer than the overhead, about ``X`` for a GPU-bound one.
    """
    return scaling_base(g, ra, sk).with_inflation(inflation_ms)


def scaling_base(g: StepGraph, ra: RankAnalysis, sk: SteadyKernels) -> ScalingBase:
    """Rank ``ra``'s ``ScalingBase``, once per rank graph (the kernel rules' per-rank parts
    hold it: ``model.small_grid.grid_parts`` ...)."""
    return g.memo(("scaling_base",), lambda: _scaling_base(g, ra, sk))


def _scaling_base(g: StepGraph, ra: RankAnalysis, sk: SteadyKernels) -> ScalingBase:
    share = gpu_bound_share(ra)
    done = _step_done(g, sk)
    if done is None:
        return ScalingBase(None, None, share)
    host_done, gpu_done = done
    backlog = np.maximum(gpu_done - host_done, 0).astype(np.float64)
    by_slot = sorted(ra.steps.steady, key=lambda st: st.start_ns)
    waits = np.array([sum(ra.breakdown.per_step[st.index].get(c, 0) for c in HOST_WAITS)
                      for st in by_slot], dtype=np.float64)
    return ScalingBase(backlog, waits, share)


def step_done(g: StepGraph, sk: SteadyKernels) -> tuple[I64, I64] | None:
    """Per steady step (``sk``'s), when the host ended its last launch call and when the GPU
    ended the work those launches issued; ``None`` when launches cannot be paired with their
    kernels."""
    return _step_done(g, sk)


def _step_done(g: StepGraph, sk: SteadyKernels) -> tuple[I64, I64] | None:
    api = g.table("api_calls")
    k = g.table("kernels")
    if api.num_rows == 0 or k.num_rows == 0:
        return None
    # the launch calls with a correlation, and the steady step of each
    launch = str_in(api, "kind", LAUNCH_KINDS) & (g.keys("api_calls") >= 0)
    if not launch.any():
        return None
    a_ts, a_end = bounds(api)
    a_slot = np.where(launch, assign_to_windows(a_ts, sk.starts, sk.ends), -1)
    m = a_slot >= 0
    host_done = np.full(sk.n_steps, -1, dtype=np.int64)
    np.maximum.at(host_done, a_slot[m], a_end[m])
    # GPU end of the work each step's launches issued: each kernel's launch call (the graph's
    # correlation join), when it is one of those
    nk = g.gpu.n_kernels
    row = g.gpu_api_row[:nk]
    slot = np.where(row >= 0, a_slot[np.maximum(row, 0)], -1)
    hit = slot >= 0
    gpu_done = np.full(sk.n_steps, -1, dtype=np.int64)
    np.maximum.at(gpu_done, slot[hit], g.gpu.end[:nk][hit])
    if ((host_done < 0) | (gpu_done < 0)).any():
        return None
    return host_done, gpu_done
