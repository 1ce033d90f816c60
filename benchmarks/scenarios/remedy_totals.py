#!/usr/bin/env python3
"""The remedy scores of several re-scored suites side by side: one Markdown row per suite and
per path (record, profiler trace), then all of them together (no GPU).

    python3 benchmarks/scenarios/remedy_totals.py NAME=DIR [NAME=DIR ...]

Each DIR is what ``rescore_remedies.py --out DIR`` wrote (its ``results.json``); NAME labels its
row. The counts are ``remedy_report.totals_text``'s, as each suite's accuracy.md gives them.

A second table counts each row's ``share_ratio``, "given the measured baseline": the
report's predicted share of its own step applied to the measured untraced baseline, against
the measured fixed step. Where the report's steps are the program's, the score above takes
its own ms instead (``remedy_score``'s module doc says why); where they came from the kernel
stream's periodicity the two are the same. Traps and unstable measurements
(``remedy_score.UNSTABLE_SPREAD``) are left out.

A third table repeats the first without the rows the interleaved harness timed for a scenario
it cannot time (``timing.TIMED_BY_PROGRAMS``): only their variants timed by their own programs
(``record_suite --program-timing``) stay.

A fourth counts the choices: for every two fix variants of one scenario whose measured fixed
steps differ by :data:`CHOICE_MIN` or more (of the faster), whether the report's predictions
put them in the same order (TF32 or bf16 autocast; the CPU sort on the GPU or pinned round
trips; CUDA graphs or pinned copies): the fix a user reading the report would pick first.

A fifth takes each fix across the suites: per scenario, variant and path, the calls that
scored it, the median of its ratios (the score of the first table), their range and how many
were within ±30%. One call's ratio carries the host's pace at that call (docs/accuracy.md,
"The host's two speeds"); the median over calls says whether the model itself is off.
``cpu_ops_midstep``'s variant "pinned" sorted its pinned buffer in place until 2026-11-27;
in a result that has no "pinned_inplace" variant, that row is counted as "pinned_inplace"
(``variants.RENAMED``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import timing  # after the sys.path setup
from remedy_report import totals_text
from remedy_score import TARGET, TOLERANCE, measured_groups
from variants import measured_name


def load(spec: str) -> tuple[str, list[dict[str, Any]]]:
    name, sep, folder = spec.partition("=")
    if not sep:
        name, folder = Path(spec).name, spec
    data = json.loads((Path(folder) / "results.json").read_text())
    return name, list(data.get("scenarios") or [])


def share_text(results: list[dict[str, Any]], path: str) -> str:
    """Rows whose share of the report's own step, applied to the measured baseline, is within
    ±30% of the measured fixed step."""
    got = [float(row["share_ratio"]) for res in results
           for row in ((res.get("remedy_score") or {}).get(path) or [])
           if not row.get("trap") and not row.get("unstable")
           and row.get("share_ratio") is not None]
    if not got:
        return "nothing scored"
    ok = sum(1 for r in got if abs(r - 1.0) <= TOLERANCE)
    return f"{ok}/{len(got)}"


CHOICE_MIN = 0.05  # measured fixed steps closer than this (of the faster) are a tie: not counted


def _first_rows(res: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """Per variant, its first scored row with a prediction and a measurement (no trap, no
    unstable one)."""
    out: dict[str, dict[str, Any]] = {}
    for row in (res.get("remedy_score") or {}).get(path) or []:
        if (row.get("trap") or row.get("unstable") or row.get("predicted_fixed_ms") is None
                or row.get("measured_fixed_ms") is None):
            continue
        out.setdefault(str(row.get("variant")), row)
    return out


def per_fix(suites: list[tuple[str, list[dict[str, Any]]]]
            ) -> dict[tuple[str, str, str], list[float]]:
    """(scenario, variant, path) -> the ratio of its scored row in each suite, in order (no
    trap, no unstable measurement; the variant's first such row of a result)."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for _, results in suites:
        for res in results:
            for path in ("record", "profiler"):
                for variant, row in _first_rows(res, path).items():
                    if row.get("ratio") is None:
                        continue
                    scen = str(res.get("scenario"))
                    key = (scen, measured_name(scen, variant, res.get("variants") or {}), path)
                    out.setdefault(key, []).append(float(row["ratio"]))
    return out


def per_fix_table(suites: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """One row per fix and path (:func:`per_fix`): calls, median ratio, range, within ±30%;
    a median beyond ±20% is marked."""
    import statistics

    out = ["| scenario | variant | path | calls | median | range | within ±30% |",
           "|---|---|---|---|---|---|---|"]
    for (scen, variant, path), got in sorted(per_fix(suites).items()):
        med = statistics.median(got)
        ok = sum(1 for r in got if abs(r - 1.0) <= TOLERANCE)
        mark = " **(off ±20%)**" if abs(med - 1.0) > TARGET else ""
        out.append(f"| {scen} | {variant} | {path} | {len(got)} | {med:.2f}{mark} | "
                   f"{min(got):.2f}-{max(got):.2f} | {ok}/{len(got)} |")
    return out


def choice_text(results: list[dict[str, Any]], path: str) -> str:
    """Pairs of one scenario's fix variants, measured apart, that the predictions order as
    measured: "right/compared"."""
    right = n = 0
    for res in results:
        rows = list(_first_rows(res, path).values())
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                ma, mb = float(a["measured_fixed_ms"]), float(b["measured_fixed_ms"])
                if abs(ma - mb) < CHOICE_MIN * min(ma, mb):
                    continue
                n += 1
                pa, pb = float(a["predicted_fixed_ms"]), float(b["predicted_fixed_ms"])
                right += (pa < pb) == (ma < mb) and pa != pb
    return f"{right}/{n}" if n else "nothing compared"


def _table(suites: list[tuple[str, list[dict[str, Any]]]],
           text: Callable[[list[dict[str, Any]], str], str], record_head: str) -> list[str]:
    """One row per suite and one for all of them: ``text`` of its results per path."""
    out = [f"| suite | {record_head} | via profiler trace |", "|---|---|---|"]
    everything: list[dict[str, Any]] = []
    for name, results in suites:
        everything += results
        out.append(f"| {name} | {text(results, 'record')} | {text(results, 'profiler')} |")
    out.append(f"| **all** | {text(everything, 'record')} | {text(everything, 'profiler')} |")
    return out


def program_timed(res: dict[str, Any]) -> dict[str, Any]:
    """``res`` with, for a ``timing.TIMED_BY_PROGRAMS`` scenario, only the remedy rows of the
    variants its own programs timed."""
    if res.get("scenario") not in timing.TIMED_BY_PROGRAMS:
        return res
    timed = {k for _, vs in measured_groups(res) for k, v in (vs or {}).items()
             if str(v.get("from", "")).startswith("program.py")}
    score = {path: None if rows is None else [r for r in rows if r.get("variant") in timed]
             for path, rows in (res.get("remedy_score") or {}).items()}
    return {**res, "remedy_score": score}


def share_table(suites: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    return _table(suites, share_text, "via record")


def table(suites: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    return _table(suites, totals_text, "via record")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        suites = [load(a) for a in args]
    except (OSError, ValueError) as exc:
        print(f"remedy_totals.py: {exc}", file=sys.stderr)
        return 2
    print("\n".join(table(suites)))
    print("\nGiven the measured baseline: the report's share of its own step applied to it "
          "(share_ratio), within ±30%:\n")
    print("\n".join(share_table(suites)))
    print("\nAs the first table, without the rows the harness timed for "
          f"{', '.join(timing.TIMED_BY_PROGRAMS)} (their variants timed by their own programs "
          "stay):\n")
    print("\n".join(table([(n, [program_timed(r) for r in rs]) for n, rs in suites])))
    print("\nChoices: two fix variants of one scenario measured at least "
          f"{CHOICE_MIN:.0%} apart, ordered by the predictions as measured:\n")
    print("\n".join(_table(suites, choice_text, "via record")))
    print("\nEach fix across the suites: its scored ratio's median over the calls, range, and "
          "calls within ±30%:\n")
    print("\n".join(per_fix_table(suites)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
