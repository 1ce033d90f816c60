"""Advice by remedy: each fix replayed on the step model, and the plan (all of them at once).

Per rank, the step model (``model.stepmodel``) of a representative steady step is built and
replayed; its replay error against the measured median step is reported for every rank
(:class:`StepModelFit`). Remedies are judged on one rank: the slowest (largest median steady
step). Each candidate of the catalogue (``model.stepmodel.catalog``) is replayed alone, every
option of it; the remedy's prediction is its best option's. The **plan** applies every remedy
that helps, together, in one replay (TF32 and bf16 AMP are alternatives: the better one).

Savings are the replay's relative change applied to the measured step:
``predicted_step_ms = measured_ms * replay(edited) / replay(model)``: the replay decides what
overlaps, its error on the unedited step does not enter the saving. On a torch.profiler trace
the remedies edit the model without the profiler's host cost (``stepmodel.profiler``): the
``baseline_ms`` is then ``measured_ms * replay(untraced) / replay(model)``, the step predicted
for the program run without the profiler, and ``est_saving_ms = baseline_ms -
predicted_step_ms`` (elsewhere ``baseline_ms`` is the measured step).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.advisor.base import Finding
from stepscope.analysis import Analysis, RankAnalysis
from stepscope.model.profiler_cost import costs_for
from stepscope.model.stepmodel import StepModel, build_step_model, replay
from stepscope.model.stepmodel.catalog import Candidate, Option, candidates
from stepscope.model.stepmodel.profiler import untraced

MIN_SAVING_PCT = 1.0  # a remedy no finding asked for is listed from this saving on
MAX_FIT_RANKS = 8  # beyond this many ranks, the fit is reported for the judged rank only
ALTERNATIVES = (("tf32", "bf16_amp"),)  # remedies of which the plan takes one


@dataclass(frozen=True)
class StepModelFit:
    rank: int
    step_index: int
    measured_ms: float
    replayed_ms: float
    error_pct: float
    host_busy_ms: float  # the busiest host thread, per step
    gpu_busy_ms: float  # union over the rank's streams, per step


@dataclass(frozen=True)
class RemedyOption:
    name: str
    title: str
    predicted_step_ms: float
    est_saving_ms: float
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Remedy:
    id: str
    title: str
    rank: int
    finding_ids: tuple[str, ...]
    baseline_ms: float  # the step the saving is taken from (module docstring)
    predicted_step_ms: float
    est_saving_ms: float
    est_saving_pct: float
    option: str  # the best option's name
    options: tuple[RemedyOption, ...]
    evidence: tuple[str, ...]
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    rank: int
    measured_ms: float
    baseline_ms: float
    predicted_step_ms: float
    est_saving_ms: float
    est_saving_pct: float
    remedy_ids: tuple[str, ...]
    options: tuple[str, ...]  # the option taken for each remedy, in order


@dataclass(frozen=True)
class RemedyAdvice:
    fits: tuple[StepModelFit, ...]
    remedies: tuple[Remedy, ...]  # by saving, largest first
    plan: Plan | None


def _fit(m: StepModel) -> tuple[StepModelFit, float]:
    r = replay(m)
    meas = m.measured_ns / 1e6
    err = 100.0 * (r.step_ms - meas) / meas if meas > 0 else 0.0
    return StepModelFit(m.rank, m.step_index, round(meas, 4), round(r.step_ms, 4), round(err, 2),
                        round(max(r.host_busy_ns, default=0) / 1e6, 4),
                        round(r.gpu_busy_ns / 1e6, 4)), r.step_ns


def remedy_advice(analysis: Analysis, findings: tuple[Finding, ...] = ()) -> RemedyAdvice:
    """Step-model fits per rank, the remedies of the slowest rank and their plan."""
    ranks = [ra for ra in analysis.ranks if ra.steps.steady]
    if not ranks:
        return RemedyAdvice((), (), None)
    judged = max(ranks, key=_median_span)
    fit_ranks = ranks if len(ranks) <= MAX_FIT_RANKS else [judged]
    fits: list[StepModelFit] = []
    model: StepModel | None = None
    base_ns = 0.0
    costs = costs_for(analysis.graph)
    for ra in fit_ranks:
        m = build_step_model(analysis.graph.rank(ra.rank), ra, costs)
        if m is None:
            continue
        f, step_ns = _fit(m)
        fits.append(f)
        if ra.rank == judged.rank:
            model, base_ns = m, step_ns
    if model is None or base_ns <= 0:
        return RemedyAdvice(tuple(fits), (), None)
    fired = {f.id for f in findings}
    meas = model.measured_ns / 1e6
    model = untraced(model)
    baseline = _predict(model, base_ns, meas)
    out: list[tuple[Remedy, Option]] = []
    for c in candidates(analysis, judged, model):
        r, o = _judge(c, model, base_ns, meas, baseline, judged.rank, fired)
        # a remedy answers a finding that fired, or saves enough by itself to be said
        if r.finding_ids or r.est_saving_pct >= MIN_SAVING_PCT:
            out.append((r, o))
    out.sort(key=lambda x: (-x[0].est_saving_ms, x[0].id))
    return RemedyAdvice(tuple(fits), tuple(r for r, _ in out),
                        _plan(out, model, base_ns, meas, baseline, judged.rank))


def _median_span(ra: RankAnalysis) -> float:
    spans = sorted(s.span_ns for s in ra.steps.steady)
    return float(spans[len(spans) // 2]) if spans else 0.0


def _predict(m: StepModel, base_ns: float, meas: float) -> float:
    return meas * replay(m).step_ns / base_ns


def _judge(c: Candidate, m: StepModel, base_ns: float, meas: float, baseline: float,
           rank: int, fired: set[str]) -> tuple[Remedy, Option]:
    opts = [(o, _predict(o.apply(m), base_ns, meas)) for o in c.options]
    best, pred = min(opts, key=lambda x: x[1])
    saving = baseline - pred
    return Remedy(
        id=c.id, title=c.title, rank=rank,
        finding_ids=tuple(f for f in c.finding_ids if f in fired), baseline_ms=round(baseline, 4),
        predicted_step_ms=round(pred, 4), est_saving_ms=round(saving, 4),
        est_saving_pct=round(100.0 * saving / baseline, 2) if baseline > 0 else 0.0,
        option=best.name,
        options=tuple(RemedyOption(o.name, o.title, round(p, 4), round(baseline - p, 4),
                                   o.assumptions) for o, p in opts),
        evidence=c.evidence, assumptions=c.assumptions + best.assumptions), best


def _plan(out: list[tuple[Remedy, Option]], m: StepModel, base_ns: float, meas: float,
          baseline: float, rank: int) -> Plan | None:
    helping = [(r, o) for r, o in out if r.est_saving_ms > 0]
    for group in ALTERNATIVES:  # keep the best of alternatives (``out`` is by saving)
        seen = False
        kept = []
        for r, o in helping:
            if r.id in group:
                if seen:
                    continue
                seen = True
            kept.append((r, o))
        helping = kept
    if not helping:
        return None
    x = m
    for _, o in helping:
        x = o.apply(x)
    pred = _predict(x, base_ns, meas)
    return Plan(rank=rank, measured_ms=round(meas, 4), baseline_ms=round(baseline, 4),
                predicted_step_ms=round(pred, 4), est_saving_ms=round(baseline - pred, 4),
                est_saving_pct=round(100.0 * (baseline - pred) / baseline, 2)
                if baseline > 0 else 0.0,
                remedy_ids=tuple(r.id for r, _ in helping),
                options=tuple(o.name for _, o in helping))


__all__ = ["Plan", "Remedy", "RemedyAdvice", "RemedyOption", "StepModelFit", "remedy_advice"]
