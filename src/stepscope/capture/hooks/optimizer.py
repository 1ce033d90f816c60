"""PyTorch optimizer hook: a global ``register_optimizer_step_post_hook`` (torch >= 2.0).

Every ``Optimizer.step`` of the program calls ``on_step(optimizer)`` after it ran; which
optimizer paces the steps is the host capture's decision (``capture.host``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

OPTIMIZER_MODULE = "torch.optim.optimizer"
TORCH_STEP = "torch.optim.Optimizer.step"  # the step source, as the manifest names it

OnOptimizerStep = Callable[[Any], None]  # (optimizer); must not raise


def hook_optimizer(module: ModuleType, handles: list[Any], *, on_step: OnOptimizerStep,
                   on_error: Callable[[str, str], None]) -> str:
    """Register the hook (its handle appended to ``handles``); returns what was done."""
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        on_error("optimizer_hook_unavailable",
                 "optimizer steps not hooked (torch < 2.0): mark steps with stepscope.step()")
        return "not hooked: torch has no register_optimizer_step_post_hook"

    def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        on_step(optimizer)

    try:
        handles.append(register(post_hook))
    except Exception as e:
        on_error("optimizer_hook_unavailable", f"optimizer steps not hooked: {e}")
        return f"not hooked: {e}"
    return "hooked"
