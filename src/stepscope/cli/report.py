"""``stepscope report RUN``: the terminal summary, or the JSON report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.report import build_report
from stepscope.reporters.json_report import to_json
from stepscope.reporters.terminal import print_report, render_text
from stepscope.store.run import Run


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="summarise a run (terminal, text or JSON)")
    p.add_argument("run_dir", metavar="RUN")
    p.add_argument("-o", "--output", help="write the report to a file (.json or .txt)")
    p.add_argument("--format", choices=("text", "json"), help="default: text, or from -o's suffix")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    fmt = args.format
    if fmt is None:
        fmt = "json" if args.output and str(args.output).endswith(".json") else "text"
    report = build_report(Run(args.run_dir))
    text = to_json(report) if fmt == "json" else None
    if args.output:
        out = Path(args.output)
        try:
            out.write_text(text if text is not None else render_text(report), encoding="utf-8")
        except OSError as exc:
            raise StepscopeError(f"{out}: cannot write the report ({exc.strerror})") from None
        print(f"wrote {out}")
    elif text is not None:
        print(text)
    else:
        print_report(report)
    return 0
