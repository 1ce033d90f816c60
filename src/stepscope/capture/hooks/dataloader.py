"""PyTorch DataLoader hooks: input waits, and each loader's settings and worker processes.

In ``torch.utils.data.dataloader``, ``_BaseDataLoaderIter.__next__`` is wrapped to time each
batch fetch (an input wait), and ``DataLoader._get_iterator`` to read the loader's settings and
its worker processes once per iterator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from stepscope.capture.hooks.patching import Patch

DATALOADER_MODULE = "torch.utils.data.dataloader"

OnWait = Callable[[Any, int, int], None]  # (iterator, t0_ns, t1_ns); must not raise
OnIterator = Callable[[Any, Any], None]  # (loader, iterator); must not raise


def patch_dataloader(module: ModuleType, patches: list[Patch], *, clock: Callable[[], int],
                     on_wait: OnWait, on_iterator: OnIterator,
                     on_error: Callable[[str, str], None]) -> str:
    """Patch ``module`` (appending to ``patches``); returns what was done, for the manifest."""
    try:
        base = module._BaseDataLoaderIter
        loader_cls = module.DataLoader
        next_patch = Patch(base, "__next__", base.__dict__["__next__"])
        iter_patch = Patch(loader_cls, "_get_iterator", loader_cls.__dict__["_get_iterator"])
    except (AttributeError, KeyError) as e:
        on_error("dataloader_hook_unavailable",
                 f"DataLoader waits not captured: torch's DataLoader has no {e}")
        return f"not patched: this torch has no {e}"
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
    patches += [next_patch, iter_patch]
    return "patched"
