"""Named fix variants of a scenario and the remedy ids each applies (issue 22, validation).

A scenario has a baseline and one or more fix variants; each variant is a real user fix (no
stepscope in the program) and names the remedies of stepscope's report it applies, so the
suite can score each remedy's ``predicted_step_ms`` against the variant's measured step.
Torch-free (the JAX/CuPy scenarios' processes import it).

Declarations in a scenario module (all optional):

``VARIANTS = {"tf32": ("tf32",), "bf16_amp": ("bf16_amp",)}``: variant name -> remedy ids, in
order; the first is the default fix (``build(True, ...)``, ``program.py --fixed``). A module
that declares ``VARIANTS`` takes ``build(fixed: bool | str, device)``, where a string names the
variant (``pick`` turns ``fixed`` into a name).
``FIX_REMEDIES = ("pinned_copies",)``: a module with one fix (``build(fixed: bool, ...)``):
its variant is called "fixed" and applies these remedies. Neither: a variant "fixed" with no
remedy id (not scored against remedies).
``TRAPS = ("remove_syncs",)``: variants whose fix is expected NOT to help (the advisor must not
promise a saving there).
``PLAN_COVERS = {"gpu_sort": ("pinned_copies", "remove_round_trip", "remove_syncs")}``: the
remedy ids whose combined plan the variant's measurement also checks (a fix that makes them
all moot); by default a variant covers its own remedies.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

# The report's remedy ids (issue 22 part 2; the step-model helper's catalogue).
REMEDY_IDS: tuple[str, ...] = (
    "cuda_graphs", "tf32", "bf16_amp", "channels_last", "pinned_copies", "remove_syncs",
    "remove_round_trip", "ops_to_gpu", "remove_callback", "dataloader_workers", "larger_batch", "comm_overlap",
)
DEFAULT_NAME = "fixed"


@dataclass(frozen=True)
class Variant:
    """One fix of a scenario: its name, the remedy ids it applies, whether it is a trap (a fix
    that must not help), and the remedy ids whose combined plan it also checks."""

    name: str
    remedies: tuple[str, ...]
    trap: bool = False
    covers: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "remedies": list(self.remedies), "trap": self.trap,
                "covers": list(self.covers)}


def variants_of(mod: ModuleType) -> tuple[Variant, ...]:
    """The module's fix variants, default first (see the module docstring)."""
    declared = getattr(mod, "VARIANTS", None)
    if declared:
        items = [(str(k), tuple(v)) for k, v in dict(declared).items()]
    else:
        items = [(DEFAULT_NAME, tuple(getattr(mod, "FIX_REMEDIES", ())))]
    traps = set(getattr(mod, "TRAPS", ()))
    covers = {str(k): tuple(v) for k, v in dict(getattr(mod, "PLAN_COVERS", {})).items()}
    out = []
    for name, rems in items:
        bad = [r for r in rems if r not in REMEDY_IDS]
        if bad:
            raise ValueError(f"{mod.__name__}: variant {name!r} names unknown remedies {bad}")
        out.append(Variant(name=name, remedies=rems, trap=name in traps,
                           covers=covers.get(name, rems)))
    return tuple(out)


def pick(fixed: bool | str, declared: dict[str, tuple[str, ...]]) -> str | None:
    """A module's ``build(fixed, ...)`` argument as a variant name: None for the baseline,
    the first declared variant for True, the name itself (checked) for a string."""
    if fixed is False:
        return None
    names = list(declared)
    if fixed is True:
        return names[0]
    if fixed not in declared:
        raise ValueError(f"unknown variant {fixed!r}; known: {', '.join(names)}")
    return fixed


def build_arg(mod: ModuleType, variant: str | None) -> bool | str:
    """What to pass as ``build``'s ``fixed`` for ``variant`` (None: the baseline)."""
    if variant is None:
        return False
    if getattr(mod, "VARIANTS", None):
        return variant
    if variant != DEFAULT_NAME:
        raise ValueError(f"{mod.__name__} has one fix, {DEFAULT_NAME!r}; not {variant!r}")
    return True


# A variant whose program changed under its name: (scenario, old name) -> the name that program
# has now. A result that lacks the new name measured the old program under the old name.
# cpu_ops_midstep's "pinned" sorted its pinned buffer in place until 2026-11-27, dropping a host
# copy that the pinned_copies remedy keeps (docs/accuracy.md, "The host's two speeds").
RENAMED: dict[tuple[str, str], str] = {("cpu_ops_midstep", "pinned"): "pinned_inplace"}


def measured_name(scenario: str, name: str, measured: Any) -> str:
    """The name, as declared now, of the variant a result measured as ``name``; ``measured``
    is the result's variant names (a result that has the new name measured both)."""
    new = RENAMED.get((scenario, name))
    return new if new is not None and new not in measured else name
