"""The frameworks a profiled program has imported, read from ``sys.modules`` at the end of its
capture (``capture.bootstrap`` writes them to the partition's meta): the advice speaks in the
fixes of those frameworks."""

from __future__ import annotations

import sys
from collections.abc import Mapping

# the frameworks whose fixes the advice can speak in, by the module that says they are in use
FRAMEWORK_MODULES = (("pytorch", "torch"), ("jax", "jax"), ("tensorflow", "tensorflow"),
                     ("cupy", "cupy"), ("triton", "triton"), ("numba", "numba.cuda"))


def frameworks_loaded(modules: Mapping[str, object] | None = None) -> list[str]:
    """The frameworks imported by the program (``sys.modules``; nothing is imported here)."""
    mods = sys.modules if modules is None else modules
    return [name for name, module in FRAMEWORK_MODULES if module in mods]


__all__ = ["FRAMEWORK_MODULES", "frameworks_loaded"]
