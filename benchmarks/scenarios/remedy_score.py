"""Scoring stepscope's remedies against measured fix variants (issue 22, validation).

Pure functions of plain data: the report's JSON fields (``remedies``: ``id``, ``title``,
``finding_ids``, ``predicted_step_ms``, ``est_saving_ms``, ``est_saving_pct``, ``options``,
``assumptions``; ``plan``: ``predicted_step_ms``, ``remedy_ids``; ``step_model``) and the
suite's per-variant measurements (``run.measure_variants``). Torch-free.

For each fix variant (``variants.Variant``) and each path (record, profiler trace):

- the prediction it checks: one remedy id -> that remedy (or an option of that id under
  another remedy); several -> the plan restricted to those ids where the report gives one
  (``plan.subsets`` / ``plans``: ``remedy_ids`` + ``predicted_step_ms``), else an option that
  combines them (``bf16_amp`` with option ``channels_last``), else the plan when its remedies
  are all among what the variant covers (``Variant.covers``);
- a variant that covers more than one remedy id also checks the plan (a "plan" row);
- a row whose prediction is a plan (restricted or whole: ``is_plan_row``) is counted apart
  from the single remedies (``totals``: ``single_*`` / ``plan_*``);
- the predicted fixed step is the report's own ``predicted_step_ms``, the figure it prints,
  where the report's steps are the program's (``summary.step_source`` among
  :data:`PROGRAM_STEP_SOURCES`: a step hook, torch.profiler's steps, step annotations or
  NVTX ranges; its ``baseline_ms`` is then an untraced step, measured or estimated) or where
  it is calibrated to a measured untraced step (``step_model.calibration.reached``, not by
  the GPU's pace). Otherwise (steps recovered from the kernel stream's periodicity: the ms
  of a window that may be a part of the program's step, or a report that does not say) it
  is the measured untraced baseline x (``predicted_step_ms`` / the report's step it is
  relative to: the remedy's or plan's ``baseline_ms``, else the captured step
  ``step_model.measured_ms``, else ``summary.step_ms.mean``): the report's share. ok when
  within +-30% of the measured fixed step (target +-20%). Every row also keeps the share's
  ratio (``share_ratio``, "given the measured baseline") and the report's own ms against the
  measurement (``direct_ratio``). Why the ms and not the share, where both apply: the share
  carries the baseline's move from one process to the next into the fix (H100, 2026-11-27:
  ``jax_host_callback``'s untraced baseline 10.9-15.9 ms in five calls, its fixed step
  2.30-2.38 ms, the reports' 2.23-2.32 ms; docs/accuracy.md, "The report's own
  milliseconds, scored");
- a trap (a fix that must not help): ok when the predicted saving is below 10% (a remedy not
  offered predicts none) and the measurement shows no gain (saving below 5%);
- a measurement that did not hold still is not scored: where the programs timed a variant
  (``record_suite --program-timing``, one process per run) and its runs or the baseline's
  differ by more than :data:`UNSTABLE_SPREAD` (slowest over fastest), the row is kept with
  ``unstable`` (the two ranges) and counted apart (``totals``: ``unstable``). A ±30% check
  means nothing against a baseline whose processes ran at 28, 58 and 137 ms a step (H100,
  2026-11-27, ``loader_tf32``: its loader runs in the training process, whose pace moved
  with the machine's; the earlier calls' runs stayed within 1.22x).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

TOLERANCE = 0.30
TARGET = 0.20
TRAP_MAX_PREDICTED_PCT = 10.0
NO_GAIN_PCT = 5.0
UNSTABLE_SPREAD = 1.5  # slowest over fastest run of program.py, beyond which a row is unscored
PACED = "paced by the GPU's utilisation after the capture window"  # advisor.remedies.PACED
# the step sources whose steps are the program's own (reporters.report.PROGRAM_STEPS)
PROGRAM_STEP_SOURCES = frozenset({"profiler_step", "annotation", "nvtx", "hook", "manual"})
REMEDY_KEYS = ("id", "title", "rank", "finding_ids", "baseline_ms", "predicted_step_ms",
               "est_saving_ms", "est_saving_pct", "option", "options", "assumptions")


# ---------------------------------------------------------------------------------------------
# What a report says


def remedy_fields(report: dict[str, Any] | None) -> dict[str, Any]:
    """The remedy part of a JSON report (``stepscope report --format json``): remedies, plan,
    step model and the captured step time the predictions are relative to."""
    if not report:
        return {}
    s = report.get("summary") or {}
    model = report.get("step_model") or None
    step_ms = s.get("step_ms") or {}
    captured, source = None, None
    if isinstance(model, dict) and model.get("measured_ms"):
        captured, source = float(model["measured_ms"]), "step_model.measured_ms"
    elif isinstance(step_ms, dict) and step_ms.get("mean"):
        captured, source = float(step_ms["mean"]), "summary.step_ms.mean"
    out: dict[str, Any] = {
        "remedies": [{k: r.get(k) for k in REMEDY_KEYS} for r in report.get("remedies") or []
                     if isinstance(r, dict)],
        "plan": report.get("plan"), "step_model": model,
        "captured_step_ms": captured, "captured_from": source,
        "step_source": s.get("step_source"),
    }
    if report.get("plans") is not None:
        out["plans"] = report.get("plans")
    return out


@dataclass(frozen=True)
class Prediction:
    """A predicted step for a set of remedy ids and the report's step it is relative to
    (``base_ms``: the item's ``baseline_ms`` where the report gives one, the step the saving is
    taken from: on a profiler trace the step predicted without the profiler; else the
    captured step)."""

    step_ms: float | None  # None: the report offers nothing for these ids
    source: str  # "remedy tf32", "option channels_last of bf16_amp", "plan", ...
    remedy_ids: tuple[str, ...] = ()
    base_ms: float | None = None


def _opt_id(o: dict[str, Any]) -> str:
    return str(o.get("id") or o.get("name") or "")


def _opt_parts(o: dict[str, Any]) -> set[str]:
    """The remedy ids an option stands for: its ``remedy_ids``, else its id split at "+"
    ("bf16_amp+channels_last")."""
    if o.get("remedy_ids"):
        return {str(x) for x in o["remedy_ids"]}
    return {x for x in _opt_id(o).split("+") if x}


def _base_of(d: dict[str, Any], fallback: float | None) -> float | None:
    b = d.get("baseline_ms")
    return float(b) if b else fallback


def _prediction(d: dict[str, Any], source: str, ids: tuple[str, ...],
                base: float | None) -> Prediction:
    """``predicted_step_ms``, else ``base`` less ``est_saving_pct``."""
    step = None
    if d.get("predicted_step_ms") is not None:
        step = float(d["predicted_step_ms"])
    elif d.get("est_saving_pct") is not None and base:
        step = base * (1.0 - float(d["est_saving_pct"]) / 100.0)
    return Prediction(step, source, ids, base)


def _subset_plans(fields: dict[str, Any]) -> list[dict[str, Any]]:
    plan = fields.get("plan") or {}
    found = list(plan.get("subsets") or []) if isinstance(plan, dict) else []
    found += list(fields.get("plans") or [])
    return [p for p in found if isinstance(p, dict)]


def _plan_ids(fields: dict[str, Any]) -> set[str]:
    plan = fields.get("plan") or {}
    return set(plan.get("remedy_ids") or []) if isinstance(plan, dict) else set()


def plan_prediction(fields: dict[str, Any]) -> Prediction:
    plan = fields.get("plan")
    if not isinstance(plan, dict) or not plan.get("remedy_ids"):
        return Prediction(None, "no plan")
    return _prediction(plan, "plan", tuple(plan["remedy_ids"]),
                       _base_of(plan, fields.get("captured_step_ms")))


def predict(fields: dict[str, Any], ids: tuple[str, ...],
            covers: tuple[str, ...] = ()) -> Prediction:
    """The report's prediction for applying the remedies ``ids`` together (module doc). A
    remedy whose options include one of its own name (``bf16_amp``'s ``bf16_amp``, beside
    ``channels_last``) is read through that option: the remedy's own figure is its best
    option's, which may apply more than the variant does."""
    captured = fields.get("captured_step_ms")
    remedies = {str(r.get("id")): r for r in fields.get("remedies") or []}
    want = set(ids)
    if len(ids) == 1 and ids[0] in remedies:
        r = remedies[ids[0]]
        base = _base_of(r, captured)
        same = next((o for o in r.get("options") or []
                     if isinstance(o, dict) and _opt_id(o) == ids[0]), None)
        if same is not None and len(r.get("options") or []) > 1:
            return _prediction(same, f"option {ids[0]} of {ids[0]}", ids, base)
        return _prediction(r, f"remedy {ids[0]}", ids, base)
    for p in _subset_plans(fields):
        if set(p.get("remedy_ids") or []) == want:
            return _prediction(p, "plan restricted to " + "+".join(ids), ids,
                               _base_of(p, captured))
    for r in remedies.values():
        for o in r.get("options") or []:
            if not isinstance(o, dict) or not _opt_id(o):
                continue
            parts = _opt_parts(o)
            if parts == want or parts | {str(r.get("id"))} == want:
                return _prediction(o, f"option {_opt_id(o)} of {r.get('id')}", ids,
                                   _base_of(o, _base_of(r, captured)))
    plan_ids = _plan_ids(fields)
    if len(ids) > 1 and plan_ids and plan_ids <= set(covers or ids) and plan_ids & want:
        return plan_prediction(fields)
    return Prediction(None, "not offered")


