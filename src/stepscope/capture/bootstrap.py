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
- with the default schedule, runs a watcher thread that opens a *time* window when no step hook
  fires but the program uses the GPU (``capture.auto_window``);
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
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from stepscope.capture.auto_window import (
    NO_STEPS,
    POLL_S,
    DriverProbe,
    Fallback,
    Move,
    WatchState,
    Window,
    WindowUsed,
    compiling_now,
    default_steps_probe,
    needs_probe,
    next_move,
    tail_plan,
)
from stepscope.capture.chunks import Tables, clip, concat, threads_cpu_s
from stepscope.capture.config import ENV_VAR, CaptureConfig, HostLike, default_host
from stepscope.capture.flight_recorder import FlightRecorderTap
from stepscope.capture.frameworks import frameworks_loaded
from stepscope.capture.gpu import GpuLike, GpuSlot, make_gpu
from stepscope.capture.gpu_flow import GpuFlow
from stepscope.capture.host_slot import HostSlot
from stepscope.capture.schedule import DEFAULT_MAX_SECONDS, Action
from stepscope.capture.step_times import StepTimes
from stepscope.capture.topology import with_topology
from stepscope.capture.window_io import WindowIO
from stepscope.store.manifest import Diagnostic


class Session(WindowIO):
    """One process's capture (see the module doc). Thread-safe via one re-entrant lock; the
    window's I/O is ``WindowIO``'s."""

    def __init__(
        self,
        config: CaptureConfig,
        *,
        clock: Callable[[], int] = time.time_ns,
        environ: Mapping[str, str] | None = None,
        host_factory: Callable[[CaptureConfig, int, Callable[[], int]], HostLike] = default_host,
        gpu_factory: Callable[[str, str], GpuLike | None] | None = None,
        argv: tuple[str, ...] = (),
        gpu_probe: Callable[[], bool] | None = None,
        poll_s: float | None = POLL_S,
        steps_probe: Callable[[], bool] = default_steps_probe,
        compile_probe: Callable[[], bool] = compiling_now,
    ) -> None:
        """``gpu_probe``: is the GPU in use by this process yet (``capture.auto_window``);
        ``steps_probe``: will a step hook fire soon (an optimizer exists), which makes the
        fallback wait longer for it; ``compile_probe``: is a framework compiling now (the
        warm-up waits for that to stop);
        ``poll_s``: how often the watcher asks it (None: no watcher thread; ``poll`` is called
        by the caller, as tests do)."""
        from stepscope.capture.staging import PartitionMeta, StagingPartition, env_rank

        env = os.environ if environ is None else environ
        self.schedule = config.schedule
        self.pid = os.getpid()
        self.start_ns = clock()
        rank, world = env_rank(env)
        self._meta = PartitionMeta(pid=self.pid, start_ns=self.start_ns, ppid=os.getppid(),
                                   host=socket.gethostname(), env_rank=rank, world_size=world,
                                   argv=argv)
        part = StagingPartition.for_process(Path(config.staging), self.pid, self.start_ns)
        self._rank = rank or 0
        diags: list[Diagnostic] = []
        super().__init__(config, clock, part, HostSlot(host_factory, diags),
                         GpuSlot(config.gpu, config.gpu_api,
                                 gpu_factory or partial(make_gpu, spill_dir=part.path),
                                 topology=partial(with_topology, use_nvml=config.nvml)), diags)
        self.boundaries = 0
        self._last_boundary: int | None = None
        self._poll_s = poll_s
        self._compile_probe = compile_probe
        self.auto = Fallback(enabled=config.auto_window, probe=gpu_probe or DriverProbe(),
                             steps_probe=steps_probe,
                             warmup_s=config.auto_warmup_s, flush_every_s=config.flush_every_s,
                             max_s=self.schedule.max_seconds or DEFAULT_MAX_SECONDS,
                             folder=self.partition.path, keep_chunks=self._pre.maxlen or 2)
        self.window_used = WindowUsed("steps" if not self.schedule.timed else "time",
                                      self.schedule.describe())
        self._ended_open = False  # the window was still open (or never opened) at the end
        self._step_times = StepTimes()
        self._warmup_boundary: int | None = None
        self._finishing = False
        self.ended = "running"
        self.exit_status: int | None = None  # a non-zero sys.exit() status (capture.process)
        self._timers: list[threading.Timer] = []
        # torch.distributed's collectives (capture.flight_recorder)
        self.comms = FlightRecorderTap.for_capture(config, env, clock)

    # -- lifecycle ---------------------------------------------------------------------------
    def begin(self) -> Session:
        with self._lock:
            self.comms.arm()
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
            if self.auto.enabled and self._poll_s is not None:
                t = threading.Thread(target=self._watch, name="stepscope-watch", daemon=True)
                t.start()
        return self

    def _timer(self, after_s: float, fn: Callable[[], None]) -> None:
        t = threading.Timer(after_s, fn)
        t.daemon = True
        t.name = "stepscope-window"
        t.start()
        self._timers.append(t)

    def _start_host(self) -> None:
        self.host.start(self.config, self._rank, self._clock, self._on_boundary)

    # -- the default window's fallback (capture.auto_window) -----------------------------------
    def _watch(self) -> None:
        period = max(self._poll_s or POLL_S, 0.01)
        while not self._closed.wait(period):
            if not self.poll():
                return

    def poll(self) -> bool:
        """One look of the watcher (every ``poll_s``); False when it has nothing more to do."""
        if os.getpid() != self.pid or not self.auto.enabled:
            return False
        with self._lock:
            ask = needs_probe(self._watch_state())
        in_use = self.auto.ask() if ask else False  # outside the lock
        with self._lock:
            state = self._watch_state()
            move = next_move(state, in_use)
            if move is Move.START_GPU:  # the tentative capture
                self.auto.gpu_seen(state.now_ns)
                self.gpu.prepare()
                self._start_gpu()
                self._write_meta()
            elif move is Move.OPEN and self._open(state.now_ns):
                self.window_used = self.auto.opened(state.now_ns)
            elif move is Move.CLOSE:
                self._close()
            if self.open_ns is None and self.boundaries == 0 and self._due():
                self._keep_pre()  # no boundary drains the host data: bounded memory here
        if move is Move.FLUSH_GPU:
            self._flush_pre_window()
        return move is not Move.STOP

    def _watch_state(self) -> WatchState:
        window = (Window.CLOSED if self.close_ns is not None else Window.NONE if self.open_ns is None
                  else Window.AUTO if self.auto.open_ns is not None else Window.STEPS)
        now = self._clock()
        host = self.host.host
        got = getattr(host, "last_compile_ns", None) if host is not None else None
        compiled = got if isinstance(got, int) else None
        if (window is Window.NONE and self.auto.gpu_seen_ns is not None and self.boundaries == 0
                and self._compile_probe()):
            compiled = now  # compiling now: as if a compile just ended
        flow = getattr(host, "gpu_flow", None) if host is not None else None
        seen = (flow.known, flow.flow_since(now)) if isinstance(flow, GpuFlow) else (False, None)
        return self.auto.state(now, self.boundaries, window, self.finished, compiled, seen)

    def _flush_pre_window(self) -> None:
        """Flush the tentative GPU capture while no window is open (on the watcher thread,
        outside the lock, as ``_flush_window`` does; ``Fallback.flushed`` keeps the tail)."""
        with self._lock:
            if self.finished or self.open_ns is not None or self._io.busy:
                return
            self._io.busy = True
            self.auto.last_flush_ns = self._clock()
        data: Tables = {}
        try:
            data = self._gpu_data(final=False)
        finally:
            with self._lock:
                self.auto.flushed(data, self._clock(), steps_fired=self.boundaries > 0)
                self._io.leave()

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
            if self.schedule.timed or self.close_ns is not None or self.auto.open_ns is not None:
                return  # wall-time windows; boundaries in the fallback's window are just steps
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
            # no step to time after the window: the host samples the GPU's pace after it
            self.host.pace_closed(now, sample_after=self.boundaries == 0)
            data = self.host.stop(keep_hooks=keep)
            if self.open_ns is not None:
                self.out.write(clip(data, self.open_ns, now))
                self.out.write(clip(gpu, self.open_ns, now))
                self._count_raw()
                self._write_collectives(self.open_ns, now)
            self._write_meta()

    def _open(self, now: int) -> bool:
        opened = super()._open(now)
        if opened:
            self.comms.note_groups()  # the groups' ranks, in case they are gone at the close
            self.host.pace_opened(now)
        return opened

    def _write_collectives(self, lo: int, hi: int) -> None:
        """The window's collectives from torch.distributed's flight recorder (read once, after
        the window: ``capture.flight_recorder``); a failure is a diagnostic."""
        tables, diags = self.comms.take_safely(self._rank, lo, hi)
        self._diags.extend(diags)
        if tables:
            self.out.write(tables)

    def _pre_window_gpu(self) -> list[Tables]:
        return self.auto.take_pre()

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
            self._ended_open = self.close_ns is None
            if self.close_ns is None and self.open_ns is not None:
                self._close()
            elif self.open_ns is None:
                self._keep_tail()
            self._step_times.stop_after()
            self.host.release_hooks()
            self.host.end_after_window()  # its samples are in the final meta
            self.comms.disarm()
            self.finished = True
            self._write_meta()

    def _keep_tail(self) -> None:
        """No window opened: keep the tail ``capture.auto_window.tail_plan`` says (the last
        ``max_seconds`` of host data, or all since the GPU was first used during the warm-up)."""
        now = self._clock()
        self._wait_io()
        gpu = self._gpu_data(final=True)  # started for a warm-up step, or the tentative capture
        data = self.host.stop()
        merged = concat([*self._pre, data])
        self._pre.clear()
        a = self.auto
        tail = tail_plan(timed=self.schedule.timed, auto=a.enabled, first=self.schedule.first,
                         boundaries=self.boundaries, gpu_seen_ns=a.gpu_seen_ns,
                         gpu_started=a.gpu_seen_ns is not None or self._warmup_boundary is not None,
                         start_ns=self.start_ns, now_ns=now, warmup_s=a.warmup_s, keep_s=a.max_s)
        self._diags.append(tail.diagnostic)
        self.window_used = tail.used
        self.open_ns, self.close_ns = tail.start_ns, now
        self.out.write(clip(merged, tail.start_ns, now))
        if tail.keep_gpu:  # raw records: clipped to the window at merge
            for d in [*a.take_pre(), gpu]:
                self.out.write(clip(d, tail.start_ns, now))
        else:
            self._discard_raw()
        self._write_collectives(tail.start_ns, now)
        self._measure(None, now)

    def _write_meta(self) -> None:
        used = self.window_used
        settings: dict[str, Any] = {"window": used.text, "window_kind": used.kind,
                                    "schedule": self.schedule.to_dict(),
                                    "window_start_ns": self.open_ns, "window_end_ns": self.close_ns,
                                    "window_ended_with_program": self._ended_open,
                                    "step_boundaries_seen": self.boundaries,
                                    "gpu": self.gpu.status, **self.auto.settings(),
                                    "frameworks": frameworks_loaded(),
                                    "flight_recorder": dict(self.comms.status)}
        # the overhead figures from the window's close on (later with the steps after it)
        no_steps = NO_STEPS if used.kind not in ("steps", "time") else None
        overhead = (self._step_times.report(*self._measured, no_steps=no_steps)
                    if self._measured is not None else {})
        if overhead:
            overhead.update(self.host.pace_figures())
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


__all__ = ["ENV_VAR", "CaptureConfig", "HostLike", "Session", "clip", "concat", "threads_cpu_s"]
