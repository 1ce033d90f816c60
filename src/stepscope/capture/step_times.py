"""Step times before and inside the capture window, and the overhead figures the manifest keeps
(``manifest.overhead["rank<N>"]``, described in docs/record.md)."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

RATIO_STEPS_BEFORE = 10  # steps before the window that the overhead ratio compares with
RATIO_STEPS_AFTER = 10  # steps after the window (CUPTI detached, samplers stopped) timed for it
MIN_STEPS_AFTER = 3  # fewer steps after the window: no after-window ratio
DRAWS = 1000  # bootstrap resamples of the after-window ratio's interval
MAX_RESAMPLED = 1000  # in-window steps resampled (evenly spaced over the window, if more)
PHASE_LIMIT = 1.25  # steps before vs after the window differing by more: the program changed speed


def ratio_interval(inside: Sequence[int], after: Sequence[int], level: float = 0.90
                   ) -> tuple[float, float]:
    """Percentile bootstrap interval of median(inside) / median(after), resampling each side
    (fixed seed: the same steps give the same interval)."""
    a = np.asarray(inside, dtype=np.float64)
    if len(a) > MAX_RESAMPLED:
        a = a[np.linspace(0, len(a) - 1, MAX_RESAMPLED).astype(np.int64)]
    b = np.asarray(after, dtype=np.float64)
    rng = np.random.default_rng(0)
    num = np.median(a[rng.integers(0, len(a), (DRAWS, len(a)))], axis=1)
    den = np.median(b[rng.integers(0, len(b), (DRAWS, len(b)))], axis=1)
    r = num / np.maximum(den, 1.0)
    lo, hi = np.quantile(r, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def unmeasurable(ratio_ci: tuple[float, float], before_ns: float | None, after_ns: float,
                 n_before: int) -> str | None:
    """Why the after-window ratio does not measure the capture's cost on this run, or None.
    A capture cannot make steps faster, and steps before and after the window (both without
    CUPTI) that differ by more than ``PHASE_LIMIT`` mean the program changed speed by itself."""
    if ratio_ci[1] < 1.0:
        return ("the steps in the window ran faster than those after it: the program's speed "
                "changed, which hides the capture's cost")
    if before_ns and n_before >= RATIO_STEPS_BEFORE and after_ns > 0:
        phase = max(before_ns, after_ns) / min(before_ns, after_ns)
        if phase > PHASE_LIMIT:
            return (f"the steps before the window ({before_ns / 1e6:.3g} ms) and after it "
                    f"({after_ns / 1e6:.3g} ms) differ by x{phase:.2f}: the program changed speed "
                    "by itself, which hides the capture's cost")
    return None


class StepTimes:
    """Durations of the steps before the window (sum, count and the last few) and inside it.
    Not thread-safe: the session calls it under its lock."""

    def __init__(self) -> None:
        self._sum = {False: 0, True: 0}
        self._count = {False: 0, True: 0}
        self._before_last: deque[int] = deque(maxlen=RATIO_STEPS_BEFORE)
        self._inside: deque[int] = deque(maxlen=100_000)
        self._after: list[int] = []
        self._after_state = "off"  # off | skip (the step that closes the window) | timing | done

    def add(self, dur_ns: int, inside: bool) -> None:
        self._sum[inside] += dur_ns
        self._count[inside] += 1
        (self._inside if inside else self._before_last).append(dur_ns)

    def window_closed(self) -> None:
        """The window closed with the program running on: time the steps after it (the first
        one pays for closing the window and is left out)."""
        if self._after_state == "off":
            self._after_state = "skip"

    def add_after(self, dur_ns: int) -> bool:
        """A step after the window; True when it is the last one wanted (the step hooks can
        come out)."""
        if self._after_state == "skip":
            self._after_state = "timing"
        elif self._after_state == "timing":
            self._after.append(dur_ns)
            if len(self._after) >= RATIO_STEPS_AFTER:
                self._after_state = "done"
                return True
        return False

    def stop_after(self) -> None:
        """No more steps after the window (the process is ending)."""
        self._after_state = "done"

    def report(self, window_wall_s: float | None, sampler_cpu_s: float | None,
               no_steps: str | None = None) -> dict[str, Any]:
        """The overhead figures: window wall time, sampler threads' CPU (windows of 1 s or more:
        /proc counts 10 ms ticks), mean and median step times and their ratio. ``no_steps``: why
        the cost cannot be measured when no step fell in the window (a time window taken because
        no step hook fired), said as ``step_time_ratio_after_unmeasurable``; no ratio is made up."""
        o: dict[str, Any] = {}
        if no_steps is not None and not self._inside:
            o["step_time_ratio_after_unmeasurable"] = no_steps
        if window_wall_s is not None:
            o["window_wall_s"] = round(window_wall_s, 6)
            if sampler_cpu_s is not None and window_wall_s >= 1.0:
                o["sampler_threads_cpu_s"] = round(sampler_cpu_s, 6)
                o["sampler_threads_cpu_share"] = round(sampler_cpu_s / window_wall_s, 6)
        for inside, where in ((False, "before"), (True, "in")):
            if self._count[inside]:
                o[f"mean_step_ms_{where}_window"] = round(self._sum[inside] / self._count[inside] / 1e6, 6)
                o[f"steps_{where}_window"] = self._count[inside]
        if self._before_last and self._inside:
            before = statistics.median(self._before_last)
            inside_ms = statistics.median(self._inside)
            o["median_step_ms_before_window"] = round(before / 1e6, 6)
            o["median_step_ms_in_window"] = round(inside_ms / 1e6, 6)
            if before > 0:
                o["step_time_ratio_in_window_vs_before"] = round(inside_ms / before, 6)
                o["step_time_ratio_note"] = (
                    f"median step in the window / median of the last {RATIO_STEPS_BEFORE} steps "
                    "before it (those run with the host hooks and samplers on, and may still be "
                    "warming up): a rough indicator of capture cost, not a benchmark")
        if len(self._after) >= MIN_STEPS_AFTER and self._inside:
            after = statistics.median(self._after)
            o["median_step_ms_after_window"] = round(after / 1e6, 6)
            o["steps_after_window"] = len(self._after)
            if after > 0:
                o["step_time_ratio_in_window_vs_after"] = round(statistics.median(self._inside) / after, 6)
                ci = ratio_interval(self._inside, self._after)
                o["step_time_ratio_after_ci90"] = [round(ci[0], 4), round(ci[1], 4)]
                before_ns = statistics.median(self._before_last) if self._before_last else None
                why = unmeasurable(ci, before_ns, after, len(self._before_last))
                if why is not None:
                    o["step_time_ratio_after_unmeasurable"] = why
                o["step_time_ratio_after_note"] = (
                    f"median step in the window / median of up to {RATIO_STEPS_AFTER} steps right "
                    "after it, with the samplers stopped and CUPTI detached (the first step after "
                    "the window, which pays for closing it, is left out): the capture's cost on "
                    "this run, when the program's steps are alike; it reads low where CUPTI stayed "
                    "attached (the cupti_stays_attached diagnostic, --backend torch). ci90: a 90% "
                    "bootstrap interval; unmeasurable: why the figure does not measure the "
                    "capture's cost here (the program's speed changed by itself, or its host ran "
                    "ahead of the GPU: gpu_busy_ms_per_step_in_window, added at merge)")
        o["sampler_threads_cpu_note"] = (
            "CPU time of threads named 'stepscope*' during the window, as a share of one core")
        return o
