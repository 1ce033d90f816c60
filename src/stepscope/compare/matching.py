"""Which kernel (or op) of NEW is which of BASE, when a rebuild renamed it slightly.

Matching, in this order (each name is matched once):

1. **by name**: the same name on both sides;
2. **by normalised name and launch configuration**: among the names left, those whose
   :func:`normalise` forms are equal and whose launch configuration (grid and block, the one
   with the most time under the name) is the same; the largest by time pair first;
3. **by normalised name**: a normalised form left with exactly one name on each side.

What is left is *new* (only in NEW) or *gone* (only in BASE). The normalised form drops
what changes between builds of one kernel: a leading ``void``, hex literals and hash-like
runs of hex digits (``triton_poi_fused_add_0`` / ``_1``, ``sm90_xmma_..._0x1a2b3c4d``), and
every run of decimal digits (template arguments and tile sizes: ``<128, 4>``), so two
templated instances that differ only in numbers match only where rule 2 or 3 allows.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from stepscope.compare.sides import Use

_HEX_LITERAL = re.compile(r"0x[0-9a-fA-F]+")
_HEX_HASH = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}"
                       r"(?![0-9A-Za-z])")
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")

BY_NAME = "name"
BY_CONFIG = "normalised name and launch configuration"
BY_FORM = "normalised name"


def normalise(name: str) -> str:
    """The form of ``name`` that survives a rebuild (module docstring)."""
    s = name.strip().removeprefix("void ")
    s = _HEX_LITERAL.sub("0x#", s)
    s = _HEX_HASH.sub("#", s)
    s = _DIGITS.sub("#", s)
    return _SPACE.sub(" ", s)


@dataclass(frozen=True)
class Change:
    """One kernel or op, per steady step on each side (None: absent there)."""

    name: str  # NEW's name, else BASE's
    base_name: str | None
    new_name: str | None
    base: Use | None
    new: Use | None
    matched_by: str  # BY_NAME, BY_CONFIG, BY_FORM; "" for new and gone

    @property
    def base_ms(self) -> float:
        return self.base.ms if self.base else 0.0

    @property
    def new_ms(self) -> float:
        return self.new.ms if self.new else 0.0

    @property
    def delta_ms(self) -> float:
        return self.new_ms - self.base_ms

    @property
    def status(self) -> str:
        """``matched`` (on both sides), ``new`` or ``gone``."""
        return "matched" if self.base and self.new else ("new" if self.new else "gone")


def match(base: dict[str, Use], new: dict[str, Use]) -> list[Change]:
    """Every name of either side, paired (module docstring), largest ``|delta_ms|`` first."""
    out = [Change(n, n, n, base[n], new[n], BY_NAME) for n in base.keys() & new.keys()]
    forms_b: dict[str, list[str]] = defaultdict(list)
    forms_n: dict[str, list[str]] = defaultdict(list)
    for n in base.keys() - new.keys():
        forms_b[normalise(n)].append(n)
    for n in new.keys() - base.keys():
        forms_n[normalise(n)].append(n)
    for form in forms_b.keys() & forms_n.keys():
        bs = sorted(forms_b[form], key=lambda n: (-base[n].ms, n))
        ns = sorted(forms_n[form], key=lambda n: (-new[n].ms, n))
        for b in list(bs):
            cfg = base[b].config
            twin = next((n for n in ns if cfg is not None and new[n].config == cfg), None)
            if twin is not None:
                out.append(Change(twin, b, twin, base[b], new[twin], BY_CONFIG))
                bs.remove(b)
                ns.remove(twin)
        if len(bs) == 1 and len(ns) == 1:
            out.append(Change(ns[0], bs[0], ns[0], base[bs[0]], new[ns[0]], BY_FORM))
            bs, ns = [], []
        forms_b[form], forms_n[form] = bs, ns
    out += [Change(n, n, None, base[n], None, "") for ns_ in forms_b.values() for n in ns_]
    out += [Change(n, None, n, None, new[n], "") for ns_ in forms_n.values() for n in ns_]
    return sorted(out, key=lambda c: (-abs(c.delta_ms), c.name))
