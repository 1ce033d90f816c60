"""What runs inside the profiled process: window, host capture, flush on exit or crash.

The launcher (or ``stepscope.record``) hands a ``CaptureConfig`` over (as JSON in the
``STEPSCOPE_CAPTURE`` environment variable for a launched program). ``Session`` then:

- runs ``HostCapture`` and counts step boundaries (its step listener: optimizer hooks or
  ``stepscope.step()``), asking ``Schedule.action`` at each boundary whether the window is open;
- outside the window, host data is drained and dropped (bounded memory); inside it, a flush
  thread writes it to this process's staging partition every ``flush_every_s``, with the GPU
  backend's records (kept raw by the ``cupti`` backend, decoded at merge), and the rest is written
  when the window closes, so a process killed later (even by ``os._exit`` or SIGKILL, which cannot
  be hooked) keeps what was flushed. The training thread never does that I/O: a flush takes the
  host data under the session lock (a swap) and writes outside it, and closing the window waits
  for a flush under way;
- caps the rows it writes (``max_rows``) and says so in a diagnostic;
- flushes on normal exit (``atexit``), on an uncaught exception (``sys.excepthook``, chained),
  Ctrl-C (KeyboardInterrupt takes the exception path) and SIGTERM (a handler that flushes, restores
  the default action and re-sends the signal, so the exit status is unchanged).

The process-wide part (active sessions, exit/signal hooks, the sitecustomize entry point) is in
``capture.process``; the GPU backend's lifecycle in ``capture.gpu``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from stepscope.capture.chunks import TIMED_TABLES, Tables, clip, concat, cpu_since, threads_cpu_s
from stepscope.capture.config import ENV_VAR, CaptureConfig, HostLike, default_host
from stepscope.capture.gpu import GpuLike, GpuSlot, make_gpu
from stepscope.capture.host_slot import HostSlot
from stepscope.capture.schedule import Action
from stepscope.capture.step_times import StepTimes
from stepscope.capture.window_writer import WindowWriter
from stepscope.store.manifest import Diagnostic


class Session:
    """One process's capture (see the module doc). Thread-safe via one re-entrant lock."""

    def __init__(
        self,
        config: CaptureConfig,
        *,
        clock: Callable[[], int] = time.time_ns,
        environ: Mapping[str, str] | None = None,
        host_factory: Callable[[CaptureConfig, int, Callable[[], int]], HostLike] = default_host,
        gpu_factory: Callable[[str, str], GpuLike | None] | None = None,
        argv: tuple[str, ...] = (),
    ) -> None:
        from stepscope.capture.partitions import PartitionMeta, StagingPartition, env_rank

        env = os.environ if environ is None else environ
        self.config = config
        self.schedule = config.schedule
        self._clock = clock
        self.pid = os.getpid()
        self.start_ns = clock()
        rank, world = env_rank(env)
        self._meta = PartitionMeta(pid=self.pid, start_ns=self.start_ns, ppid=os.getppid(),
                                   host=socket.gethostname(), env_rank=rank, world_size=world,
                                   argv=argv)
        self.partition = StagingPartition.for_process(Path(config.staging), self.pid, self.start_ns)
        self._rank = rank or 0
        self._lock = threading.RLock()
        self._diags: list[Diagnostic] = []
        self.host = HostSlot(host_factory, self._diags)
        self.gpu = GpuSlot(config.gpu, config.gpu_api,
                           gpu_factory or partial(make_gpu, spill_dir=self.partition.path))
        self.boundaries = 0
        self.open_ns: int | None = None
        self.close_ns: int | None = None
        self._last_boundary: int | None = None
        self._last_flush = 0
        self._pre: deque[Tables] = deque(maxlen=max(2, int(10.0 / max(config.flush_every_s, 0.1)) + 2))
        self._step_times = StepTimes()
        self._warmup_boundary: int | None = None
        self._cpu_open: dict[int, float] | None = None
        self._measured: tuple[float | None, float | None] | None = None  # window wall, CPU
        self._finishing = False
        self.out = WindowWriter(self.partition, config.max_rows)
        self._io_busy = False  # a flush is writing (outside the lock); see _flush_window
        self._io_idle = threading.Condition(self._lock)
        self.ended = "running"
        self.exit_status: int | None = None  # a non-zero sys.exit() status (capture.process)
        self.finished = False
        self._timers: list[threading.Timer] = []
        self._closed = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def begin(self) -> Session:
        with self._lock:
            self._write_meta()
            if not self.schedule.timed and self.schedule.first <= 1:
                self.gpu.prepare()  # no step to wait for (else: at boundary 0, see _on_boundary)
            if self.schedule.timed:
                delay = self.schedule.delay_s or 0.0
                duration = self.schedule.duration_s or 0.0
                lead = min(delay, self.config.gpu_lead_s)
                if lead > 0:
                    self._timer(delay - lead, self._start_gpu_early)
                self._timer(delay, self._open_timed)
                self._timer(delay + duration, self._close)
            else:
                self._start_host()
        return self

    def _timer(self, after_s: float, fn: Callable[[], None]) -> None:
        t = threading.Timer(after_s, fn)
        t.daemon = True
        t.name = "stepscope-window"
        t.start()
        self._timers.append(t)

    def _start_host(self) -> None:
        self.host.start(self.config, self._rank, self._clock, self._on_boundary)

    # -- steps and window --------------------------------------------------------------------
    def step(self) -> None:
        """A manual step boundary (``stepscope.step()``/``record().step()``)."""
        if not self.host.mark_step():  # a running host calls _on_boundary through its listener
            self._on_boundary(-1)

    def _on_boundary(self, _host_index: int) -> None:
        if os.getpid() != self.pid or self.finished:
            return
        with self._lock:
            now = self._clock()
            k = self.boundaries
            self.boundaries += 1
            # the warm-up step (GPU backend starting) is neither a before- nor an in-window step
            warmup = self._warmup_boundary is not None and k == self._warmup_boundary + 1
            if self._last_boundary is not None and not warmup:
                if self.close_ns is None:
                    self._step_times.add(now - self._last_boundary, inside=self.open_ns is not None)
                elif self._step_times.add_after(now - self._last_boundary):
                    self.host.release_hooks()
            self._last_boundary = now
            if self.schedule.timed or self.close_ns is not None:
                return
            elapsed = 0.0 if self.open_ns is None else (now - self.open_ns) / 1e9
            action = self.schedule.action(k, elapsed)
            if k == 0:
                # the GPU backend is made off this thread from the first boundary on: by then the
                # framework is imported and its libcupti loaded, which the backend must share
                self.gpu.prepare()
            if self.open_ns is None and k + 1 == self.schedule.first:
                self._start_gpu()  # one warm-up step: its start cost stays out of the window
                self._warmup_boundary = k
            if action is Action.CAPTURE and self.open_ns is None:
                self._open(now)
            elif action is Action.DONE:
                if self.open_ns is None:  # window passed without opening (cannot happen by design)
                    self.open_ns = now
                self._close()
            elif self.open_ns is None and self._due():
                self._keep_pre()  # in the window the flush thread writes; here nothing is written

    def _due(self) -> bool:
        return self._clock() - self._last_flush >= self.config.flush_every_s * 1e9

    def _open(self, now: int) -> None:
        # drop what was sampled before the window, but keep the untimed tables (threads, processes)
        merged = concat([*self._pre, self.host.drain()])
        self._pre.clear()
        self.out.write({name: cols for name, cols in merged.items() if name not in TIMED_TABLES})
        self._start_gpu()
        self.open_ns = now
        self._last_flush = now
        self._cpu_open = threads_cpu_s()
        self._write_meta()  # the window's start, for a process killed before it closes
        t = threading.Thread(target=self._flusher, name="stepscope-flush", daemon=True)
        t.start()

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
            if self.finished or self.close_ns is not None or self.open_ns is None or self._io_busy:
                return False
            self._io_busy = True
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
                self._io_busy = False
                self._io_idle.notify_all()
        if full:
            self._close()
        return not full

    def _wait_io(self, timeout_s: float = 60.0) -> None:
        """Wait (holding the lock, which waiting releases) for a flush under way to end."""
        deadline = time.monotonic() + timeout_s
        while self._io_busy:
            left = deadline - time.monotonic()
            if left <= 0:
                self._diags.append(Diagnostic("warning", "flush_stuck", "a flush of the window "
                                              f"was still writing after {timeout_s:g} s"))
                return
            self._io_idle.wait(left)

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

    def _start_gpu_early(self) -> None:
        with self._lock:
            if self.finished or self.close_ns is not None or self.open_ns is not None:
                return
            self._start_gpu()

    def _open_timed(self) -> None:
        with self._lock:
            if self.finished or self.close_ns is not None:
                return
            self._start_host()
            self._open(self._clock())

    def _keep_pre(self) -> None:
        """Before the window: drain the host data and keep only the last ~10 s (bounded)."""
        self._last_flush = self._clock()
        self._pre.append(self.host.drain())

    def _close(self) -> None:
        with self._lock:
            if self.close_ns is not None or self.finished:
                return
            cpu = threads_cpu_s()
            now = self._clock()
            self.close_ns = now
            self._closed.set()
            self._measure(cpu, now)
            self._wait_io()
            gpu = self._gpu_data(final=True)
            # the step hooks stay in for the steps after the window (their times, with the
            # samplers stopped and CUPTI detached, are the overhead's reference), unless the
            # process is ending
            keep = not self._finishing
            if keep:
                self._step_times.window_closed()
            data = self.host.stop(keep_hooks=keep)
            if self.open_ns is not None:
                self.out.write(clip(data, self.open_ns, now))
                self.out.write(clip(gpu, self.open_ns, now))
                self._count_raw()
            self._write_meta()

    def _measure(self, cpu_close: dict[int, float] | None, now: int) -> None:
        wall = None if self.open_ns is None else (now - self.open_ns) / 1e9
        self._measured = (wall, cpu_since(self._cpu_open, cpu_close))

    # -- end of process ----------------------------------------------------------------------
    def finish(self, ended: str | None = None) -> None:
        """Flush everything and write the final meta. Idempotent; a no-op in forked children."""
        if os.getpid() != self.pid:
            return
        with self._lock:
            if self.finished:
                return
            for t in self._timers:
                t.cancel()
            self._closed.set()
            if ended is not None:
                self.ended = ended
            elif self.ended == "running":
                self.ended = "exit" if not self.exit_status else f"exit status {self.exit_status}"
            self._finishing = True
            if self.close_ns is None and self.open_ns is not None:
                self._close()
            elif self.open_ns is None:
                self._keep_tail()
            self._step_times.stop_after()
            self.host.release_hooks()
            self.finished = True
            self._write_meta()

    def _keep_tail(self) -> None:
        """The window never opened: keep the last ``max_seconds`` of host data."""
        now = self._clock()
        self._gpu_data(final=True)  # started for a warm-up step of a window that never came
        self._discard_raw()
        data = self.host.stop()
        merged = concat([*self._pre, data])
        self._pre.clear()
        keep_s = self.schedule.max_seconds or 10.0
        if self.schedule.timed:
            why = "the program ended before the --delay was over"
        else:
            why = (f"fewer than {self.schedule.first + 1} step boundaries were seen (no optimizer "
                   "step hook fired and stepscope.step() was not called often enough)")
        self._diags.append(Diagnostic("warning", "window_not_reached",
                                      f"the capture window never opened: {why}; kept the last "
                                      f"{keep_s:g} s of host samples instead"))
        self.open_ns = max(self.start_ns, now - int(keep_s * 1e9))
        self.close_ns = now
        self.out.write(clip(merged, self.open_ns, now))

    def _discard_raw(self) -> None:
        """Drop GPU records kept raw (those of a warm-up step whose window never opened)."""
        from stepscope.capture.cupti.raw import raw_files

        for f in raw_files(self.partition.path):
            f.unlink(missing_ok=True)

    def _write_meta(self) -> None:
        from dataclasses import replace

        settings: dict[str, Any] = {"window": self.schedule.describe(),
                                    "schedule": self.schedule.to_dict(),
                                    "window_start_ns": self.open_ns, "window_end_ns": self.close_ns,
                                    "step_boundaries_seen": self.boundaries,
                                    "gpu": self.gpu.status}
        # the overhead figures from the window's close on (later with the steps after it)
        overhead = self._step_times.report(*self._measured) if self._measured is not None else {}
        diags = [*self._diags, *self.out.diagnostics]
        host, host_diags = self.host.for_manifest()
        if host is not None:
            settings["host"] = host
            diags.extend(host_diags)
        meta = replace(self._meta, ended=self.ended, settings=settings, overhead=overhead,
                       diagnostics=tuple(diags))
        try:
            self.partition.write_meta(meta)
        except OSError:
            pass


__all__ = ["CaptureConfig", "ENV_VAR", "HostLike", "Session", "clip", "concat",
           "threads_cpu_s"]
