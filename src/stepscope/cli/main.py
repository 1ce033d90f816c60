"""``stepscope`` command line: one module per verb; errors become one line and exit code 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stepscope import __version__
from stepscope.cli import demo, export, export_import, query, record, report
from stepscope.errors import StepscopeError

VERBS = (record, export_import, report, query, export, demo)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stepscope",
        description="Why is my GPU training step slow, and what should I change?",
    )
    p.add_argument("--version", action="version", version=f"stepscope {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND")
    sub.required = True
    for verb in VERBS:
        verb.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 bad input)."""
    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        return int(exc.code or 0)
    try:
        code: int = args.run(args)
        return code
    except StepscopeError as exc:
        if args.debug:
            raise
        print(f"stepscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stepscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def run() -> None:
    sys.exit(main())
