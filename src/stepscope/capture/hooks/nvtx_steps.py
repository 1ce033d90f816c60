"""NVTX ranges as steps (``--nvtx NAME``): a step marker when a range named NAME opens.

Patched: ``torch.cuda.nvtx.range_push/range_start`` (``range()`` calls ``range_push``) and the
``nvtx`` package's ``push_range/start_range`` and ``annotate`` (its ``__enter__``).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from stepscope.capture.hooks.patching import OnStepMarker, Patch, patched

NVTX_MODULES = ("torch.cuda.nvtx", "nvtx")
NVTX_STEP = "nvtx range"  # the step source, as the manifest names it


def is_step_range(name: str, message: object) -> bool:
    """``NAME`` itself, or ``NAME`` followed by a space, ``#``, ``:`` or a digit."""
    if not isinstance(message, str) or not message.startswith(name):
        return False
    rest = message[len(name):]
    return not rest or rest[0] in " #:" or rest[0].isdigit()


def patch_nvtx(module: ModuleType, patches: list[Patch], on_marker: OnStepMarker,
               step_name: str) -> str:
    """Patch the module's range functions (appending to ``patches``); returns what was done."""
    done: list[str] = []
    for fn_name in ("range_push", "range_start", "push_range", "start_range"):
        original = getattr(module, fn_name, None)
        if not callable(original) or getattr(original, "__stepscope__", False):
            continue
        patch = Patch(module, fn_name, original)  # type: ignore[arg-type]  # a module's attribute

        def wrapper(*args: Any, _orig: Any = original, _patch: Patch = patch, **kwargs: Any) -> Any:
            if _patch.active:
                msg = args[0] if args else kwargs.get("msg", kwargs.get("message"))
                if is_step_range(step_name, msg):
                    on_marker(NVTX_STEP)
            return _orig(*args, **kwargs)

        wrapper.__stepscope__ = True  # type: ignore[attr-defined]
        functools.update_wrapper(wrapper, original)
        patch.apply(wrapper)
        patches.append(patch)
        done.append(fn_name)
    cls = getattr(module, "annotate", None)
    if isinstance(cls, type) and callable(getattr(cls, "__enter__", None)) and not patched(patches, cls):
        enter_patch = Patch.of(cls, "__enter__")
        original_enter = enter_patch.original

        @functools.wraps(original_enter)
        def __enter__(obj: Any) -> Any:
            if enter_patch.active:
                attrs = getattr(obj, "attributes", None)
                msg = getattr(attrs, "message", None)
                msg = getattr(msg, "string", msg)
                if is_step_range(step_name, msg):
                    on_marker(NVTX_STEP)
            return original_enter(obj)

        enter_patch.apply(__enter__)
        patches.append(enter_patch)
        done.append("annotate")
    return f"patched {', '.join(done)}" if done else "not patched: no NVTX range functions"
