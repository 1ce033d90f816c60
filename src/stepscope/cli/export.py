"""``stepscope export RUN [-o FILE]``: the run as a timeline for Perfetto UI / chrome://tracing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stepscope.cli.progress import PROGRESS_AFTER_S, TerminalProgress
from stepscope.cli.verbs import add_verb
from stepscope.errors import StepscopeError
from stepscope.progress import reporting

SUFFIXES = (".json", ".json.gz")


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "export")
    p.add_argument("run_dir", metavar="RUN")
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="trace file, .json or .json.gz "
                        "(default: <RUN name>.trace.json.gz next to RUN)")
    p.set_defaults(run=run)


def default_output(run_dir: Path) -> Path:
    name = run_dir.resolve().name.removesuffix(".stepscope") or "run"
    return run_dir.resolve().with_name(f"{name}.trace.json.gz")


def run(args: argparse.Namespace) -> int:
    from stepscope.exporters.trace import export_trace
    from stepscope.store.output import check_not_in_run
    from stepscope.store.run import Run

    if args.output and not str(args.output).endswith(SUFFIXES):
        raise StepscopeError(f"{args.output}: the trace file must end in .json or .json.gz")
    r = Run(args.run_dir)
    out = Path(args.output) if args.output else default_output(r.path)
    check_not_in_run(out, r.path)
    with TerminalProgress(not args.quiet, delay_s=PROGRESS_AFTER_S) as sink, reporting(sink):
        stats = export_trace(r, out)
    ph = stats.by_phase
    print(f"wrote {out}: {stats.events:,} events ({ph.get('X', 0):,} slices, "
          f"{stats.flows:,} launch flows, {ph.get('C', 0):,} counter values); "
          "open it in https://ui.perfetto.dev or chrome://tracing")
    return 0
