"""Advice by remedy: each fix replayed on the step model, and the plan (all of them at once).

Per rank, the step model (``model.stepmodel``) of a representative steady step is built and
replayed; its replay error against the measured median step is reported for every rank
(:class:`StepModelFit`). Remedies are judged on one rank: the slowest (largest median steady
step). Each candidate of the catalogue (``model.stepmodel.catalog``) is replayed alone, every
option of it; the remedy's prediction is its best option's. The **plan** applies every remedy
that saves at least ``MIN_SAVING_PCT``, together, in one replay (TF32 and bf16 AMP are
alternatives: the better one); its ``subsets`` replay subsets of those remedies together
(every pair at least: ``advisor.plan_subsets``). Each rank's fit, remedies and plan are a
per-rank fact (:func:`rank_remedies`, computed where the rank is analysed); the findings that
fired only choose which remedies are listed. A remedy that saves nothing alone but does once
the others are applied (TF32 behind an input wait) joins the plan and its subsets
(:func:`_enabled`).

Savings are the replay's relative change applied to the measured step:
``predicted_step_ms = measured_ms * replay(edited) / replay(model)``: the replay decides what
overlaps, its error on the unedited step does not enter the saving. On a torch.profiler trace
or a recorded run the remedies edit the model without the profiler's or the capture's host
cost and with the dispatch at the thread's typical speed (``stepmodel.profiler``,
``stepmodel.host_speed``): the ``baseline_ms`` is then ``measured_ms * replay(untraced) /
replay(model)``, the step predicted for the program run without the profiler, and
``est_saving_ms = baseline_ms - predicted_step_ms`` (elsewhere ``baseline_ms`` is the
measured step). Given the program's step measured without the profiler (``untraced_step_ms``,
``stepscope report --untraced-step-ms``), that model is first calibrated to it
(``stepmodel.calibrate``: its host side or its GPU side, whichever changes least with the
GPU's change weighed x3, scaled until it replays at that step): the ``baseline_ms`` is then the given step, and the remedies edit the
calibrated model (:class:`StepCalibration` says which side was scaled and how far, or that the
step was out of reach). A recorded run gives that step itself: the steps ``record`` timed after
its window (``AFTER_WINDOW``), or, where no step hook timed any, the captured step at the pace
the GPU's utilisation after the window implies (``PACED``, ``capture.util_pace``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from stepscope.advisor.base import Finding
from stepscope.advisor.plan_subsets import PlanSubset, plan_subsets
from stepscope.advisor.untraced import AFTER_WINDOW, GIVEN, PACED, StepCalibration, UntracedSteps
from stepscope.analysis import Analysis, RankAnalysis
from stepscope.analysis.results import FACT
from stepscope.model.profiler_cost import step_costs
from stepscope.model.stepmodel import StepModel, build_step_model, replay
from stepscope.model.stepmodel.calibrate import MAX_FACTOR, MIN_FACTOR, calibrate
from stepscope.model.stepmodel.catalog import Candidate, Option, candidates
from stepscope.model.stepmodel.profiler import untraced

MIN_SAVING_PCT = 1.0  # listed without a finding, and in the plan, from this saving on
ESTIMATED_BASE = 0.2  # tracing cost (share of the traced step) from which the baseline is flagged
MAX_FIT_RANKS = 8  # beyond this many ranks, the fit is reported for the judged rank only
ALTERNATIVES = (("tf32", "bf16_amp"),)  # remedies of which the plan takes one
# a calibration factor beyond these (or under their inverse) is far from the trace: the host
# moved 0.8-1.5x untraced (docs/accuracy.md), a GPU-bound step a few percent
FAR = {"host": 2.0, "gpu": 1.5}


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
    subsets: tuple[PlanSubset, ...] = ()  # the plan restricted to subsets (plan_subsets)


@dataclass(frozen=True)
class RemedyAdvice:
    fits: tuple[StepModelFit, ...]
    remedies: tuple[Remedy, ...]  # by saving, largest first
    plan: Plan | None
    calibration: StepCalibration | None = None


def _fit(m: StepModel) -> tuple[StepModelFit, float]:
    r = replay(m)
    meas = m.measured_ns / 1e6
    err = 100.0 * (r.step_ms - meas) / meas if meas > 0 else 0.0
    return StepModelFit(m.rank, m.step_index, round(meas, 4), round(r.step_ms, 4), round(err, 2),
                        round(max(r.host_busy_ns, default=0) / 1e6, 4),
                        round(r.gpu_busy_ns / 1e6, 4)), r.step_ns


@dataclass(frozen=True)
class RankRemedies:
    """One rank's step-model fit, every candidate remedy judged (``finding_ids``: every
    finding it answers, fired or not) and the plan: a per-rank fact, small to send back."""

    fit: StepModelFit
    remedies: tuple[Remedy, ...]
    plan: Plan | None
    calibration: StepCalibration | None = None


def rank_remedies(analysis: Analysis, ra: RankAnalysis,
                  untraced: UntracedSteps | None = None) -> RankRemedies | None:
    """Rank ``ra``'s fit, remedies and plan, memoised on its graph (a per-rank fact:
    ``advisor.rank_facts``; the step model itself is not kept); with ``untraced`` steps,
    calibrated to the rank's (module docstring)."""
    g = analysis.graph.rank(ra.rank)
    target = None if untraced is None else untraced.of(ra.rank)
    pace = None if untraced is None else untraced.pace_of(ra.rank)
    source = ("" if untraced is None else untraced.source if target is not None
              else PACED if pace is not None else "")
    return g.memo((FACT, "remedies", target, pace, source),
                  lambda: _rank_remedies(analysis, ra, target, source, pace))


