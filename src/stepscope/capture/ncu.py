"""Run a program under Nsight Compute (``ncu``) for ``stepscope kernels``: the command line,
and what its failures mean in one line (the counters refused, ncu missing)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from stepscope.errors import CaptureError

COUNTERS_REFUSED = (
    "the GPU's performance counters are restricted to administrators (ERR_NVGPUCTRPERM): run "
    "as root, or allow them for every user (`options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d, then reload the driver or "
    "reboot); in a container, start it with `--cap-add SYS_ADMIN`; virtual GPUs need profiling "
    "enabled by the host. The trace-level kernel analysis of the run is unchanged")


def ncu_command(ncu: str, report: Path, name_regex: str, launch_skip: int, launch_count: int,
                program: Sequence[str], *, sections: str = "full") -> list[str]:
    """The ncu command line: the kernels by function name, after ``launch_skip`` matching
    launches, ``launch_count`` of them, ``--set sections``, written to ``report``."""
    return [ncu, "--set", sections, "--import-source", "yes",
            "--kernel-name-base", "function", "--kernel-name", f"regex:{name_regex}",
            "--launch-skip", str(launch_skip), "--launch-count", str(launch_count),
            "--export", str(report), "--force-overwrite", "--", *program]


def find_ncu(ncu: str | None) -> str:
    exe = shutil.which(ncu or "ncu")
    if exe is None:
        raise CaptureError(f"{ncu or 'ncu'}: Nsight Compute is not installed or not on PATH "
                           "(install it with the CUDA toolkit, or pass --ncu PATH)")
    return exe


def run_ncu(cmd: Sequence[str], log: Path, timeout_s: float | None = None) -> int:
    """Run ``cmd`` with its output to ``log``; the program's exit status. ``CaptureError`` in
    one line when the counters were refused or nothing was profiled."""
    try:
        with open(log, "wb") as out:
            done = subprocess.run(list(cmd), stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise CaptureError(f"ncu did not finish in {timeout_s:g} s (log: {log})") from None
    except OSError as exc:
        raise CaptureError(f"{cmd[0]}: cannot run ({exc.strerror or exc})") from None
    text = log.read_text(encoding="utf-8", errors="replace")
    if "ERR_NVGPUCTRPERM" in text:
        raise CaptureError(COUNTERS_REFUSED)
    if "No kernels were profiled" in text:
        raise CaptureError(f"ncu profiled no kernel: the program launched none of them by that "
                           f"name after the warm-up (log: {log})")
    return done.returncode
