"""Framework hooks of the host capture (PyTorch, JAX, Keras), installed without importing them.

The bootstrap starts the capture before the user's code imports torch, and importing
``torch.utils.data`` ourselves would cost a second and change the program. So a
``sys.meta_path`` finder watches for the modules below and patches them right after they are
executed (a post-import hook); modules already imported are patched at once.

- ``torch.utils.data.dataloader``: ``_BaseDataLoaderIter.__next__`` is wrapped to time each
  batch fetch (an input wait), and ``DataLoader._get_iterator`` to read the loader's settings and
  its worker processes once per iterator.
- ``torch.optim.optimizer``: a global ``register_optimizer_step_post_hook``.
- ``jax._src.profiler`` (and ``jax.profiler``, which re-exports the same class):
  ``StepTraceAnnotation.__init__`` (to learn the annotation's name) and ``__enter__`` (a step
  marker each time one is entered). Shape taken from jax-ml/jax ``jax/_src/profiler.py`` (JAX
  0.4-0.8: ``TraceAnnotation`` subclasses jaxlib's ``TraceMe``, ``StepTraceAnnotation`` defines
  only ``__init__``). Only one annotation name paces the steps (digits ignored, so
  ``f"train_step_{n}"`` is one name): the first seen, replaced once by the first name containing
  "train" if it did not. So ``StepTraceAnnotation("eval", ...)`` loops, or several annotations
  inside one step, do not add steps.
- ``keras.src.callbacks.callback_list`` (Keras 3; also ``keras.src.callbacks``, the Keras 2.13+ /
  ``tf_keras`` module): ``CallbackList.on_train_batch_end``, which every Keras 3 backend's
  ``fit()`` calls once per train batch on the training thread (before it dispatches the
  callbacks, maybe asynchronously): a step marker at each train batch end. Shape taken from
  keras-team/keras ``keras/src/callbacks/callback_list.py`` (Keras 3.8).

The JAX and Keras hooks are installed only when an ``on_step_marker`` callback is given; each
class is patched once, whichever of its modules is seen first.

Wrappers never change behaviour: results and exceptions (``StopIteration`` included) pass
through untouched; ``uninstall()`` restores the original attributes (when someone wrapped them
again after us, our wrapper stays but turns into a plain pass-through).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

DATALOADER_MODULE = "torch.utils.data.dataloader"
OPTIMIZER_MODULE = "torch.optim.optimizer"
JAX_MODULES = ("jax._src.profiler", "jax.profiler")
KERAS_MODULES = ("keras.src.callbacks.callback_list", "keras.src.callbacks", "tf_keras.src.callbacks")
# step marker sources, as ``on_step_marker`` receives them and the manifest names them
TORCH_STEP = "torch.optim.Optimizer.step"
JAX_STEP = "jax.profiler.StepTraceAnnotation"
NVTX_STEP = "nvtx range"
NVTX_MODULES = ("torch.cuda.nvtx", "nvtx")
KERAS_STEP = "keras.callbacks.CallbackList.on_train_batch_end"


class _NotifyingLoader(importlib.abc.Loader):
    """Wraps the real loader for one import; calls back once the module has executed."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # put the real loader back where the import system recorded ours
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._callback(module)

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, is_package, resources ...
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the finders after it, and wraps the loader of watched modules."""

    def __init__(self, callbacks: Mapping[str, Callable[[ModuleType], None]]) -> None:
        self._callbacks = dict(callbacks)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        callback = self._callbacks.get(fullname)
        if callback is None:
            return None
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, PostImportFinder):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _NotifyingLoader(spec.loader, callback)
            return spec
        return None


class _Patch:
    """One replaced class attribute; ``active`` turns the wrapper into a pass-through."""

    def __init__(self, owner: type, name: str, original: Any) -> None:
        self.owner = owner
        self.name = name
        self.original = original
        self.own = name in owner.__dict__  # False: inherited, so undo deletes our override
        self.wrapper: Any = None
        self.active = True

    @staticmethod
    def of(owner: type, name: str) -> _Patch:
        """The attribute as the class holds it (its own), else as it inherits it."""
        return _Patch(owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name))

    def apply(self, wrapper: Any) -> None:
        self.wrapper = wrapper
        setattr(self.owner, self.name, wrapper)

    def undo(self) -> None:
        self.active = False
        if self.owner.__dict__.get(self.name) is self.wrapper:
            if self.own:
                setattr(self.owner, self.name, self.original)
            else:
                delattr(self.owner, self.name)


OnWait = Callable[[Any, int, int], None]  # (iterator, t0_ns, t1_ns); must not raise
OnIterator = Callable[[Any, Any], None]  # (loader, iterator); must not raise
OnOptimizerStep = Callable[[Any], None]  # (optimizer); must not raise
OnStepMarker = Callable[[str], None]  # (JAX_STEP | KERAS_STEP); must not raise


class _NamePacer:
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


class TorchHooks:
    """Installs/uninstalls the DataLoader and optimizer hooks; errors go to ``on_error``."""

    def __init__(self, *, clock: Callable[[], int], on_wait: OnWait, on_iterator: OnIterator,
                 on_optimizer_step: OnOptimizerStep, on_error: Callable[[str, str], None],
                 on_step_marker: OnStepMarker | None = None, nvtx_step: str = "") -> None:
        self._clock = clock
        self._on_wait = on_wait
        self._on_iterator = on_iterator
        self._on_step = on_optimizer_step
        self._on_error = on_error
        self._on_marker = on_step_marker
        self._nvtx_step = nvtx_step
        self._finder: PostImportFinder | None = None
        self._patches: list[_Patch] = []
        self._handles: list[Any] = []
        self.installed: dict[str, str] = {}  # what -> "patched" / why not

    def install(self) -> None:
        if self._finder is not None:
            return
        callbacks = {DATALOADER_MODULE: self._guarded(self._patch_dataloader),
                     OPTIMIZER_MODULE: self._guarded(self._hook_optimizer)}
        if self._on_marker is not None:  # listed in ``installed`` only once imported
            callbacks.update({m: self._guarded(self._patch_jax) for m in JAX_MODULES})
            callbacks.update({m: self._guarded(self._patch_keras) for m in KERAS_MODULES})
            if self._nvtx_step:
                callbacks.update({m: self._guarded(self._patch_nvtx) for m in NVTX_MODULES})
        self._finder = PostImportFinder(callbacks)
        sys.meta_path.insert(0, self._finder)
        for name, callback in callbacks.items():
            if name in (DATALOADER_MODULE, OPTIMIZER_MODULE):
                self.installed.setdefault(name, "waiting for import")
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__spec__", None) is not None:
                callback(module)

    def uninstall(self) -> None:
        if self._finder is not None:
            try:
                sys.meta_path.remove(self._finder)
            except ValueError:
                pass
            self._finder = None
        for patch in reversed(self._patches):
            patch.undo()
        self._patches.clear()
        for handle in self._handles:
            try:
                handle.remove()
            except Exception as e:
                self._on_error("hook_remove_failed", f"could not remove an optimizer hook: {e}")
        self._handles.clear()

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

    def _patch_dataloader(self, module: ModuleType) -> None:
        try:
            base = module._BaseDataLoaderIter
            loader_cls = module.DataLoader
            next_patch = _Patch(base, "__next__", base.__dict__["__next__"])
            iter_patch = _Patch(loader_cls, "_get_iterator", loader_cls.__dict__["_get_iterator"])
        except (AttributeError, KeyError) as e:
            self.installed[DATALOADER_MODULE] = f"not patched: this torch has no {e}"
            self._on_error("dataloader_hook_unavailable",
                           f"DataLoader waits not captured: torch's DataLoader has no {e}")
            return
        clock, on_wait, on_iterator = self._clock, self._on_wait, self._on_iterator
        original_next = next_patch.original
        original_get = iter_patch.original

        @functools.wraps(original_next)
        def __next__(it: Any) -> Any:
            if not next_patch.active:
                return original_next(it)
            t0 = clock()
            try:
                return original_next(it)
            finally:
                on_wait(it, t0, clock())

        @functools.wraps(original_get)
        def _get_iterator(loader: Any) -> Any:
            it = original_get(loader)
            if iter_patch.active:
                on_iterator(loader, it)
            return it

        next_patch.apply(__next__)
        iter_patch.apply(_get_iterator)
        self._patches += [next_patch, iter_patch]
        self.installed[DATALOADER_MODULE] = "patched"

    def _hook_optimizer(self, module: ModuleType) -> None:
        register = getattr(module, "register_optimizer_step_post_hook", None)
        if register is None:
            self.installed[OPTIMIZER_MODULE] = "not hooked: torch has no register_optimizer_step_post_hook"
            self._on_error("optimizer_hook_unavailable",
                           "optimizer steps not hooked (torch < 2.0): mark steps with stepscope.step()")
            return
        on_step = self._on_step

        def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            on_step(optimizer)

        try:
            self._handles.append(register(post_hook))
        except Exception as e:
            self.installed[OPTIMIZER_MODULE] = f"not hooked: {e}"
            self._on_error("optimizer_hook_unavailable", f"optimizer steps not hooked: {e}")
            return
        self.installed[OPTIMIZER_MODULE] = "hooked"

    # -- JAX / Keras step markers --------------------------------------------------------------
    def _patched(self, cls: type) -> bool:
        return any(p.owner is cls for p in self._patches)

    def _patch_jax(self, module: ModuleType) -> None:
        cls = getattr(module, "StepTraceAnnotation", None)
        if not isinstance(cls, type) or not callable(getattr(cls, "__enter__", None)):
            self.installed[module.__name__] = "not patched: no StepTraceAnnotation context manager"
            return
        if self._patched(cls):
            return
        init_patch, enter_patch = _Patch.of(cls, "__init__"), _Patch.of(cls, "__enter__")
        original_init, original_enter = init_patch.original, enter_patch.original
        on_marker = self._on_marker
        assert on_marker is not None
        pacer = _NamePacer()
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
        self._patches += [init_patch, enter_patch]
        self.installed[module.__name__] = f"patched {cls.__module__}.{cls.__qualname__}"

    def _patch_keras(self, module: ModuleType) -> None:
        cls = getattr(module, "CallbackList", None)
        original = getattr(cls, "on_train_batch_end", None) if isinstance(cls, type) else None
        if cls is None or original is None:
            self.installed[module.__name__] = "not patched: no CallbackList.on_train_batch_end"
            return
        if self._patched(cls):
            return
        patch = _Patch.of(cls, "on_train_batch_end")
        original = patch.original
        on_marker = self._on_marker
        assert on_marker is not None

        @functools.wraps(original)
        def on_train_batch_end(self: Any, *args: Any, **kwargs: Any) -> Any:
            if patch.active:
                on_marker(KERAS_STEP)  # the batch has ended: before the callbacks run
            return original(self, *args, **kwargs)

        patch.apply(on_train_batch_end)
        self._patches.append(patch)
        self.installed[module.__name__] = f"patched {cls.__module__}.{cls.__qualname__}"

    # -- NVTX ranges as steps (--nvtx NAME) ----------------------------------------------------
    def _is_step_range(self, message: object) -> bool:
        """``NAME`` itself, or ``NAME`` followed by a space, ``#``, ``:`` or a digit."""
        name = self._nvtx_step
        if not isinstance(message, str) or not message.startswith(name):
            return False
        rest = message[len(name):]
        return not rest or rest[0] in " #:" or rest[0].isdigit()

    def _patch_nvtx(self, module: ModuleType) -> None:
        """``torch.cuda.nvtx.range_push/range_start`` (``range()`` calls ``range_push``) and the
        ``nvtx`` package's ``push_range/start_range`` and ``annotate``: a step boundary when a
        range named NAME opens."""
        on_marker = self._on_marker
        assert on_marker is not None
        patched: list[str] = []
        for fn_name in ("range_push", "range_start", "push_range", "start_range"):
            original = getattr(module, fn_name, None)
            if not callable(original) or getattr(original, "__stepscope__", False):
                continue
            patch = _Patch(module, fn_name, original)  # type: ignore[arg-type]  # a module's attribute

            def wrapper(*args: Any, _orig: Any = original, _patch: _Patch = patch, **kwargs: Any) -> Any:
                if _patch.active:
                    msg = args[0] if args else kwargs.get("msg", kwargs.get("message"))
                    if self._is_step_range(msg):
                        on_marker(NVTX_STEP)
                return _orig(*args, **kwargs)

            wrapper.__stepscope__ = True  # type: ignore[attr-defined]
            functools.update_wrapper(wrapper, original)
            patch.apply(wrapper)
            self._patches.append(patch)
            patched.append(fn_name)
        cls = getattr(module, "annotate", None)
        if isinstance(cls, type) and callable(getattr(cls, "__enter__", None)) and not self._patched(cls):
            enter_patch = _Patch.of(cls, "__enter__")
            original_enter = enter_patch.original

            @functools.wraps(original_enter)
            def __enter__(obj: Any) -> Any:
                if enter_patch.active:
                    attrs = getattr(obj, "attributes", None)
                    msg = getattr(attrs, "message", None)
                    msg = getattr(msg, "string", msg)
                    if self._is_step_range(msg):
                        on_marker(NVTX_STEP)
                return original_enter(obj)

            enter_patch.apply(__enter__)
            self._patches.append(enter_patch)
            patched.append("annotate")
        self.installed[module.__name__] = (f"patched {', '.join(patched)}" if patched
                                           else "not patched: no NVTX range functions")

