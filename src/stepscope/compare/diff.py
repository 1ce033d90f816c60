"""``diff(BASE, NEW)``: did NEW's step get faster, slower, or stay the same, and where did the
change come from. A pure function of the two sides' analyses and advice.

Alignment, by step, never by wall-clock window:

* **Ranks.** When both sides have several ranks and the same ones, every rank is compared
  with itself, and the headline step of a run is, per step number steady on every rank,
  the slowest rank's time (the job waits for it). Otherwise one rank per side: the lowest
  rank both sides have (rank 0 of a job), else each side's lowest rank (two single-rank
  traces of different jobs); ``Diff.alignment`` says which.
* **Steps.** Each side's steady steps (``analysis.steady``: warm-up and rare outliers left
  out), pooled over the side's runs, are the samples of :func:`stats.shift_test`.
* **Steps recovered from periodicity.** Where no marker shows the steps, they are whole
  periods of the kernel stream grouped to about 2 ms (``analysis.periodicity``), so a faster
  run packs more periods into a step. When every compared sample's steps are periods of the
  same work (the same multiset of kernel names), each sample's per-step figures are scaled
  to BASE's first sample's periods per step: compared per unit of work. When the samples'
  steps are not the same work (one side has markers, or the periods differ), the step times
  do not measure the same thing: the verdict is inconclusive and ``alignment`` says why.
* **Causes.** The breakdown leaves GPU idle time that no recorded host event explains as
  ``idle`` where the rank recorded host ops (a recorded run holds none: there it splits that
  time as the idle model does, ``analysis.breakdown.host_idle``), and counts the idle time
  after a sync returns (the queue refilling) as ``launch``. The
  ``causes`` split the same time as the advisor does (``model.idle``): the GPU categories,
  then GPU idle time claimed by input waits, syncs (blocked, and the drain after them),
  step-boundary gaps, launch overhead and host work (with the unexplained rest). They sum to
  the mean step too.
* **Categories, kernels, ops.** Per steady step, the mean over the compared ranks, then over
  the side's runs; categories are the step-time breakdown, so they sum to the side's mean
  step (``mean_ms``), and their deltas to the difference of the means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from stepscope.advisor import Advice
from stepscope.analysis import Analysis
from stepscope.analysis.breakdown import CATEGORIES
from stepscope.compare.findings import FindingChange, compare_findings
from stepscope.compare.matching import Change, match
from stepscope.compare.sides import CAUSES, RankSample, Use, mean_uses, rank_sample
from stepscope.compare.stats import TEST_NAME, ShiftTest, Verdict, shift_test
from stepscope.errors import StepscopeError

DIFF_SCHEMA = "stepscope.diff/1"


@dataclass(frozen=True)
class Side:
    """One run of a side: its name (a path), its analysis and advice."""

    label: str
    analysis: Analysis
    advice: Advice


@dataclass(frozen=True)
class RunRef:
    label: str
    ranks: tuple[int, ...]  # the ranks compared
    steady_steps: int  # of the headline sample
    step_detail: str


@dataclass(frozen=True)
class CategoryChange:
    name: str
    base_ms: float
    new_ms: float

    @property
    def delta_ms(self) -> float:
        return self.new_ms - self.base_ms


@dataclass(frozen=True)
class RankDiff:
    base_rank: int
    new_rank: int
    step: ShiftTest
    categories: tuple[CategoryChange, ...]


@dataclass(frozen=True)
class Diff:
    base: tuple[RunRef, ...]
    new: tuple[RunRef, ...]
    alignment: str  # one line: which ranks were compared, how steps were matched
    test: str  # the test's name
    step: ShiftTest  # the headline: step times
    mean_ms: tuple[float, float]  # mean steady step, BASE and NEW (what categories sum to)
    categories: tuple[CategoryChange, ...]  # largest |delta| first
    causes: tuple[CategoryChange, ...]  # GPU categories + the idle split (sides.CAUSES)
    kernels: tuple[Change, ...]  # largest |delta| first
    ops: tuple[Change, ...]
    findings: tuple[FindingChange, ...]
    ranks: tuple[RankDiff, ...]  # per rank when several are compared, else empty

    @property
    def verdict(self) -> Verdict:
        return self.step.verdict

    def slower_than(self, pct: float) -> bool:
        """NEW is slower than BASE by more than ``pct`` percent with the test's confidence:
        the lower end of the interval is above it."""
        lo = self.step.interval_pct[0]
        return math.isfinite(lo) and lo > pct


def _rank_plan(base: Sequence[Analysis], new: Sequence[Analysis]) -> tuple[
        list[tuple[int, int]], str]:
    """(base rank, new rank) pairs to compare and the line that says so (module docstring)."""
    def ranks(side: Sequence[Analysis]) -> set[int]:
        sets = [{ra.rank for ra in a.ranks if ra.steps.steady} for a in side]
        return set.intersection(*sets) if sets else set()

    rb, rn = ranks(base), ranks(new)
    if not rb or not rn:
        which = "BASE" if not rb else "NEW"
        raise StepscopeError(f"{which} has no rank with steady steps (no steps were found)")
    if len(rb) > 1 and rb == rn:
        rs = sorted(rb)
        return [(r, r) for r in rs], (f"ranks {_span(rs)}, each against itself; a step's time "
                                      f"is its slowest rank's, per step number")
    common = rb & rn
    if common:
        r = min(common)
        more = (f", the lowest rank both sides have (BASE: {_ranks(len(rb))}, NEW: "
                f"{_ranks(len(rn))})" if len(rb) > 1 or len(rn) > 1 else "")
        return [(r, r)], f"rank {r}{more}"
    b, n = min(rb), min(rn)
    return [(b, n)], f"BASE rank {b} against NEW rank {n} (no rank in common)"


def _ranks(n: int) -> str:
    return "1 rank" if n == 1 else f"{n} ranks"


def _span(rs: list[int]) -> str:
    return f"{rs[0]}-{rs[-1]}" if rs == list(range(rs[0], rs[-1] + 1)) else ", ".join(map(str, rs))


def _headline(samples: list[RankSample]) -> list[float]:
    """A run's step times: one rank's steady steps, or per step number steady on every
    rank, the slowest rank's time."""
    if len(samples) == 1:
        return list(samples[0].steps_ms)
    per = [dict(zip(s.step_numbers, s.steps_ms)) for s in samples]
    common = sorted(set.intersection(*(set(p) for p in per)))
    if not common:  # ranks numbered their steps apart: the first rank's steps
        return list(samples[0].steps_ms)
    return [max(p[k] for p in per) for k in common]


