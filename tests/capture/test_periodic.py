"""The sampler threads' fixed-rate loop: tick counts, skipped ticks, tick errors."""

from __future__ import annotations

import threading
import time
from typing import Any

from stepscope.capture.periodic import run_periodic


def test_slow_ticks_are_skipped_and_errors_reported() -> None:
    stop = threading.Event()
    status: dict[str, Any] = {}
    errors: list[Exception] = []
    calls = [0]

    def tick() -> None:
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(0.12)  # late by more than two periods: those ticks are skipped
        if calls[0] == 2:
            raise ValueError("broken reading")
        if calls[0] >= 5:
            stop.set()

    run_periodic(stop, 40.0, tick, status, errors.append)
    assert status["ticks"] == calls[0] == 5
    assert status["skipped_ticks"] >= 2
    assert [str(e) for e in errors] == ["broken reading"]
