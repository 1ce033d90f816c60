"""Host-side capture inside the profiled process: samplers, stack sampler, DataLoader/step hooks.

``HostCapture`` owns the metric samplers (psutil and NVML at ``sample_hz``: by default in a
process of their own, ``samplers.remote``, so that they never take the GIL from the training
thread; in a daemon thread when that process cannot start or ``sampler_process`` is off), a
daemon thread sampling Python stacks at ``stack_hz`` (``capture.periodic``) and the framework
hooks of ``capture.hooks``. Everything it sees goes into bounded per-table buffers of
row tuples (``capture.buffers``) that ``drain()`` hands to the writer as column dicts (the
``schema`` columns of each table). What the DataLoader hooks see is kept by
``capture.loader_records``; the samplers are in ``capture.samplers``.

Step boundaries (where each step begins, from the optimizer, JAX, Keras and NVTX hooks or
``stepscope.step()``) are kept by ``capture.step_boundaries``.

Nothing here prints; nothing needs torch, psutil or NVML: what is missing is a diagnostic.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from stepscope.capture.buffers import TableBuffers
from stepscope.capture.gpu_flow import GpuFlow
from stepscope.capture.hooks.install import WRAPPER_FILES, TorchHooks
from stepscope.capture.hooks.nvtx_steps import NVTX_STEP
from stepscope.capture.host_manifest import manifest_settings
from stepscope.capture.loader_records import LoaderRecords
from stepscope.capture.periodic import run_periodic
from stepscope.capture.samplers.metrics import open_samplers
from stepscope.capture.samplers.remote import SamplerProcess
from stepscope.capture.stacks import StackSampler
from stepscope.capture.step_boundaries import StepBoundaries
from stepscope.capture.topology import process_cpus
from stepscope.capture.util_pace import AfterWindow, UtilPace
from stepscope.settings import Settings
from stepscope.store.manifest import Diagnostic

HOST_TABLES = ("samples", "stacks", "input_waits", "steps", "threads", "processes")
_JOIN_TIMEOUT_S = 2.0


def _sampler_process_default() -> bool:
    """``STEPSCOPE_SAMPLER_PROCESS=0`` samples in a thread of the profiled process instead (the
    knob the overhead benchmark turns)."""
    return Settings.from_env().sampler_process


@dataclass(frozen=True)
class HostSettings:
    sample_hz: float = 10.0  # psutil + NVML sampling rate; 0 = off
    stack_hz: float = 20.0  # Python stack sampler of the training thread(s); 0 = off
    nvml: bool = True  # sample GPUs via nvidia-ml-py when importable and NVML works
    hooks: bool = True  # DataLoader/optimizer (PyTorch), StepTraceAnnotation (JAX), Keras batches
    max_rows: int = 250_000  # per table between drains; beyond it the oldest rows are dropped
    nvtx_step: str = ""  # --nvtx NAME: NVTX ranges named NAME are the steps (no other hook counts)
    # psutil/NVML in a separate process (see the module doc); False: in a thread of this one
    sampler_process: bool = field(default_factory=_sampler_process_default)


class HostCapture:
    """See the module docstring. ``nvml_module``/``import_module``/``env``/``sys_root``/``cpus``
    (a process's CPU affinity as a cpulist) are for tests."""

    def __init__(self, settings: HostSettings, *, rank: int = 0,
                 clock: Callable[[], int] = time.time_ns, nvml_module: Any = None,
                 import_module: Callable[[str], ModuleType] = importlib.import_module,
                 env: Mapping[str, str] | None = None, sys_root: str = "/",
                 cpus: Callable[[int], str | None] = process_cpus) -> None:
        self.settings = settings
        self._cpus = cpus
        self.rank = rank
        self._clock = clock
        self._nvml_module = nvml_module
        self._import = import_module
        self._env: Mapping[str, str] = os.environ if env is None else env
        self._sys_root = sys_root
        self._lock = threading.RLock()  # re-entrant: stop()/drain() may run in a signal handler
        self._buffers = TableBuffers(HOST_TABLES, settings.max_rows)
        self._diags: dict[str, Diagnostic] = {}
        self._stop_event = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running = False
        self._loaders = LoaderRecords(
            push=self._buffers.push, note_thread=lambda: self._note_thread(threading.current_thread()),
            note_process=self._note_process, diag=self._diag)
        self._steps = StepBoundaries(
            clock=clock, push=self._buffers.push, diag=self._diag,
            note_thread=lambda: self._note_thread(threading.current_thread()),
            hook=NVTX_STEP if settings.nvtx_step else None)
        self._hooks = TorchHooks(clock=clock, on_wait=self._loaders.on_wait,
                                 on_iterator=self._on_iterator,
                                 on_optimizer_step=self._steps.on_optimizer_step,
                                 on_error=self._diag, on_step_marker=self._steps.on_step_marker,
                                 nvtx_step=settings.nvtx_step, on_compile=self._steps.on_compile)
        # threads whose stacks are sampled: ident -> native id
        self._sampled: dict[int, int] = {}
        self._seen_threads: set[tuple[int, int]] = set()
        self._seen_pids: set[int] = set()
        # sampler state, for the manifest
        self._status: dict[str, Any] = {"metrics": {}, "stacks": {}}
        self._nvml_info: dict[str, Any] = {}  # OpenSamplers.nvml_info() of wherever NVML ran
        self._psutil_unavailable: dict[str, str] = {}
        self._remote: SamplerProcess | None = None
        self.gpu_flow = GpuFlow()  # when the GPU's work started to flow (the default window)
        self.util_pace = UtilPace()  # the GPU's utilisation in the window and after it
        self._after: AfterWindow | None = None  # the samplers kept after the window
        self._stopped_ns: int | None = None  # when the samplers' rows stopped going to the run
        if hasattr(os, "register_at_fork"):  # a forked child (DataLoader worker) has no samplers
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _reset_in_child(ref))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
            self._stopped_ns = None
            self._stop_event = threading.Event()
            main = threading.main_thread()
            self._note_thread(main)
            self._note_process(os.getpid(), _process_name())
            if self.settings.hooks:
                self._hooks.install()
            stop = self._stop_event
            if self.settings.sample_hz > 0:
                if not self._start_remote():
                    self._spawn("stepscope-host-sampler", lambda: self._metrics_loop(stop))
            else:
                self._status["metrics"] = {"ran": False, "why": "sample_hz = 0"}
            if self.settings.stack_hz > 0:
                self._spawn("stepscope-stack-sampler", lambda: self._stacks_loop(stop))
            else:
                self._status["stacks"] = {"ran": False, "why": "stack_hz = 0"}

    def _start_remote(self) -> bool:
        """The samplers' own process; False: sample in a thread here instead."""
        injected = self._nvml_module is not None or self._import is not importlib.import_module
        if not self.settings.sampler_process or injected:  # tests' fakes live in this process
            return False
        remote = SamplerProcess(hz=self.settings.sample_hz, nvml=self.settings.nvml,
                                follow_children=not self.settings.hooks, env=self._env,
                                sys_root=self._sys_root,
                                push=self._push_samples,
                                diag=lambda level, code, msg: self._diag(code, msg, level))
        try:
            remote.start()
        except OSError as e:
            self._diag("sampler_process_failed", f"the sampler process could not start ({e}): "
                       "sampling in a thread of the profiled process instead", level="info")
            return False
        self._remote = remote
        self._status["metrics"] = {"ran": True, "hz": self.settings.sample_hz,
                                   "where": "process", "process": remote.pid}
        return True

    def _on_iterator(self, loader: Any, it: Any) -> None:
        self._loaders.on_iterator(loader, it)
        remote = self._remote
        if remote is not None and self.settings.hooks:
            remote.set_workers(self._loaders.worker_pids())

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self, keep_hooks: bool = False) -> None:
        """Stop the samplers and take the hooks out; ``keep_hooks``: leave the hooks in (step
        boundaries still reach the listeners) until ``release_hooks``."""
        with self._lock:
            if not self._running:
                return
            self._note_native_threads()
            self._running = False
            self._stopped_ns = self._clock()
            self._stop_event.set()
            if not keep_hooks:
                self._hooks.uninstall()
            threads, self._threads = self._threads, []
            remote = self._remote
        if remote is not None and keep_hooks and self.util_pace.after_s > 0:
            self._keep_sampling(remote)  # the program goes on: its pace after the window
        elif remote is not None:
            self._stop_remote(remote)
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join(_JOIN_TIMEOUT_S)
                if thread.is_alive():
                    self._diag("sampler_stuck", f"{thread.name} did not stop within {_JOIN_TIMEOUT_S} s")

    def _stop_remote(self, remote: SamplerProcess) -> None:
        remote.stop(_JOIN_TIMEOUT_S)
        self._status["metrics"].update(remote.status)
        self._nvml_info = remote.nvml_info
        self._psutil_unavailable = remote.psutil_unavailable

    def _keep_sampling(self, remote: SamplerProcess) -> None:
        """Leave the sampler process running for ``util_pace.after_s`` after the window, its
        later rows going to ``util_pace`` only (``_push_samples``); then, or at
        ``end_after_window``, stop it."""
        def stop() -> None:
            with self._lock:
                mine = self._remote is remote
                if mine:
                    self._remote = None
            if mine:
                self._stop_remote(remote)

        self._after = AfterWindow(remote.pump, stop, self.util_pace.after_s)

    def end_after_window(self) -> None:
        """Stop the sampling after the window now (the process is ending), and wait for it."""
        if self._after is not None:
            self._after.end(_JOIN_TIMEOUT_S + 1.0)

    def release_hooks(self) -> None:
        """Take out the hooks a ``stop(keep_hooks=True)`` left in (a no-op while running)."""
        with self._lock:
            if not self._running:
                self._hooks.uninstall()

    # -- steps (capture.step_boundaries) ---------------------------------------------------
    def mark_step(self, ts_ns: int | None = None) -> None:
        self._steps.mark(ts_ns)

    def add_step_listener(self, fn: Callable[[int], None]) -> None:
        self._steps.add_listener(fn)

    @property
    def last_compile_ns(self) -> int | None:
        """When the program's framework (JAX) last reported a compilation ended (None: never):
        the default window's warm-up waits for it (``capture.auto_window``)."""
        return self._steps.last_compile_ns

    def _worker_pids(self) -> frozenset[int] | None:
        if not self.settings.hooks:
            return None  # fall back to all child processes
        return self._loaders.worker_pids()

    # -- threads/processes/buffers -----------------------------------------------------------
    def _note_thread(self, thread: threading.Thread) -> int:
        ident, native = thread.ident, thread.native_id
        if ident is None or native is None:
            return threading.get_native_id()
        if ident not in self._sampled:
            with self._lock:
                self._sampled[ident] = native
                if (os.getpid(), native) not in self._seen_threads:
                    self._seen_threads.add((os.getpid(), native))
                    self._push("threads", (os.getpid(), native, thread.name))
        return native

    def _note_native_threads(self, proc: str = "/proc") -> None:
        """Name the process's threads that Python does not know (C++ threads such as torch's
        ``pt_autograd_0``, whose CUDA calls are in the window), from ``/proc/self/task/*/comm``.
        Caller holds the lock."""
        pid = os.getpid()
        try:
            tids = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            return
        for entry in tids:
            if not entry.isdigit() or (pid, int(entry)) in self._seen_threads:
                continue
            try:
                with open(f"{proc}/{pid}/task/{entry}/comm", encoding="utf-8",
                          errors="replace") as f:
                    name = f.read().strip()
            except OSError:
                continue
            self._seen_threads.add((pid, int(entry)))
            self._push("threads", (pid, int(entry), name))

    def _note_process(self, pid: int, name: str) -> None:
        with self._lock:
            if pid not in self._seen_pids:
                self._seen_pids.add(pid)
                self._push("processes", (pid, name, socket.gethostname(), self._affinity(pid)))

    def _affinity(self, pid: int) -> str | None:
        """``processes.cpu_affinity``: the CPUs ``pid`` may run on when it is first seen (a
        binding made later by the program itself is not seen; ``torchrun --numa-binding``,
        ``numactl`` and ``taskset`` bind before the interpreter starts)."""
        return self._cpus(0 if pid == os.getpid() else pid)

    def _push_samples(self, rows: list[Any]) -> None:
        self.util_pace.note(rows)
        cut = self._stopped_ns
        # sampled after a stop that kept the samplers for the pace (``_keep_sampling``): the
        # pace only; a plain stop keeps a sampler thread's last tick, as its status counts it
        if cut is not None and self._after is not None and not self._running:
            rows = [r for r in rows if int(r[0]) < cut]
            if not rows:
                return
        self.gpu_flow.note(rows)
        self._buffers.push_many("samples", rows)

    def _push(self, table: str, row: tuple[Any, ...]) -> None:
        self._buffers.push(table, row)

    def drain(self) -> dict[str, dict[str, list[Any]]]:
        if self._remote is not None:
            self._remote.pump()
        return self._buffers.drain(self.rank)

    def _diag(self, code: str, message: str, level: str = "warning") -> None:
        with self._lock:
            old = self._diags.get(code)
            count = old.count + 1 if old is not None else 1
            self._diags[code] = Diagnostic(level=level, code=code, message=message, count=count)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        with self._lock:
            out = list(self._diags.values())
        return (*out, *self._buffers.diagnostics())

    # -- sampler threads ---------------------------------------------------------------------
    def _metrics_loop(self, stop: threading.Event) -> None:
        """The fallback: psutil and NVML in a thread of the profiled process."""
        status: dict[str, Any] = {"ran": True, "hz": self.settings.sample_hz, "where": "thread"}
        self._status["metrics"] = status
        opened = open_samplers(pid=os.getpid(), nvml=self.settings.nvml,
                               worker_pids=self._worker_pids, import_module=self._import,
                               nvml_module=self._nvml_module, env=self._env,
                               sys_root=self._sys_root,
                               diag=lambda level, code, msg: self._diag(code, msg, level))
        status.update(opened.status)
        self._psutil_unavailable = opened.psutil_unavailable
        self._nvml_info = opened.nvml_info()

        def tick() -> None:
            self._push_samples(opened.sample(self._clock()))

        try:
            run_periodic(stop, self.settings.sample_hz, tick, status, self._sampler_error)
        finally:
            self._nvml_info = opened.nvml_info()
            opened.close()

    def _stacks_loop(self, stop: threading.Event) -> None:
        status: dict[str, Any] = {"ran": True, "hz": self.settings.stack_hz}
        self._status["stacks"] = status
        sampler = StackSampler(skip_files=WRAPPER_FILES)

        def tick() -> None:
            ts = self._clock()
            pid = os.getpid()
            rows = [(ts, pid, tid, frames) for tid, frames in sampler.sample(dict(self._sampled))]
            self._buffers.push_many("stacks", rows)

        run_periodic(stop, self.settings.stack_hz, tick, status, self._sampler_error)

    def _sampler_error(self, e: Exception) -> None:
        self._diag("sampler_error", f"{threading.current_thread().name}: {type(e).__name__}: {e}")

    # -- manifest ----------------------------------------------------------------------------
    def settings_for_manifest(self) -> dict[str, Any]:
        return manifest_settings(
            loaders=self._loaders.settings(), nvml=self._nvml_info,
            metrics=self._status["metrics"], stacks=self._status["stacks"],
            psutil_unavailable=self._psutil_unavailable,
            hooks=dict(self._hooks.installed) if self.settings.hooks else "off",
            steps=self._steps.manifest(), sys_root=self._sys_root)


def _reset_in_child(ref: Callable[[], HostCapture | None]) -> None:
    """The lock may have been held by a sampler thread at fork time: the child gets a fresh one."""
    cap = ref()
    if cap is not None:
        cap._lock = threading.RLock()
        cap._buffers.after_fork()
        cap._loaders.after_fork()
        cap._steps.after_fork()
        cap._threads = []


def _process_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
