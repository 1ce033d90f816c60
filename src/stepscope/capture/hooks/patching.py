"""One replaced attribute (``Patch``), undone on uninstall, and the step-marker callback type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

OnStepMarker = Callable[[str], None]  # (the step source, e.g. JAX_STEP); must not raise


class Patch:
    """One replaced class attribute; ``active`` turns the wrapper into a pass-through."""

    def __init__(self, owner: type, name: str, original: Any) -> None:
        self.owner = owner
        self.name = name
        self.original = original
        self.own = name in owner.__dict__  # False: inherited, so undo deletes our override
        self.wrapper: Any = None
        self.active = True

    @staticmethod
    def of(owner: type, name: str) -> Patch:
        """The attribute as the class holds it (its own), else as it inherits it."""
        return Patch(owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name))

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


def patched(patches: Sequence[Patch], cls: type) -> bool:
    """Whether ``cls`` already has one of ``patches`` (a class is patched once)."""
    return any(p.owner is cls for p in patches)
