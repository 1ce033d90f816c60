"""Findings that appeared, went away, or changed severity or saving between BASE and NEW.

Findings are matched by rule id (a rule that fired on several ranks counts once, by its
largest saving). With several runs on a side, a finding is on that side when it fired in
more than half of its runs; its saving is the mean over the side's runs (0 where it did not
fire), its severity and title those of its largest saving. A finding on both sides is
``changed`` when its severity differs or its saving moved by more than
``max(CHANGE_MS, CHANGE_SHARE x BASE's saving)``, else ``unchanged``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepscope.advisor import Advice, Finding

CHANGE_MS = 0.05
CHANGE_SHARE = 0.10


@dataclass(frozen=True)
class FindingSide:
    severity: str
    title: str
    est_saving_ms: float  # mean over the side's runs
    est_saving_pct: float  # mean over the runs it fired in
    runs: int  # how many of the side's runs it fired in
    of: int


@dataclass(frozen=True)
class FindingChange:
    id: str
    category: str
    status: str  # appeared | gone | changed | unchanged
    base: FindingSide | None
    new: FindingSide | None

    @property
    def delta_saving_ms(self) -> float:
        return ((self.new.est_saving_ms if self.new else 0.0)
                - (self.base.est_saving_ms if self.base else 0.0))


def _side(advices: Sequence[Advice]) -> dict[str, tuple[str, FindingSide]]:
    """id -> (category, the side's view of it), for the findings on this side."""
    per_run: list[dict[str, Finding]] = []
    for adv in advices:
        best: dict[str, Finding] = {}
        for f in adv.findings:
            if f.id not in best or f.est_saving_ms > best[f.id].est_saving_ms:
                best[f.id] = f
        per_run.append(best)
    k = len(per_run)
    out: dict[str, tuple[str, FindingSide]] = {}
    for fid in {i for r in per_run for i in r}:
        fired = [r[fid] for r in per_run if fid in r]
        if 2 * len(fired) <= k:
            continue
        top = max(fired, key=lambda f: f.est_saving_ms)
        out[fid] = (top.category, FindingSide(
            severity=top.severity.value, title=top.title,
            est_saving_ms=sum(f.est_saving_ms for f in fired) / k,
            est_saving_pct=sum(f.est_saving_pct for f in fired) / len(fired),
            runs=len(fired), of=k))
    return out


def compare_findings(base: Sequence[Advice], new: Sequence[Advice]) -> list[FindingChange]:
    """Every finding on either side, appeared / gone / changed first, by saving moved."""
    b, n = _side(base), _side(new)
    out = []
    for fid in b.keys() | n.keys():
        cat = (n.get(fid) or b[fid])[0]
        fb, fn = (b[fid][1] if fid in b else None), (n[fid][1] if fid in n else None)
        if fb is None:
            status = "appeared"
        elif fn is None:
            status = "gone"
        else:
            moved = abs(fn.est_saving_ms - fb.est_saving_ms)
            changed = (fb.severity != fn.severity
                       or moved > max(CHANGE_MS, CHANGE_SHARE * fb.est_saving_ms))
            status = "changed" if changed else "unchanged"
        out.append(FindingChange(fid, cat, status, fb, fn))
    order = {"appeared": 0, "gone": 0, "changed": 0, "unchanged": 1}
    return sorted(out, key=lambda c: (order[c.status], -abs(c.delta_saving_ms), c.id))
