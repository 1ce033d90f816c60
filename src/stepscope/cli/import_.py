"""``stepscope import TRACE... -o RUN``: foreign traces into a run folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stepscope.cli.progress import PROGRESS_AFTER_S, TerminalProgress
from stepscope.importers import import_traces
from stepscope.progress import reporting
from stepscope.store.writer import check_replaceable


def add_parser(sub: Any) -> None:
    p = sub.add_parser("import", help="import Kineto traces (files or folders, one file per rank) or "
                                       "Nsight Systems exports (.sqlite[.gz], Parquet folder)")
    p.add_argument("traces", nargs="+", help="trace files (.json / .json.gz, nsys .sqlite / .sqlite.gz) or folders")
    p.add_argument("-o", "--output", help="run folder to write (default: <first trace>.stepscope)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing run folder (only a stepscope run, holding no input)")
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")
    p.add_argument("--workers", type=_positive, metavar="N",
                   help="ranks read at once (1: one after another; default: "
                        "STEPSCOPE_IMPORT_WORKERS, else from the traces' size, cores and memory)")
    p.add_argument("--engine", metavar="ENGINE",
                   help="where ranks are read: process (a local process pool, the default), "
                        "dask (a local Dask cluster) or dask:SCHEDULER_ADDRESS (needs "
                        "stepscope[dask]; the output folder must be on a file system the "
                        "workers share)")
    p.set_defaults(run=run)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def default_output(first: str) -> Path:
    p = Path(first.rstrip("/"))
    name = p.name
    for suffix in (".gz", ".json", ".trace", ".pt", ".sqlite"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return p.with_name(name + ".stepscope")


def run(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else default_output(args.traces[0])
    if args.force:
        check_replaceable(out, args.traces)  # never delete a folder that is not a run
    with TerminalProgress(not args.quiet, delay_s=PROGRESS_AFTER_S) as sink, reporting(sink):
        path = import_traces(args.traces, out, overwrite=args.force, workers=args.workers,
                             engine=args.engine)
    print(f"wrote run {path}", file=sys.stdout)
    return 0
