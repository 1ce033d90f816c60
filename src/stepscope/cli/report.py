"""``stepscope report RUN``: the terminal summary, the JSON, HTML or Markdown report.

The format comes from ``--format``, else from the suffix of ``-o`` (``.json``, ``.html``/``.htm``,
``.md``), else text. JSON, Markdown and text without ``-o`` go to stdout; HTML without ``-o`` is
written to ``RUN/report.html`` (a multi-megabyte page is no use on a terminal). ``--open`` writes
the HTML report and opens it in the browser (where there is none, it says where the file is).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.cli.progress import PROGRESS_AFTER_S, TerminalProgress
from stepscope.cli.verbs import add_verb
from stepscope.errors import StepscopeError
from stepscope.progress import reporting

FORMATS = ("text", "json", "html", "markdown")

if TYPE_CHECKING:
    from stepscope.reporters.report import Report


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "report")
    p.add_argument("run_dir", metavar="RUN")
    p.add_argument("-o", "--output", help="write the report to a file (.html, .json or .txt)")
    p.add_argument("--format", choices=FORMATS,
                   help="default: from -o's suffix, else text (html without -o: RUN/report.html; "
                        "markdown: for CI job summaries and pull-request comments)")
    p.add_argument("--open", action="store_true",
                   help="open the HTML report in the browser (implies --format html)")
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")
    p.add_argument("--workers", type=_positive, metavar="N",
                   help="analyse the ranks in N worker processes (1: serial; default: a pool "
                        "the size of the cores for runs of many ranks and events)")
    p.add_argument("--engine", default="process", metavar="ENGINE",
                   help="where the per-rank analysis runs: process (a local pool, default), "
                        "dask (a local Dask cluster) or dask:SCHEDULER_ADDRESS (the run's "
                        "folder must be at the same path on the workers)")
    p.add_argument("--untraced-step-ms", type=_positive_ms, metavar="MS",
                   help="the program's step time without the profiler (from its own log): the "
                        "remedies' predictions are calibrated to it (the run's steps must be "
                        "marked by the program); without it, a recorded run is calibrated to "
                        "the steps record timed right after its capture window")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from stepscope.analysis.rank_pool import check_engine
    from stepscope.reporters.report import build_report
    from stepscope.store.output import check_not_in_run, write_text_output
    from stepscope.store.run import Run

    fmt = args.format or ("html" if args.open and not args.output else
                          "markdown" if _is_markdown(args.output) else format_for(args.output))
    if args.open and fmt != "html":
        raise StepscopeError(f"--open opens the HTML report (not --format {fmt}, -o "
                             f"{args.output or '-'}): give -o FILE.html or no -o")
    engine, _, address = str(args.engine).strip().partition(":")
    check_engine(engine)
    if engine == "process" and address:
        check_engine(args.engine)
    run_ = Run(args.run_dir)
    with TerminalProgress(not args.quiet, delay_s=PROGRESS_AFTER_S) as sink, reporting(sink):
        report = build_report(run_, page=fmt == "html", workers=args.workers, engine=engine,
                              address=address, untraced_step_ms=args.untraced_step_ms)
        text = _rendered(report, fmt)
    output = args.output or (str(run_.path / "report.html") if fmt == "html" else None)
    if output:
        check_not_in_run(output, run_.path)
        out = write_text_output(output, text if text is not None else _plain(report))
        print(f"wrote {out}")
        if args.open:
            said = open_in_browser(out)
            if said:
                print(f"stepscope: {said}", file=sys.stderr)
    elif text is not None:
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        from stepscope.reporters.terminal import print_report

        print_report(report)
    return 0


# The renderers are imported by the format that needs them: the HTML page's and the terminal's
# modules (with rich) cost ~50 ms of start-up that a JSON report does not need.

def _rendered(report: Report, fmt: str) -> str | None:
    """The JSON or HTML text; None for text (rendered for the terminal or by _plain)."""
    if fmt == "json":
        from stepscope.reporters.json_report import to_json

        return to_json(report)
    if fmt == "html":
        from stepscope.reporters.html import to_html

        return to_html(report)
    if fmt == "markdown":
        from stepscope.reporters.markdown import to_markdown

        return to_markdown(report)
    return None


def _plain(report: Report) -> str:
    from stepscope.reporters.terminal import render_text

    return render_text(report)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: not a positive number of workers")
    return n


def _positive_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: not a step time in ms (a number > 0)")
    return value


def _is_markdown(output: str | None) -> bool:
    return bool(output) and Path(str(output)).suffix.lower() in (".md", ".markdown")


def open_in_browser(path: Path, environ: Mapping[str, str] | None = None,
                    platform: str | None = None,
                    opener: Callable[[str], bool] | None = None) -> str | None:
    """Open ``path`` in the user's browser; what to tell the user when it was not opened.
    Where no browser can show it (Linux or BSD with no display and no ``BROWSER``: an SSH
    session, a container, CI) nothing is started: a terminal browser would take over the
    terminal. The environment, platform and opener are parameters for the tests."""
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    uri = Path(path).resolve().as_uri()
    headless = (plat.startswith(("linux", "freebsd", "openbsd", "netbsd"))
                and not any(env.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")))
    if headless:
        return f"no display to open a browser on; the report is {path}"
    if opener is None:
        import webbrowser

        opener = webbrowser.open
    try:
        opened = opener(uri)
    except Exception as exc:  # a browser that fails to start is no failure of the report
        return f"could not open a browser ({exc}); the report is {path}"
    return None if opened else f"found no browser to open; the report is {path}"


def format_for(output: str | None) -> str:
    suffix = Path(output).suffix.lower() if output else ""
    return {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "text")
