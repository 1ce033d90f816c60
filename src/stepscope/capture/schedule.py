"""The capture window as pure functions, in the spirit of ``torch.profiler.schedule``.

Steps are numbered by their *boundaries*: boundary ``k`` (0-based: the k-th optimizer step hook or
``stepscope.step()`` call) is where step ``k`` begins, and step ``k`` ends at boundary ``k + 1``.
The first step of a program (before boundary 0) has no start mark and is never captured.

At every boundary the bootstrap asks ``Schedule.action(k, window_elapsed_s)``:

- ``SKIP``: the window has not opened yet (warm-up, or before ``--steps A``);
- ``CAPTURE``: step ``k`` is inside the window (the window opens at the first CAPTURE);
- ``DONE``: the window is over; capture stops and never restarts.

``window_elapsed_s`` is the time since the window opened (0 before), so the default window
("skip 3 warm-up steps, then ~10 s or 50 steps, whichever comes first") stays a pure function.
``--delay S --duration S`` windows are on wall time instead: ``time_action(elapsed_s)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from stepscope.errors import CaptureError

DEFAULT_SKIP_FIRST = 3
DEFAULT_MAX_STEPS = 50
DEFAULT_MAX_SECONDS = 10.0
DEFAULT_WARMUP_S = 3.0  # the default window's fallback (capture.auto_window)


class Action(str, Enum):
    SKIP = "skip"
    CAPTURE = "capture"
    DONE = "done"


@dataclass(frozen=True)
class Schedule:
    """A step window ``[first, last]`` (inclusive) or the default one.

    ``last=None`` means "until ``max_steps`` steps or ``max_seconds`` of steps were captured";
    ``delay_s``/``duration_s`` (both set or both ``None``) make it a wall-time window instead.
    """

    first: int = DEFAULT_SKIP_FIRST
    last: int | None = None
    max_steps: int | None = DEFAULT_MAX_STEPS
    max_seconds: float | None = DEFAULT_MAX_SECONDS
    delay_s: float | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.first < 0 or (self.last is not None and self.last < self.first):
            raise CaptureError(f"bad step window {self.first}-{self.last}: need 0 <= A <= B")
        if (self.delay_s is None) != (self.duration_s is None):
            raise CaptureError("--delay and --duration go together")
        if self.delay_s is not None and (self.delay_s < 0 or (self.duration_s or 0) <= 0):
            raise CaptureError("--delay must be >= 0 and --duration > 0 seconds")

    @property
    def timed(self) -> bool:
        return self.delay_s is not None

    def action(self, step: int, window_elapsed_s: float = 0.0) -> Action:
        """What to do at boundary ``step`` (step ``step`` is about to begin)."""
        if self.timed:  # wall-time windows ignore steps
            return Action.SKIP
        if step < self.first:
            return Action.SKIP
        if self.last is not None:
            return Action.CAPTURE if step <= self.last else Action.DONE
        if self.max_steps is not None and step - self.first >= self.max_steps:
            return Action.DONE
        if self.max_seconds is not None and step > self.first and window_elapsed_s >= self.max_seconds:
            return Action.DONE
        return Action.CAPTURE

    def time_action(self, elapsed_s: float) -> Action:
        """For ``--delay/--duration``: what to do ``elapsed_s`` after the program started."""
        if self.delay_s is None or self.duration_s is None:
            return Action.SKIP
        if elapsed_s < self.delay_s:
            return Action.SKIP
        return Action.CAPTURE if elapsed_s < self.delay_s + self.duration_s else Action.DONE

    def describe(self) -> str:
        if self.timed:
            return f"{self.delay_s:g} s after start, for {self.duration_s:g} s"
        if self.last is not None:
            return f"steps {self.first}-{self.last}"
        parts = [f"from step {self.first}"]
        if self.max_steps is not None:
            parts.append(f"at most {self.max_steps} steps")
        if self.max_seconds is not None:
            parts.append(f"about {self.max_seconds:g} s")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {"first": self.first, "last": self.last, "max_steps": self.max_steps,
                "max_seconds": self.max_seconds, "delay_s": self.delay_s,
                "duration_s": self.duration_s}

    @staticmethod
    def from_dict(d: dict[str, object]) -> Schedule:
        def num(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)  # type: ignore[arg-type]

        last = d.get("last")
        max_steps = d.get("max_steps", DEFAULT_MAX_STEPS)
        return Schedule(
            first=int(d.get("first", DEFAULT_SKIP_FIRST)),  # type: ignore[call-overload]
            last=None if last is None else int(last),  # type: ignore[call-overload]
            max_steps=None if max_steps is None else int(max_steps),  # type: ignore[call-overload]
            max_seconds=num("max_seconds"),
            delay_s=num("delay_s"),
            duration_s=num("duration_s"),
        )


_STEPS = re.compile(r"^\s*(\d+)\s*(?:-|:|\.\.)\s*(\d+)\s*$")


def parse_steps(text: str) -> tuple[int, int]:
    """``"5-20"`` → ``(5, 20)`` (inclusive); ``"7"`` → ``(7, 7)``."""
    t = text.strip()
    if t.isdigit():
        return int(t), int(t)
    m = _STEPS.match(t)
    if not m:
        raise CaptureError(f"--steps {text!r}: expected A-B, e.g. --steps 5-20")
    a, b = int(m.group(1)), int(m.group(2))
    if b < a:
        raise CaptureError(f"--steps {text!r}: the last step is before the first")
    return a, b


def make_schedule(
    steps: str | None = None, delay_s: float | None = None, duration_s: float | None = None
) -> Schedule:
    """The schedule for the CLI/API options (``steps`` and ``delay/duration`` are exclusive)."""
    if steps is not None and (delay_s is not None or duration_s is not None):
        raise CaptureError("choose either --steps or --delay/--duration, not both")
    if steps is not None:
        a, b = parse_steps(steps)
        return Schedule(first=a, last=b, max_steps=None, max_seconds=None)
    if delay_s is not None or duration_s is not None:
        return Schedule(delay_s=0.0 if delay_s is None else delay_s,
                        duration_s=DEFAULT_MAX_SECONDS if duration_s is None else duration_s,
                        max_steps=None, max_seconds=None)
    return Schedule()


__all__ = ["DEFAULT_MAX_SECONDS", "DEFAULT_WARMUP_S", "Action", "Schedule", "make_schedule",
           "parse_steps"]
