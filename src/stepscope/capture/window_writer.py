"""A session's writes into its staging partition, under the row cap.

Rows written as Parquet chunks and records the GPU backend keeps raw (decoded at merge,
``capture.cupti.spill``) both count toward ``max_rows``: past it, nothing more is written and the
session closes its window (``row_cap`` diagnostic). Not thread-safe: the session lets one flush
write at a time.
"""

from __future__ import annotations

import threading
import time

from stepscope.capture.chunks import Tables, count_rows
from stepscope.capture.staging import StagingPartition
from stepscope.store.manifest import Diagnostic

PAST_CAP = frozenset({"devices", "threads", "processes"})  # written even past the row cap


class WindowWriter:
    def __init__(self, partition: StagingPartition, max_rows: int) -> None:
        self.partition = partition
        self.max_rows = max_rows
        self.rows = 0
        self._raw_counted = 0  # GPU records kept raw, counted into ``rows``
        self.diagnostics: list[Diagnostic] = []

    def write(self, data: Tables) -> bool:
        """Write one chunk; False (nothing written) when it would pass the row cap."""
        n = count_rows(data)
        if not n:
            return True
        if self.rows + n > self.max_rows:
            self._cap_reached()
            # the tables that describe the run rather than its events (a few rows: the GPUs
            # used, threads, processes) are written past the cap: without them the rules that
            # need them cannot run on what was kept
            small = {k: v for k, v in data.items() if k in PAST_CAP}
            if small:
                self._write(small)
            return False
        self._write(data)
        return True

    def _write(self, data: Tables) -> None:
        try:
            self.rows += self.partition.write_chunk(data)
        except Exception as exc:
            self.diagnostics.append(Diagnostic("error", "flush_failed",
                                               f"writing the partition failed: {exc!r}"))

    def count_raw(self, total: int) -> bool:
        """Count the backend's raw records (``total`` so far); False when over the cap."""
        self.rows += total - self._raw_counted
        self._raw_counted = total
        if self.rows <= self.max_rows:
            return True
        self._cap_reached()
        return False

    def skip_raw(self, total: int) -> None:
        """The backend's raw records so far (``total``) were made before the window (clipped
        away at merge): they do not count toward the cap."""
        self._raw_counted = max(self._raw_counted, total)

    def _cap_reached(self) -> None:
        if not any(d.code == "row_cap" for d in self.diagnostics):
            self.diagnostics.append(Diagnostic(
                "warning", "row_cap",
                f"stopped capturing after {self.rows} rows (cap {self.max_rows}): "
                "use a shorter window (--steps A-B; --duration S where no step hook fires)"))


class IoGate:
    """One flush at a time writes outside the session's lock (so that the training thread's
    step boundaries never wait on that I/O); closing or opening the window waits for it.
    ``busy`` is read and set, and ``leave``/``wait`` called, under the session's lock."""

    def __init__(self, lock: threading.RLock) -> None:
        self.busy = False
        self._idle = threading.Condition(lock)

    def leave(self) -> None:
        self.busy = False
        self._idle.notify_all()

    def wait(self, timeout_s: float = 60.0) -> Diagnostic | None:
        """Wait (the lock is released while waiting) for a flush under way to end."""
        deadline = time.monotonic() + timeout_s
        while self.busy:
            left = deadline - time.monotonic()
            if left <= 0:
                return Diagnostic("warning", "flush_stuck", "a flush of the window was still "
                                  f"writing after {timeout_s:g} s")
            self._idle.wait(left)
        return None


__all__ = ["IoGate", "WindowWriter"]
