"""The default window's fallback for programs whose steps no hook marks (JAX, CuPy, Triton, raw
CUDA, PyTorch without ``torch.optim``, inference loops).

With the default schedule (no ``--steps``, ``--delay/--duration`` or ``--nvtx``), a watcher
thread of the session (``stepscope-watch``) asks a probe every ``POLL_S`` whether this process
uses the GPU yet (``capture.cuda_driver.gpu_in_use``: libcuda already loaded and a primary
context active; it never loads or initialises CUDA itself). Then, :func:`next_move` decides:

- the GPU is first seen in use and no step boundary has fired: the GPU backend starts at once
  (a *tentative* capture, so that a program ending early still leaves its GPU records);
- ``warmup_s`` after that with still no step boundary, ``warmup_s`` after the last
  compilation the framework reported (JAX, ``capture.hooks.jax_compile``; at most
  ``COMPILE_WAIT_S`` after the first GPU use), and ``warmup_s`` after the GPU's work started
  to flow (NVML's utilisation, ``capture.gpu_flow``; at most ``FLOW_WAIT_S`` after the first
  GPU use: set-up work between the first GPU use and the loop is not taken for the loop): a
  *time* window opens, and closes
  ``max_s`` later or when the program ends, whichever comes first; the steps are recovered at
  analysis from the periodicity of the kernel stream (``analysis.periodicity``). Boundaries that fire
  inside it are recorded as steps; they do not close it;
- a step boundary fires before that: the step schedule wins as without the fallback (the
  tentative GPU capture runs on; what it recorded before the step window is clipped away).

While the tentative capture runs without a window, the GPU backend is flushed every
``flush_every_s`` (bounded memory; raw CUPTI records go to the staging folder, clipped to the
window at merge), and raw records older than the tail kept at exit are dropped (:class:`RawTail`).

The window a process ended up with is described by :func:`describe` and written into its
settings (``window``, ``window_kind``); see docs/record.md.
"""

from __future__ import annotations

import re
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any

from stepscope.capture.chunks import Tables
from stepscope.capture.gpu_flow import FLOW_WAIT_S, flow_ready
from stepscope.capture.window_used import (
    WindowUsed,
    describe_auto,
    describe_auto_compiled,
    describe_auto_expected,
    describe_auto_flow,
    describe_auto_quiet,
    describe_tail,
    describe_warmup_end,
)
from stepscope.store.manifest import Diagnostic

POLL_S = 0.25
# an optimizer exists (``hooks.optimizer.optimizer_built``) but its first step has not come yet
# (torch.compile, cudnn autotuning, a slow first batch): how long after the first GPU use the
# fallback waits for the step hooks before it opens its time window anyway
STEPS_EXPECTED_WAIT_S = 60.0
# a program that still compiles (JAX reports each compilation): how long after the first GPU use
# the fallback waits for compiling to stop before it opens its time window anyway
COMPILE_WAIT_S = 60.0
# source files whose functions run only while a framework compiles: one on a thread's stack
# means it is compiling now (JAX: XLA's compile and GEMM autotuning; TorchInductor's codegen;
# Triton's kernel compiler). Not torch/_dynamo: its frames wrap every call of a compiled model.
COMPILER_FILES = ("jax/_src/compiler.py", "torch/_inductor/compile_fx.py",
                  "triton/compiler/compiler.py")
MAX_FRAMES = 400  # stack depth looked at per thread


class Move(str, Enum):
    WAIT = "wait"  # nothing to do now; look again
    START_GPU = "start_gpu"  # the GPU is in use and no step hook fired: start the backend now
    OPEN = "open"  # the warm-up is over with no step boundary: open the time window
    CLOSE = "close"  # the time window has lasted max_s: close it
    FLUSH_GPU = "flush_gpu"  # the tentative capture runs without a window: flush the backend
    STOP = "stop"  # nothing left for the watcher (steps won, the window closed, the end)


class Window(str, Enum):
    """What the session's window is at one look of the watcher."""

    NONE = "none"  # not opened yet
    STEPS = "steps"  # opened by the step schedule
    AUTO = "auto"  # the fallback's time window
    CLOSED = "closed"


