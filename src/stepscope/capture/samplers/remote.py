"""The metric samplers (psutil, NVML) in a process of their own, beside the profiled one.

Why a process: psutil reads ``/proc`` files and NVML is called through ctypes, and each of those
calls gives the GIL up and takes it back. Against a thread that keeps the GIL busy (a training
loop launching kernels from Python) every take-back waits for the interpreter's switch interval
and then forces that thread off the GIL: one psutil tick measured 1.3 ms alone but 164 ms of wall
time and ~30 forced switches next to a busy thread, a 2-4% slower loop on a 2-core machine at
10 Hz (docs/benchmarks.md). A separate process never touches the profiled process's GIL.

Protocol. The parent (``SamplerProcess``) starts ``python -I`` (no ``sitecustomize`` from
``PYTHONPATH``, so the capture bootstrap does not run in it) with a JSON configuration; the child
(``child_main``) writes one JSON object per line to its stdout, a pipe the parent reads without
blocking whenever the host capture is drained:

- ``{"status": ..., "nvml": ..., "psutil_unavailable": ...}`` once the samplers are open;
- ``{"rows": [[ts_ns, device, metric, value, unit], ...]}`` every tick;
- ``{"diag": [level, code, message]}`` when something cannot be sampled;
- ``{"final": ..., ...}`` (the tick counts) when it stops.

The parent writes commands to the child's stdin: ``W pid pid…`` (the DataLoader worker processes
to follow) and ``Q`` (stop). The child also stops when its parent is gone (``os.getppid()``
changes), ignores SIGINT (Ctrl-C reaches the whole process group; the parent decides when
sampling stops) and, when the parent stops reading, blocks on the full pipe (no unbounded memory).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from stepscope.capture.periodic import run_periodic
from stepscope.capture.samplers import Row
from stepscope.capture.samplers.metrics import Diag, open_samplers

_CHILD = """\
import json, sys
cfg = json.loads(sys.argv[1])
sys.path[:0] = cfg["path"]
try:
    from stepscope.capture.samplers.remote import child_main
except BaseException as e:
    sys.stdout.write(json.dumps({"diag": ["warning", "sampler_process_failed",
                                          "the sampler process could not start: %r" % (e,)]}) + "\\n")
    sys.exit(1)
