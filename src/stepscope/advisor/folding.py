"""Findings that are one problem seen twice, folded into one after the rules ran.

A straggler: in a job whose ranks meet at every collective, the late rank's own idle-GPU
findings (host work, input, launches, syncs, gaps between steps: where its time goes) are the
*cause* of the straggler finding, and fixing them saves what the other ranks wait - the
straggler's figure - not the late rank's own idle time, which the others' step does not
contain. Those findings of the late rank are folded into the straggler finding: their titles
become its evidence ("on rank N: ..."), their first fix line is added to its fix; any other
rank's findings and every other category stay as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from stepscope.advisor.base import Finding, Fix

STRAGGLER = "straggler"
CAUSE_CATEGORIES = frozenset({"host", "input", "launch", "sync"})


def fold(findings: Sequence[Finding]) -> list[Finding]:
    out = list(findings)
    for s in [f for f in out if f.id == STRAGGLER and f.where.rank is not None]:
        causes = [f for f in out if f is not s and f.category in CAUSE_CATEGORIES
                  and f.where.rank == s.where.rank]
        if not causes:
            continue
        evidence = list(s.evidence)
        fix = s.fix
        for c in causes:
            evidence.append(f"on rank {s.where.rank}: {c.title} (its {c.id} finding, folded "
                            f"here: fixing it saves what the other ranks wait)")
            fix = Fix(**{k: _join(getattr(fix, k), getattr(c.fix, k))
                         for k in ("pytorch", "tensorflow", "jax", "cuda")})
        merged = dataclasses.replace(s, evidence=tuple(evidence), fix=fix)
        out = [merged if f is s else f for f in out if f not in causes]
    return out


def _join(a: str, b: str) -> str:
    first = b.split("\n", 1)[0].strip()
    if not first:
        return a
    return f"{a} On that rank: {first}" if a else first


__all__ = ["fold"]