def _mean_over(samples: Sequence[RankSample], field: str, names: tuple[str, ...]
               ) -> dict[str, float]:
    """The samples' mean ms per steady step of each of ``names`` in their ``field``
    (``categories_ms`` or ``causes_ms``)."""
    return {c: float(np.mean([getattr(s, field).get(c, 0.0) for s in samples])) if samples
            else 0.0 for c in names}


def _categories(b: dict[str, float], n: dict[str, float],
                names: tuple[str, ...] = CATEGORIES) -> tuple[CategoryChange, ...]:
    rows = [CategoryChange(c, b.get(c, 0.0), n.get(c, 0.0)) for c in names]
    return tuple(sorted(rows, key=lambda r: -abs(r.delta_ms)))


def _uses(side: list[list[RankSample]], kind: str) -> dict[str, Use]:
    per_run = [mean_uses([getattr(s, kind) for s in run]) for run in side]
    return mean_uses(per_run)


def compare(base: Sequence[Side], new: Sequence[Side], *, confidence: float = 0.95,
            margin_pct: float = 2.0) -> Diff:
    """The diff of NEW against BASE (module docstring); each side one run or several."""
    if not base or not new:
        raise StepscopeError("diff needs at least one run on each side")
    if not 0.5 <= confidence < 1.0:
        raise StepscopeError(f"confidence {confidence} is not in [0.5, 1)")
    if not margin_pct >= 0:
        raise StepscopeError(f"margin {margin_pct}% is negative")
    plan, alignment = _rank_plan([s.analysis for s in base], [s.analysis for s in new])

    def sample(side: Sequence[Side], pick: int) -> list[list[RankSample]]:
        return [[rank_sample(s.analysis, s.analysis.rank(p[pick])) for p in plan] for s in side]

    sb, sn = sample(base, 0), sample(new, 1)
    sb, sn, work_note, comparable = _per_work(sb, sn)
    alignment += work_note
    heads_b, heads_n = [_headline(r) for r in sb], [_headline(r) for r in sn]
    step = shift_test(np.array(sum(heads_b, []), dtype=np.float64),
                      np.array(sum(heads_n, []), dtype=np.float64),
                      confidence=confidence, margin_pct=margin_pct)
    if not comparable:
        step = replace(step, verdict=Verdict.INCONCLUSIVE,
                       reason="the two sides' steps are not the same work (see alignment)")
    cat_b = _mean_runs([_mean_over(r, "categories_ms", CATEGORIES) for r in sb])
    cat_n = _mean_runs([_mean_over(r, "categories_ms", CATEGORIES) for r in sn])
    cause_b = _mean_runs([_mean_over(r, "causes_ms", CAUSES) for r in sb], CAUSES)
    cause_n = _mean_runs([_mean_over(r, "causes_ms", CAUSES) for r in sn], CAUSES)
    ranks: list[RankDiff] = []
    if len(plan) > 1:
        for i, (rb, rn) in enumerate(plan):
            t = shift_test(np.array([x for r in sb for x in r[i].steps_ms]),
                           np.array([x for r in sn for x in r[i].steps_ms]),
                           confidence=confidence, margin_pct=margin_pct)
            ranks.append(RankDiff(rb, rn, t, _categories(
                _mean_runs([r[i].categories_ms for r in sb]),
                _mean_runs([r[i].categories_ms for r in sn]))))
    return Diff(
        base=tuple(_ref(s, r, h) for s, r, h in zip(base, sb, heads_b)),
        new=tuple(_ref(s, r, h) for s, r, h in zip(new, sn, heads_n)),
        alignment=alignment, test=TEST_NAME, step=step,
        mean_ms=(_mean_of(sb), _mean_of(sn)),
        categories=_categories(cat_b, cat_n),
        causes=_categories(cause_b, cause_n, CAUSES),
        kernels=tuple(match(_uses(sb, "kernels"), _uses(sn, "kernels"))),
        ops=tuple(match(_uses(sb, "ops"), _uses(sn, "ops"))),
        findings=tuple(compare_findings([s.advice for s in base], [s.advice for s in new])),
        ranks=tuple(ranks))


