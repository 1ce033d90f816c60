"""Steps as values (:class:`Step`, :class:`StepInfo`) and which of them are steady state.

Steady state: the first step is dropped as warm-up when it is more than 25%
longer than the median of the others (and at least 3 steps exist); a step is an
outlier when ``|wall - median| > max(0.25 * median, min(5 * 1.4826 * MAD, 0.5 * median))``
(the MAD term alone breaks down when a few steps hold two bad ones, e.g. a kernel
the profiler dropped at the window's start). Slow steps are outliers only while rare: when
at least 3 of them make more than a quarter of the steps, the slowness recurs (12 of 28
steps waiting 140-640 ms for the DataLoader) and is what the loop costs, so they stay
steady (fast outliers are still left out). Both are reported, never silently hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepscope.analysis.intervals import I64
from stepscope.schema_enums import StepSource

# slow steps are outliers only while rare: at least this many, more than this share of the
# steps (after a warm-up), recur (a DataLoader stall every other step) and stay in
RECURRING_MIN = 3
RECURRING_SHARE = 0.25


@dataclass(frozen=True)
class Step:
    """One step. ``start_ns/end_ns`` are the source's markers (host side for ProfilerStep,
    NVTX, hooks); ``window_start_ns/window_end_ns`` are the step on the GPU timeline
    (:func:`anchor_to_gpu`), which the breakdown slices and the step time measures."""

    index: int  # 0-based position in this rank's step list
    number: int  # step number as the source numbers it
    start_ns: int
    end_ns: int
    steady: bool
    note: str = ""  # why a step is not steady
    window_start_ns: int = -1  # -1: same as the markers
    window_end_ns: int = -1

    @property
    def wall_ns(self) -> int:
        """The marker's duration."""
        return self.end_ns - self.start_ns

    @property
    def window(self) -> tuple[int, int]:
        if self.window_start_ns < 0:
            return self.start_ns, self.end_ns
        return self.window_start_ns, self.window_end_ns

    @property
    def span_ns(self) -> int:
        """The step's length on the timeline window: what the breakdown adds up to."""
        a, b = self.window
        return b - a


@dataclass(frozen=True)
class PeriodicWork:
    """What one step holds when steps were recovered from the kernel stream's periodicity:
    ``periods`` repetitions of a period of ``kernels`` kernels. Two runs whose steps group
    different numbers of the same period are compared per period (``compare``)."""

    kernels: int  # kernels in one period
    periods: int  # periods per step
    signature: str  # the period's kernel names as a multiset, hashed: equal for the same work


@dataclass(frozen=True)
class StepInfo:
    rank: int
    source: str  # StepSource value
    steps: tuple[Step, ...]
    detail: str = ""  # how they were found, one line starting with the count ("48 from ...")

    anchored: bool = False  # windows moved onto the GPU timeline
    work: PeriodicWork | None = None  # steps from periodicity: what one step holds

    @property
    def starts(self) -> I64:
        """Marker starts (host side): assign host events to steps with these."""
        return np.array([s.start_ns for s in self.steps], dtype=np.int64)

    @property
    def ends(self) -> I64:
        return np.array([s.end_ns for s in self.steps], dtype=np.int64)

    @property
    def window_starts(self) -> I64:
        """Timeline windows (GPU-anchored when possible): slice the timeline with these."""
        return np.array([s.window[0] for s in self.steps], dtype=np.int64)

    @property
    def window_ends(self) -> I64:
        return np.array([s.window[1] for s in self.steps], dtype=np.int64)

    @property
    def steady(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.steady)

    @property
    def walls_ns(self) -> I64:
        return np.array([s.wall_ns for s in self.steps], dtype=np.int64)

    @property
    def spans_ns(self) -> I64:
        return np.array([s.span_ns for s in self.steps], dtype=np.int64)



def select_steady(walls: I64) -> tuple[tuple[bool, ...], tuple[str, ...]]:
    """Which steps are steady state, and a note for each that is not (module doc)."""
    n = walls.size
    steady = np.ones(n, dtype=bool)
    notes = [""] * n
    if n >= 3:
        rest = np.median(walls[1:])
        if walls[0] > 1.25 * rest:
            steady[0] = False
            notes[0] = f"warm-up: {walls[0] / rest:.2f}x the median of the other steps"
    if n >= 4:
        cand = walls[steady]
        med = float(np.median(cand))
        mad = float(np.median(np.abs(cand - med)))
        # the MAD is robust only while most steps are normal: with few steps and two bad
        # ones it grows huge, so a step off the median by more than half is always out
        limit = max(0.25 * med, min(5 * 1.4826 * mad, 0.5 * med))
        out = steady & (np.abs(walls - med) > limit)
        slow = out & (walls > med)
        if slow.sum() >= RECURRING_MIN and slow.sum() > RECURRING_SHARE * cand.size:
            out &= ~slow  # slow steps that recur are the workload's steady state, not outliers
        for i in np.flatnonzero(out).tolist():
            steady[i] = False
            notes[i] = f"outlier: {walls[i] / med:.2f}x the median step"
    if not steady.any():
        steady[:] = True
        notes = [""] * n
    return tuple(bool(x) for x in steady), tuple(notes)


def make_step_info(rank: int, source: StepSource, s: I64, e: I64, n: I64, detail: str,
                   work: PeriodicWork | None = None) -> StepInfo:
    steady, notes = select_steady(e - s)
    steps = tuple(
        Step(index=i, number=int(n[i]), start_ns=int(s[i]), end_ns=int(e[i]),
             steady=steady[i], note=notes[i])
        for i in range(s.size)
    )
    return StepInfo(rank=rank, source=source.value, steps=steps, detail=detail, work=work)
