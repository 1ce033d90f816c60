"""JAX step markers: ``jax.profiler.StepTraceAnnotation`` entered.

In ``jax._src.profiler`` (and ``jax.profiler``, which re-exports the same class),
``StepTraceAnnotation.__init__`` is wrapped to learn the annotation's name and ``__enter__`` to
give a step marker each time one is entered. Shape taken from jax-ml/jax ``jax/_src/profiler.py``
(JAX 0.4-0.8: ``TraceAnnotation`` subclasses jaxlib's ``TraceMe``, ``StepTraceAnnotation``
defines only ``__init__``). Only one annotation name paces the steps (digits ignored, so
``f"train_step_{n}"`` is one name): the first seen, replaced once by the first name containing
"train" if it did not. So ``StepTraceAnnotation("eval", ...)`` loops, or several annotations
inside one step, do not add steps.
"""

from __future__ import annotations

import functools
import re
import threading
from types import ModuleType
from typing import Any

from stepscope.capture.hooks.patching import OnStepMarker, Patch, patched

JAX_MODULES = ("jax._src.profiler", "jax.profiler")
JAX_STEP = "jax.profiler.StepTraceAnnotation"  # the step source, as the manifest names it


class NamePacer:
    """Which annotation names give step boundaries (see the module doc). Thread-safe."""

    _DIGITS = re.compile(r"\d+")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pacing: str | None = None
        self._replaced = False

    def counts(self, name: object) -> bool:
        key = self._DIGITS.sub("#", name) if isinstance(name, str) else "?"
        with self._lock:
            if self.pacing is None:
                self.pacing = key
            elif key != self.pacing and not self._replaced and "train" in key.lower() \
                    and "train" not in self.pacing.lower():
                self.pacing, self._replaced = key, True
            return key == self.pacing


def patch_jax(module: ModuleType, patches: list[Patch], on_marker: OnStepMarker) -> str | None:
    """Patch the module's ``StepTraceAnnotation`` (appending to ``patches``); returns what was
    done, or None when the class was already patched through its other module."""
    cls = getattr(module, "StepTraceAnnotation", None)
    if not isinstance(cls, type) or not callable(getattr(cls, "__enter__", None)):
        return "not patched: no StepTraceAnnotation context manager"
    if patched(patches, cls):
        return None
    init_patch, enter_patch = Patch.of(cls, "__init__"), Patch.of(cls, "__enter__")
    original_init, original_enter = init_patch.original, enter_patch.original
    pacer = NamePacer()
    pending = threading.local()  # name of the annotation this thread constructed last

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if init_patch.active:
            pending.name = args[0] if args else kwargs.get("name")

    @functools.wraps(original_enter)
    def __enter__(self: Any) -> Any:
        result = original_enter(self)
        if enter_patch.active:
            name, pending.name = getattr(pending, "name", None), None
            if pacer.counts(name):
                on_marker(JAX_STEP)
        return result

    init_patch.apply(__init__)
    enter_patch.apply(__enter__)
    patches += [init_patch, enter_patch]
    return f"patched {cls.__module__}.{cls.__qualname__}"