sys.exit(child_main(cfg))
"""
_PIPE_BYTES = 1 << 20  # ~1 minute of ticks at 10 Hz on a 64-core machine
_DROP_ENV = ("STEPSCOPE_CAPTURE",)


class SamplerProcess:
    """Parent side. ``start()`` raises OSError when the process cannot be started; after that
    nothing raises: a child that fails reports a diagnostic or just stops sending rows."""

    def __init__(self, *, hz: float, nvml: bool, follow_children: bool, env: Mapping[str, str],
                 sys_root: str, push: Callable[[list[Row]], None], diag: Diag) -> None:
        self._hz, self._nvml, self._follow = hz, nvml, follow_children
        self._env, self._sys_root = env, sys_root
        self._push, self._diag = push, diag
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0
        self._tail = b""
        self._lock = threading.Lock()
        self._workers: frozenset[int] = frozenset()
        self.status: dict[str, Any] = {}  # the child's sampler states and tick counts
        self.nvml_info: dict[str, Any] = {}
        self.psutil_unavailable: dict[str, str] = {}
        self.pid: int | None = None
        self._final = False

    def start(self) -> None:
        visible = self._env.get("CUDA_VISIBLE_DEVICES")
        cfg = {"pid": os.getpid(), "hz": self._hz, "nvml": self._nvml, "follow": self._follow,
               "env": {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible},
               "sys_root": self._sys_root, "path": [p for p in sys.path if p]}
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _CHILD, json.dumps(cfg)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self._owner = os.getpid()
        self.pid = self._proc.pid
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        os.set_blocking(fd, False)
        try:
            import fcntl

            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
        except (ImportError, OSError):
            pass  # the default pipe size: the child blocks sooner when nobody reads

    def _mine(self) -> subprocess.Popen[bytes] | None:
        """The process, in the process that started it (a forked DataLoader worker has a copy of
        this object and must leave the child alone)."""
        return self._proc if self._proc is not None and os.getpid() == self._owner else None

    def set_workers(self, pids: frozenset[int]) -> None:
        """Follow these DataLoader worker processes (sent only when the set changes)."""
        if pids == self._workers:
            return
        self._workers = pids
        self._command("W " + " ".join(str(p) for p in sorted(pids)))

    def _command(self, line: str) -> None:
        proc = self._mine()
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the child is gone: its rows stop, which pump() reports at stop

    def pump(self) -> None:
        """Push every complete line the child has written so far (never blocks)."""
        proc = self._mine()
        if proc is None or proc.stdout is None:
            return
        with self._lock:
            chunks = [self._tail]
            while True:
                try:
                    data = os.read(proc.stdout.fileno(), _PIPE_BYTES)
                except (BlockingIOError, InterruptedError):
                    break
                except (OSError, ValueError):
                    break
                if not data:
                    break
                chunks.append(data)
            lines = b"".join(chunks).split(b"\n")
            self._tail = lines.pop()
            for line in lines:
                if line:
                    self._handle(line)

    def _handle(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            self._diag("warning", "sampler_process_output", f"unreadable line from the sampler "
                       f"process: {line[:80]!r}")
            return
        if "rows" in msg:
            self._push([(int(r[0]), r[1], str(r[2]), float(r[3]), str(r[4])) for r in msg["rows"]])
        elif "diag" in msg:
            level, code, message = msg["diag"]
            self._diag(str(level), str(code), str(message))
        self._final = self._final or "final" in msg
        for key in ("status", "final"):
            if key in msg:
                self.status.update(msg[key])
                self.nvml_info = msg.get("nvml") or self.nvml_info
                self.psutil_unavailable = msg.get("psutil_unavailable") or self.psutil_unavailable

    def stop(self, timeout_s: float = 2.0) -> None:
        """Ask the child to stop, take its last rows, and wait for it (killed after ``timeout_s``)."""
        proc = self._mine()
        if proc is None:
            return
        self._command("Q")
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            self.pump()  # a child blocked on a full pipe needs a reader to get to its end
            time.sleep(0.01)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            self._diag("warning", "sampler_stuck", f"the sampler process did not stop within "
                       f"{timeout_s} s and was killed")
        self.pump()
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        if not self._final:
            self.status["ended"] = f"exit status {proc.returncode} before reporting its ticks"
        self._proc = None


# -- the child ---------------------------------------------------------------------------------


def child_main(cfg: dict[str, Any]) -> int:
    """Sample until told to stop (``Q`` or end of stdin) or until the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = int(cfg["pid"])
    out = sys.stdout.fileno()
    lock = threading.Lock()

    def emit(obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with lock:
            while data:
                data = data[os.write(out, data):]

    workers: list[frozenset[int] | None] = [None if cfg["follow"] else frozenset()]
    stop = threading.Event()

    def commands() -> None:
        for line in sys.stdin.buffer:
            if line.startswith(b"W"):
                workers[0] = frozenset(int(x) for x in line.split()[1:])
            elif line.startswith(b"Q"):
                break
        stop.set()

    threading.Thread(target=commands, name="commands", daemon=True).start()
    opened = open_samplers(pid=parent, nvml=bool(cfg["nvml"]), worker_pids=lambda: workers[0],
                           import_module=importlib.import_module, nvml_module=None,
                           env=cfg["env"], sys_root=str(cfg["sys_root"]),
                           diag=lambda level, code, msg: emit({"diag": [level, code, msg]}))

    def facts(key: str, status: dict[str, Any]) -> dict[str, Any]:
        return {key: status, "nvml": opened.nvml_info(), "psutil_unavailable": opened.psutil_unavailable}

    status: dict[str, Any] = dict(opened.status, ran=True, hz=cfg["hz"], process=os.getpid())

    def tick() -> None:
        if os.getppid() != parent:
            stop.set()
            return
        emit({"rows": opened.sample(time.time_ns())})

    def on_error(e: Exception) -> None:
        if isinstance(e, BrokenPipeError):
            raise e
        emit({"diag": ["warning", "sampler_error", f"sampler process: {type(e).__name__}: {e}"]})

    try:
        emit(facts("status", status))
        run_periodic(stop, float(cfg["hz"]), tick, status, on_error)
        emit(facts("final", status))
    except BrokenPipeError:  # the parent is gone
        pass
    finally:
        opened.close()
    return 0
