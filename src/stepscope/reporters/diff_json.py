"""The machine-readable diff (``stepscope.diff/1``), the twin of the terminal and HTML diff.

Contract (version 1; later versions only add keys):
  schema        "stepscope.diff/1"
  verdict       faster | slower | same | inconclusive
  reason        one line: the interval against 0 and the margin
  test          {name, confidence, margin_pct}
  step_ms       {base, new (medians of the steady steps), change_ms (the Hodges-Lehmann
                shift), change_pct (of base), interval [lo_pct, hi_pct], interval_ms [lo, hi]
                (null ends: too few steps), base_mean, new_mean (what categories sum to),
                base_steps, new_steps}
  alignment     one line: the ranks compared, how steps were matched
  base, new     [{path, ranks, steady_steps, step_detail}] one per run
  categories    {name: {base_ms, new_ms, delta_ms}} per steady step, largest |delta| first
  causes        the same, over the GPU categories and the idle split by what the GPU waited
                for (compute, communication, copies, input_wait, sync, step_gaps, launch, host)
  kernels, ops  {matched: [...], new: [...], gone: [...], counts{matched, new, gone}}; rows:
                {name, base_name, new_name, matched_by, base{calls, ms, grid, block},
                new{...}, delta_ms}, per steady step, largest |delta| first, at most
                ``ROWS`` of each list
  findings      {appeared, gone, changed, unchanged}: [{id, category, base{severity, title,
                est_saving_ms, est_saving_pct, runs, of}, new{...}, delta_saving_ms, docs}]
  ranks         per rank when several ranks are compared: [{base_rank, new_rank, verdict,
                reason, step_ms{...}, categories{...}}], else []
  fail_above    {pct, failed} when the command was given ``--fail-above``, else null
"""

from __future__ import annotations

import json
from typing import Any

from stepscope.compare import DIFF_SCHEMA, CategoryChange, Change, Diff, FindingChange, ShiftTest
from stepscope.compare.sides import Use
from stepscope.reporters.json_report import jsonable

ROWS = 50


def _step(t: ShiftTest, means: tuple[float, float] | None = None) -> dict[str, Any]:
    lo, hi = t.interval_pct
    out = {"base": t.base_ms, "new": t.new_ms, "change_ms": t.shift_ms,
           "change_pct": t.change_pct, "interval": [lo, hi], "interval_ms": [t.lo_ms, t.hi_ms],
           "base_steps": t.n_base, "new_steps": t.n_new}
    if means is not None:
        out["base_mean"], out["new_mean"] = means
    return out


def _categories(rows: tuple[CategoryChange, ...]) -> dict[str, Any]:
    return {c.name: {"base_ms": c.base_ms, "new_ms": c.new_ms, "delta_ms": c.delta_ms}
            for c in rows}


def _use(u: Use | None) -> dict[str, Any] | None:
    if u is None:
        return None
    d: dict[str, Any] = {"calls": u.calls, "ms": u.ms}
    if u.config is not None:
        d["grid"], d["block"] = list(u.config[:3]), list(u.config[3:])
    return d


def change_row(c: Change) -> dict[str, Any]:
    return {"name": c.name, "base_name": c.base_name, "new_name": c.new_name,
            "matched_by": c.matched_by or None, "base": _use(c.base), "new": _use(c.new),
            "delta_ms": c.delta_ms}


def changes(rows: tuple[Change, ...], limit: int = ROWS) -> dict[str, Any]:
    by: dict[str, list[Change]] = {"matched": [], "new": [], "gone": []}
    for c in rows:
        by[c.status].append(c)
    out: dict[str, Any] = {k: [change_row(c) for c in v[:limit]] for k, v in by.items()}
    out["counts"] = {"matched": len(by["matched"]), "new": len(by["new"]),
                     "gone": len(by["gone"])}
    return out


def finding_row(f: FindingChange) -> dict[str, Any]:
    return {"id": f.id, "category": f.category, "base": jsonable(f.base),
            "new": jsonable(f.new), "delta_saving_ms": f.delta_saving_ms,
            "docs": f"docs/rules/{f.id}.md"}


def diff_dict(d: Diff, *, fail_above: float | None = None) -> dict[str, Any]:
    findings: dict[str, list[dict[str, Any]]] = {
        "appeared": [], "gone": [], "changed": [], "unchanged": []}
    for f in d.findings:
        findings[f.status].append(finding_row(f))
    out = {
        "schema": DIFF_SCHEMA,
        "verdict": d.verdict.value,
        "reason": d.step.reason,
        "test": {"name": d.test, "confidence": d.step.confidence,
                 "margin_pct": d.step.margin_pct},
        "step_ms": _step(d.step, d.mean_ms),
        "alignment": d.alignment,
        "base": [_ref(r) for r in d.base],
        "new": [_ref(r) for r in d.new],
        "categories": _categories(d.categories),
        "causes": _categories(d.causes),
        "kernels": changes(d.kernels),
        "ops": changes(d.ops),
        "findings": findings,
        "ranks": [{"base_rank": r.base_rank, "new_rank": r.new_rank,
                   "verdict": r.step.verdict.value, "reason": r.step.reason,
                   "step_ms": _step(r.step), "categories": _categories(r.categories)}
                  for r in d.ranks],
        "fail_above": (None if fail_above is None else
                       {"pct": fail_above, "failed": d.slower_than(fail_above)}),
    }
    result = jsonable(out)
    assert isinstance(result, dict)
    return result


def _ref(r: Any) -> dict[str, Any]:
    return {"path": r.label, "ranks": list(r.ranks), "steady_steps": r.steady_steps,
            "step_detail": r.step_detail}


def diff_json(d: Diff, *, fail_above: float | None = None, indent: int | None = 2) -> str:
    return json.dumps(diff_dict(d, fail_above=fail_above), indent=indent, ensure_ascii=False)