# ---------------------------------------------------------------------------------------------
# Scoring


def score_row(pred: Prediction, *, baseline_ms: float, fixed_ms: float, saving_pct: float,
              captured_ms: float | None, trap: bool, absolute: bool = False,
              unstable: str | None = None) -> dict[str, Any]:
    """One prediction against one measured variant (module doc); ``absolute``: the report's
    ms are the program's, compared as they are (a trap's promised saving stays the report's
    own share); ``unstable``: why the measurement is not a reference (module doc): the row is
    neither ok nor off."""
    base = baseline_ms if absolute and not trap else pred.base_ms or captured_ms
    out: dict[str, Any] = {**asdict(pred), "remedy_ids": list(pred.remedy_ids),
                           "base_ms": base, "trap": trap,
                           "scored": "ms" if absolute else "share",
                           "measured_baseline_ms": round(baseline_ms, 4),
                           "measured_fixed_ms": round(fixed_ms, 4),
                           "measured_saving_pct": round(saving_pct, 2),
                           "predicted_fixed_ms": None, "predicted_saving_pct": None,
                           "ratio": None, "ok": False, "on_target": False}
    if pred.step_ms is not None and base:
        scale = pred.step_ms / base
        out["predicted_fixed_ms"] = round(baseline_ms * scale, 4)
        out["predicted_saving_pct"] = round(100.0 * (1.0 - scale), 2)
        out["ratio"] = round(out["predicted_fixed_ms"] / fixed_ms, 3) if fixed_ms > 0 else None
        # both kept, whichever is scored: the report's own ms against the untraced measurement
        # (the predicted fixed step directly, and the step its saving is taken from;
        # comparable only where the report's steps are the program's steps), and its share
        # of its own step applied to the measured baseline
        own = pred.base_ms or captured_ms
        out["direct_ratio"] = round(pred.step_ms / fixed_ms, 3) if fixed_ms > 0 else None
        out["base_ratio"] = (round(own / baseline_ms, 3) if own and baseline_ms > 0
                             else None)
        out["share_ratio"] = (round(baseline_ms * pred.step_ms / own / fixed_ms, 3)
                              if own and fixed_ms > 0 else None)
    if unstable:
        out["unstable"] = unstable
        return out
    if trap:
        predicted = out["predicted_saving_pct"] if pred.step_ms is not None else 0.0
        no_gain = saving_pct < NO_GAIN_PCT
        out["no_gain_measured"] = no_gain
        out["ok"] = out["on_target"] = (predicted is not None and
                                        predicted < TRAP_MAX_PREDICTED_PCT and no_gain)
        return out
    r = out["ratio"]
    out["ok"] = r is not None and abs(r - 1.0) <= TOLERANCE
    out["on_target"] = r is not None and abs(r - 1.0) <= TARGET
    return out


