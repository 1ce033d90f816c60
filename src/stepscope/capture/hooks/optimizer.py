"""PyTorch optimizer hook: a global ``register_optimizer_step_post_hook`` (torch >= 2.0).

Every ``Optimizer.step`` of the program calls ``on_step(optimizer)`` after it ran; which
optimizer paces the steps is the host capture's decision (``capture.step_boundaries``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

OPTIMIZER_MODULE = "torch.optim.optimizer"
TORCH_STEP = "torch.optim.Optimizer.step"  # the step source, as the manifest names it

OnOptimizerStep = Callable[[Any], None]  # (optimizer); must not raise


class OptimizerHook:
    """The registered post-hook, and how it comes out. Taking it out while an optimizer step runs
    its post-hooks (the capture window closing on a step boundary: this hook's own call) changes
    the dict torch is iterating over, and with a hook registered after it (the program's own)
    torch raises "OrderedDict mutated during iteration" in the program's ``step()``. So inside a
    step it is only switched off; the next ``remove()`` from outside a step takes it out."""

    def __init__(self, on_step: OnOptimizerStep) -> None:
        self._on_step = on_step
        self.handle: Any = None
        self.active = True
        self._local = threading.local()  # depth of this hook's calls on the current thread

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            self._on_step(optimizer)
        finally:
            self._local.depth -= 1

    def remove(self) -> bool:
        """Switch the hook off, and take it out unless called from inside it. True: taken out."""
        self.active = False
        if self.handle is None:
            return True
        if getattr(self._local, "depth", 0) > 0:
            return False
        self.handle.remove()
        self.handle = None
        return True


def hook_optimizer(module: ModuleType, handles: list[Any], *, on_step: OnOptimizerStep,
                   on_error: Callable[[str, str], None]) -> str:
    """Register the hook (an ``OptimizerHook`` appended to ``handles``); returns what was done."""
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        on_error("optimizer_hook_unavailable",
                 "optimizer steps not hooked (torch < 2.0): mark steps with stepscope.step()")
        return "not hooked: torch has no register_optimizer_step_post_hook"
    hook = OptimizerHook(on_step)
    try:
        hook.handle = register(hook)
        handles.append(hook)
    except Exception as e:
        on_error("optimizer_hook_unavailable", f"optimizer steps not hooked: {e}")
        return f"not hooked: {e}"
    return "hooked"


def optimizer_built() -> bool:
    """Whether the program has built a ``torch.optim`` optimizer, without importing torch or
    patching anything: the first instance of an optimizer class wraps that class's ``step`` and
    marks it ``hooked`` (``Optimizer._patch_step_function``, torch >= 1.8). Never raises."""
    module = sys.modules.get(OPTIMIZER_MODULE)
    base = getattr(module, "Optimizer", None) if module is not None else None
    if not isinstance(base, type):
        return False
    try:
        todo: list[type] = [base]
        seen: set[type] = set()
        while todo:
            cls = todo.pop()
            if cls in seen:
                continue
            seen.add(cls)
            if getattr(cls.__dict__.get("step"), "hooked", False):
                return True
            todo.extend(cls.__subclasses__())
    except Exception:  # noqa: BLE001 - a probe must never break the program
        return False
    return False
