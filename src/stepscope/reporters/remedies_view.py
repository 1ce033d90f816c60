"""The remedies part of a report (``advisor.remedies``): the step model's fit, the remedies
ranked by saving, and the plan, for the JSON report and the terminal."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from stepscope.advisor.plan_subsets import best_pair
from stepscope.advisor.remedies import Plan, Remedy, RemedyAdvice, StepCalibration, tracing_note


def remedies_json(ra: RemedyAdvice | None) -> dict[str, Any]:
    """``step_model`` (the judged rank's fit, ``ranks``: every fitted rank's, and
    ``calibration``: to the untraced step given or recorded, null when there was none),
    ``remedies`` and ``plan`` (null where there is none; its ``subsets``: the plan restricted
    to subsets of its remedies, ``advisor.plan_subsets``)."""
    if ra is None:
        return {"step_model": None, "remedies": [], "plan": None}
    judged = ra.plan.rank if ra.plan else (ra.remedies[0].rank if ra.remedies else None)
    fit = next((f for f in ra.fits if f.rank == judged), ra.fits[0] if ra.fits else None)
    step_model = None
    if fit is not None:
        step_model = {**dataclasses.asdict(fit),
                      "ranks": [dataclasses.asdict(f) for f in ra.fits],
                      "calibration": (dataclasses.asdict(ra.calibration)
                                      if ra.calibration is not None else None)}
    remedies = []
    for r in ra.remedies:
        d = dataclasses.asdict(r)
        d["options"] = [dataclasses.asdict(o) for o in r.options]
        remedies.append(d)
    plan = dataclasses.asdict(ra.plan) if ra.plan else None
    return {"step_model": step_model, "remedies": remedies, "plan": plan}


def fit_line(ra: RemedyAdvice | None) -> Text | None:
    """One line: the replay of the step model against the measured step."""
    if ra is None or not ra.fits:
        return None
    f = max(ra.fits, key=lambda x: abs(x.error_pct))
    where = f"rank {f.rank}" if len(ra.fits) > 1 else "the step"
    worst = " (worst rank)" if len(ra.fits) > 1 else ""
    return Text(f"Step model: {where} replays in {f.replayed_ms:.2f} ms against "
                f"{f.measured_ms:.2f} ms measured ({f.error_pct:+.1f}%){worst}", style="dim")


def pair_text(plan: Plan | None) -> str | None:
    """The pair of remedies that saves the most together, where the plan applies more than
    two ("cuda_graphs + pinned_copies together: -> 4.10 ms/step (save 80%)"); None else."""
    if plan is None or len(plan.remedy_ids) <= 2:
        return None
    p = best_pair(plan.subsets)
    if p is None:
        return None
    return (f"{' + '.join(p.remedy_ids)} together: -> {p.predicted_step_ms:.2f} ms/step "
            f"(save {p.est_saving_pct:.0f}%)")


def short_title(r: Remedy) -> str:
    """A remedy's title without its parenthesis ("Pinned, non-blocking copies")."""
    return r.title.split(" (")[0]


def fixes_for(ra: RemedyAdvice | None, finding_id: str, limit: int = 3) -> tuple[Remedy, ...]:
    """The listed remedies that answer the finding, largest saving first, at most ``limit``
    (their savings are the overlap-free ones the reports show beside the finding's own)."""
    if ra is None:
        return ()
    return tuple(r for r in ra.remedies if finding_id in r.finding_ids)[:limit]


def replayed_fixes(ra: RemedyAdvice | None, finding_id: str) -> str | None:
    """Beside a finding, the remedies that answer it as the step model replays them: their
    overlap-free savings, where the finding's own estimate is the symptom's (on a step the host
    limits, TF32 saves less than the fp32 kernels' time); None where no listed remedy does."""
    rs = fixes_for(ra, finding_id)
    if not rs:
        return None
    return ("as fixes, replayed with the rest of the step (savings do not add up): " if
            len(rs) > 1 else "as a fix, replayed with the rest of the step: ") + "; ".join(
        f"{short_title(r)}{f' ({r.option})' if len(r.options) > 1 else ''} -> "
        f"{r.predicted_step_ms:.2f} ms/step, save {r.est_saving_ms:.2f} ms "
        f"({r.est_saving_pct:.0f}%)" for r in rs)


def remedy_lines(ra: RemedyAdvice | None, limit: int = 6) -> list[RenderableType]:
    """The terminal's "Remedies" section: by saving, then the plan."""
    if ra is None or not ra.remedies:
        return []
    rank = ra.remedies[0].rank
    out: list[RenderableType] = [Text(f"Remedies (each replayed on the step model of rank {rank}; "
                                      "savings do not add up)", style="bold")]
    for i, r in enumerate(ra.remedies[:limit], 1):
        line = Text(f"{i}. {r.title}")  # Text: no markup parsed
        opt = f", {r.option}" if len(r.options) > 1 else ""
        line.append(f"  (-> {r.predicted_step_ms:.2f} ms/step, save {r.est_saving_ms:.2f} ms, "
                    f"{r.est_saving_pct:.0f}%{opt})", style="bold")
        out.append(line)
    if ra.plan is not None:
        p = ra.plan
        # savings are from the baseline (on a profiler trace or a recorded run: the step without
        # the profiler's or the capture's cost), as each remedy's; the traced step is said
        # when it differs
        traced = (f" without the tracing cost, {p.measured_ms:.2f} ms as traced"
                  if abs(p.baseline_ms - p.measured_ms) > 0.005 * p.measured_ms else "")
        cal = ra.calibration
        if cal is not None and cal.reached:
            side = (f"the host's time x{cal.factor:.2f} after the tracing cost"
                    if cal.scaled == "host" else f"the GPU's time x{cal.factor:.2f}")
            traced = (f" (the untraced step {cal.source}; {p.measured_ms:.2f} ms as traced, "
                      f"{side})")
        elif tracing_note(p.baseline_ms, p.measured_ms):
            traced += " (an estimate: see the remedies' assumptions)"
        together = " together" if len(p.remedy_ids) > 1 else ""
        out.append(Text(f"Plan: {' + '.join(p.remedy_ids)}{together} -> {p.predicted_step_ms:.2f}"
                        f" ms/step from {p.baseline_ms:.2f} ms{traced} (save "
                        f"{p.est_saving_pct:.0f}%)", style="bold green"))
        pair = pair_text(p)
        if pair is not None:
            out.append(Text(f"Best pair: {pair}", style="green"))
    unreached = not_calibrated_text(ra.calibration)
    if unreached is not None:
        out.append(Text(unreached, style="yellow"))
    return out


def not_calibrated_text(cal: StepCalibration | None) -> str | None:
    """The line every report format prints when the untraced step was out of the step
    model's reach (None when it was reached, or there was none)."""
    if cal is None or cal.reached:
        return None
    return (f"Not calibrated: the untraced step {cal.source} ({cal.untraced_step_ms:.2f} ms) is "
            f"out of the step model's reach ({cal.min_ms:.2f}-{cal.max_ms:.2f} ms)")


__all__ = ["fit_line", "not_calibrated_text", "pair_text", "remedies_json", "remedy_lines"]
