"""The plan restricted to subsets of its remedies: what two (or three...) fixes buy together.

A user rarely applies every remedy of the plan. For the remedies that help (each saves at
least ``remedies.MIN_SAVING_PCT`` alone; both of an alternative pair such as TF32 / bf16 AMP
are kept: a user may pick either), every subset of two or more is replayed on the step model
with those remedies' edits together, each remedy at its best option: one replay per subset,
not a sum of the remedies' savings. The subsets are chosen by :func:`choose`:

* every pair of the ``MAX_POOL`` remedies that save the most alone (the pool), but never two
  remedies of one alternative group (``remedies.ALTERNATIVES``: they are one choice);
* then the plan less one remedy, less two, ... (triples and larger subsets of the remedies
  the plan applies, the pool's remedies only), up to ``MAX_SUBSETS`` in all (every pair of the
  pool always fits); each size in the pool's order (largest saving first);
* never the set the plan itself applies (that is the plan).

Savings are taken as every remedy's (``remedies`` module docstring): from the step the report
calls the baseline (on a torch.profiler trace, the step without the profiler's cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

MAX_POOL = 8  # remedies the subsets are made of: 28 pairs at most
MAX_SUBSETS = 40  # replays per rank, pairs included


@dataclass(frozen=True)
class PlanSubset:
    """The plan restricted to ``remedy_ids`` (in the plan's order), each at ``options``."""

    remedy_ids: tuple[str, ...]
    options: tuple[str, ...]
    predicted_step_ms: float
    est_saving_ms: float
    est_saving_pct: float


def choose(ids: Sequence[str], plan_ids: Sequence[str],
           alternatives: Sequence[Sequence[str]] = (), *, max_pool: int = MAX_POOL,
           max_subsets: int = MAX_SUBSETS) -> list[tuple[int, ...]]:
    """Index tuples into ``ids`` (remedies by saving, largest first) of the subsets to replay
    (module docstring)."""
    pool = list(range(min(len(ids), max_pool)))
    group = {r: i for i, g in enumerate(alternatives) for r in g}
    whole = set(plan_ids)
    out: list[tuple[int, ...]] = []
    for a, b in combinations(pool, 2):
        if ids[a] in group and group.get(ids[b]) == group[ids[a]]:
            continue
        if {ids[a], ids[b]} != whole:
            out.append((a, b))
    inside = [i for i in pool if ids[i] in whole]
    for size in range(3, len(inside)):
        for sub in combinations(inside, size):
            if len(out) >= max_subsets:
                return out
            out.append(sub)
    return out


def plan_subsets(ids: Sequence[str], plan_ids: Sequence[str],
                 predict: Callable[[tuple[int, ...]], tuple[float, tuple[str, ...]]],
                 baseline_ms: float,
                 alternatives: Sequence[Sequence[str]] = ()) -> tuple[PlanSubset, ...]:
    """Each chosen subset (:func:`choose`) of the remedies ``ids`` (by saving, largest first)
    replayed: ``predict(indexes)`` is the predicted step (ms) with those remedies applied
    together, and the option each is taken at."""
    out = []
    for sub in choose(ids, plan_ids, alternatives):
        pred, options = predict(sub)
        saving = baseline_ms - pred
        out.append(PlanSubset(
            remedy_ids=tuple(ids[i] for i in sub), options=options,
            predicted_step_ms=round(pred, 4), est_saving_ms=round(saving, 4),
            est_saving_pct=round(100.0 * saving / baseline_ms, 2) if baseline_ms > 0 else 0.0))
    return tuple(out)


def best_pair(subsets: Sequence[PlanSubset]) -> PlanSubset | None:
    """The pair that saves the most (None without a pair)."""
    pairs = [s for s in subsets if len(s.remedy_ids) == 2]
    return max(pairs, key=lambda s: s.est_saving_ms, default=None)


__all__ = ["MAX_POOL", "MAX_SUBSETS", "PlanSubset", "best_pair", "choose", "plan_subsets"]