def _rank_remedies(analysis: Analysis, ra: RankAnalysis, untraced_step_ms: float | None,
                   source: str = GIVEN, pace: float | None = None) -> RankRemedies | None:
    if not ra.steps.steady:
        return None
    g = analysis.graph.rank(ra.rank)
    model = build_step_model(g, ra, step_costs(analysis.graph, g))
    if model is None:
        return None
    fit, base_ns = _fit(model)
    if base_ns <= 0:
        return RankRemedies(fit, (), None)
    meas = model.measured_ns / 1e6
    if untraced_step_ms is None and pace is not None:
        untraced_step_ms = meas * pace  # the captured step at the untraced pace
    bare = untraced(model)
    baseline = _predict(bare, base_ns, meas)
    note = tracing_note(baseline, meas)
    cal = None
    ref_ns, ref_ms = base_ns, meas  # predictions: ref_ms * replay(edited) / ref_ns
    if untraced_step_ms is not None:
        bare, cal, note, replayed_ns = _calibrated(bare, ra.rank, untraced_step_ms, source,
                                                   baseline, base_ns, meas, note)
        if cal.reached:  # the calibrated model's own replay is the given step
            ref_ns, ref_ms, baseline = replayed_ns, untraced_step_ms, untraced_step_ms
    cands = candidates(analysis, ra, bare)
    out = [_judge(c, bare, ref_ns, ref_ms, baseline, ra.rank, note) for c in cands]
    out.sort(key=lambda x: (-x[0].est_saving_ms, x[0].id))
    return RankRemedies(fit, tuple(r for r, _ in out),
                        _plan(out, bare, ref_ns, ref_ms, baseline, ra.rank, meas,
                              {c.id: c.options for c in cands}), cal)


def _calibrated(bare: StepModel, rank: int, given: float, source: str, estimated: float,
                base_ns: float, meas: float, note: tuple[str, ...]
                ) -> tuple[StepModel, StepCalibration, tuple[str, ...], float]:
    """The untraced model calibrated to the untraced step (ms), the assumption every remedy
    then carries in place of the tracing note, and the calibrated model's replayed step (ns,
    ``calibrate`` replayed it)."""
    m, c = calibrate(bare, given * base_ns / meas)
    to_ms = meas / base_ns
    cal = StepCalibration(rank, source, round(given, 4), c.reached, c.side, round(c.factor, 4),
                          round(estimated, 4), round(c.floor_ns * to_ms, 4),
                          round(c.ceiling_ns * to_ms, 4))
    if not c.reached:
        return bare, cal, note + (
            f"not calibrated: the untraced step {source} ({given:.2f} ms) is out of the model's "
            f"reach ({cal.min_ms:.2f}-{cal.max_ms:.2f} ms with its host's or its GPU's time "
            f"x{MIN_FACTOR:g}-x{MAX_FACTOR:g}); the savings start from the trace's estimate",
        ), c.replayed_ns
    how = (f"the host's work and waits are taken x{c.factor:.2f}, the GPU work as traced"
           if c.side == "host" else
           f"the GPU work is taken x{c.factor:.2f}, the host as estimated without the tracing "
           "cost")
    out: tuple[str, ...] = (f"calibrated to the untraced step {source} ({given:.2f} ms; the "
                            f"trace alone estimates {estimated:.2f} ms): {how}",)
    if source == GIVEN and not 1 / FAR[c.side] <= c.factor <= FAR[c.side]:
        out += (f"the step given is far from the trace's ({c.side} x{c.factor:.2f}): check that "
                "it is the same step (one iteration, the same batch and model)",)
    return m, cal, out, c.replayed_ns


