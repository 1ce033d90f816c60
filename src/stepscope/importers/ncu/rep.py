"""A ``.ncu-rep`` report -> its raw page as CSV text, through the ``ncu`` on PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stepscope.errors import TraceFormatError

REP_MAGIC = b"NVIDIA Nsight Compute"  # not relied upon: the suffix decides
EXPORT_TIMEOUT_S = 600


def raw_page_command(ncu: str, report: Path) -> list[str]:
    """The command that prints a report's raw page as CSV, kernel names demangled as the
    run's kernels are, values in base units."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw",
            "--print-kernel-base", "demangled", "--print-units", "base"]


def export_raw(report: Path, ncu: str | None = None) -> str:
    """The raw page of ``report`` (CSV text). ``TraceFormatError`` when ``ncu`` is not
    installed (saying how to export the CSV elsewhere) or cannot read the report."""
    exe = ncu or shutil.which("ncu")
    if exe is None:
        raise TraceFormatError(str(report), "an Nsight Compute report, and ncu is not on PATH: "
                               "export it where ncu is installed with `ncu --import "
                               f"{report.name} --csv --page raw > {report.stem}.csv` and "
                               "import the CSV")
    try:
        done = subprocess.run(raw_page_command(exe, report), capture_output=True, text=True,
                              timeout=EXPORT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TraceFormatError(str(report), f"ncu could not export it ({exc})") from None
    if done.returncode != 0:
        why = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")
        raise TraceFormatError(str(report), f"ncu could not export it ({why.splitlines()[0]})")
    return done.stdout
