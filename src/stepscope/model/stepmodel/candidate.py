"""A remedy before its replay: a :class:`Candidate` (id, title, the findings it answers, its
evidence) with its :class:`Option` s, each an :data:`Edit` of a step model (the catalogue:
``catalog``, ``kernel_remedies``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stepscope.model.stepmodel.steps import StepModel

Edit = Callable[[StepModel], StepModel]


@dataclass(frozen=True)
class Option:
    name: str
    title: str
    apply: Edit = field(compare=False, repr=False)
    assumptions: tuple[str, ...] = ()
    # applied after the other remedies' edits where several are replayed together: its edit
    # reads the step they leave (the loader's wait left depends on the compute beside it)
    last: bool = False


@dataclass(frozen=True)
class Candidate:
    """A remedy that applies to a rank's model, before its replay."""

    id: str
    title: str
    finding_ids: tuple[str, ...]  # the findings it answers (those that fired are kept)
    evidence: tuple[str, ...]
    options: tuple[Option, ...]  # one at least; the plan takes the best
    assumptions: tuple[str, ...] = ()


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


__all__ = ["Candidate", "Edit", "Option", "ms"]
