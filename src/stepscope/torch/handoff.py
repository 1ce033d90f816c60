"""``on_trace_ready(dir)``: a ``torch.profiler`` ``on_trace_ready`` handler.

Each profiler cycle (each ``active`` phase of the schedule, or the whole ``with`` block without
one) it:

1. writes the Kineto trace as ``tensorboard_trace_handler`` does: ``<dir>/<worker>.<time in
   ns>.pt.trace.json`` (``.gz`` with ``use_gzip``; ``<worker>`` is ``<host>_<pid>`` unless
   named), so TensorBoard and Perfetto read the folder as before;
2. imports it into the run ``<dir>/<worker>.<time in ns>.stepscope`` beside it (stepscope
   skips run folders when it reads a folder of traces, TensorBoard ignores them);
3. prints one short block: the run, the step time, the top findings (``reporters.handoff``),
   in the process of rank 0 only (``RANK`` unset or 0) unless ``quiet``; every rank writes
   its own run.

A cycle that stepscope cannot read (a ``StepscopeError``) never stops the training: its trace
stays, and one line says why. The handler keeps the paths it wrote (``traces``, ``runs``).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, TextIO

from stepscope.errors import StepscopeError
from stepscope.notebook import load
from stepscope.reporters.handoff import TOP, cycle_block, emit, failure_line


class TraceReady:
    """The handler ``on_trace_ready`` returns (module docstring)."""

    def __init__(self, dir_name: str | os.PathLike[str], worker_name: str | None = None,
                 use_gzip: bool = False, *, analyze: bool = True, top: int = TOP,
                 quiet: bool = False, file: TextIO | None = None) -> None:
        self.dir = Path(dir_name)
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.analyze = analyze
        self.top = top
        self.quiet = quiet
        self.file = file
        self.traces: list[Path] = []
        self.runs: list[Path] = []

    def __call__(self, prof: Any) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StepscopeError(f"{self.dir}: cannot create the folder ({exc.strerror})") \
                from None
        worker = self.worker_name or f"{socket.gethostname()}_{os.getpid()}"
        stem = f"{worker}.{time.time_ns()}"
        trace = self.dir / f"{stem}.pt.trace.json{'.gz' if self.use_gzip else ''}"
        prof.export_chrome_trace(str(trace))
        self.traces.append(trace)
        if not self.analyze:
            return
        speak = not self.quiet and os.environ.get("RANK", "0") in ("", "0")
        try:
            profile = load(trace, out=self.dir / f"{stem}.stepscope")
            self.runs.append(profile.path)
            if speak:
                emit(cycle_block(profile.analyze(), top=self.top), self.file)
        except StepscopeError as exc:
            if speak:
                emit(failure_line(trace, str(exc)), self.file)


def on_trace_ready(dir_name: str | os.PathLike[str] = "stepscope-traces",
                   worker_name: str | None = None, use_gzip: bool = False, *,
                   analyze: bool = True, top: int = TOP, quiet: bool = False,
                   file: TextIO | None = None) -> TraceReady:
    """A handler for ``torch.profiler.profile(on_trace_ready=...)``: the arguments of
    ``tensorboard_trace_handler`` and, after them, ``analyze`` (False: write the traces only),
    ``top`` (findings printed), ``quiet`` (print nothing) and ``file`` (where to print)."""
    return TraceReady(dir_name, worker_name, use_gzip, analyze=analyze, top=top, quiet=quiet,
                      file=file)