def score_variants(variants: dict[str, dict[str, Any]] | None, baseline_ms: float | None,
                   fields: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """Every measured variant's rows for one path (None: the path gave no report). A variant
    without remedy ids is not scored; one covering several ids gets a "plan" row too."""
    if fields is None or not fields:
        return None
    rows: list[dict[str, Any]] = []
    captured = fields.get("captured_step_ms")
    absolute = scored_in_ms(fields)
    for name, v in (variants or {}).items():
        rems = tuple(v.get("remedies") or ())
        if not rems or v.get("status") != "measured" or baseline_ms is None:
            continue
        covers = tuple(v.get("covers") or rems)
        trap = bool(v.get("trap"))

        def row(p: Prediction, check: str, base: float = baseline_ms) -> dict[str, Any]:
            return {"variant": name, "check": check,
                    **score_row(p, baseline_ms=base, fixed_ms=float(v["fixed_ms"]),
                                saving_pct=float(v["saving_pct"]), captured_ms=captured,
                                trap=trap, absolute=absolute,
                                unstable=v.get("unstable"))}

        pred = predict(fields, rems, covers)
        rows.append(row(pred, "remedy"))
        if len(covers) > 1 and not pred.source.startswith("plan"):
            plan = plan_prediction(fields)
            if plan.step_ms is not None and set(plan.remedy_ids) <= set(covers):
                rows.append(row(plan, "plan"))
    return rows


def program_steps(step_source: Any) -> bool:
    """The report's steps are the program's own: every rank's step source (joined by "+")
    among :data:`PROGRAM_STEP_SOURCES`."""
    return bool(step_source) and all(p in PROGRAM_STEP_SOURCES
                                     for p in str(step_source).split("+"))


def scored_in_ms(fields: dict[str, Any]) -> bool:
    """The report's ms are compared as they are (module doc): its steps are the program's, or
    it is calibrated to a measured untraced step (not paced by the GPU: a step paced so is
    the captured one, maybe a part of the program's where the steps came from periodicity)."""
    cal = (fields.get("step_model") or {}).get("calibration") or {}
    return (program_steps(fields.get("step_source"))
            or (bool(cal.get("reached")) and cal.get("source") != PACED))


def is_plan_row(row: dict[str, Any]) -> bool:
    """A row that checks a plan (the plan, or the plan restricted to the variant's remedies)
    rather than one remedy."""
    return row.get("check") == "plan" or str(row.get("source") or "").startswith("plan")


def totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Counts over score rows: scored, ok (+-30% or trap passed), on target (+-20%), traps;
    ``single_*``: the rows of one remedy, ``plan_*``: the rows of a plan (``is_plan_row``);
    ``share_*``: the rows with a share ratio, and those within +-30% by it (given the
    measured baseline, module doc); ``unstable``: the rows left out of all the others (their
    measurement did not hold still, module doc)."""
    unstable = [r for r in rows if r.get("unstable")]
    rows = [r for r in rows if not r.get("unstable")]
    traps = [r for r in rows if r.get("trap")]
    rest = [r for r in rows if not r.get("trap")]
    plans = [r for r in rest if is_plan_row(r)]
    single = [r for r in rest if not is_plan_row(r)]
    shares = [float(r["share_ratio"]) for r in rest if r.get("share_ratio") is not None]
    return {"rows": len(rows), "predicted": sum(1 for r in rest if r["ratio"] is not None),
            "ok": sum(1 for r in rest if r["ok"]),
            "on_target": sum(1 for r in rest if r["on_target"]),
            "not_offered": sum(1 for r in rest if r["step_ms"] is None),
            "single_rows": len(single), "single_ok": sum(1 for r in single if r["ok"]),
            "single_on_target": sum(1 for r in single if r["on_target"]),
            "plan_rows": len(plans), "plan_ok": sum(1 for r in plans if r["ok"]),
            "plan_on_target": sum(1 for r in plans if r["on_target"]),
            "traps": len(traps), "traps_ok": sum(1 for r in traps if r["ok"]),
            "share_rows": len(shares),
            "share_ok": sum(1 for x in shares if abs(x - 1.0) <= TOLERANCE),
            "unstable": len(unstable)}


FIELD_KEYS = ("remedies", "plan", "plans", "step_model", "captured_step_ms", "captured_from",
              "step_source")


def measured_groups(res: dict[str, Any]
                    ) -> list[tuple[float | None, dict[str, dict[str, Any]] | None]]:
    """The scenario's measured variants, grouped by the baseline they were timed against:
    normally all of them against ``timing``'s. Where ``timing`` is the program's own loop
    (``record_suite --program-timing``: ``source`` "program.py", the harness's timing kept
    as ``timing_harness``), each variant the programs timed (``timing.variants``; before
    2026-11-27 only the default one, ``timing.fixed_ms``) takes the program's fixed step
    against the program's baseline; the other variants stay against the harness's baseline
    (``variants_timing``, else ``timing_harness``)."""
    t = res.get("timing") or {}
    vs = res.get("variants")
    if t.get("source") != "program.py" or not vs:
        return [(t.get("baseline_ms"), vs)]
    first = next(iter(vs))
    timed = dict(t.get("variants") or {})
    if not timed and t.get("fixed_ms") is not None:
        timed = {first: {"fixed_ms": t["fixed_ms"], "saving_ms": t.get("saving_ms"),
                         "saving_pct": t.get("saving_pct")}}
    base_runs = [float(x) for x in t.get("baseline_runs_ms") or ()]
    prog = {k: {**vs[k], "status": "measured", "fixed_ms": timed[k]["fixed_ms"],
                "unstable": unstable_runs(base_runs, timed[k].get("runs_ms") or ()),
                "saving_ms": timed[k].get("saving_ms"), "saving_pct": timed[k].get("saving_pct"),
                "harness_fixed_ms": vs[k].get("fixed_ms"),
                "from": "program.py (its own loop, the baseline's source)"}
            for k in vs if k in timed}
    rest = {k: vs[k] for k in vs if k not in timed}
    harness = (res.get("variants_timing") or {}).get("baseline_ms") or \
        (res.get("timing_harness") or {}).get("baseline_ms")
    out: list[tuple[float | None, dict[str, dict[str, Any]] | None]] = []
    if prog:
        out.append((t.get("baseline_ms"), prog))
    if rest:
        out.append((harness, rest))
    return out


def unstable_runs(baseline: Any, fixed: Any) -> str | None:
    """Why program.py's runs of a baseline and a variant are no reference (their slowest over
    their fastest beyond :data:`UNSTABLE_SPREAD`), else None."""
    out = []
    for what, runs in (("baseline", baseline), ("variant", fixed)):
        xs = [float(x) for x in runs if isinstance(x, (int, float)) and x > 0]
        if len(xs) > 1 and max(xs) > UNSTABLE_SPREAD * min(xs):
            out.append(f"{what} runs {min(xs):.1f}-{max(xs):.1f} ms")
    return "; ".join(out) or None


def score_result(res: dict[str, Any]) -> dict[str, list[dict[str, Any]] | None]:
    """record_suite's per-scenario result -> its remedy rows per path ("record", "profiler");
    None for a path that gave no report. Each variant is scored against the baseline it was
    timed with (:func:`measured_groups`)."""
    groups = measured_groups(res)
    out: dict[str, list[dict[str, Any]] | None] = {}
    for path in ("record", "profiler"):
        p = res.get(path) or {}
        fields = {k: p[k] for k in FIELD_KEYS if k in p} if p.get("status") == "ok" else None
        if fields and not fields.get("step_source"):
            # results.json before the field: the condensed report's summary (record) or the
            # trace's (profiler)
            src = ((p.get("summary") or {}).get("step_source")
                   or (p.get("traced") or {}).get("step_source"))
            if src:
                fields["step_source"] = src
        rows: list[dict[str, Any]] | None = None
        for base, vs in groups:
            got = score_variants(vs, base, fields)
            if got is not None:
                rows = (rows or []) + got
        out[path] = rows
    return out
