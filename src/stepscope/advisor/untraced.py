"""The program's step without the profiler that a rank's step model is calibrated to, where it
came from, and what the calibration did (``advisor.remedies``; docs/remedies.md, "Calibrating
to the untraced step")."""

from __future__ import annotations

from dataclasses import dataclass

GIVEN = "given"  # UntracedSteps.source: the user's (report --untraced-step-ms)
AFTER_WINDOW = "measured after the capture window"  # record's own (manifest.overhead)
# record's, where no step was timed after the window: the captured step x the GPU's
# utilisation in the window over after it (``capture.util_pace``)
PACED = "paced by the GPU's utilisation after the capture window"


@dataclass(frozen=True)
class UntracedSteps:
    """The program's step without the profiler, to which each rank's model is calibrated: one
    step for every rank (``every``: the user's), or one per rank (``per_rank``: record's steps
    right after its capture window, CUPTI detached)."""

    source: str  # GIVEN, AFTER_WINDOW or PACED (no rank has a step of its own)
    every: float | None = None
    per_rank: tuple[tuple[int, float], ...] = ()
    # ranks without a step of their own: the untraced over the captured pace (PACED)
    pace: tuple[tuple[int, float], ...] = ()

    def of(self, rank: int) -> float | None:
        if self.every is not None:
            return self.every
        return next((ms for r, ms in self.per_rank if r == rank), None)

    def pace_of(self, rank: int) -> float | None:
        """The rank's untraced step over its captured one, where no step of its own is
        known."""
        if self.of(rank) is not None:
            return None
        return next((k for r, k in self.pace if r == rank), None)


@dataclass(frozen=True)
class StepCalibration:
    """The step model calibrated to the untraced step (module docstring)."""

    rank: int
    source: str  # UntracedSteps.source
    untraced_step_ms: float  # as given or measured
    reached: bool
    scaled: str  # the side of the model scaled: "host" (after the tracing cost is out), "gpu"
    factor: float  # ... by this factor (1.0 when not reached)
    estimated_ms: float  # the untraced step the model predicted before
    min_ms: float  # the shortest and longest steps the calibration could reach
    max_ms: float


__all__ = ["AFTER_WINDOW", "GIVEN", "PACED", "StepCalibration", "UntracedSteps"]