@dataclass(frozen=True)
class WatchState:
    now_ns: int
    boundaries: int  # step boundaries seen so far
    window: Window
    gpu_seen_ns: int | None  # when the watcher first saw the GPU in use (None: not yet)
    auto_open_ns: int | None  # when the time window opened
    last_gpu_flush_ns: int  # the tentative capture's last flush (or its start)
    warmup_s: float
    max_s: float
    flush_every_s: float
    finished: bool = False
    steps_expected: bool = False  # an optimizer exists: its step hook should fire soon
    expect_wait_s: float = STEPS_EXPECTED_WAIT_S
    last_compile_ns: int | None = None  # when the framework last reported a compile ended
    compile_wait_s: float = COMPILE_WAIT_S
    flow_known: bool = False  # NVML samples the GPUs' utilisation (``capture.gpu_flow``)
    flow_since_ns: int | None = None  # when the GPU work flowing now started (None: quiet)
    flow_wait_s: float = FLOW_WAIT_S


def flowing(s: WatchState) -> bool:
    """Whether the GPU's work has flowed for ``warmup_s`` (``capture.gpu_flow.flow_ready``)."""
    return flow_ready(known=s.flow_known, since_ns=s.flow_since_ns, gpu_seen_ns=s.gpu_seen_ns,
                      now_ns=s.now_ns, warmup_s=s.warmup_s, wait_s=s.flow_wait_s)


def compiling(s: WatchState) -> bool:
    """Whether the warm-up still waits for compilation: a compile ended less than
    ``warmup_s`` ago, and the first GPU use is less than ``compile_wait_s`` ago."""
    if s.last_compile_ns is None or s.gpu_seen_ns is None:
        return False
    return (s.now_ns - s.last_compile_ns < s.warmup_s * 1e9
            and s.now_ns - s.gpu_seen_ns < s.compile_wait_s * 1e9)


def warmup_limit_s(s: WatchState) -> float:
    """How long after the first GPU use the fallback waits for a step boundary."""
    return max(s.warmup_s, s.expect_wait_s) if s.steps_expected else s.warmup_s


def needs_probe(s: WatchState) -> bool:
    """Whether the next move depends on the probe (it is asked only then)."""
    return (not s.finished and s.window is Window.NONE and s.gpu_seen_ns is None
            and s.boundaries == 0)


def next_move(s: WatchState, gpu_in_use: bool) -> Move:
    """The watcher's next move (see the module doc). ``gpu_in_use``: the probe's answer, when
    :func:`needs_probe` asked for it."""
    if s.finished or s.window in (Window.CLOSED, Window.STEPS):
        return Move.STOP
    if s.window is Window.AUTO:
        if s.auto_open_ns is not None and s.now_ns - s.auto_open_ns >= s.max_s * 1e9:
            return Move.CLOSE
        return Move.WAIT
    if s.gpu_seen_ns is None:
        if s.boundaries > 0:
            return Move.STOP  # step hooks fire: the step schedule as without the fallback
        return Move.START_GPU if gpu_in_use else Move.WAIT
    if (s.boundaries == 0 and s.now_ns - s.gpu_seen_ns >= warmup_limit_s(s) * 1e9
            and not compiling(s) and (s.steps_expected or flowing(s))):
        return Move.OPEN
    if s.now_ns - s.last_gpu_flush_ns >= s.flush_every_s * 1e9:
        return Move.FLUSH_GPU
    return Move.WAIT


def compiling_now() -> bool:
    """Whether a thread of this process is inside a framework's compiler now (a frame of one of
    ``COMPILER_FILES`` on its stack). jax.monitoring reports a compile only when it ends, and
    one compile can last tens of seconds; the watcher asks this at each look of the warm-up.
    Never raises."""
    try:
        frames = sys._current_frames()
    except Exception:  # noqa: BLE001 - a probe must never break the program
        return False
    for top in frames.values():
        f: FrameType | None = top
        depth = 0
        while f is not None and depth < MAX_FRAMES:
            name = f.f_code.co_filename.replace("\\", "/")
            if name.endswith(COMPILER_FILES):
                return True
            f, depth = f.f_back, depth + 1
    return False


def default_steps_probe() -> bool:
    """Whether a step hook is expected to fire (a ``torch.optim`` optimizer exists)."""
    try:
        from stepscope.capture.hooks.optimizer import optimizer_built

        return optimizer_built()
    except Exception:  # noqa: BLE001 - a probe must never break the program
        return False


