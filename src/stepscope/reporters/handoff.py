"""What the torch.profiler hand-off (``stepscope.torch.on_trace_ready``) prints after each
profiler cycle: one short block (the run, its step time and GPU busy share, the top findings,
the command for the full report), or one line when the cycle could not be analysed. Names
from the trace are written with control characters escaped (``errors.printable``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from stepscope.analysis.summary import summarize
from stepscope.errors import printable
from stepscope.reporters.report import Report

TOP = 3


def cycle_block(report: Report, *, top: int = TOP) -> str:
    """The block for one cycle's run (module docstring), without a trailing newline."""
    s = summarize(report.analysis)
    head = f"stepscope: {report.run_path}"
    if s.step_time is not None:
        head += (f": {s.steps} steps, {s.step_time.mean_ms:.2f} ms/step, "
                 f"GPU busy {s.gpu_busy_pct:.0f}%")
    else:
        head += ": no steps found"
    lines = [printable(head, newlines=False)]
    fs = report.advice.findings
    for i, f in enumerate(fs[:top], 1):
        lines.append(printable(f"  {i}. {f.id} ({f.severity.value}): {f.est_saving_ms:.2f} "
                               f"ms/step ({f.est_saving_pct:.0f}%) {f.title}", newlines=False))
    if not fs:
        lines.append("  no findings")
    elif len(fs) > top:
        lines.append(f"  ... {len(fs) - top} more")
    lines.append(printable(f"  full report: stepscope report {report.run_path}",
                           newlines=False))
    return "\n".join(lines)


def failure_line(trace: Path, why: str) -> str:
    return printable(f"stepscope: {trace}: written, not analysed: {why}", newlines=False)


def emit(text: str, file: TextIO | None = None) -> None:
    """Print ``text`` (one block) to ``file`` (default: standard output at the time of the
    call, so that a notebook shows it under the cell)."""
    print(text, file=file if file is not None else sys.stdout, flush=True)
