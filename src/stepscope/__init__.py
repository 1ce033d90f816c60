"""stepscope: why is my GPU training step slow, and what should I change?"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from stepscope.api import Recording, record, step

__all__ = ["Recording", "__version__", "record", "step"]


def __getattr__(name: str) -> Any:
    """``Recording``, ``record`` and ``step`` (``stepscope.api``), imported on first use:
    ``import stepscope`` stays cheap (no numpy/pyarrow) for the command line."""
    if name in ("Recording", "record", "step"):
        from stepscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'stepscope' has no attribute {name!r}")
