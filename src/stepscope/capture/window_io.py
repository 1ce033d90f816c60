"""A capture session's window I/O (the base of ``bootstrap.Session``, which decides when the
window opens and closes): opening it, the flush thread that writes the open window into the
staging partition every ``flush_every_s`` (host data taken under the lock, written outside it:
``IoGate``), the host data kept before the window (the last ~10 s), the GPU backend's data, and
the window's wall and CPU time."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

from stepscope.capture.chunks import TIMED_TABLES, Tables, clip, concat, cpu_since, threads_cpu_s
from stepscope.capture.config import CaptureConfig
from stepscope.capture.gpu import GpuSlot
from stepscope.capture.host_slot import HostSlot
from stepscope.capture.staging import StagingPartition
from stepscope.capture.window_writer import IoGate, WindowWriter
from stepscope.store.manifest import Diagnostic


class WindowIO(ABC):
    """Thread-safe via one re-entrant lock (``_lock``); the subclass closes the window
    (``_close``), writes the partition's meta (``_write_meta``) and may hand over GPU tables
    recorded before the window (``_pre_window_gpu``)."""

    def __init__(self, config: CaptureConfig, clock: Callable[[], int],
                 partition: StagingPartition, host: HostSlot, gpu: GpuSlot,
                 diags: list[Diagnostic]) -> None:
        self.config = config
        self._clock = clock
        self.partition = partition
        self.host, self.gpu, self._diags = host, gpu, diags
        self._lock = threading.RLock()
        self.open_ns: int | None = None
        self.close_ns: int | None = None
        self.finished = False
        self._last_flush = 0
        self._pre: deque[Tables] = deque(maxlen=max(2, int(10.0 / max(config.flush_every_s, 0.1)) + 2))
        self._cpu_open: dict[int, float] | None = None
        self._measured: tuple[float | None, float | None] | None = None  # window wall, CPU
        self.out = WindowWriter(partition, config.max_rows)
        self._io = IoGate(self._lock)  # one flush writes at a time, outside the lock
        self._closed = threading.Event()

    @abstractmethod
    def _close(self) -> None:
        """Close the window (the subclass decides when and what its end writes)."""

    @abstractmethod
    def _write_meta(self) -> None:
        """Write the partition's meta (who, how it ended, settings, overhead, diagnostics)."""

    def _pre_window_gpu(self) -> list[Tables]:
        return []

    def _due(self) -> bool:
        return self._clock() - self._last_flush >= self.config.flush_every_s * 1e9

    def _open(self, now: int) -> bool:
        self._wait_io()  # a flush of the tentative GPU capture under way
        if self.open_ns is not None or self.close_ns is not None:
            return False  # opened (or closed) by another thread while this one waited
        # drop what was sampled before the window, but keep the untimed tables (threads, processes)
        merged = concat([*self._pre, self.host.drain()])
        self._pre.clear()
        self.out.write({name: cols for name, cols in merged.items() if name not in TIMED_TABLES})
        self._start_gpu()
        for data in self._pre_window_gpu():  # the tentative capture's decoded tables: clipped
            self.out.write(clip(data, now, None))
        self.out.skip_raw(self.gpu.raw_records())  # raw ones before the window: clipped at merge
        self.open_ns = now
        self._last_flush = now
        self._cpu_open = threads_cpu_s()
        self._write_meta()  # the window's start, for a process killed before it closes
        t = threading.Thread(target=self._flusher, name="stepscope-flush", daemon=True)
        t.start()
        return True

    def _flusher(self) -> None:
        """Flush every ``flush_every_s`` while the window is open, whether or not steps come
        (timed windows, long or stuck steps): bounded memory, and a crash keeps what was written."""
        period = max(self.config.flush_every_s, 0.1)
        while not self._closed.wait(period):
            if not self._flush_window():
                return

    def _flush_window(self) -> bool:
        """One flush of the open window, on the flush thread. The host data is taken under the
        lock (a swap of buffers); writing it and moving the GPU backend's records happen outside
        it, so the training thread's step boundaries never wait on that I/O (``_close`` waits for
        a flush under way). Returns False once the window is closed (or the row cap closed it)."""
        with self._lock:
            if self.finished or self.close_ns is not None or self.open_ns is None:
                return False
            if self._io.busy:
                return True  # another flush is writing: next period
            self._io.busy = True
            self._last_flush = self._clock()
            data = self.host.drain()
            lo = self.open_ns
        full = False
        try:
            full = not self.out.write(clip(data, lo, None))
            if not full:
                full = not self.out.write(clip(self._gpu_data(final=False), lo, None))
            full = full or not self._count_raw()
        finally:
            with self._lock:
                self._io.leave()
        if full:
            self._close()
        return not full

    def _wait_io(self) -> None:
        """Wait (holding the lock, which waiting releases) for a flush under way to end."""
        stuck = self._io.wait()
        if stuck is not None:
            self._diags.append(stuck)

    def _count_raw(self) -> bool:
        """Count the GPU records the backend has kept raw into the row cap; False when over it."""
        return self.out.count_raw(self.gpu.raw_records())

    @property
    def rows(self) -> int:
        return self.out.rows

    def _start_gpu(self) -> None:
        diag = self.gpu.start()
        if diag is not None:
            self._diags.append(diag)

    def _gpu_data(self, final: bool) -> Tables:
        data, diags = self.gpu.data(final)
        self._diags.extend(diags)
        return data

    def _keep_pre(self) -> None:
        """Before the window: drain the host data and keep only the last ~10 s (bounded)."""
        self._last_flush = self._clock()
        self._pre.append(self.host.drain())

    def _measure(self, cpu_close: dict[int, float] | None, now: int) -> None:
        wall = None if self.open_ns is None else (now - self.open_ns) / 1e9
        self._measured = (wall, cpu_since(self._cpu_open, cpu_close))

    def _discard_raw(self) -> None:
        """Drop GPU records kept raw (those of a warm-up step whose window never opened): the
        ``cupti`` backend's records, the ``torch`` backend's exported trace."""
        from stepscope.capture.cupti.raw import raw_files
        from stepscope.capture.torch_backend import TRACE_GLOB

        for f in [*raw_files(self.partition.path), *self.partition.path.glob(TRACE_GLOB)]:
            f.unlink(missing_ok=True)


__all__ = ["WindowIO"]
