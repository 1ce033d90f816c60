"""Whether the GPU is working now, from NVML's utilisation samples: when the program's GPU work
started to flow, for the default window's warm-up (``capture.auto_window``).

The first GPU use (a CUDA context) is often not the start of the loop: a program moves its model
to the GPU, then builds its dataset, fills host buffers or reads files for seconds before its
first step. A warm-up counted from the first GPU use then opens the time window on that setup.
NVML's ``gpu.util_pct`` (the share of a sampling period in which a kernel ran; the samplers
already record it, ``capture.samplers.nvml``) says when kernels run: the warm-up is counted
from the start of the current *flow*, the first busy sample after the last quiet stretch of
:data:`QUIET_S` or more (every sample below :data:`BUSY_PCT` on every GPU the process sees).

It is a device-wide figure: another process working on the same GPU looks like flow. Where NVML
gives no utilisation (no NVML, a MIG slice), :attr:`GpuFlow.known` stays False and the warm-up
is counted from the first GPU use, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

METRIC = "gpu.util_pct"
BUSY_PCT = 1.0  # a sample at or above this: a kernel ran in its period
QUIET_S = 1.0  # a stretch of quiet samples at least this long ends a flow


class GpuFlow:
    """Fed with the samplers' rows (any thread); read by the window's watcher."""

    def __init__(self, quiet_s: float = QUIET_S, busy_pct: float = BUSY_PCT) -> None:
        self._lock = threading.Lock()
        self._quiet_ns = int(quiet_s * 1e9)
        self._busy_pct = busy_pct
        self._known = False
        self._tick: tuple[int, bool] | None = None  # the sample time being gathered, busy?
        self._quiet_since: int | None = None  # first sample of the current quiet stretch
        self._flow_since: int | None = None  # first busy sample of the current flow
        self._last_ns: int | None = None  # the last complete sample time

    def note(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Sampler rows ``(ts_ns, device, metric, value, unit)``, in time order per sampler;
        the GPUs of one tick share its ``ts_ns``."""
        with self._lock:
            for r in rows:
                if r[2] != METRIC:
                    continue
                self._known = True
                ts, busy = int(r[0]), float(r[3]) >= self._busy_pct
                if self._tick is not None and self._tick[0] == ts:
                    self._tick = (ts, self._tick[1] or busy)
                    continue
                if self._tick is not None:
                    self._close(*self._tick)
                self._tick = (ts, busy)

    def _close(self, ts: int, busy: bool) -> None:
        if self._last_ns is not None and ts < self._last_ns:
            return  # out of order: ignored
        self._last_ns = ts
        if busy:
            quiet_long = (self._quiet_since is not None and ts - self._quiet_since
                          >= self._quiet_ns)
            if self._flow_since is None or quiet_long:
                self._flow_since = ts
            self._quiet_since = None
        elif self._quiet_since is None:
            self._quiet_since = ts

    @property
    def known(self) -> bool:
        """Whether NVML's utilisation is sampled at all."""
        with self._lock:
            return self._known

    def flow_since(self, now_ns: int) -> int | None:
        """When the GPU work flowing now started (None: the GPU is quiet now, or never ran a
        kernel yet). A quiet stretch shorter than ``quiet_s`` does not end a flow."""
        with self._lock:
            if self._tick is not None:
                self._close(*self._tick)
                self._tick = None
            if self._flow_since is None:
                return None
            if self._quiet_since is not None and now_ns - self._quiet_since >= self._quiet_ns:
                return None
            return self._flow_since


# how long after the first GPU use the warm-up waits for the GPU's work to flow before the time
# window opens anyway (a program whose GPU stays quiet: it still gets a window)
FLOW_WAIT_S = 60.0


def flow_ready(*, known: bool, since_ns: int | None, gpu_seen_ns: int | None, now_ns: int,
               warmup_s: float, wait_s: float = FLOW_WAIT_S) -> bool:
    """Whether the GPU's work has flowed for ``warmup_s`` now; True where NVML does not say
    (``known`` False) or the wait for it reached ``wait_s`` after the first GPU use."""
    if not known or gpu_seen_ns is None:
        return True
    if now_ns - gpu_seen_ns >= wait_s * 1e9:
        return True
    return since_ns is not None and now_ns - since_ns >= warmup_s * 1e9
