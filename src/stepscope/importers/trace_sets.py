"""Which trace files make one run: folders searched recursively, TensorBoard log folders,
profiler cycles, and ranks that do not belong to one job.

A run holds one capture window per rank (its steps, GPU busy share and breakdown are over that
window). So:

* a folder is searched recursively (hidden folders and stepscope runs skipped): a TensorBoard
  log folder keeps its traces in ``plugins/profile/<run>/``, where
  ``torch.profiler.tensorboard_trace_handler`` writes ``<worker>.<ms>.pt.trace.json[.gz]``
  (``<worker>`` is ``<host>_<pid>`` unless named);
* traces of more than one TensorBoard run (two ``plugins/profile/<run>`` folders) are refused:
  they are different experiments, each its own stepscope run;
* several profiler cycles of one worker (``schedule(..., repeat=N)`` or ``repeat=0``: one
  ``<worker>`` and several ``<ms>``) found in a folder: the last cycle of each worker is imported
  and the run says which, and which others were left (a ``profiler_cycles`` warning naming
  them; each is imported by naming its file). Named explicitly, or told by content (one process
  id and capture windows that do not overlap), they are refused with a message naming the
  cycles. Each cycle is its own run: never two ranks, and never one rank with a gap of minutes
  in its timeline;
* files that look like ranks of different jobs (different world sizes or GPU models, or
  capture windows far apart) are imported with a ``mixed_jobs`` warning saying why.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from stepscope.errors import TraceFormatError
from stepscope.schema import TABLE_NAMES
from stepscope.store.manifest import MANIFEST_NAME, Diagnostic

# tensorboard_trace_handler's file name: <worker>.<time in ms>.pt.trace.json[.gz]
CYCLE_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ms>\d{10,})\.pt\.trace\.json(\.gz)?$")
# capture windows of ranks of one job start within seconds of each other; further apart than
# this (with no overlap) they are different captures
FAR_APART_NS = 60 * 1_000_000_000
_TIMED = ("kernels", "memcpy", "memset", "api_calls", "cpu_ops", "annotations")


def walk(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Files under ``folder`` ending with ``suffixes``, sorted by path: recursively, skipping
    hidden folders and stepscope runs (a run written next to its traces, ``-o traces/run``,
    holds JSON that is not a trace: its manifest, ``report.json``)."""
    out = []
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not _is_run(here / d)]
        out += [here / n for n in names if n.endswith(suffixes) and (here / n).is_file()]
    return sorted(out)


def _is_run(path: Path) -> bool:
    return (path / MANIFEST_NAME).is_file() and any((path / t).is_dir() for t in TABLE_NAMES)


def tensorboard_run(path: Path) -> str | None:
    """``<logdir>/plugins/profile/<run>`` for a trace in a TensorBoard log folder, else None."""
    parts = path.parts
    for i in range(len(parts) - 3, 0, -1):
        if parts[i - 1] == "plugins" and parts[i] == "profile":
            return str(Path(*parts[: i + 2]))
    return None


def check_tensorboard_runs(given: str, files: Sequence[Path]) -> None:
    """Refuse traces of several TensorBoard runs (``given``: the paths, for the message)."""
    runs = sorted({r for r in map(tensorboard_run, files) if r is not None})
    if len(runs) > 1:
        names = ", ".join(Path(r).name for r in runs)
        raise TraceFormatError(given, (
            f"traces of {len(runs)} TensorBoard runs ({names}); a stepscope run is one of "
            f"them: import one folder, e.g. stepscope import {runs[0]}"))


def check_cycles_by_name(files: Sequence[Path]) -> None:
    """Refuse several profiler cycles of one worker, told by tensorboard_trace_handler's names."""
    cycles: defaultdict[tuple[Path, str], list[Path]] = defaultdict(list)
    for f in files:
        m = CYCLE_NAME.match(f.name)
        if m:
            cycles[(f.parent, m["worker"])].append(f)
    for (_, worker), fs in sorted(cycles.items()):
        if len(fs) > 1:
            raise cycles_error(worker, fs)


def last_cycles(files: Sequence[Path]) -> tuple[list[Path], list[Diagnostic]]:
    """Of the files found in a folder, the last profiler cycle of each worker (by the time in
    tensorboard_trace_handler's names), and a warning per worker whose earlier cycles were left."""
    cycles: defaultdict[tuple[Path, str], list[tuple[int, Path]]] = defaultdict(list)
    for f in files:
        m = CYCLE_NAME.match(f.name)
        if m:
            cycles[(f.parent, m["worker"])].append((int(m["ms"]), f))
    dropped: set[Path] = set()
    diags = []
    for (_, worker), found in sorted(cycles.items()):
        if len(found) < 2:
            continue
        found.sort()
        left = [f for _, f in found[:-1]]
        dropped.update(left)
        diags.append(Diagnostic("warning", "profiler_cycles", (
            f"{len(found)} profiler cycles of one worker ({worker}): imported the last, "
            f"{found[-1][1].name}; left: {', '.join(f.name for f in left)} (a run holds one "
            f"capture window per rank: import another cycle by naming its file)"),
            str(found[-1][1])))
    return [f for f in files if f not in dropped], diags


