"""``stepscope record [-o RUN] [--steps A-B | --delay S --duration S] -- CMD ARGS...``

Runs CMD (a script, ``-m module``, ``python ...`` or a launcher such as ``torchrun``) with the
capture bootstrap injected, then merges what every Python process captured into one run.

stdout belongs to the program: stepscope's own lines, the merge's progress (on a terminal) and the
summary go to stderr (nothing with ``--quiet``). The exit status is the program's: its exit code, or, when it was ended by a signal,
the launcher ends itself by the same signal (so a shell sees 128+N as it would have). Errors found
before the program starts (bad options, RUN exists) exit with 2; a capture failure after the
program ran is reported on stderr and the program's status is still returned. ``--force``
replaces only a stepscope run folder that holds none of the command's files (checked before the
program starts).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope._version import __version__
from stepscope.capture.backends import BACKENDS
from stepscope.capture.schedule import DEFAULT_WARMUP_S, make_schedule
from stepscope.capture.staging_folder import make_staging
from stepscope.cli.progress import TerminalProgress
from stepscope.cli.verbs import add_verb
from stepscope.errors import CaptureError, MissingExtensionWarning, RunError, StepscopeError

if TYPE_CHECKING:
    from stepscope.capture.launcher import LaunchResult

# The capture, the importers and the store are imported when the command runs (numpy and pyarrow
# with them), not to build the parser: `stepscope record --help` stays quick.

# signals the launcher re-raises on itself so its parent sees the same death (no core dumps)
RERAISE = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGPIPE,
           signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM}


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "record")
    p.add_argument("-o", "--output", metavar="RUN", help="run folder (default: stepscope-<time>)")
    p.add_argument("--force", action="store_true", help="replace an existing run folder")
    p.add_argument("--steps", metavar="A-B", help="capture steps A to B (inclusive, 0-based)")
    p.add_argument("--delay", type=float, metavar="S", help="start capturing S seconds after start")
    p.add_argument("--duration", type=float, metavar="S", help="capture for S seconds")
    p.add_argument("--warmup", type=float, metavar="S",
                   help="when no step hook fires: open a time window S seconds after the program "
                        f"first uses the GPU (default {DEFAULT_WARMUP_S:g}; the default window only)")
    p.add_argument("--sample-hz", type=float, default=10.0, metavar="N",
                   help="process/system sampling rate (default 10)")
    p.add_argument("--no-stacks", action="store_true", help="do not sample Python stacks")
    p.add_argument("--nvtx", metavar="NAME", default="",
                   help="the NVTX ranges named NAME (torch.cuda.nvtx, the nvtx package) are the "
                        "steps: --steps counts them, no other step hook does")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="GPU capture: cupti (default; CUPTI through a small C shim), cupti-python "
                        "(NVIDIA's package, optional extra), torch (torch.profiler), none")
    p.add_argument("--gpu-api", choices=("none", "filtered", "all"), default="filtered",
                   help="CUDA runtime/driver calls to record: the ones that matter (launches, "
                        "syncs, copies, allocations; default), all, or none")
    p.add_argument("--no-flight-recorder", action="store_true",
                   help="do not size or read torch.distributed's flight recorder (the "
                        "collectives then have no sizes or process groups; docs/record.md)")
    p.add_argument("--quiet", action="store_true", help="print nothing (the run is still written)")
    p.add_argument("--live", action="store_true",
                   help="while the program runs, show its step time, GPU busy, input wait and "
                        "the top finding so far: a panel redrawn every second on a terminal "
                        "(the program's output is printed above it), else a line every 30 s; "
                        "read from what the capture writes, in this process (docs/record.md)")
    p.add_argument("--kernels", metavar="top:N", type=_top,
                   help="then run the program again under Nsight Compute (ncu), profiling the "
                        "N kernels with the most time per step, and add their counters to the "
                        "run (as `stepscope kernels RUN -- CMD`)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="train.py ARGS | -m module ARGS | python ... | torchrun ...")
    p.set_defaults(run=run)


def default_output(now: _dt.datetime | None = None) -> Path:
    t = now or _dt.datetime.now()
    return Path(f"stepscope-{t:%Y%m%d-%H%M%S}")


MAX_SAMPLE_HZ = 1000.0  # a sampler thread faster than this costs the program more than it shows


def check_seconds(flag: str, value: float | None) -> None:
    """A number of seconds given on the command line: finite, >= 0 and no more than a year
    (``--delay 1e308`` overflowed a deadline; ``nan`` compared false with everything)."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= 365 * 86400):
        raise CaptureError(f"{flag} must be >= 0 seconds and at most a year (got {value:g})")


