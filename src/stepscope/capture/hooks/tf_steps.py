"""TensorFlow step markers: ``tf.profiler.experimental.Trace(name, step_num=N, ...)`` entered.

In ``tensorflow.python.profiler.trace`` (what ``tf.profiler.experimental.Trace`` is),
``Trace.__init__(self, name, **kwargs)`` is wrapped to learn whether the trace carries a
``step_num`` (the documented way to mark a training step in a custom loop:
``with tf.profiler.experimental.Trace("train", step_num=step, _r=1):``) and ``__enter__`` to
give a step marker each time such a trace is entered. Shape taken from tensorflow/tensorflow
``tensorflow/python/profiler/trace.py`` (TF 2.2-2.18: ``Trace`` is a plain class whose
``__init__`` starts a ``TraceMe`` when the profiler is on and whose ``__enter__`` returns the
trace). As for JAX (``jax_steps``), one name paces the steps, so traces of other names with a
``step_num`` (an evaluation loop) add none. Keras ``fit()`` has its own marker (``keras_steps``).
"""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import Any

from stepscope.capture.hooks.jax_steps import NamePacer
from stepscope.capture.hooks.patching import OnStepMarker, Patch, patched

TF_MODULES = ("tensorflow.python.profiler.trace",)
TF_STEP = "tf.profiler.experimental.Trace(step_num=...)"  # the step source, as the manifest names it


def patch_tf(module: ModuleType, patches: list[Patch], on_marker: OnStepMarker) -> str | None:
    """Patch the module's ``Trace`` (appending to ``patches``); returns what was done, or None
    when the class was already patched."""
    cls = getattr(module, "Trace", None)
    if not isinstance(cls, type) or not callable(getattr(cls, "__enter__", None)):
        return "not patched: no Trace context manager"
    if patched(patches, cls):
        return None
    init_patch, enter_patch = Patch.of(cls, "__init__"), Patch.of(cls, "__enter__")
    original_init, original_enter = init_patch.original, enter_patch.original
    pacer = NamePacer()
    pending = threading.local()  # the step trace this thread constructed last (its name)

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if init_patch.active:
            name = args[0] if args else kwargs.get("name")
            pending.name = name if "step_num" in kwargs else None
            pending.trace = self

    @functools.wraps(original_enter)
    def __enter__(self: Any) -> Any:
        result = original_enter(self)
        if enter_patch.active and getattr(pending, "trace", None) is self:
            name, pending.name, pending.trace = getattr(pending, "name", None), None, None
            if name is not None and pacer.counts(name):
                on_marker(TF_STEP)
        return result

    init_patch.apply(__init__)
    enter_patch.apply(__enter__)
    patches += [init_patch, enter_patch]
    return f"patched {cls.__module__}.{cls.__qualname__}"