class DriverProbe:
    """``capture.cuda_driver.gpu_in_use`` with the driver kept once found (each look would
    otherwise ``dlopen`` libcuda again); False where it is not available. Never raises."""

    def __init__(self) -> None:
        self._driver: Any = None

    def __call__(self) -> bool:
        try:
            from stepscope.capture.cuda_driver import CudaDriver, gpu_in_use

            if self._driver is None:
                self._driver = CudaDriver.attach()
                if self._driver is None:
                    return False
            return gpu_in_use(self._driver)
        except Exception:  # noqa: BLE001 - a probe must never break the program
            return False


class Fallback:
    """One session's fallback state (see the module doc). Not thread-safe: the session calls it
    under its lock, except ``ask`` (the probe), which it calls outside."""

    def __init__(self, *, enabled: bool, probe: Callable[[], bool], warmup_s: float, max_s: float,
                 flush_every_s: float, folder: Path, keep_chunks: int,
                 steps_probe: Callable[[], bool] = default_steps_probe) -> None:
        self.enabled, self.probe, self.steps_probe = enabled, probe, steps_probe
        self.steps_expected = False  # latched: once an optimizer exists, steps are expected
        self.warmup_s, self.max_s, self.flush_every_s = warmup_s, max_s, flush_every_s
        self.gpu_seen_ns: int | None = None
        self.open_ns: int | None = None  # when the time window opened
        self.last_compile_ns: int | None = None  # as of the last look (the host capture's)
        self.flow_known = False  # as of the last look (``capture.gpu_flow``)
        self.flow_since_ns: int | None = None
        self.last_flush_ns = 0
        self._pre: deque[Tables] = deque(maxlen=keep_chunks)  # decoded GPU tables, no window yet
        self._raw = RawTail(folder)

    def state(self, now_ns: int, boundaries: int, window: Window, finished: bool,
              last_compile_ns: int | None = None,
              flow: tuple[bool, int | None] = (False, None)) -> WatchState:
        """``last_compile_ns``: when the framework last reported a compile ended (or a
        compiler was seen running); the latest one seen is kept. ``flow``: whether NVML
        samples utilisation, and since when the GPU's work flows (``capture.gpu_flow``)."""
        self.flow_known, self.flow_since_ns = flow
        if last_compile_ns is not None and (self.last_compile_ns is None
                                            or last_compile_ns > self.last_compile_ns):
            self.last_compile_ns = last_compile_ns
        if (not self.steps_expected and window is Window.NONE and boundaries == 0
                and self.gpu_seen_ns is not None):
            try:
                self.steps_expected = bool(self.steps_probe())
            except Exception:  # noqa: BLE001 - a probe must never break the program
                self.steps_expected = False
        return WatchState(steps_expected=self.steps_expected,
                          now_ns=now_ns, boundaries=boundaries, window=window,
                          gpu_seen_ns=self.gpu_seen_ns, auto_open_ns=self.open_ns,
                          last_gpu_flush_ns=self.last_flush_ns, warmup_s=self.warmup_s,
                          max_s=self.max_s, flush_every_s=self.flush_every_s, finished=finished,
                          last_compile_ns=self.last_compile_ns, flow_known=flow[0],
                          flow_since_ns=flow[1])

    def ask(self) -> bool:
        try:
            return bool(self.probe())
        except Exception:  # noqa: BLE001 - a probe must never break the program
            return False

    def gpu_seen(self, now_ns: int) -> None:
        self.gpu_seen_ns = self.last_flush_ns = now_ns

    def opened(self, now_ns: int) -> WindowUsed:
        self.open_ns = now_ns
        c, g = self.last_compile_ns, self.gpu_seen_ns
        limit = max(self.warmup_s, STEPS_EXPECTED_WAIT_S) if self.steps_expected else self.warmup_s
        f = self.flow_since_ns
        if self.flow_known and g is not None and not self.steps_expected:
            if f is None:  # opened at FLOW_WAIT_S with the GPU quiet
                return describe_auto_quiet(FLOW_WAIT_S, self.max_s)
            if f - g >= 1e9 and (c is None or f > c):
                return describe_auto_flow(self.warmup_s, self.max_s, (f - g) / 1e9)
        if c is not None and g is not None and c + self.warmup_s * 1e9 > g + limit * 1e9:
            return describe_auto_compiled(self.warmup_s, self.max_s, (c - g) / 1e9)
        if self.steps_expected:
            return describe_auto_expected(max(self.warmup_s, STEPS_EXPECTED_WAIT_S), self.max_s)
        return describe_auto(self.warmup_s, self.max_s)

    def flushed(self, data: Tables, now_ns: int, steps_fired: bool) -> None:
        """A flush of the tentative capture ended at ``now_ns``: keep its decoded tables (the
        last few) and, once step hooks fire (the tail kept at exit is then ``max_s``), drop the
        raw records older than that tail."""
        if data:
            self._pre.append(data)
        self._raw.note(now_ns)
        if steps_fired:
            self._raw.drop_before(now_ns - int(self.max_s * 1e9))

    def take_pre(self) -> list[Tables]:
        out = list(self._pre)
        self._pre.clear()
        return out

    def settings(self) -> dict[str, Any]:
        return ({"auto_warmup_s": self.warmup_s, "gpu_first_used_ns": self.gpu_seen_ns}
                if self.enabled else {})


