#!/usr/bin/env python3
"""Score the multi-GPU suite's summaries and print the markdown table for docs/accuracy.md.

    python3 benchmarks/multigpu/score.py OUT            # OUT/summaries/*.json (run_suite.py)
    python3 benchmarks/multigpu/score.py OUT/summary.json a.json   # summary files

Per scenario and path (``record``: ``stepscope record`` of the baseline; ``profiler``: the
baseline's torch.profiler traces, one per rank, imported together), on the run's JSON report:

- planted (``expected`` set): ranked first = the first warning/critical finding is the planted
  rule (``timing.score_first_serious``, as the single-GPU suite scores it) and, for a straggler,
  names the planted rank (``where.rank``; whether its title or evidence names the cause, e.g.
  "host", is noted beside the verdict); estimate = the rule's ``est_saving_pct`` over the
  measured saving (% of the untraced baseline step), ok within ±30%. Verdict: pass (both),
  partial (ranked first, estimate off), FAIL.
- healthy (``expected == ""``): pass when none of the scenario's ``forbidden`` rules (straggler,
  exposed or slow communication) is warning/critical; other findings are listed, not failed.

The summary format is ``run_suite.py``'s; ``score_path`` and ``table`` are pure functions of it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent / "scenarios")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import timing  # noqa: E402  (torch-free)
from registry import SCENARIOS  # noqa: E402

SERIOUS = ("warning", "critical")
TOLERANCE = 0.30


def score_path(summary: dict[str, Any], findings: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One path's score (``findings`` None: the path gave no report)."""
    expected = summary.get("expected", "")
    t = summary.get("timing")
    sc: dict[str, Any] = timing.score_first_serious(expected, t, findings, TOLERANCE)
    fs = findings or []
    if not expected:
        forbidden = set(summary.get("forbidden") or ())
        bad = [f["id"] for f in fs if f.get("severity") in SERIOUS and f["id"] in forbidden]
        sc["forbidden_found"] = bad
        sc["verdict"] = ("no report" if findings is None else "pass" if not bad else "FAIL")
        sc["passed"] = sc["verdict"] == "pass"
        return sc
    late = summary.get("late_rank")
    top = next((f for f in fs if f.get("severity") in SERIOUS), None)
    sc["top_rank"] = top.get("rank") if top else None
    sc["rank_ok"] = None if late is None else bool(sc["ranked_first"] and sc["top_rank"] == late)
    cause = summary.get("cause")
    text = " ".join([str((top or {}).get("title", "")),
                     *map(str, (top or {}).get("evidence") or [])]).lower()
    sc["cause_named"] = None if not cause or not sc["ranked_first"] else cause.lower() in text
    first = bool(sc["ranked_first"]) and sc["rank_ok"] is not False
    if findings is None:
        sc["verdict"] = "no report"
    elif first and sc["within_tolerance"]:
        sc["verdict"] = "pass"
    elif first:
        sc["verdict"] = "partial (estimate off)"
    else:
        sc["verdict"] = "FAIL"
    sc["passed"] = sc["verdict"] == "pass"
    return sc