def _per_work(sb: list[list[RankSample]], sn: list[list[RankSample]]) -> tuple[
        list[list[RankSample]], list[list[RankSample]], str, bool]:
    """Steps recovered from periodicity, scaled to the same work (module docstring): the
    samples, a note for ``alignment`` and whether the sides' steps are comparable."""
    works = [s.work for side in (sb, sn) for run in side for s in run]
    if all(w is None for w in works):
        return sb, sn, "", True
    if any(w is None for w in works) or len({w.signature for w in works if w}) > 1:
        return sb, sn, ("; the steps are not the same work (recovered from the periodicity "
                        "of different kernel streams, or markers on one side only): step "
                        "times are not comparable, add a step marker to both"), False
    ref = sb[0][0].work
    assert ref is not None
    grouped = {w.periods for w in works if w}
    if len(grouped) == 1:
        return sb, sn, "", True

    def scale(side: list[list[RankSample]]) -> list[list[RankSample]]:
        return [[s.scaled(ref.periods / s.work.periods) if s.work else s for s in run]
                for run in side]

    def span(side: list[list[RankSample]]) -> str:
        ps = sorted({s.work.periods for run in side for s in run if s.work})
        return str(ps[0]) if len(ps) == 1 else f"{ps[0]}-{ps[-1]}"

    return scale(sb), scale(sn), (
        f"; steps recovered from the periodicity of the kernel stream (a period of "
        f"{ref.kernels} kernels) hold BASE {span(sb)}, NEW {span(sn)} periods: every step "
        f"scaled to {ref.periods} periods, compared per unit of work"), True


def _mean_runs(dicts: list[dict[str, float]],
               names: tuple[str, ...] = CATEGORIES) -> dict[str, float]:
    return {c: float(np.mean([d.get(c, 0.0) for d in dicts])) for c in names}


def _mean_of(samples: list[list[RankSample]]) -> float:
    """The side's mean steady step, as the categories add up: over ranks, then runs."""
    return float(np.mean([np.mean([np.mean(s.steps_ms) for s in run]) for run in samples]))


def _ref(side: Side, samples: list[RankSample], head: list[float]) -> RunRef:
    return RunRef(label=side.label, ranks=tuple(s.rank for s in samples),
                  steady_steps=len(head), step_detail=samples[0].step_detail)