def cycles_error(worker: str, files: Sequence[Path]) -> TraceFormatError:
    names = ", ".join(f.name for f in files)
    return TraceFormatError(str(files[0].parent), (
        f"{len(files)} profiler cycles of one worker ({worker}): {names}; a run holds one "
        f"capture window per rank: import one cycle at a time, e.g. stepscope import "
        f"{files[0]} -o RUN"))


@dataclass(frozen=True)
class FileFacts:
    """What tells ranks of one job from captures of different ones."""

    path: Path
    rank: int
    rank_given: bool  # distributedInfo names the rank
    pid: int | None
    world_size: int | None
    gpus: tuple[str, ...]  # deviceProperties names
    start_ns: int | None  # the first event of the file
    end_ns: int | None  # at or after the end of its last


def facts(path: Path, rank: int, rank_given: bool, pid: int | None, world_size: int | None,
          tables: Mapping[str, pa.Table]) -> FileFacts:
    lo: list[int] = []
    hi: list[int] = []
    for name in _TIMED:
        t = tables.get(name)
        if t is None or t.num_rows == 0:
            continue
        # the end as last start + longest duration: an upper bound that needs no new column
        # (cycles and far-apart windows are judged conservatively by it)
        mm = pc.min_max(t.column("ts_ns"))
        dur = pc.max(t.column("dur_ns"))
        if mm["min"].is_valid and mm["max"].is_valid:
            lo.append(mm["min"].as_py())
            hi.append(mm["max"].as_py() + (dur.as_py() if dur.is_valid else 0))
    dev = tables.get("devices")
    gpus = tuple(sorted({str(n) for n in dev.column("name").to_pylist() if n})) \
        if dev is not None and "name" in dev.column_names else ()
    return FileFacts(path, rank, rank_given, pid, world_size, gpus,
                     min(lo) if lo else None, max(hi) if hi else None)


def check_cycles_by_content(files: Sequence[FileFacts]) -> None:
    """Refuse files of one process whose capture windows do not overlap (profiler cycles
    written under other names), unless distributedInfo gives them different ranks."""
    by_pid: defaultdict[int, list[FileFacts]] = defaultdict(list)
    for f in files:
        if f.pid is not None and not f.rank_given and f.start_ns is not None:
            by_pid[f.pid].append(f)
    for pid, fs in by_pid.items():
        if len(fs) < 2:
            continue
        fs = sorted(fs, key=lambda f: f.start_ns or 0)
        if all((a.end_ns or 0) <= (b.start_ns or 0) for a, b in zip(fs, fs[1:])):
            raise cycles_error(f"process {pid}", [f.path for f in fs])


def mixed_jobs(files: Sequence[FileFacts]) -> Diagnostic | None:
    """A warning when the files look like ranks of different jobs, saying why."""
    if len(files) < 2:
        return None
    why: list[str] = []
    sizes = sorted({f.world_size for f in files if f.world_size is not None})
    if len(sizes) > 1:
        why.append(f"world sizes {', '.join(map(str, sizes))}")
    gpus = sorted({f.gpus for f in files if f.gpus})
    if len(gpus) > 1:
        why.append("GPUs " + " / ".join(", ".join(g) for g in gpus))
    spans = sorted((f.start_ns, f.end_ns or f.start_ns, f.path.name) for f in files
                   if f.start_ns is not None)
    if len(spans) > 1:
        end = spans[0][1]
        for s, e, name in spans[1:]:
            if s - end > FAR_APART_NS:
                why.append(f"capture windows {(s - end) / 1e9:.0f} s apart ({name} starts "
                           f"after the others ended)")
                break
            end = max(end, e)
    if not why:
        return None
    return Diagnostic("warning", "mixed_jobs", (
        f"the {len(files)} trace files look like ranks of different jobs ({'; '.join(why)}): "
        "they are reported as one run's ranks; import each job's traces on their own"),
        count=len(files))


__all__ = ["CYCLE_NAME", "FileFacts", "check_cycles_by_content", "check_cycles_by_name", "last_cycles",
           "check_tensorboard_runs", "facts", "mixed_jobs", "tensorboard_run", "walk"]