NO_STEPS = ("no step boundary fired in the window (a time window, taken because no step hook "
            "fired): the capture's cost cannot be measured from step times on this run")


@dataclass(frozen=True)
class Tail:
    """What a process that ends before any window opened keeps: ``[start_ns, end]``."""

    start_ns: int
    used: WindowUsed
    diagnostic: Diagnostic
    keep_gpu: bool  # keep the GPU records of the tail (else: those kept raw are deleted)


def tail_plan(*, timed: bool, auto: bool, first: int, boundaries: int, gpu_seen_ns: int | None,
              gpu_started: bool, start_ns: int, now_ns: int, warmup_s: float,
              keep_s: float) -> Tail:
    """The window of a process that ended before any window opened (``auto``: the default
    schedule, with its fallback)."""
    last = max(start_ns, now_ns - int(keep_s * 1e9))
    if auto and boundaries == 0 and gpu_seen_ns is not None:
        used = describe_warmup_end(warmup_s, (now_ns - gpu_seen_ns) / 1e9)
        return Tail(gpu_seen_ns, used, Diagnostic("info", "window_includes_warmup",
                                                  f"the window is {used.text}"), True)
    if auto and boundaries == 0:
        return Tail(last, describe_tail(keep_s, False), Diagnostic(
            "info", "no_step_hook", "no step hook fired and no GPU work was seen: kept the last "
            f"{keep_s:g} s of host activity"), False)
    if timed:
        why = "the program ended before the --delay was over"
    else:
        why = (f"fewer than {first + 1} step boundaries were seen (no optimizer step hook fired "
               "and stepscope.step() was not called often enough)")
    gpu = auto and gpu_started
    used = describe_tail(keep_s, gpu)
    what = "host and GPU activity" if gpu else "host samples"
    return Tail(last, used, Diagnostic("warning", "window_not_reached",
                                       f"the capture window never opened: {why}; kept the last "
                                       f"{keep_s:g} s of {what} instead"), gpu)


_BIN = re.compile(r"^cupti\.\d+\.bin$")


class RawTail:
    """The raw CUPTI record files (``cupti.<n>.bin``, ``capture.cupti.spill``) that flushes made
    before any window opened, so that those older than the tail kept at exit can be deleted
    (the name files, ``cupti.<n>.strings.json``, stay: later records need the names they hold).
    Not thread-safe: the session lets one flush run at a time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._known: set[str] = set()
        self._flushes: deque[tuple[int, list[str]]] = deque()

    def _bins(self) -> set[str]:
        try:
            return {p.name for p in self.folder.iterdir() if _BIN.match(p.name)}
        except OSError:
            return set()

    def note(self, flushed_ns: int) -> None:
        """A flush ended at ``flushed_ns``: remember the files it wrote."""
        new = sorted(self._bins() - self._known)
        self._known.update(new)
        if new:
            self._flushes.append((flushed_ns, new))

    def drop_before(self, before_ns: int) -> int:
        """Delete the files of flushes that ended before ``before_ns``; returns how many."""
        n = 0
        while self._flushes and self._flushes[0][0] < before_ns:
            _, names = self._flushes.popleft()
            for name in names:
                (self.folder / name).unlink(missing_ok=True)
                n += 1
        return n


__all__ = [
    "NO_STEPS",
    "POLL_S",
    "Fallback",
    "Move",
    "RawTail",
    "Tail",
    "WatchState",
    "Window",
    "WindowUsed",
    "DriverProbe",
    "describe_auto",
    "describe_tail",
    "describe_warmup_end",
    "needs_probe",
    "next_move",
    "tail_plan",
]
