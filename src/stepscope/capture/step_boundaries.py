"""Where each step of the profiled program begins: the host capture's ``steps`` rows.

Boundary ``k`` (0-based) is where step ``k`` begins; step ``k`` ends at boundary ``k + 1``, and
the ``steps`` row of step ``k`` is emitted then (``source`` = how boundary ``k`` was found).
Boundaries come from:

- the optimizer hook: the post-hook of ``Optimizer.step``. With several optimizers (GANs,
  per-module optimizers) only the *pacing* optimizer counts: the first one seen stepping (the
  next one to step becomes pacing when it is garbage collected). Gradient accumulation is
  therefore one step per optimizer step, which is what a training step is.
- JAX ``StepTraceAnnotation`` entered, Keras ``CallbackList.on_train_batch_end`` (see
  ``capture.hooks``). Of the three hooks, the first that fires is the one used for the rest of
  the run (``settings_for_manifest()["samplers"]["steps"]["hook"]``), so a program that trips two
  of them (Keras on the JAX backend inside a ``StepTraceAnnotation``) never double-counts.
- ``mark_step()`` (``stepscope.step()``): once it has been called, hook boundaries are
  ignored for the rest of the run, so the two never double-count.

Step listeners get ``k`` at every boundary, on the thread that crossed it; an exception in a
listener becomes a diagnostic, never the user's problem.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from stepscope.capture.hooks.optimizer import TORCH_STEP
from stepscope.schema_enums import StepSource


class StepBoundaries:
    """``push(table, row)``, ``note_thread()`` (notes the current thread as a sampled one) and
    ``diag(code, message)`` are the host capture's; ``hook``: the step hook to use from the
    start (NVTX ranges when asked for), else the first one that fires."""

    def __init__(self, *, clock: Callable[[], int], push: Callable[[str, tuple[Any, ...]], None],
                 note_thread: Callable[[], int], diag: Callable[[str, str], None],
                 hook: str | None = None) -> None:
        self._clock = clock
        self._push = push
        self._note_thread = note_thread
        self._diag = diag
        self._lock = threading.RLock()  # re-entrant: a listener may mark a step
        self._listeners: list[Callable[[int], None]] = []
        self._next_boundary = 0
        self._last_boundary: tuple[int, StepSource] | None = None
        self._manual = False
        self._hook = hook  # the step hook in use
        self._pacing: Callable[[], Any] | None = None
        self._last_compile_ns: int | None = None  # when JAX last reported a compile ended

    def after_fork(self) -> None:
        """In a forked child (a DataLoader worker): the lock may have been held at fork time."""
        self._lock = threading.RLock()

    def mark(self, ts_ns: int | None = None) -> None:
        self._manual = True
        self._boundary(self._clock() if ts_ns is None else ts_ns, StepSource.MANUAL)

    def add_listener(self, fn: Callable[[int], None]) -> None:
        with self._lock:
            self._listeners.append(fn)

    def on_optimizer_step(self, optimizer: Any) -> None:
        try:
            if self._manual or not self._claim(TORCH_STEP):
                return
            pacing = self._pacing() if self._pacing is not None else None
            if pacing is None:
                try:
                    self._pacing = weakref.ref(optimizer)
                except TypeError:
                    self._pacing = lambda: optimizer
            elif pacing is not optimizer:
                return
            self._note_thread()
            self._boundary(self._clock(), StepSource.HOOK)
        except Exception as e:
            self._diag("step_hook_error", f"optimizer step hook failed: {type(e).__name__}: {e}")

    def on_compile(self) -> None:
        self._last_compile_ns = self._clock()

    @property
    def last_compile_ns(self) -> int | None:
        """When the program's framework (JAX) last reported a compilation ended (None: never)."""
        return self._last_compile_ns

    def on_step_marker(self, hook: str) -> None:
        try:
            if self._manual or not self._claim(hook):
                return
            self._note_thread()
            self._boundary(self._clock(), StepSource.HOOK)
        except Exception as e:
            self._diag("step_hook_error", f"{hook} step hook failed: {type(e).__name__}: {e}")

    def _claim(self, hook: str) -> bool:
        with self._lock:
            if self._hook is None:
                self._hook = hook
            return self._hook == hook

    def _boundary(self, ts: int, source: StepSource) -> None:
        with self._lock:
            k = self._next_boundary
            self._next_boundary += 1
            if self._last_boundary is not None:
                start, start_source = self._last_boundary
                self._push("steps", (start, max(0, ts - start), k - 1, start_source.value, None))
            self._last_boundary = (ts, source)
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(k)
            except Exception as e:
                self._diag("step_listener_error", f"a step listener failed at step {k}: "
                           f"{type(e).__name__}: {e}")

    def manifest(self) -> dict[str, Any]:
        """``settings_for_manifest()["samplers"]["steps"]``: how many boundaries, from where."""
        return {"boundaries": self._next_boundary,
                "source": "manual" if self._manual else ("hook" if self._next_boundary else None),
                "hook": self._hook}
