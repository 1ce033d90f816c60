"""The "Remedies" tables of the planted suite's accuracy.md (issue 22, validation).

One table per framework table: per scenario and fix variant, the remedy (or plan) it checks,
the measured step (baseline -> variant, untraced), the predicted fixed step via record and via
the profiler trace (``remedy_score``), their ratio to the measured one and the verdict; then
the totals. Pure functions of record_suite's per-scenario results.
"""

from __future__ import annotations

from typing import Any

import remedy_score as rs

HEADER = ("| scenario | variant | checks | measured ms (baseline → fixed, saving) | "
          "predicted fixed ms via record | via profiler trace | predicted / measured "
          "(record / profiler) | ok? (record / profiler) |")
RULE = "|---|---|---|---|---|---|---|---|"


def _esc(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _rows_of(r: dict[str, Any], path: str) -> list[dict[str, Any]] | None:
    return (r.get("remedy_score") or {}).get(path)


def _pred_cell(row: dict[str, Any] | None, has_report: bool, why: str = "no report") -> str:
    if not has_report:
        return why
    if row is None:
        return "–"
    if row["predicted_fixed_ms"] is None:
        return "not offered" if row["step_ms"] is None else "no captured step"
    return f"{row['predicted_fixed_ms']:.2f} ({row['predicted_saving_pct']:.0f}%)"


def _ratio_cell(row: dict[str, Any] | None) -> str:
    return "–" if row is None or row["ratio"] is None else f"{row['ratio']:.2f}"


def _ok_cell(row: dict[str, Any] | None, has_report: bool) -> str:
    if not has_report or row is None:
        return "–"
    if row.get("unstable"):
        return f"not scored ({_esc(row['unstable'])})"
    if row["trap"]:
        return "ok (trap)" if row["ok"] else (
            "FAIL (trap: fix helped)" if not row.get("no_gain_measured") else
            "FAIL (trap: saving promised)")
    if row["ok"]:
        return "ok" if row["on_target"] else "ok (±30%)"
    return "not offered" if row["step_ms"] is None else "off"


def _checks(row: dict[str, Any], variant: dict[str, Any]) -> str:
    ids = "+".join(variant.get("remedies") or [])
    if row["check"] == "plan":
        return f"plan ({'+'.join(row['remedy_ids'])})"
    src = row["source"]
    if src == "not offered" or src == f"remedy {ids}":
        return ids + (" (trap)" if row["trap"] else "")
    return f"{ids} via {src}" + (" (trap)" if row["trap"] else "")


def scenario_rows(r: dict[str, Any]) -> list[str]:
    """The table rows of one scenario (nothing for a scenario without remedy variants)."""
    variants = r.get("variants") or {}
    if not any(v.get("remedies") for v in variants.values()):
        return []
    name = r["scenario"]
    base = (r.get("timing") or {}).get("baseline_ms")
    rec, prof = _rows_of(r, "record"), _rows_of(r, "profiler")
    kept = str(r.get("rescored") or "")
    why_rec = "run not bundled" if "record kept" in kept else "no report"
    why_prof = "trace not bundled" if "profiler kept" in kept else "no report"
    lines = []
    for vname, v in variants.items():
        if not v.get("remedies"):
            continue
        if v.get("status") != "measured":
            why = v.get("error") or v.get("status") or r.get("reason") or r.get("status")
            lines.append(f"| {name} | {vname} | {'+'.join(v['remedies'])} | not measured: "
                         f"{_esc(why)[:90]} | | | | |")
            continue
        keys = [(x["variant"], x["check"]) for x in (rec or []) + (prof or [])
                if x["variant"] == vname]
        for key in dict.fromkeys(keys):
            a = next((x for x in rec or [] if (x["variant"], x["check"]) == key), None)
            b = next((x for x in prof or [] if (x["variant"], x["check"]) == key), None)
            row = a or b
            assert row is not None
            # the row's measurement: the baseline the variant was timed against
            # (``remedy_score.measured_groups``)
            measured = (f"{row['measured_baseline_ms']:.2f} → {row['measured_fixed_ms']:.2f} "
                        f"({row['measured_saving_pct']:.0f}%)"
                        if row.get("measured_baseline_ms") is not None else "–")
            lines.append(
                f"| {name} | {vname} | {_esc(_checks(row, v))} | {measured} | "
                f"{_pred_cell(a, rec is not None, why_rec)} | "
                f"{_pred_cell(b, prof is not None, why_prof)} | "
                f"{_ratio_cell(a)} / {_ratio_cell(b)} | "
                f"{_ok_cell(a, rec is not None)} / {_ok_cell(b, prof is not None)} |")
        if not keys:
            lines.append(f"| {name} | {vname} | {'+'.join(v['remedies'])} | "
                         f"{base or 0:.2f} → {v['fixed_ms']:.2f} | {why_rec} | {why_prof} | "
                         "– | – |")
    return lines


PLAN_HEADER = ("| scenario | variant | plan of | measured ms (baseline → fixed, saving) | "
               "the fixes alone, measured saving | predicted fixed ms via record | via "
               "profiler trace | predicted / measured (record / profiler) | ok? (record / "
               "profiler) |")
PLAN_RULE = "|---|---|---|---|---|---|---|---|---|"


def _alone(variants: dict[str, Any], ids: list[str]) -> str:
    """The measured saving of each variant that applies one of ``ids`` alone."""
    got = []
    for vname, v in variants.items():
        rems = list(v.get("remedies") or [])
        if len(rems) == 1 and rems[0] in ids and v.get("status") == "measured":
            got.append((rems[0], vname, float(v["saving_pct"])))
    if not got:
        return "–"
    text = ", ".join(f"{r} ({n}) {x:.0f}%" if r != n else f"{r} {x:.0f}%" for r, n, x in got)
    return text + (f"; sum {sum(x for _, _, x in got):.0f}%" if len(got) > 1 else "")


def plan_rows(r: dict[str, Any]) -> list[str]:
    """One scenario's rows of the plan table: each row that checks a plan ("plan of A+B":
    predicted / measured), and the fixes' measured savings alone beside it."""
    # each variant as scored: against the baseline it was timed with (rs.measured_groups)
    groups = rs.measured_groups(r)
    bases = {k: b for b, vs in groups for k in (vs or {})}
    variants = {k: v for _, vs in groups for k, v in (vs or {}).items()}
    rec, prof = _rows_of(r, "record"), _rows_of(r, "profiler")
    keys = [(x["variant"], x["check"]) for x in (rec or []) + (prof or [])
            if rs.is_plan_row(x) and not x.get("trap")]
    lines = []
    for key in dict.fromkeys(keys):
        a = next((x for x in rec or [] if (x["variant"], x["check"]) == key), None)
        b = next((x for x in prof or [] if (x["variant"], x["check"]) == key), None)
        row = a or b
        assert row is not None
        v = variants.get(key[0]) or {}
        base = bases.get(key[0])
        ids = list(row["remedy_ids"])
        measured = (f"{base:.2f} → {v['fixed_ms']:.2f} ({v['saving_pct']:.0f}%)"
                    if base is not None and v.get("fixed_ms") is not None else "–")
        lines.append(
            f"| {r['scenario']} | {key[0]} | {_esc('+'.join(ids))} | {measured} | "
            f"{_esc(_alone(variants, list(v.get('remedies') or ids)))} | "
            f"{_pred_cell(a, rec is not None)} | {_pred_cell(b, prof is not None)} | "
            f"{_ratio_cell(a)} / {_ratio_cell(b)} | "
            f"{_ok_cell(a, rec is not None)} / {_ok_cell(b, prof is not None)} |")
    return lines


def totals_text(results: list[dict[str, Any]], path: str) -> str:
    rows = [x for r in results for x in (_rows_of(r, path) or [])]
    t = rs.totals(rows)
    if not t["rows"]:
        return "nothing scored" + (f" (the measurement unstable: {t['unstable']})"
                                   if t["unstable"] else "")
    text = (f"within ±30% {t['ok']}/{t['rows'] - t['traps']} (±20%: {t['on_target']}), "
            f"not offered {t['not_offered']}")
    if t["plan_rows"]:
        text += (f"; one remedy {t['single_ok']}/{t['single_rows']}, plans of several "
                 f"{t['plan_ok']}/{t['plan_rows']} (±20%: {t['plan_on_target']})")
    if t["traps"]:
        text += f", traps ok {t['traps_ok']}/{t['traps']}"
    if t["share_rows"]:
        text += f"; given the measured baseline {t['share_ok']}/{t['share_rows']}"
    if t["unstable"]:
        text += f"; not scored, the measurement unstable: {t['unstable']}"
    return text


def remedies_md(results: list[dict[str, Any]], title: str) -> list[str]:
    """The "Remedies" table of one framework table's results, then the plans of several
    remedies checked against a fix that applies them together ([] when none has variants)."""
    body = [ln for r in results for ln in scenario_rows(r)]
    if not body:
        return []
    out = ["", f"### Remedies ({title})", "", HEADER, RULE, *body, "",
           (f"Remedies via record: {totals_text(results, 'record')}. Via profiler trace: "
            f"{totals_text(results, 'profiler')}.")]
    plans = [ln for r in results for ln in plan_rows(r)]
    if plans:
        out += ["", f"#### Plans of several remedies ({title})", "",
                "A fix variant that applies several remedies at once, against the report's "
                "plan restricted to those remedies (`plan.subsets`: one replay of them "
                "together, not a sum), else the plan; the fixes alone beside it.", "",
                PLAN_HEADER, PLAN_RULE, *plans]
    return out


INTRO = ("Remedies: each fix variant (a real user fix, named by the remedy ids it applies) is "
         "timed untraced, interleaved with the baseline. Predicted fixed step = the report's "
         "predicted_step_ms where its steps are the program's (a step hook, torch.profiler's "
         "steps, step annotations) or it is calibrated to a measured untraced step; else "
         "(steps recovered from periodicity) the measured baseline × predicted_step_ms / the "
         "step it is relative to (the report's share). ok = within ±30% of the measured fixed "
         "step (target ±20%). \"Given the measured baseline\": every row scored by its share. "
         "A variant covering several remedy ids also checks the plan. A trap (a fix that must "
         "not help) is ok when the predicted saving is below 10% and the measured saving below "
         "5%. Not scored: a variant timed by its program whose runs, or the baseline's, "
         f"differ by more than {rs.UNSTABLE_SPREAD:g}x (slowest over fastest).")
