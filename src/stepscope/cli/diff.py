"""``stepscope diff BASE NEW``: is NEW faster, slower or the same as BASE, and why.

``BASE NEW`` are two runs (run folders, or trace files/folders, imported into a temporary
folder for the comparison); ``--base R... --new R...`` gives several runs per side (their
steady steps pooled). The format comes from ``--format``, else from the suffix of ``-o``,
else the terminal. Exit status: 0; 1 when ``--fail-above PCT`` is given and NEW is slower
than BASE by more than PCT percent with the test's confidence (a CI gate); 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from stepscope.cli.progress import PROGRESS_AFTER_S, TerminalProgress
from stepscope.cli.report import format_for
from stepscope.cli.verbs import add_verb
from stepscope.errors import StepscopeError
from stepscope.progress import reporting

if TYPE_CHECKING:
    from stepscope.compare import Diff


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "diff")
    p.add_argument("runs", nargs="*", metavar="BASE NEW",
                   help="the two runs (run folders or traces)")
    p.add_argument("--base", nargs="+", metavar="RUN", help="several runs for BASE")
    p.add_argument("--new", nargs="+", metavar="RUN", help="several runs for NEW")
    p.add_argument("--fail-above", type=_number, metavar="PCT",
                   help="exit 1 when NEW is slower than BASE by more than PCT%% with confidence")
    p.add_argument("--margin", type=_number, default=2.0, metavar="PCT",
                   help="equivalence margin: 'same' when the interval lies within ±PCT%% "
                        "(default 2)")
    p.add_argument("--confidence", type=_number, default=0.95, metavar="P",
                   help="confidence of the interval (default 0.95)")
    p.add_argument("-o", "--output", help="write the diff to a file (.html, .json or .txt)")
    p.add_argument("--format", choices=("text", "terminal", "json", "html"),
                   help="default: from -o's suffix, else the terminal")
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")
    p.set_defaults(run=run)


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """BASE's and NEW's runs from ``BASE NEW`` or ``--base ... --new ...`` (one way only)."""
    if args.base or args.new:
        if args.runs:
            raise StepscopeError("give BASE NEW, or --base and --new, not both")
        if not (args.base and args.new):
            raise StepscopeError("--base and --new go together")
        return list(args.base), list(args.new)
    if len(args.runs) != 2:
        raise StepscopeError(f"diff takes two runs, BASE and NEW ({len(args.runs)} given)")
    return [args.runs[0]], [args.runs[1]]


def run(args: argparse.Namespace) -> int:
    import stepscope
    from stepscope.store.output import write_text_output

    base, new = sides(args)
    fmt = args.format or format_for(args.output)
    with TerminalProgress(not args.quiet, delay_s=PROGRESS_AFTER_S) as sink, reporting(sink):
        d = stepscope.diff(base, new, confidence=args.confidence, margin_pct=args.margin)
    text = _rendered(d, fmt, args.fail_above)
    if args.output:
        out = write_text_output(args.output, text if text is not None else _plain(d))
        print(f"wrote {out}")
    elif text is not None:
        print(text)
    else:
        from stepscope.reporters.diff_terminal import print_diff

        print_diff(d)
    if args.fail_above is not None and d.slower_than(args.fail_above):
        return 1
    return 0


def _rendered(d: Diff, fmt: str, fail_above: float | None) -> str | None:
    if fmt == "json":
        from stepscope.reporters.diff_json import diff_json

        return diff_json(d, fail_above=fail_above)
    if fmt == "html":
        from stepscope.reporters.diff_html import diff_html

        return diff_html(d, fail_above=fail_above)
    return None


def _plain(d: Diff) -> str:
    from stepscope.reporters.diff_terminal import diff_text

    return diff_text(d)
