"""A fixed-rate loop for the sampler threads of the host capture."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def run_periodic(stop: threading.Event, hz: float, tick: Callable[[], None],
                 status: dict[str, Any], on_error: Callable[[Exception], None]) -> None:
    """Call ``tick`` at ``hz`` until ``stop`` is set, with drift correction: tick k is due at
    t0 + k/hz; missed ticks are skipped. ``status`` gets ``ticks``, ``skipped_ticks`` and the
    thread CPU time of the ticks (``cpu_s``); an exception of a tick goes to ``on_error``."""
    period = 1.0 / hz
    due = time.monotonic() + period
    ticks = skipped = 0
    cpu = 0.0
    while not stop.wait(max(0.0, due - time.monotonic())):
        c0 = time.thread_time()
        try:
            tick()
        except Exception as e:
            on_error(e)
        cpu += time.thread_time() - c0
        ticks += 1
        due += period
        late = time.monotonic() - due
        if late > 0:
            missed = int(late / period) + 1
            skipped += missed
            due += missed * period
        status.update(ticks=ticks, skipped_ticks=skipped, cpu_s=round(cpu, 6))
