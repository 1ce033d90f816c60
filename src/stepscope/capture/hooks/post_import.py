"""A post-import hook: a ``sys.meta_path`` finder that calls back once a watched module has run.

It finds nothing itself: it asks the finders after it, and wraps the loader of the watched
modules so that the callback runs right after the module's code (the real loader is put back
where the import system recorded the wrapper).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any


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

    def insert(self) -> None:
        """Watch imports from now on (first on ``sys.meta_path``)."""
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        """Stop watching; a finder already taken out (by the program) is no error."""
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

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