def rescore(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with ``score`` recomputed from its findings (both paths)."""
    out = dict(summary)
    out["score"] = {}
    for path in ("record", "profiler"):
        p = summary.get(path) or {}
        if p.get("status") == "n/a":
            out["score"][path] = None
            continue
        out["score"][path] = score_path(summary, p.get("findings") if p.get("status") == "ok"
                                        else None)
    return out


# ---------------------------------------------------------------------------------------------
# The table


def _pct(x: Any) -> str:
    return "–" if x is None else f"{x:.1f}%"


def _ms(x: Any) -> str:
    return "–" if x is None else f"{x:.2f}"


def _esc(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def top_cell(summary: dict[str, Any], path: str) -> str:
    p = summary.get(path) or {}
    if p.get("status") == "n/a":
        return f"n/a ({_esc(p.get('why', ''))})"
    sc = (summary.get("score") or {}).get(path)
    if not sc or not sc.get("has_report"):
        return "no report" + (f": {_esc(p.get('error'))[:80]}" if p.get("error") else "")
    if not sc.get("top"):
        n = sc.get("findings", 0)
        return f"none ({n} info)" if n else "none"
    fs = p.get("findings") or []
    top = next((f for f in fs if f.get("severity") in SERIOUS), {})
    rank = top.get("rank")
    est = top.get("est_saving_pct")
    return (f"{sc['top']} ({sc['top_severity']}"
            + (f", rank {rank}" if rank is not None else "")
            + (f", est {_pct(est)}" if est is not None else "") + ")")


def est_cell(summary: dict[str, Any], path: str) -> str:
    sc = (summary.get("score") or {}).get(path)
    if not sc or not sc.get("has_report") or not summary.get("expected"):
        return "–"
    if sc.get("est_saving_pct") is None:
        return "not found"
    r = sc.get("ratio_pct")
    tail = "" if r is None else f" = {r:.2f} {'ok' if sc.get('within_tolerance') else 'off'}"
    meas = (summary.get("timing") or {}).get("saving_pct")
    return f"{_pct(sc['est_saving_pct'])} / {_pct(meas)}{tail}"


def verdict_cell(summary: dict[str, Any]) -> str:
    parts = []
    for path in ("record", "profiler"):
        sc = (summary.get("score") or {}).get(path)
        if sc is None:
            continue
        v = sc.get("verdict", "?")
        if sc.get("forbidden_found"):
            v += f" ({', '.join(sc['forbidden_found'])})"
        if sc.get("rank_ok") is False and sc.get("ranked_first"):
            v += f" (rank {sc.get('top_rank')} named)"
        if sc.get("cause_named") is False:
            v += f" (cause {summary.get('cause')} not named)"
        parts.append(f"{path}: {v}")
    return "; ".join(parts) or "–"


def row(s: dict[str, Any]) -> str:
    name = s.get("scenario", "?")
    exp = s.get("expected") or "(healthy)"
    if s.get("late_rank") is not None:
        exp += f" rank {s['late_rank']}"
    if s.get("status") in ("skipped", "not run"):
        return f"| {name} | {exp} | {s['status']}: {_esc(s.get('reason', ''))} | | | | | |"
    t = s.get("timing") or {}
    meas = (f"{_ms(t.get('baseline_ms'))} → {_ms(t.get('fixed_ms'))} ms "
            f"({_ms(t.get('saving_ms'))} ms, {_pct(t.get('saving_pct'))})" if t
            else "not measured" + (f": {_esc(s.get('error'))[:60]}" if s.get("error") else ""))
    return (f"| {name} | {exp} | {top_cell(s, 'record')} | {top_cell(s, 'profiler')} | "
            f"{est_cell(s, 'record')} | {est_cell(s, 'profiler')} | {meas} | {verdict_cell(s)} |")


def timing_text(meta: dict[str, Any]) -> str:
    if meta.get("timing") == "separate":
        return (f"untraced timing: {meta.get('rounds', '?')} launches per variant, alternating, "
                f"{meta.get('separate_steps', '?')} steps each; median of the launches' median "
                "step times")
    return (f"untraced timing: both variants in one launch, {meta.get('rounds', '?')} "
            f"interleaved rounds × {meta.get('block_steps', '?')} steps per variant; medians of "
            "the block means")


def table(summaries: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> str:
    meta = meta or {}
    head = []
    if meta:
        head = [f"{meta.get('nproc', '?')} × {meta.get('device_name') or meta.get('device', '?')}"
                f"; torch {meta.get('torch', '?')}, jax {meta.get('jax', '?')}; "
                f"{meta.get('date', '')}; {timing_text(meta)}.", ""]
    lines = [*head,
             ("| scenario | expected | top finding (record) | top finding (torch.profiler) | "
              "est / measured (record) | est / measured (profiler) | measured untraced "
              "base → fix | verdict |"),
             "|---|---|---|---|---|---|---|---|"]
    order = {s.name: i for i, s in enumerate(SCENARIOS)}
    for s in sorted(summaries, key=lambda s: order.get(s.get("scenario", ""), len(order))):
        lines.append(row(s))
    scored = [s for s in summaries if s.get("score")]
    for path in ("record", "profiler"):
        scs = [s["score"].get(path) for s in scored if s["score"].get(path)]
        if scs:
            n_pass = sum(1 for sc in scs if sc.get("verdict") == "pass")
            lines.append("")
            lines.append(f"{path}: {n_pass}/{len(scs)} pass.")
    lines.append("")
    return "\n".join(lines)


def load(paths: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Summaries (rescored) and the suite's meta from suite folders (``summaries/*.json``,
    ``meta.json``), ``summary.json`` files (``{"meta", "scenarios"}``) or single summaries."""
    files: list[Path] = []
    meta: dict[str, Any] = {}
    for p in paths:
        if p.is_dir():
            files += sorted((p / "summaries").glob("*.json"))
            if (p / "meta.json").exists():
                meta = json.loads((p / "meta.json").read_text())
        else:
            files.append(p)
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        d = json.loads(f.read_text())
        if not isinstance(d, dict):
            raise ValueError(f"{f}: not a summary")
        meta = d.get("meta") or meta
        for s in d.get("scenarios", [d] if "scenario" in d else []):
            out[s["scenario"]] = rescore(s)
    return list(out.values()), meta


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    paths = [Path(a) for a in args]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"score.py: {missing[0]}: no such file or folder", file=sys.stderr)
        return 2
    try:
        summaries, meta = load(paths)
    except (OSError, ValueError, KeyError) as exc:
        print(f"score.py: cannot read the summaries: {exc}", file=sys.stderr)
        return 2
    print(table(summaries, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
