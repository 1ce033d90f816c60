"""Keras step markers: ``CallbackList.on_train_batch_end``.

In ``keras.src.callbacks.callback_list`` (Keras 3; also ``keras.src.callbacks``, the Keras 2.13+ /
``tf_keras`` module), ``CallbackList.on_train_batch_end``, which every Keras 3 backend's ``fit()``
calls once per train batch on the training thread (before it dispatches the callbacks, maybe
asynchronously), gives a step marker at each train batch end. Shape taken from
keras-team/keras ``keras/src/callbacks/callback_list.py`` (Keras 3.8).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from stepscope.capture.hooks.patching import OnStepMarker, Patch, patched

KERAS_MODULES = ("keras.src.callbacks.callback_list", "keras.src.callbacks", "tf_keras.src.callbacks")
KERAS_STEP = "keras.callbacks.CallbackList.on_train_batch_end"  # the step source


def patch_keras(module: ModuleType, patches: list[Patch], on_marker: OnStepMarker) -> str | None:
    """Patch the module's ``CallbackList`` (appending to ``patches``); returns what was done, or
    None when the class was already patched through another of its modules."""
    cls = getattr(module, "CallbackList", None)
    original = getattr(cls, "on_train_batch_end", None) if isinstance(cls, type) else None
    if cls is None or original is None:
        return "not patched: no CallbackList.on_train_batch_end"
    if patched(patches, cls):
        return None
    patch = Patch.of(cls, "on_train_batch_end")
    original = patch.original

    @functools.wraps(original)
    def on_train_batch_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        if patch.active:
            on_marker(KERAS_STEP)  # the batch has ended: before the callbacks run
        return original(self, *args, **kwargs)

    patch.apply(on_train_batch_end)
    patches.append(patch)
    return f"patched {cls.__module__}.{cls.__qualname__}"
