#!/usr/bin/env python3
"""The remedy scores of several re-scored suites side by side: one Markdown row per suite and
per path (record, profiler trace), then all of them together (no GPU).

    python3 benchmarks/scenarios/remedy_totals.py NAME=DIR [NAME=DIR ...]

Each DIR is what ``rescore_remedies.py --out DIR`` wrote (its ``results.json``); NAME labels its
row. The counts are ``remedy_report.totals_text``'s, as each suite's accuracy.md gives them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from remedy_report import totals_text  # after the sys.path setup


def load(spec: str) -> tuple[str, list[dict[str, Any]]]:
    name, sep, folder = spec.partition("=")
    if not sep:
        name, folder = Path(spec).name, spec
    data = json.loads((Path(folder) / "results.json").read_text())
    return name, list(data.get("scenarios") or [])


def table(suites: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    out = ["| suite | via record | via profiler trace |", "|---|---|---|"]
    everything: list[dict[str, Any]] = []
    for name, results in suites:
        everything += results
        out.append(f"| {name} | {totals_text(results, 'record')} | "
                   f"{totals_text(results, 'profiler')} |")
    out.append(f"| **all** | {totals_text(everything, 'record')} | "
               f"{totals_text(everything, 'profiler')} |")
    return out


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