def run(args: argparse.Namespace) -> int:
    from stepscope.capture.bootstrap import CaptureConfig
    from stepscope.capture.launcher import PKG_ROOT, build_command, child_env
    from stepscope.capture.partitions import merge
    from stepscope.importers import parse_kineto
    from stepscope.store.manifest import Diagnostic
    from stepscope.store.writer import check_replaceable

    for flag, value in (("--delay", args.delay), ("--duration", args.duration),
                        ("--warmup", args.warmup)):
        check_seconds(flag, value)
    schedule = make_schedule(args.steps, args.delay, args.duration)
    if not (math.isfinite(args.sample_hz) and 0 < args.sample_hz <= MAX_SAMPLE_HZ):
        raise CaptureError(f"--sample-hz {args.sample_hz:g}: must be > 0 and at most "
                           f"{MAX_SAMPLE_HZ:g}")
    warmup = DEFAULT_WARMUP_S if args.warmup is None else args.warmup
    if args.warmup is not None and (schedule.timed or schedule.last is not None or args.nvtx):
        raise CaptureError("--warmup applies to the default window only (not with --steps, "
                           "--delay/--duration or --nvtx)")
    if warmup < 0:
        raise CaptureError("--warmup must be >= 0 seconds")
    cmd = build_command(args.command)
    script = next((a for a in cmd[1:2] if a.endswith((".py", ".pyw"))), None)
    if script is not None and not Path(script).is_file():
        raise CaptureError(f"{script}: no such script")
    out = Path(args.output) if args.output else default_output()
    inputs = [Path(a) for a in cmd if Path(a).exists()]  # the script and the files it is given
    if out.exists() and not args.force:
        raise RunError(f"{out}: already exists (choose another -o or pass --force)")
    if args.force:
        check_replaceable(out, inputs)
    if args.backend in ("auto", "cupti"):
        from stepscope.capture.cupti.native import shim_notice

        notice = shim_notice()
        if notice is not None:
            warnings.warn(notice, MissingExtensionWarning, stacklevel=1)
    staging = make_staging(out)
    config = CaptureConfig(staging=str(staging.resolve()), schedule=schedule,
                           sample_hz=args.sample_hz, stacks=not args.no_stacks,
                           pkg_root=str(PKG_ROOT), gpu=args.backend, gpu_api=args.gpu_api,
                           nvtx_step=args.nvtx, auto_warmup_s=warmup,
                           flight_recorder=not args.no_flight_recorder)
    try:
        result = _launch(cmd, child_env(config), staging, live=args.live and not args.quiet,
                         flush_every_s=config.flush_every_s)
    except StepscopeError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    code = result.returncode

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    try:
        diags = [Diagnostic("error", "bootstrap_failed",
                            "capture could not start in a process: "
                            + (f.read_text(errors="replace").splitlines() or ["?"])[0], file=f.name)
                 for f in sorted(staging.glob("bootstrap-error-*.txt"))]
        if result.forwarded:
            diags.append(Diagnostic("info", "signals_forwarded",
                                    f"forwarded to the program: {', '.join(result.forwarded)}"))
        with TerminalProgress(not args.quiet) as progress:
            path = merge(staging, out, command=cmd, returncode=code, launched_pid=result.pid,
                         overwrite=args.force, inputs=inputs, progress=progress,
                         read_trace=parse_kineto,  # --backend torch's trace
                         extra_diagnostics=diags, version=__version__,
                         settings={"window": schedule.describe(), "sample_hz": args.sample_hz,
                                   "stacks": not args.no_stacks, "wall_s": round(result.wall_s, 3),
                                   "backend": args.backend, "gpu_api": args.gpu_api,
                                   "nvtx_step": args.nvtx or None,
                                   "auto_warmup_s": warmup if config.auto_window else None})
    except (StepscopeError, OSError, ValueError) as exc:
        say(f"stepscope: error: the run could not be written: {exc}")
        return _exit_like(code)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not args.quiet:
        _summary(path, code)
    if args.kernels and code == 0:
        from stepscope.cli.kernels import profile_kernels

        try:
            rep, _ = profile_kernels(path, cmd, top=args.kernels, say=say)
            say(f"stepscope: added Nsight Compute counters to run {path} (report {rep})")
        except StepscopeError as exc:  # the run is written; the program's exit status stands
            say(f"stepscope: --kernels: {exc}")
    return _exit_like(code)


def _launch(cmd: list[str], env: dict[str, str], staging: Path, *, live: bool,
            flush_every_s: float) -> LaunchResult:
    """Run the program; with ``live``, beside the live view of its staging folder."""
    from stepscope.capture.launcher import launch

    if not live:
        return launch(cmd, env)
    from stepscope.cli.live import LiveView

    with LiveView(staging, terminal=sys.stderr.isatty(), flush_every_s=flush_every_s) as view:
        out, err = view.child_stdio()
        return launch(cmd, env, stdout=out, stderr=err, started=view.started)


def _top(text: str) -> int:
    """``top:N`` -> N."""
    head, _, n = text.partition(":")
    if head != "top" or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected top:N (N >= 1)")
    return int(n)


def summary_line(path: Path, code: int, partial: bool) -> str:
    """``stepscope: wrote run PATH`` and, in brackets, how the program ended and whether the
    capture was cut (``capture.endings``)."""
    from stepscope.capture.endings import status_text

    said = [t for t in (status_text(code),
                        "partial: a process's capture was cut short" if partial else "") if t]
    return f"stepscope: wrote run {path}" + (f" ({'; '.join(said)})" if said else "")


def _summary(path: Path, code: int) -> None:
    from rich.console import Console

    from stepscope.reporters.report import build_report
    from stepscope.reporters.terminal import WIDTH, print_report
    from stepscope.store.manifest import read_manifest
    from stepscope.store.run import Run

    try:
        partial = read_manifest(path).partial
    except StepscopeError:
        partial = False
    print(summary_line(path, code, partial), file=sys.stderr)
    try:
        console = Console(stderr=True)
        width = min(WIDTH, console.width) if console.is_terminal else WIDTH
        print_report(build_report(Run(path)), Console(stderr=True, width=width))
    except Exception as exc:  # the program's status matters more than our summary
        print(f"stepscope: could not summarise the run ({exc!r}); try: stepscope report {path}",
              file=sys.stderr)


def _exit_like(returncode: int) -> int:
    """The program's exit code; for a signal, die by it (a shell then sees 128+N)."""
    if returncode >= 0:
        return returncode
    sig = -returncode
    if sig in RERAISE:
        sys.stdout.flush()
        sys.stderr.flush()
        if sig != signal.SIGKILL:  # SIGKILL has no handler to reset (signal() raises)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return 128 + sig
