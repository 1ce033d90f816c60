"""Foreign traces -> a stepscope run (the same tables capture writes).

>>> import_traces(["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"], "run")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stepscope._version import __version__
from stepscope.errors import DamagedFileError, TraceFormatError
from stepscope.importers.detect import detect
from stepscope.importers.kineto import KinetoFile, parse_kineto
from stepscope.store.manifest import Diagnostic, Manifest, RankInfo, SourceInfo
from stepscope.store.writer import RunWriter

TRACE_SUFFIXES = (".json", ".json.gz")

__all__ = ["KinetoFile", "detect", "import_traces", "parse_kineto", "trace_files"]


def trace_files(paths: Sequence[str | Path]) -> tuple[list[Path], list[Diagnostic]]:
    """Expand files and folders into the trace files to import, one per rank.

    A folder contributes every ``*.json`` / ``*.json.gz`` directly inside it that
    looks like a PyTorch profiler trace; other JSON files there are skipped with
    a diagnostic. A file named explicitly must be a trace.
    """
    out: list[Path] = []
    diags: list[Diagnostic] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.append(p)

    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            candidates = sorted(c for c in p.iterdir()
                                if c.name.endswith(TRACE_SUFFIXES) and c.is_file())
            if not candidates:
                raise TraceFormatError(str(p), "no trace files (*.json, *.json.gz) in this folder")
            found = 0
            first_problem = ""
            for c in candidates:
                try:
                    detect(c)
                except DamagedFileError:
                    raise  # a truncated rank file is a lost rank, not a file to skip
                except TraceFormatError as exc:
                    first_problem = first_problem or f"{c.name}: {exc.problem}"
                    diags.append(Diagnostic("warning", "skipped_file", exc.problem, str(c)))
                    continue
                found += 1
                add(c)
            if not found:
                raise TraceFormatError(str(p), f"no PyTorch profiler traces in this folder "
                                               f"({len(candidates)} JSON file(s) skipped; "
                                               f"first: {first_problem})")
        else:
            detect(p)  # raises with what the file is (missing, not a trace, JAX ...)
            add(p)
    if not out:
        given = ", ".join(str(p) for p in paths) or "(no paths)"
        raise TraceFormatError(given, "no trace files given")
    return out, diags


def import_traces(paths: Sequence[str | Path], out: str | Path, *, overwrite: bool = False) -> Path:
    """Import PyTorch profiler traces (files and/or folders, one file per rank)
    into a run at ``out``; returns its path. The run is written atomically: on
    any error nothing is left at ``out`` (an existing run there is untouched)."""
    files, diags = trace_files(paths)
    ranks: dict[int, RankInfo] = {}
    tools: list[str] = []
    offsets: dict[str, int] = {}
    details: list[dict[str, Any]] = []
    with RunWriter(out, overwrite=overwrite) as writer:
        for i, f in enumerate(files):
            kf = parse_kineto(f, default_rank=i)
            r = kf.rank.rank
            if r in ranks:
                raise TraceFormatError(
                    str(f), f"rank {r} again (also the rank of {ranks[r].file}); "
                            "give each rank's trace once")
            ranks[r] = kf.rank
            writer.write_many(r, kf.tables)
            diags.extend(kf.diagnostics)
            if kf.tool not in tools:
                tools.append(kf.tool)
            offsets[str(f)] = kf.clock_offset_ns
            details.append(kf.details)
            del kf  # one file's tables in memory at a time
        offset = next(iter(offsets.values()))
        manifest = Manifest(
            source=SourceInfo(
                kind="kineto", files=tuple(str(f) for f in files), tool="; ".join(tools),
                details={"files": details,
                         **({"clock_offset_ns_by_file": offsets}
                            if len(set(offsets.values())) > 1 else {})}),
            ranks=tuple(ranks[r] for r in sorted(ranks)),
            clock="unix_ns",
            clock_offset_ns=offset,
            stepscope_version=__version__,
            diagnostics=tuple(diags),
        )
        return writer.finish(manifest)
