"""``stepscope import TRACE... -o RUN``: foreign traces into a run folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from stepscope.cli.progress import PROGRESS_AFTER_S, TerminalProgress
from stepscope.cli.verbs import add_verb
from stepscope.errors import StepscopeError
from stepscope.progress import reporting


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "import")
    p.add_argument("traces", nargs="+", help="trace files (.json / .json.gz, .xplane.pb, nsys "
                   ".sqlite / .sqlite.gz) or folders; Nsight Compute raw-page CSV exports (ncu "
                   "--import R.ncu-rep --csv --page raw) or .ncu-rep reports (needs ncu on PATH)")
    p.add_argument("--into", metavar="RUN",
                   help="add the Nsight Compute profiles to this existing run (its kernels are "
                        "joined to them by name and launch configuration) instead of writing "
                        "a new run")
    p.add_argument("--rank", type=int, default=0, metavar="R",
                   help="the rank of the run the profiles belong to (with --into; default 0)")
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


def run(args: argparse.Namespace) -> int:
    from stepscope.importers import import_traces, run_folder_for
    from stepscope.importers.ncu import attach_profiles, import_profiles, is_ncu_file
    from stepscope.store.writer import check_replaceable

    profiles = [t for t in args.traces if is_ncu_file(t)]
    traces = [t for t in args.traces if t not in profiles]
    if args.into:
        if traces:
            raise StepscopeError(f"{traces[0]}: --into adds Nsight Compute profiles only; "
                                 "import traces into a new run")
        path = attach_profiles(profiles, args.into, rank=args.rank)
        print(f"added {len(profiles)} Nsight Compute profile(s) to run {path}", file=sys.stdout)
        return 0
    if profiles and not traces:
        out = Path(args.output) if args.output else run_folder_for(profiles[0])
        if args.force:
            check_replaceable(out, profiles)
        path = import_profiles(profiles, out, overwrite=args.force)
        print(f"wrote run {path}", file=sys.stdout)
        return 0
    args.traces = traces
    out = Path(args.output) if args.output else run_folder_for(args.traces[0])
    if args.force:
        check_replaceable(out, args.traces)  # never delete a folder that is not a run
    with TerminalProgress(not args.quiet, delay_s=PROGRESS_AFTER_S) as sink, reporting(sink):
        path = import_traces(args.traces, out, overwrite=args.force, workers=args.workers,
                             engine=args.engine)
    if profiles:
        attach_profiles(profiles, path, rank=args.rank)
    print(f"wrote run {path}", file=sys.stdout)
    return 0
