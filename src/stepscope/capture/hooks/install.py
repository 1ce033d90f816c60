"""``TorchHooks``: installs and removes every hook family of ``capture.hooks`` (see its doc).

``install()`` puts a ``PostImportFinder`` first on ``sys.meta_path`` for the modules of each
family and patches the ones already imported. The JAX, Keras, TensorFlow and NVTX step markers are installed
only when an ``on_step_marker`` callback is given (NVTX ranges only with a step range name); each
class is patched once, whichever of its modules is seen first. A hook that fails is a
diagnostic (``on_error``) and a line of ``installed``, never the user's ``import`` failing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from stepscope.capture.hooks import (
    dataloader,
    jax_compile,
    jax_steps,
    keras_steps,
    nvtx_steps,
    optimizer,
    patching,
    post_import,
    tf_steps,
)
from stepscope.capture.hooks.dataloader import DATALOADER_MODULE, OnIterator, OnWait
from stepscope.capture.hooks.optimizer import OPTIMIZER_MODULE, OnOptimizerStep
from stepscope.capture.hooks.patching import OnStepMarker, Patch

# the files of the wrappers: their frames are left out of sampled stacks
WRAPPER_FILES = tuple(m.__file__ or "" for m in (dataloader, optimizer, jax_steps, keras_steps,
                                                  tf_steps, nvtx_steps, patching, post_import,
                                                  jax_compile))


class TorchHooks:
    """Installs/uninstalls the framework hooks; errors go to ``on_error``."""

    def __init__(self, *, clock: Callable[[], int], on_wait: OnWait, on_iterator: OnIterator,
                 on_optimizer_step: OnOptimizerStep, on_error: Callable[[str, str], None],
                 on_step_marker: OnStepMarker | None = None, nvtx_step: str = "",
                 on_compile: Callable[[], None] | None = None) -> None:
        """``on_compile``: called when JAX reports a compilation ended (``jax_compile``)."""
        self._clock = clock
        self._on_wait = on_wait
        self._on_iterator = on_iterator
        self._on_step = on_optimizer_step
        self._on_error = on_error
        self._on_marker = on_step_marker
        self._nvtx_step = nvtx_step
        self._on_compile = on_compile
        self._compile_listening = False  # registered (once per process: JAX keeps it)
        self._compile_active = False  # the listener calls on_compile only while installed
        self._finder: post_import.PostImportFinder | None = None
        self._patches: list[Patch] = []
        self._handles: list[Any] = []
        self.installed: dict[str, str] = {}  # what -> "patched" / why not

    def install(self) -> None:
        if self._finder is not None:
            return
        callbacks = {DATALOADER_MODULE: self._guarded(self._patch_dataloader),
                     OPTIMIZER_MODULE: self._guarded(self._hook_optimizer)}
        if self._on_marker is not None:  # listed in ``installed`` only once imported
            callbacks.update({m: self._guarded(self._patch_jax) for m in jax_steps.JAX_MODULES})
            callbacks.update({m: self._guarded(self._patch_keras) for m in keras_steps.KERAS_MODULES})
            callbacks.update({m: self._guarded(self._patch_tf) for m in tf_steps.TF_MODULES})
            if self._nvtx_step:
                callbacks.update({m: self._guarded(self._patch_nvtx) for m in nvtx_steps.NVTX_MODULES})
        if self._on_compile is not None:
            self._compile_active = True
            callbacks.update({m: self._guarded(self._listen_jax_compiles)
                              for m in jax_compile.JAX_MONITORING_MODULES})
        self._finder = post_import.PostImportFinder(callbacks)
        self._finder.insert()
        for name, callback in callbacks.items():
            if name in (DATALOADER_MODULE, OPTIMIZER_MODULE):
                self.installed.setdefault(name, "waiting for import")
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__spec__", None) is not None:
                callback(module)

    def uninstall(self) -> None:
        self._compile_active = False
        if self._finder is not None:
            self._finder.remove()
            self._finder = None
        for patch in reversed(self._patches):
            patch.undo()
        self._patches.clear()
        left = []  # switched off inside an optimizer step: taken out by a later uninstall
        for handle in self._handles:
            try:
                if handle.remove() is False:
                    left.append(handle)
            except Exception as e:
                self._on_error("hook_remove_failed", f"could not remove an optimizer hook: {e}")
        self._handles = left

    def _guarded(self, fn: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
        """A hook that fails must never break the user's ``import torch``."""

        def call(module: ModuleType) -> None:
            try:
                fn(module)
            except Exception as e:
                self.installed[module.__name__] = f"failed: {type(e).__name__}: {e}"
                code = "torch_hook_failed" if module.__name__.startswith("torch") else "step_hook_failed"
                self._on_error(code, f"hooking {module.__name__} failed: {e}")

        return call

    def _note(self, module: ModuleType, status: str | None) -> None:
        if status is not None:
            self.installed[module.__name__] = status

    def _patch_dataloader(self, module: ModuleType) -> None:
        self._note(module, dataloader.patch_dataloader(
            module, self._patches, clock=self._clock, on_wait=self._on_wait,
            on_iterator=self._on_iterator, on_error=self._on_error))

    def _hook_optimizer(self, module: ModuleType) -> None:
        self._note(module, optimizer.hook_optimizer(module, self._handles, on_step=self._on_step,
                                                    on_error=self._on_error))

    def _patch_jax(self, module: ModuleType) -> None:
        assert self._on_marker is not None
        self._note(module, jax_steps.patch_jax(module, self._patches, self._on_marker))

    def _listen_jax_compiles(self, module: ModuleType) -> None:
        if self._compile_listening or self._on_compile is None:
            return  # one listener, whichever module of the two came first
        self._compile_listening = True
        self._note(module, jax_compile.listen_compiles(module, self._on_compile,
                                                       lambda: self._compile_active))

    def _patch_keras(self, module: ModuleType) -> None:
        assert self._on_marker is not None
        self._note(module, keras_steps.patch_keras(module, self._patches, self._on_marker))

    def _patch_tf(self, module: ModuleType) -> None:
        assert self._on_marker is not None
        self._note(module, tf_steps.patch_tf(module, self._patches, self._on_marker))

    def _patch_nvtx(self, module: ModuleType) -> None:
        assert self._on_marker is not None
        self._note(module, nvtx_steps.patch_nvtx(module, self._patches, self._on_marker,
                                                 self._nvtx_step))