def remedy_advice(analysis: Analysis, findings: tuple[Finding, ...] = (),
                  untraced: UntracedSteps | None = None) -> RemedyAdvice:
    """Step-model fits per rank, the remedies of the slowest rank and their plan: a remedy
    is listed when it answers a finding that fired, saves ``MIN_SAVING_PCT`` by itself or is
    in the plan; with ``untraced`` steps, each rank's model calibrated to its own (module
    docstring)."""
    ranks = [ra for ra in analysis.ranks if ra.steps.steady]
    if not ranks:
        return RemedyAdvice((), (), None)
    judged = max(ranks, key=_median_span)
    fit_ranks = ranks if len(ranks) <= MAX_FIT_RANKS else [judged]
    per = {ra.rank: rank_remedies(analysis, ra, untraced) for ra in fit_ranks}
    fits = tuple(r.fit for r in per.values() if r is not None)
    mine = per.get(judged.rank)
    if mine is None:
        return RemedyAdvice(fits, (), None)
    fired = {f.id for f in findings}
    planned = set(mine.plan.remedy_ids) if mine.plan else set()
    listed = []
    for r in mine.remedies:
        ids = tuple(f for f in r.finding_ids if f in fired)
        if ids or r.est_saving_pct >= MIN_SAVING_PCT or r.id in planned:
            listed.append(replace(r, finding_ids=ids))
    return RemedyAdvice(fits, tuple(listed), mine.plan, mine.calibration)


