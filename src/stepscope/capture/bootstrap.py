"""What runs inside the profiled process: window, host capture, flush on exit or crash.

The launcher (or ``stepscope.record``) hands a ``CaptureConfig`` over (as JSON in the
``STEPSCOPE_CAPTURE`` environment variable for a launched program). ``Session`` then:

- runs ``HostCapture`` and counts step boundaries (its step listener: optimizer hooks or
  ``stepscope.step()``), asking ``Schedule.action`` at each boundary whether the window is open;
- outside the window, host data is drained and dropped (bounded memory); inside it, it is written
  to this process's staging partition every ``flush_every_s`` and when the window closes, so a
  process killed later (even by ``os._exit`` or SIGKILL, which cannot be hooked) keeps what was
  flushed;
- caps the rows it writes (``max_rows``) and says so in a diagnostic;
- flushes on normal exit (``atexit``), on an uncaught exception (``sys.excepthook``, chained),
  Ctrl-C (KeyboardInterrupt takes the exception path) and SIGTERM (a handler that flushes, restores
  the default action and re-sends the signal, so the exit status is unchanged).

Process-global state: the active sessions list (``_ACTIVE``) is the one module-level mutable
value. It is inherent: ``stepscope.step()`` must find the capture that the injected bootstrap
started in this process, without the user passing anything around.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Protocol

from stepscope.capture.gpu import GpuLike, make_gpu
from stepscope.capture.schedule import Action, Schedule
from stepscope.errors import CaptureError
from stepscope.store.manifest import Diagnostic

ENV_VAR = "STEPSCOPE_CAPTURE"
TIMED_TABLES = ("samples", "stacks", "input_waits", "steps")


@dataclass(frozen=True)
class CaptureConfig:
    staging: str
    schedule: Schedule = field(default_factory=Schedule)
    sample_hz: float = 10.0
    stack_hz: float = 20.0
    stacks: bool = True
    nvml: bool = True
    hooks: bool = True
    max_rows: int = 2_000_000
    flush_every_s: float = 5.0
    pkg_root: str = ""  # folder holding the stepscope package (for the injected sitecustomize)
    gpu: str = "auto"  # GPU backend: auto | cupti | cupti-python | torch | none (capture.gpu)
    gpu_api: str = "filtered"  # runtime/driver calls: none | filtered | all

    def to_json(self) -> str:
        d = asdict(self)
        d["schedule"] = self.schedule.to_dict()
        return json.dumps(d)

    @staticmethod
    def from_json(text: str) -> CaptureConfig:
        d = json.loads(text)
        d["schedule"] = Schedule.from_dict(d.get("schedule") or {})
        known = CaptureConfig.__dataclass_fields__
        return CaptureConfig(**{k: v for k, v in d.items() if k in known})


class HostLike(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def mark_step(self, ts_ns: int | None = None) -> None: ...
    def add_step_listener(self, fn: Callable[[int], None]) -> None: ...
    def drain(self) -> dict[str, dict[str, list[Any]]]: ...
    def settings_for_manifest(self) -> dict[str, Any]: ...
    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]: ...


def default_host(config: CaptureConfig, rank: int, clock: Callable[[], int]) -> HostLike:
    from stepscope.capture.host import HostCapture, HostSettings

    settings = HostSettings(sample_hz=config.sample_hz,
                            stack_hz=config.stack_hz if config.stacks else 0.0,
                            nvml=config.nvml, hooks=config.hooks)
    return HostCapture(settings, rank=rank, clock=clock)


Tables = dict[str, dict[str, list[Any]]]


def clip(tables: Mapping[str, Mapping[str, list[Any]]], lo: int, hi: int | None) -> Tables:
    """Keep rows whose time (the midpoint for ranges) lies in ``[lo, hi]``."""
    out: Tables = {}
    for name, cols in tables.items():
        ts = cols.get("ts_ns")
        if name not in TIMED_TABLES or ts is None:
            out[name] = {k: list(v) for k, v in cols.items()}
            continue
        durs = cols.get("dur_ns") or [0] * len(ts)
        keep = [i for i, (t, d) in enumerate(zip(ts, durs))
                if t is not None and lo <= t + (d or 0) // 2 and (hi is None or t + (d or 0) // 2 <= hi)]
        out[name] = {k: [v[i] for i in keep] for k, v in cols.items()}
    return out


def clip_gpu(tables: Mapping[str, Any], lo: int, hi: int | None) -> dict[str, Any]:
    """``clip`` for the GPU backend's tables (numpy or list columns, or Arrow tables): drops
    what the warm-up step before the window recorded."""
    import numpy as np

    out: dict[str, Any] = {}
    for name, cols in tables.items():
        if hasattr(cols, "num_rows"):
            if "ts_ns" not in cols.column_names or not cols.num_rows:
                out[name] = cols
                continue
            ts = np.asarray(cols.column("ts_ns").fill_null(0), dtype=np.int64)
            dur = (np.asarray(cols.column("dur_ns").fill_null(0), dtype=np.int64)
                   if "dur_ns" in cols.column_names else np.zeros_like(ts))
        elif "ts_ns" in cols and len(cols["ts_ns"]):
            ts = np.asarray(cols["ts_ns"], dtype=np.int64)
            dur = np.asarray(cols.get("dur_ns", np.zeros_like(ts)), dtype=np.int64)
        else:
            out[name] = cols
            continue
        mid = ts + dur // 2
        keep = (mid >= lo) & (True if hi is None else mid <= hi)
        if keep.all():
            out[name] = cols
        elif hasattr(cols, "num_rows"):
            import pyarrow as pa

            out[name] = cols.filter(pa.array(keep))
        else:
            idx = np.flatnonzero(keep)
            out[name] = {k: (v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx.tolist()])
                         for k, v in cols.items()}
    return out


def concat(chunks: list[Tables]) -> Tables:
    """Concatenate drained column dicts table by table (missing columns become None)."""
    merged: Tables = {}
    for c in chunks:
        for name, cols in c.items():
            dest = merged.setdefault(name, {})
            n_before = len(next(iter(dest.values()), []))
            for k, v in cols.items():
                dest.setdefault(k, [None] * n_before).extend(v)
            n_after = n_before + len(next(iter(cols.values()), []))
            for v in dest.values():
                v.extend([None] * (n_after - len(v)))
    return merged


def _rows(tables: Mapping[str, Any]) -> int:
    return sum(int(c.num_rows) if hasattr(c, "num_rows") else len(next(iter(c.values()), []))
               for c in tables.values())


def threads_cpu_s(match: str = "stepscope") -> float | None:
    """CPU time (user+system) of this process's threads whose name contains ``match`` (Linux)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return None
    total, found = 0, False
    for t in threading.enumerate():
        if match not in t.name.lower() or t.native_id is None:
            continue
        try:
            stat = Path(f"/proc/self/task/{t.native_id}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
        found = True
    return total / tick if found else None


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
        self.partition = StagingPartition(Path(config.staging), self.pid, self.start_ns)
        self._host_factory = host_factory
        self._rank = rank or 0
        self._lock = threading.RLock()
        self.host: HostLike | None = None
        self._gpu_factory = gpu_factory or make_gpu
        self.gpu: GpuLike | None = None
        self._gpu_ready: threading.Event | None = None
        self._gpu_made: list[Any] = []  # [GpuLike | None] or [exception], set by _prepare_gpu
        self._gpu_tried = False
        self._gpu_status: dict[str, Any] = {"backend": config.gpu, "state": "not started"}
        self._running = False
        self.boundaries = 0
        self.open_ns: int | None = None
        self.close_ns: int | None = None
        self._last_boundary: int | None = None
        self._last_flush = 0
        self._pre: deque[Tables] = deque(maxlen=max(2, int(10.0 / max(config.flush_every_s, 0.1)) + 2))
        self._before: list[int] = [0, 0]  # sum of step ns, count (steps before the window)
        self._inside: list[int] = [0, 0]
        self._cpu_open: float | None = None
        self._overhead: dict[str, Any] = {}
        self._diags: list[Diagnostic] = []
        self.rows = 0
        self.ended = "running"
        self.finished = False
        self._timers: list[threading.Timer] = []
        self._closed = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def begin(self) -> Session:
        with self._lock:
            self._write_meta()
            self._prepare_gpu()
            if self.schedule.timed:
                delay = self.schedule.delay_s or 0.0
                duration = self.schedule.duration_s or 0.0
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
        try:
            host = self._host_factory(self.config, self._rank, self._clock)
            host.add_step_listener(self._on_boundary)
            host.start()
        except Exception as exc:  # capture must never break the program
            self._diags.append(Diagnostic("error", "host_capture_failed",
                                          f"host capture could not start: {exc!r}"))
            return
        self.host = host
        self._running = True

    def _stop_host(self) -> Tables:
        if self.host is None or not self._running:
            return {}
        self._running = False
        try:
            self.host.stop()
            return self.host.drain()
        except Exception as exc:
            self._diags.append(Diagnostic("error", "host_capture_failed",
                                          f"host capture failed to stop: {exc!r}"))
            return {}

    def _drain(self) -> Tables:
        if self.host is None or not self._running:
            return {}
        try:
            return self.host.drain()
        except Exception as exc:
            self._diags.append(Diagnostic("error", "host_capture_failed", f"drain failed: {exc!r}"))
            return {}

    # -- steps and window --------------------------------------------------------------------
    def step(self) -> None:
        """A manual step boundary (``stepscope.step()``/``record().step()``)."""
        if self.host is not None and self._running:
            self.host.mark_step()  # calls _on_boundary through the listener
        else:
            self._on_boundary(-1)

    def _on_boundary(self, _host_index: int) -> None:
        if os.getpid() != self.pid or self.finished:
            return
        with self._lock:
            now = self._clock()
            k = self.boundaries
            self.boundaries += 1
            if self._last_boundary is not None:
                acc = self._inside if self.open_ns is not None and self.close_ns is None else self._before
                if self.close_ns is None:
                    acc[0] += now - self._last_boundary
                    acc[1] += 1
            self._last_boundary = now
            if self.schedule.timed or self.close_ns is not None:
                return
            elapsed = 0.0 if self.open_ns is None else (now - self.open_ns) / 1e9
            action = self.schedule.action(k, elapsed)
            if self.open_ns is None and k + 1 == self.schedule.first:
                self._start_gpu()  # one warm-up step: its start cost stays out of the window
            if action is Action.CAPTURE and self.open_ns is None:
                self._open(now)
            elif action is Action.DONE:
                if self.open_ns is None:  # window passed without opening (cannot happen by design)
                    self.open_ns = now
                self._close()
            elif self._due():
                self._flush_or_keep()

    def _due(self) -> bool:
        return self._clock() - self._last_flush >= self.config.flush_every_s * 1e9

    def _open(self, now: int) -> None:
        # drop what was sampled before the window, but keep the untimed tables (threads, processes)
        merged = concat([*self._pre, self._drain()])
        self._pre.clear()
        self._write({name: cols for name, cols in merged.items() if name not in TIMED_TABLES})
        self._start_gpu()
        self.open_ns = now
        self._last_flush = now
        self._cpu_open = threads_cpu_s()
        t = threading.Thread(target=self._flusher, name="stepscope-flush", daemon=True)
        t.start()

    def _flusher(self) -> None:
        """Flush every ``flush_every_s`` while the window is open, whether or not steps come
        (timed windows, long or stuck steps): bounded memory, and a crash keeps what was written."""
        period = max(self.config.flush_every_s, 0.1)
        while not self._closed.wait(period / 2):
            with self._lock:
                if self.finished or self.close_ns is not None:
                    return
                if self._due():
                    self._flush_or_keep()

    # -- GPU ---------------------------------------------------------------------------------
    def _prepare_gpu(self) -> None:
        """Make the GPU backend (imports, libraries, the shim) off the training thread, so that
        opening the window costs only the CUPTI switches."""
        if self.config.gpu == "none":
            return
        ready = threading.Event()

        def make() -> None:
            try:
                self._gpu_made.append(self._gpu_factory(self.config.gpu, self.config.gpu_api))
            except BaseException as exc:
                self._gpu_made.append(exc)
            finally:
                ready.set()

        self._gpu_ready = ready
        threading.Thread(target=make, name="stepscope-gpu-prepare", daemon=True).start()

    def _start_gpu(self) -> None:
        if self._gpu_tried:
            return
        self._gpu_tried = True
        try:
            if self._gpu_ready is not None:
                self._gpu_ready.wait(120)
                made = self._gpu_made[0] if self._gpu_made else None
                if isinstance(made, BaseException):
                    raise made
                gpu = made
            else:
                gpu = self._gpu_factory(self.config.gpu, self.config.gpu_api)
            if gpu is None:
                self._gpu_status = {"backend": "none", "state": "off"}
                return
            gpu.start()
        except Exception as exc:  # never break the program: say why and go on host-only
            msg = str(exc) if isinstance(exc, CaptureError) else repr(exc)
            self._gpu_status = {"backend": self.config.gpu, "state": "unavailable", "reason": msg}
            self._diags.append(Diagnostic("warning", "gpu_not_captured",
                                          f"GPU activity not captured ({self.config.gpu}): {msg}; "
                                          "host-side data only"))
            return
        self.gpu = gpu
        self._gpu_status = {"backend": gpu.backend, "state": "running"}

    def _gpu_data(self, final: bool) -> Tables:
        gpu = self.gpu
        if gpu is None:
            return {}
        try:
            data = gpu.stop() if final else gpu.flush()
        except Exception as exc:
            self._diags.append(Diagnostic("error", "gpu_capture_failed",
                                          f"GPU capture failed: {exc!r}"))
            data = {}
        if final:
            self.gpu = None
            self._gpu_status = {"state": "stopped", **self._gpu_settings(gpu)}
            self._diags.extend(gpu.diagnostics)
        return data

    @staticmethod
    def _gpu_settings(gpu: GpuLike) -> dict[str, Any]:
        try:
            return gpu.settings_for_manifest()
        except Exception as exc:
            return {"backend": gpu.backend, "settings_error": repr(exc)}

    def _open_timed(self) -> None:
        with self._lock:
            if self.finished or self.close_ns is not None:
                return
            self._start_host()
            self._open(self._clock())

    def _flush_or_keep(self) -> None:
        self._last_flush = self._clock()
        data = self._drain()
        if self.open_ns is None:
            self._pre.append(data)  # bounded: only the last ~10 s are kept
        else:
            self._write(clip(data, self.open_ns, self.close_ns))
            self._write(clip_gpu(self._gpu_data(final=False), self.open_ns, self.close_ns))

    def _write(self, data: Tables) -> None:
        n = _rows(data)
        if not n:
            return
        if self.rows + n > self.config.max_rows:
            self._diags.append(Diagnostic(
                "warning", "row_cap",
                f"stopped capturing after {self.rows} rows (cap {self.config.max_rows}): "
                "use a shorter window (--steps A-B)"))
            if self.close_ns is None:
                self.close_ns = self._clock()
                self._gpu_data(final=True)
                self._stop_host()
            return
        try:
            self.rows += self.partition.write_chunk(data)
        except Exception as exc:
            self._diags.append(Diagnostic("error", "flush_failed", f"writing the partition failed: {exc!r}"))

    def _close(self) -> None:
        with self._lock:
            if self.close_ns is not None or self.finished:
                return
            cpu = threads_cpu_s()
            now = self._clock()
            self.close_ns = now
            self._closed.set()
            self._measure(cpu, now)
            gpu = self._gpu_data(final=True)
            data = self._stop_host()
            if self.open_ns is not None:
                self._write(clip(data, self.open_ns, now))
                self._write(clip_gpu(gpu, self.open_ns, now))
            self._write_meta()

    def _measure(self, cpu_close: float | None, now: int) -> None:
        o: dict[str, Any] = {}
        if self.open_ns is not None:
            wall = (now - self.open_ns) / 1e9
            o["window_wall_s"] = round(wall, 6)
            if cpu_close is not None and self._cpu_open is not None and wall >= 1.0:
                # /proc counts in clock ticks (10 ms): shorter windows would be noise
                cpu = cpu_close - self._cpu_open
                o["sampler_threads_cpu_s"] = round(cpu, 6)
                o["sampler_threads_cpu_share"] = round(cpu / wall, 6)
        if self._before[1]:
            o["mean_step_ms_before_window"] = round(self._before[0] / self._before[1] / 1e6, 6)
            o["steps_before_window"] = self._before[1]
        if self._inside[1]:
            o["mean_step_ms_in_window"] = round(self._inside[0] / self._inside[1] / 1e6, 6)
            o["steps_in_window"] = self._inside[1]
        if self._before[1] and self._inside[1] and self._before[0]:
            o["step_time_ratio_in_window_vs_before"] = round(
                (self._inside[0] / self._inside[1]) / (self._before[0] / self._before[1]), 6)
            o["step_time_ratio_note"] = (
                "steps before the window are warm-up steps (host hooks active, samplers running): "
                "a rough indicator of capture cost, not a benchmark")
        o["sampler_threads_cpu_note"] = (
            "CPU time of threads named 'stepscope*' during the window, as a share of one core")
        self._overhead = o

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
                self.ended = "exit"
            if self.close_ns is None and self.open_ns is not None:
                self._close()
            elif self.open_ns is None:
                self._keep_tail()
            self.finished = True
            self._write_meta()

    def _keep_tail(self) -> None:
        """The window never opened: keep the last ``max_seconds`` of host data."""
        now = self._clock()
        self._gpu_data(final=True)  # started for a warm-up step of a window that never came
        data = self._stop_host()
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
        self._write(clip(merged, self.open_ns, now))

    def _write_meta(self) -> None:
        from dataclasses import replace

        settings: dict[str, Any] = {"window": self.schedule.describe(),
                                    "schedule": self.schedule.to_dict(),
                                    "window_start_ns": self.open_ns, "window_end_ns": self.close_ns,
                                    "step_boundaries_seen": self.boundaries,
                                    "gpu": dict(self._gpu_status)}
        diags = list(self._diags)
        if self.host is not None:
            try:
                settings["host"] = self.host.settings_for_manifest()
                diags.extend(self.host.diagnostics)
            except Exception:
                pass
        meta = replace(self._meta, ended=self.ended, settings=settings, overhead=self._overhead,
                       diagnostics=tuple(diags))
        try:
            self.partition.write_meta(meta)
        except OSError:
            pass


# -- process integration ---------------------------------------------------------------------

_ACTIVE: list[Session] = []  # see the module doc: the one process-global value


def active() -> Session | None:
    return _ACTIVE[-1] if _ACTIVE else None


def push(session: Session) -> None:
    _ACTIVE.append(session)


def pop(session: Session) -> None:
    if session in _ACTIVE:
        _ACTIVE.remove(session)


def mark_step() -> None:
    """``stepscope.step()``: a step boundary for the active capture; a no-op without one."""
    s = active()
    if s is not None:
        s.step()


def install_process_hooks(session: Session) -> None:
    """atexit, sys.excepthook (chained) and SIGTERM (flush, then die by the signal as before)."""
    atexit.register(session.finish)
    previous = sys.excepthook

    def excepthook(et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
        try:
            session.finish(f"exception: {et.__name__}")
        finally:
            previous(et, ev, tb)

    sys.excepthook = excepthook

    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                def on_term(signum: int, frame: FrameType | None) -> None:
                    try:
                        session.finish(f"signal: {signal.Signals(signum).name}")
                    finally:
                        signal.signal(signum, signal.SIG_DFL)
                        os.kill(os.getpid(), signum)

                signal.signal(signal.SIGTERM, on_term)
        except (ValueError, OSError):
            pass


def start_from_env(text: str, argv: tuple[str, ...] = ()) -> Session | None:
    """Entry point of the injected ``sitecustomize``."""
    if "--multiprocessing-fork" in argv:
        return None  # a spawned multiprocessing worker: its parent is the one captured
    config = CaptureConfig.from_json(text)
    session = Session(config, argv=argv)
    push(session)
    install_process_hooks(session)
    return session.begin()


__all__ = ["CaptureConfig", "concat", "ENV_VAR", "HostLike", "Session", "active", "clip", "install_process_hooks",
           "mark_step", "pop", "push", "start_from_env", "threads_cpu_s"]
