"""``stepscope kernels RUN -- CMD``: re-run the program under Nsight Compute, profiling the
kernels that cost RUN the most time per step, and add their counters to RUN."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.cli.verbs import add_verb
from stepscope.errors import CaptureError, RunError

if TYPE_CHECKING:
    from stepscope.analysis.kernel_plan import KernelPlan

DEFAULT_TOP = 5
MAX_LAUNCHES = 20


def add_parser(sub: Any) -> None:
    p = add_verb(sub, "kernels", usage="stepscope kernels [options] RUN -- CMD ARGS")
    add_options(p)
    p.add_argument("run_dir", metavar="RUN", help="the run whose kernels to profile")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the program again (the same one, the same inputs)")
    p.set_defaults(run=run)


def add_options(p: Any) -> None:
    p.add_argument("--top", type=int, default=DEFAULT_TOP, metavar="N",
                   help=f"kernels to profile, by time per step (default {DEFAULT_TOP})")
    p.add_argument("--rank", type=int, default=0, metavar="R", help="the rank (default 0)")
    p.add_argument("--max-launches", type=int, default=MAX_LAUNCHES, metavar="M",
                   help="launches profiled at most (each is replayed ~40 times: about a second; "
                        f"default {MAX_LAUNCHES})")
    p.add_argument("--ncu", metavar="PATH", help="the ncu executable (default: ncu on PATH)")
    p.add_argument("--set", dest="ncu_set", default="full", metavar="SET",
                   help="ncu section set (default full: every counter the kernel rules read)")


def program(command: Sequence[str]) -> list[str]:
    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CaptureError("no program given: stepscope kernels RUN -- python train.py ...")
    return cmd


def report_path(run_dir: Path) -> Path:
    """Beside the run (a run folder holds only its tables): ``RUN.kernels.ncu-rep``."""
    return run_dir.with_name(run_dir.name + ".kernels.ncu-rep")


def profile_kernels(run_dir: Path, cmd: Sequence[str], *, top: int, rank: int = 0,
                    max_launches: int = MAX_LAUNCHES, ncu: str | None = None,
                    ncu_set: str = "full", say: Any = None) -> tuple[Path, KernelPlan]:
    """Profile ``run_dir``'s ``top`` kernels by re-running ``cmd`` under ncu; attach."""
    from stepscope.analysis import analyze
    from stepscope.analysis.kernel_plan import plan_kernels
    from stepscope.capture.ncu import find_ncu, ncu_command, run_ncu
    from stepscope.importers.ncu import attach_profiles
    from stepscope.store.run import Run

    if top < 1 or max_launches < 1:
        raise CaptureError("--top and --max-launches must be at least 1")
    run = Run(run_dir)
    a = analyze(run)
    ra = next((r for r in a.ranks if r.rank == rank), None)
    if ra is None:
        raise RunError(f"{run_dir}: has no rank {rank}")
    plan = plan_kernels(a.graph.rank(rank), ra, top, max_launches)
    if plan is None:
        raise RunError(f"{run_dir}: no GPU kernels to profile (rank {rank})")
    exe = find_ncu(ncu)
    rep = report_path(run_dir)
    cmdline = ncu_command(exe, rep, plan.name_regex, plan.launch_skip, plan.launch_count,
                          cmd, sections=ncu_set)
    if say is not None:
        names = ", ".join(k.base for k in plan.kernels)
        say(f"stepscope: profiling {len(plan.kernels)} kernel(s) ({names}): "
            f"{plan.launch_count} launch(es) after {plan.launch_skip}"
            + (" (capped: --max-launches)" if plan.capped else ""))
    run_ncu(cmdline, rep.with_suffix(".log"))
    if not rep.is_file():
        raise CaptureError(f"ncu wrote no report {rep} (log: {rep.with_suffix('.log')})")
    attach_profiles([rep], run_dir, rank=rank, ncu=exe)
    return rep, plan


def run(args: argparse.Namespace) -> int:
    rep, plan = profile_kernels(Path(args.run_dir), program(args.command), top=args.top,
                                rank=args.rank, max_launches=args.max_launches, ncu=args.ncu,
                                ncu_set=args.ncu_set,
                                say=lambda m: print(m, file=sys.stderr))
    print(f"added Nsight Compute counters of {len(plan.kernels)} kernel(s) to run "
          f"{args.run_dir} (report {rep})", file=sys.stdout)
    return 0
