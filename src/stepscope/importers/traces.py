"""Foreign traces -> a stepscope run (the same tables capture writes).

>>> import_traces(["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"], "run")  # doctest: +SKIP

Each file is detected (``detect``), read by its format's reader as one rank's bundle
(``registry.FORMATS``) and handed to the one run assembler (``store.produce.assemble``), which
checks each bundle against what its kind of source must provide.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stepscope._version import __version__
from stepscope.errors import DamagedFileError, MissingExtensionWarning, RunError, TraceFormatError
from stepscope.importers.engines import Engine, open_pool, ordered, plan_workers
from stepscope.importers.kineto import native as kineto_native
from stepscope.importers.nsys import is_parquet_export
from stepscope.importers.rank_work import RankFailure, RankTask
from stepscope.importers.registry import FORMATS, Format, format_of
from stepscope.importers.trace_sets import (
    FileFacts,
    check_cycles_by_content,
    check_cycles_by_name,
    check_tensorboard_runs,
    facts,
    last_cycles,
    mixed_jobs,
    walk,
)
from stepscope.pools import distributed
from stepscope.settings import Settings
from stepscope.store.manifest import Diagnostic, Manifest, SourceInfo
from stepscope.store.produce import RankBundle, assemble

TRACE_SUFFIXES = (".json", ".json.gz", ".xplane.pb", ".xplane.pb.gz")
# dropped, in this order, from a trace's name to name the run written beside it
RUN_NAME_DROPS = (".gz", ".json", ".trace", ".pt", ".sqlite", ".csv", ".ncu-rep")


def run_folder_for(trace: str | Path) -> Path:
    """``<name>.stepscope`` beside ``trace``: the run ``stepscope import`` writes without
    ``-o`` and ``stepscope.load`` imports into (``RUN_NAME_DROPS`` dropped from the name:
    ``a/rank0.pt.trace.json.gz`` -> ``a/rank0.stepscope``)."""
    t = Path(trace)
    t = t if t.name else t.resolve()
    name = t.name
    for suffix in RUN_NAME_DROPS:
        name = name.removesuffix(suffix)
    return t.with_name(name + ".stepscope")


def trace_files(paths: Sequence[str | Path]) -> tuple[list[Path], list[Diagnostic]]:
    """Expand files and folders into the trace files to import, one per rank.

    A folder contributes every ``*.json`` / ``*.json.gz`` under it (recursively: a
    TensorBoard log folder keeps them in ``plugins/profile/<run>/``) that looks like a
    PyTorch profiler trace; other JSON files there are skipped with a diagnostic. A
    file named explicitly must be a trace. Of several profiler cycles of one worker found in
    a folder the last is taken (a warning names the others); traces of several TensorBoard
    runs, or cycles named explicitly, are refused (``trace_sets``).
    """
    found, diags = _detected(paths)
    return [p for p, _ in found], diags


def _detected(paths: Sequence[str | Path]) -> tuple[list[tuple[Path, Format]], list[Diagnostic]]:
    out: list[tuple[Path, Format]] = []
    diags: list[Diagnostic] = []
    seen: set[Path] = set()

    def add(p: Path, fmt: Format) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.append((p, fmt))

    for raw in paths:
        p = Path(raw)
        if p.is_dir() and not is_parquet_export(p):
            candidates = walk(p, TRACE_SUFFIXES)
            if not candidates:
                raise TraceFormatError(str(p), "no trace files (*.json, *.json.gz, *.xplane.pb) in "
                                               "this folder")
            found = 0
            first_problem = ""
            candidates, cycle_diags = last_cycles(candidates)
            diags.extend(cycle_diags)
            for c in candidates:
                try:
                    fmt = format_of(c)
                except DamagedFileError:
                    raise  # a truncated rank file is a lost rank, not a file to skip
                except TraceFormatError as exc:
                    first_problem = first_problem or f"{c.name}: {exc.problem}"
                    diags.append(Diagnostic("warning", "skipped_file", exc.problem, str(c)))
                    continue
                found += 1
                add(c, fmt)
            if not found:
                raise TraceFormatError(str(p), f"no PyTorch profiler traces or XSpace profiles in "
                                               f"this folder ({len(candidates)} file(s) "
                                               "skipped; "
                                               f"first: {first_problem})")
        else:
            add(p, format_of(p))  # raises with what the file is (missing, not a trace, JAX ...)
    if not out:
        given = ", ".join(str(p) for p in paths) or "(no paths)"
        raise TraceFormatError(given, "no trace files given")
    check_tensorboard_runs(", ".join(str(p) for p in paths), [p for p, _ in out])
    check_cycles_by_name([p for p, _ in out])
    return out, diags


def _notice_missing_scanner(formats: Iterable[str]) -> None:
    """Warn (``MissingExtensionWarning``, once per process) when Kineto traces are about to be
    read without the compiled scanner. Here, in the process that was asked, not in the workers
    that read the ranks."""
    if "kineto" in set(formats):
        notice = kineto_native.missing_notice()
        if notice is not None:
            warnings.warn(notice, MissingExtensionWarning, stacklevel=1)  # one place: once


def import_traces(paths: Sequence[str | Path], out: str | Path, *, overwrite: bool = False,
                  workers: int | None = None, engine: str | Engine | None = None) -> Path:
    """Import PyTorch profiler traces (files and/or folders, one file per rank)
    into a run at ``out``; returns its path. The run is written atomically: on
    any error nothing is left at ``out`` (an existing run there is untouched).

    ``workers``: how many ranks are read at once (1: one after another, in this process; None:
    ``STEPSCOPE_IMPORT_WORKERS``, else chosen from the set's size, the cores and the memory,
    ``engines.plan_workers``). ``engine``: where (``process``: a local process pool; ``dask`` or
    ``dask:ADDRESS``: a Dask cluster, ``dask_engine``; None: ``STEPSCOPE_IMPORT_ENGINE``, else
    ``process``). The run is the same either way."""
    files, diags = _detected(paths)
    _notice_missing_scanner(fmt.name for _, fmt in files)
    settings = Settings.from_env()
    chosen = engine if isinstance(engine, Engine) else Engine.parse(
        engine or settings.import_engine)
    if chosen.name == "dask":
        distributed()  # one line now when Dask is missing, not after the files were read
    wanted = workers if workers is not None else settings.import_workers
    if chosen.address and wanted is None:  # a cluster's size is its own: keep every file queued
        wanted = len(files)
    n = plan_workers([f for f, _ in files], wanted)
    if any(fmt.ranks is not None for _, fmt in files):
        n = 1  # a file of several ranks (nsys) is read here, its ranks one after another
    seen: list[FileFacts] = []

    def checked(read: Iterator[tuple[RankBundle, FileFacts]]) -> Iterator[RankBundle]:
        ranks: dict[int, str] = {}
        same_pid: dict[int | None, list[FileFacts]] = {}
        for bundle, fact in read:
            r = bundle.rank.rank
            seen.append(fact)
            # cycles are files of one process: only the new file's process is checked again
            # (checking every file seen after each one was quadratic in ranks)
            same_pid.setdefault(fact.pid, []).append(fact)
            check_cycles_by_content(same_pid[fact.pid])
            if r in ranks:
                raise TraceFormatError(
                    str(fact.path), f"rank {r} again (also the rank of {ranks[r]}); "
                                    "give each rank's trace once")
            ranks[r] = bundle.rank.file
            yield bundle

    def serial() -> Iterator[tuple[RankBundle, FileFacts]]:  # one rank's tables at a time
        done = 0
        for f, fmt in files:
            bundles = fmt.ranks(f, first_rank=done) if fmt.ranks is not None \
                else iter((fmt.read(f, default_rank=done),))
            for bundle in bundles:
                done += 1
                yield bundle, facts(f, bundle.rank.rank,
                                    bundle.details.get("rank_source") == "distributedInfo",
                                    bundle.rank.pid, bundle.rank.world_size, bundle.tables)

    def head(facts: Sequence[RankBundle]) -> Manifest:
        tools = list(dict.fromkeys(b.tool for b in facts))
        offsets = {b.rank.file: b.clock_offset_ns for b in facts}
        kinds = sorted({b.kind.value for b in facts})
        details: dict[str, Any] = {"files": [dict(b.details) for b in facts]}
        if len(set(offsets.values())) > 1:
            details["clock_offset_ns_by_file"] = offsets
        mixed = mixed_jobs(seen)
        return Manifest(
            source=SourceInfo(kind="+".join(kinds), files=tuple(str(f) for f, _ in files),
                              tool="; ".join(tools), details=details),
            ranks=(), clock="unix_ns", clock_offset_ns=facts[0].clock_offset_ns,
            stepscope_version=__version__,
            diagnostics=(*diags, *((mixed,) if mixed is not None else ())))

    if n == 1 and chosen.name == "process":
        return assemble(out, checked(serial()), head, overwrite=overwrite)
    with parts_folder(Path(out)) as parts, open_pool(chosen, n) as submit:
        tasks = [RankTask(f, fmt.name, i, parts, str(out)) for i, (f, fmt) in enumerate(files)]

        def parallel() -> Iterator[tuple[RankBundle, FileFacts]]:
            for result in ordered(submit, tasks, 2 * n, len(tasks)):
                if isinstance(result, RankFailure):
                    result.raise_()
                yield result.bundle, result.facts

        return assemble(out, checked(parallel()), head, overwrite=overwrite)


@contextmanager
def parts_folder(out: Path) -> Iterator[Path]:
    """The folder where the workers of a parallel import write ranks' tables until the run
    assembler adopts them: a hidden sibling of the run (one file system: adopting is a rename),
    removed on leaving whatever happened."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".parts", dir=out.parent))
    except OSError as exc:
        raise RunError(f"{out.parent}: cannot create the run folder ({exc.strerror})") from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["FORMATS", "import_traces", "trace_files"]
