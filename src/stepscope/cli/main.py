"""``stepscope`` command line: one module per verb; errors become one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence

from stepscope._version import __version__
from stepscope.cli.verbs import BY_NAME, epilog, examples_text
from stepscope.cli.verbs import VERBS as TABLE
from stepscope.errors import MissingExtensionWarning, StepscopeError, foreign, printable

# Command -> its module in stepscope.cli (each has add_parser and run), in --help order
# (`import` is a keyword: its module is import_); summaries and examples in cli/verbs.py.
# Only the module of the command being run is imported, and `stepscope --help` imports none
# (it lists the commands from cli/verbs.py): the commands' modules import their layers (numpy,
# pyarrow, rich ...) only when they run, so that `stepscope CMD --help` is quick too.
VERBS = {v.name: v.module for v in TABLE}
FIRST_EXAMPLES = ("demo", "record", "import", "report")  # under `stepscope --help`


def _import_numpy() -> None:
    """Import numpy with one OpenBLAS thread unless the user chose otherwise: the command line
    does no linear algebra, and OpenBLAS starts (and spins) a thread per core when it loads
    (measured: 0.26 s of CPU for ``import numpy`` on 2 cores against 0.18 s). The variable is
    removed again at once, so the programs ``stepscope record`` runs do not inherit it."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        importlib.import_module("numpy")
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def parser(argv: Sequence[str] | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The argument parser. Given ``argv`` naming a command: with only that command's parser
    (its module imported); else (``--help``, a mistyped command) with every command listed
    but no module imported; ``full``: every command's parser (shell completion)."""
    p = argparse.ArgumentParser(
        prog="stepscope",
        description="Why is my GPU training step slow, and what should I change?",
        epilog=examples_text(tuple(BY_NAME[n].examples[0] for n in FIRST_EXAMPLES))
        + "\n\n'stepscope COMMAND --help' shows a command's options and examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"stepscope {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND")
    sub.required = True
    first = next((a for a in argv or () if not a.startswith("-")), None)
    for verb in TABLE:
        if full or verb.name == first:
            importlib.import_module(f"stepscope.cli.{verb.module}").add_parser(sub)
        elif first not in VERBS:  # the list of commands only
            sub.add_parser(verb.name, help=verb.summary, epilog=epilog(verb))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 bad input)."""
    if argv is None:
        argv = sys.argv[1:]
    if list(argv) == ["--version"]:  # answered before numpy and every command's module load
        print(f"stepscope {__version__}")
        return 0
    p = parser(argv)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or usage error (2)
        return int(exc.code or 0)
    if args.verb != "completion":  # the one command that needs no numpy (it prints a script)
        _import_numpy()  # before the command imports its layers (not for --help)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _notices(warnings.showwarning)  # restored at the block's end
            code: int = args.run(args)
        sys.stdout.flush()  # a full disk or a closed pipe behind stdout shows here, not at exit
        return code
    except StepscopeError as exc:
        if args.debug:
            raise
        return _error(str(exc))
    except KeyboardInterrupt:
        print("stepscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _stdout_gone()
        return 0
    except (OSError, RecursionError, OverflowError, UnicodeError, MemoryError) as exc:
        # the last resort: the reading and writing code translates these, naming the file; what
        # gets here still is one line, about the command's input or its output
        if args.debug:
            raise
        problem = foreign(exc) or type(exc).__name__
        if isinstance(exc, OSError):
            if exc.filename is None:  # a write to stdout failed (print has no file name)
                _stdout_gone()
                return _error(f"stdout: cannot write ({problem})")
            return _error(problem)
        return _error(f"{_subject(args)}: {problem}")


def _notices(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` while a command runs: stepscope's own notices (an optional
    compiled part missing, ``MissingExtensionWarning``: once per process, by Python's default
    filter) as one ``stepscope: note:`` line on stderr; any other warning goes to ``show``."""

    def notice(message: Warning | str, category: type[Warning], filename: str, lineno: int,
               file: object = None, line: str | None = None) -> None:
        if issubclass(category, MissingExtensionWarning):
            print(f"stepscope: note: {printable(str(message), newlines=False)}", file=sys.stderr)
            return
        show(message, category, filename, lineno, file, line)

    return notice


def _error(message: str) -> int:
    """The one line on stderr (control characters escaped: file and kernel names come from
    the user's data); the exit code 2."""
    print(f"stepscope: error: {printable(message, newlines=False)}", file=sys.stderr)
    return 2


def _subject(args: argparse.Namespace) -> str:
    """What the command reads: the run folder or the traces."""
    given = getattr(args, "run_dir", None) or getattr(args, "traces", None) or "stepscope"
    return given if isinstance(given, str) else ", ".join(map(str, given))


def _stdout_gone() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit does not fail
    again (and print "Exception ignored ..."); in-process callers (tests) keep their stdout."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def run() -> None:
    sys.exit(main())
