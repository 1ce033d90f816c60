"""The GPU's utilisation inside the capture window and right after it: the capture's cost on a
program whose steps no hook times.

``record`` times the steps after its window to tell how much the capture slowed the program
(``capture.step_times``); a program without a step hook (an inference loop, a JAX or CuPy
program) has no steps to time there, and its steps are recovered from the kernel stream at
analysis. Its pace can still be read: the GPU work of a step does not change when the capture
ends, so where the host sets the step, the share of time the GPU is busy moves with the step's
length. NVML's ``gpu.util_pct`` (the share of its sampling period in which a kernel ran, which
the samplers already record) inside the window and after it, with CUPTI detached, gives
``untraced step / captured step = util in the window / util after it``.

On an H100 (2026-11-27, ``torch_inference``, steps recovered from periodicity), the capture took
one recorded step from 1.51 ms untraced to 3.03 ms in one process and cost nothing measurable
in another: a fixed per-call cost cannot say which.

Where the window saw no step boundary, the samplers keep running for :data:`AFTER_S` after it
(in their own process, so the program's threads are not touched; rows after the window go here
only, not to the run's tables). Where it saw steps, the samplers stop at the close as before:
the steps after the window are timed with them stopped. Samples in the first
:data:`SETTLE_S` after the window are left out (NVML's period straddles the close), and so
are ticks where no GPU is busy (the program paused or ended). The figures are the busiest
device's (the one with the highest utilisation in the window).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

METRIC = "gpu.util_pct"
AFTER_S = 5.0  # how long the samplers keep running after the window
SETTLE_S = 1.0  # samples this soon after the window are left out
MIN_SAMPLES = 10  # fewer samples after the window: no figure
BUSY_PCT = 1.0  # a tick with every GPU under this is the program idle, not its pace


class UtilPace:
    """Fed with the samplers' rows (any thread): the window's and the after-window's mean
    utilisation per device."""

    def __init__(self, after_s: float = AFTER_S, settle_s: float = SETTLE_S) -> None:
        self._lock = threading.Lock()
        self._after_s = after_s
        self._sample_after = True
        self._settle_ns = int(settle_s * 1e9)
        self._open_ns: int | None = None
        self._close_ns: int | None = None
        # (phase, device) -> [sum, count]; phase 0: the window, 1: after it
        self._sums: dict[tuple[int, int], list[float]] = {}
        self._tick: list[tuple[int, int, float]] = []  # the rows of the tick being gathered

    def opened(self, ts_ns: int) -> None:
        with self._lock:
            if self._open_ns is None:
                self._open_ns = ts_ns

    @property
    def after_s(self) -> float:
        """How long the samplers are to keep running after the window: 0 once the window
        closed without asking for it (:meth:`closed`)."""
        with self._lock:
            return self._after_s if self._sample_after else 0.0

    def closed(self, ts_ns: int, sample_after: bool = True) -> None:
        """The window closed at ``ts_ns``; ``sample_after``: the samplers are to keep running
        after it for the pace (no step to time after the window)."""
        with self._lock:
            if self._open_ns is not None and self._close_ns is None:
                self._close_ns = ts_ns
            self._sample_after = sample_after

    def note(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Sampler rows ``(ts_ns, device, metric, value, unit)``, a tick's GPUs sharing its
        ``ts_ns``."""
        with self._lock:
            for r in rows:
                if r[2] != METRIC:
                    continue
                ts = int(r[0])
                if self._tick and self._tick[0][0] != ts:
                    self._take(self._tick)
                    self._tick = []
                self._tick.append((ts, int(r[1]), float(r[3])))

    def _take(self, tick: list[tuple[int, int, float]]) -> None:
        ts = tick[0][0]
        if self._open_ns is None or ts < self._open_ns:
            return
        if self._close_ns is None or ts < self._close_ns:
            phase = 0
        elif ts < self._close_ns + self._settle_ns:
            return
        else:
            phase = 1
        if max(v for _, _, v in tick) < BUSY_PCT:
            return
        for _, dev, v in tick:
            s = self._sums.setdefault((phase, dev), [0.0, 0.0])
            s[0] += v
            s[1] += 1

    def figures(self) -> dict[str, Any]:
        """``gpu_util_pct_window``, ``gpu_util_pct_after_window`` and
        ``gpu_util_samples_after_window`` of the device busiest in the window ({} without
        both)."""
        with self._lock:
            if self._tick:
                self._take(self._tick)
                self._tick = []
            window = {d: s for (p, d), s in self._sums.items() if p == 0 and s[1] > 0}
            if not window:
                return {}
            dev = max(window, key=lambda d: window[d][0] / window[d][1])
            after = self._sums.get((1, dev))
            out: dict[str, Any] = {"gpu_util_device": dev,
                                   "gpu_util_pct_window": round(window[dev][0] / window[dev][1], 2)}
            n = int(after[1]) if after else 0
            out["gpu_util_samples_after_window"] = n
            if after and n >= MIN_SAMPLES:
                out["gpu_util_pct_after_window"] = round(after[0] / after[1], 2)
            return out


class AfterWindow:
    """The sampling after the window: a daemon thread that calls ``pump`` every 0.2 s for
    ``after_s``, then ``stop`` once; :meth:`end` cuts it short (the process is ending)."""

    def __init__(self, pump: Callable[[], None], stop: Callable[[], None],
                 after_s: float) -> None:
        self._stop_now = threading.Event()

        def loop() -> None:
            deadline = time.monotonic() + after_s
            while not self._stop_now.wait(0.2) and time.monotonic() < deadline:
                pump()
            stop()

        self._thread = threading.Thread(target=loop, name="stepscope-after-window",
                                        daemon=True)
        self._thread.start()

    def end(self, timeout_s: float) -> None:
        self._stop_now.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)


def pace_of(host: object) -> UtilPace | None:
    """A host capture's meter (None: no host, or a host without one)."""
    pace = getattr(host, "util_pace", None)
    return pace if isinstance(pace, UtilPace) else None


__all__ = ["AFTER_S", "MIN_SAMPLES", "SETTLE_S", "AfterWindow", "UtilPace", "pace_of"]
