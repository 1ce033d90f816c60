"""``profile(...)``: ``torch.profiler.profile`` with stepscope's defaults, a drop-in (every
argument of ``torch.profiler.profile`` passes through; the ones given win):

* ``activities``: CPU, and CUDA when ``torch.cuda.is_available()`` (the kernels, copies and
  syncs the analysis reads);
* ``schedule``: ``schedule(wait=1, warmup=1, active=5, repeat=1)`` (:data:`DEFAULT_SCHEDULE`):
  the first step (start-up, allocations) is left out, one warm-up step primes the profiler,
  five steps are recorded, enough for a steady-state step time; ``schedule=None`` records the
  whole ``with`` block, as ``torch.profiler.profile`` does;
* ``on_trace_ready``: :func:`stepscope.torch.on_trace_ready` into ``dir_name``
  (``stepscope-traces``): a trace and a run per cycle, the top findings printed;
* ``record_shapes=True`` (the shapes tell a misaligned GEMM's dimensions); stacks and memory
  stay off (their overhead would be in the step times the advisor judges).

Call ``prof.step()`` at the end of each training step, as with ``torch.profiler``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.torch.handoff import on_trace_ready as handoff_ready

DEFAULT_SCHEDULE = {"wait": 1, "warmup": 1, "active": 5, "repeat": 1}
_DEFAULT: Any = object()  # "not given" (None is a choice: no schedule, no handler)


def profile(dir_name: str | os.PathLike[str] = "stepscope-traces", *,
            activities: Any = _DEFAULT, schedule: Any = _DEFAULT,
            on_trace_ready: Any = _DEFAULT, record_shapes: bool = True,
            **kwargs: Any) -> Any:
    """A ``torch.profiler.profile`` (module docstring)."""
    try:
        torch = importlib.import_module("torch")
        tp = importlib.import_module("torch.profiler")
    except ImportError:
        raise StepscopeError("stepscope.torch.profile needs PyTorch: pip install torch") \
            from None
    if activities is _DEFAULT:
        activities = [tp.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(tp.ProfilerActivity.CUDA)
    if schedule is _DEFAULT:
        schedule = tp.schedule(**DEFAULT_SCHEDULE)
    if on_trace_ready is _DEFAULT:
        on_trace_ready = handoff_ready(dir_name)
    return tp.profile(activities=activities, schedule=schedule, on_trace_ready=on_trace_ready,
                      record_shapes=record_shapes, **kwargs)