def _median_span(ra: RankAnalysis) -> float:
    spans = sorted(s.span_ns for s in ra.steps.steady)
    return float(spans[len(spans) // 2]) if spans else 0.0


def tracing_note(baseline: float, meas: float) -> tuple[str, ...]:
    """The assumption every remedy carries when the tracing cost taken out is large (at least
    ``ESTIMATED_BASE`` of the traced step): the step the savings start from is an estimate."""
    if meas <= 0 or (meas - baseline) < ESTIMATED_BASE * meas:
        return ()
    return (f"the step without the tracing cost ({baseline:.2f} ms; {meas:.2f} ms as traced) is "
            "an estimate: the cost of each recorded host event is taken out, and an untraced "
            "host-bound step itself moves, 0.8-1.5x within one process on an H100; from one "
            "torch.profiler trace it came out 0.75-1.38x of the step measured untraced (23 "
            "host-bound test programs traced on H100s on two days, docs/accuracy.md); the "
            "saving in ms is as uncertain as that step: give the step your training log shows "
            "(stepscope report --untraced-step-ms)",)


def _predict(m: StepModel, base_ns: float, meas: float) -> float:
    return meas * replay(m).step_ns / base_ns


def _judge(c: Candidate, m: StepModel, base_ns: float, meas: float, baseline: float,
           rank: int, note: tuple[str, ...] = ()) -> tuple[Remedy, Option]:
    opts = [(o, _predict(o.apply(m), base_ns, meas)) for o in c.options]
    best, pred = min(opts, key=lambda x: x[1])
    saving = baseline - pred
    return Remedy(
        id=c.id, title=c.title, rank=rank,
        finding_ids=c.finding_ids, baseline_ms=round(baseline, 4),
        predicted_step_ms=round(pred, 4), est_saving_ms=round(saving, 4),
        est_saving_pct=round(100.0 * saving / baseline, 2) if baseline > 0 else 0.0,
        option=best.name,
        options=tuple(RemedyOption(o.name, o.title, round(p, 4), round(baseline - p, 4),
                                   o.assumptions) for o, p in opts),
        evidence=c.evidence, assumptions=c.assumptions + best.assumptions + note), best


def _best_of_alternatives(items: list[tuple[Remedy, Option]]) -> list[tuple[Remedy, Option]]:
    """``items`` with only the first of each group of ``ALTERNATIVES`` (they come best first)."""
    return _alternative_choices(items)[0]


def _alternative_choices(items: list[tuple[Remedy, Option]]
                         ) -> list[list[tuple[Remedy, Option]]]:
    """``items`` with one remedy of each group of ``ALTERNATIVES``, every way (the best alone
    first: ``items`` come best first)."""
    choices = [items]
    for group in ALTERNATIVES:
        members = [r.id for r, _ in items if r.id in group]
        choices = [[it for it in c if it[0].id not in group or it[0].id == keep]
                   for c in choices for keep in members] or choices
    return choices


def _enabled(out: list[tuple[Remedy, Option]], helping: list[tuple[Remedy, Option]],
             m: StepModel, base_ns: float, meas: float, baseline: float,
             options: dict[str, tuple[Option, ...]]) -> list[tuple[Remedy, Option]]:
    """The remedies that save less than ``MIN_SAVING_PCT`` alone but at least that once the
    helping ones are applied (TF32 on a step that waits for its input: the GPU work is hidden
    until more loader workers take the wait away), options taken jointly (:func:`_jointly`),
    by that saving, largest first."""
    before, _ = _jointly(helping, options, m, base_ns, meas)
    gains = []
    for r, o in out:
        if r.est_saving_pct < MIN_SAVING_PCT:
            after, _ = _jointly([*helping, (r, o)], options, m, base_ns, meas)
            if baseline > 0 and before - after >= MIN_SAVING_PCT / 100.0 * baseline:
                gains.append((before - after, r, o))
    gains.sort(key=lambda g: (-g[0], g[1].id))
    return [(r, o) for _, r, o in gains]


def _jointly(chosen: list[tuple[Remedy, Option]], options: dict[str, tuple[Option, ...]],
             m: StepModel, base_ns: float, meas: float
             ) -> tuple[float, list[tuple[Remedy, Option]]]:
    """The predicted step of ``chosen`` applied together, each remedy of several options taken
    at the one that does best with the others (in turn, the first best kept): alone, the
    loader's x2, x4 and x8 may tie where the GPU is the limit, and with TF32 they do not."""
    def replayed(items: list[tuple[Remedy, Option]]) -> float:
        x = m
        for _, o in sorted(items, key=lambda it: it[1].last):  # ``Option.last`` ones after
            x = o.apply(x)
        return _predict(x, base_ns, meas)

    chosen = list(chosen)
    pred = replayed(chosen)
    for i, (r, o) in enumerate(chosen):
        for alt in options.get(r.id, ()):
            if alt is o:
                continue
            trial = chosen[:i] + [(r, alt)] + chosen[i + 1:]
            v = replayed(trial)
            if v < pred - 1e-9:
                pred, chosen = v, trial
    return pred, chosen


def _plan(out: list[tuple[Remedy, Option]], m: StepModel, base_ns: float, meas: float,
          baseline: float, rank: int, traced_ms: float | None = None,
          options: dict[str, tuple[Option, ...]] | None = None) -> Plan | None:
    """Every remedy that helps (and those it enables), replayed together, and its subsets;
    ``options``: each remedy's options, taken jointly (:func:`_jointly`)."""
    opts = options or {}
    helping = [(r, o) for r, o in out if r.est_saving_pct >= MIN_SAVING_PCT]
    if not helping:
        return None
    enabled = _enabled(out, _best_of_alternatives(helping), m, base_ns, meas, baseline, opts)
    pool = helping + enabled  # alternatives included: a subset may take either
    # one remedy of each group of alternatives: the one that does best with the others (with
    # CUDA graphs, bf16 autocast's casts go into the graph and bf16 may beat TF32 that alone
    # beats it); a tie keeps the better alone (``out`` is by saving)
    pred, helping = min((_jointly(c, opts, m, base_ns, meas) for c in _alternative_choices(pool)),
                        key=lambda pc: pc[0])

    def together(sub: tuple[int, ...]) -> tuple[float, tuple[str, ...]]:
        p, chosen = _jointly([pool[i] for i in sub], opts, m, base_ns, meas)
        return p, tuple(o.name for _, o in chosen)

    ids = tuple(r.id for r, _ in helping)
    subsets = plan_subsets([r.id for r, _ in pool], ids, together, baseline, ALTERNATIVES)
    traced = meas if traced_ms is None else traced_ms
    return Plan(rank=rank, measured_ms=round(traced, 4), baseline_ms=round(baseline, 4),
                predicted_step_ms=round(pred, 4), est_saving_ms=round(baseline - pred, 4),
                est_saving_pct=round(100.0 * (baseline - pred) / baseline, 2)
                if baseline > 0 else 0.0,
                remedy_ids=ids, options=tuple(o.name for _, o in helping), subsets=subsets)


__all__ = ["ESTIMATED_BASE", "Plan", "RankRemedies", "Remedy", "RemedyAdvice", "RemedyOption",
           "StepCalibration", "StepModelFit", "UntracedSteps", "AFTER_WINDOW", "GIVEN", "PACED",
           "rank_remedies", "remedy_advice", "tracing_note"]
