"""Nsight Compute (ncu) kernel profiles: the raw-page CSV export, or a ``.ncu-rep`` report
read through the ``ncu`` on PATH, into the ``kernel_metrics`` and ``kernel_metric_values``
tables, as a run of their own (``import_profiles``) or added to a run (``attach_profiles``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from stepscope._version import __version__
from stepscope.errors import TraceFormatError
from stepscope.importers.ncu.raw_csv import (
    NcuProfile,
    looks_like_raw_csv,
    parse_raw_text,
    read_raw_csv,
)
from stepscope.importers.ncu.rep import export_raw
from stepscope.importers.ncu.source_csv import SourceLines, looks_like_source_csv, read_source_csv
from stepscope.schema_enums import SourceKind
from stepscope.store.attach import add_tables
from stepscope.store.manifest import Manifest, RankInfo, SourceInfo
from stepscope.store.produce import RankBundle, assemble
from stepscope.store.writer import conform

REP_SUFFIX = ".ncu-rep"
TOOL = "Nsight Compute (ncu)"


def is_ncu_file(path: str | Path) -> bool:
    """Whether ``path`` is an ncu report (by its suffix) or an ncu CSV export (by content)."""
    p = Path(path)
    if p.name.endswith(REP_SUFFIX):
        return True
    if not p.is_file():
        return False
    try:
        with open(p, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    return looks_like_raw_csv(head) or looks_like_source_csv(head)


def _is_source(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return looks_like_source_csv(fh.read(256))
    except OSError:
        return False


def read_profile(path: str | Path, ncu: str | None = None) -> NcuProfile:
    """One ncu file (raw-page CSV, or ``.ncu-rep`` through ``ncu``) as an ``NcuProfile``."""
    p = Path(path)
    if p.name.endswith(REP_SUFFIX):
        if not p.is_file():
            raise TraceFormatError(str(p), "no such file")
        return parse_raw_text(export_raw(p, ncu), str(p))
    return read_raw_csv(p)


def _tables(profile: NcuProfile | None, lines: Sequence[SourceLines] = ()
            ) -> dict[str, pa.Table]:
    out = {}
    if profile is not None:
        out = {"kernel_metrics": conform("kernel_metrics", profile.metrics),
               "kernel_metric_values": conform("kernel_metric_values", profile.values)}
    if lines:
        out["kernel_source_lines"] = conform("kernel_source_lines", {
            k: [x for sl in lines for x in sl.columns[k]] for k in lines[0].columns})
    return out


def _split(paths: Sequence[str | Path]) -> tuple[list[str | Path], list[SourceLines]]:
    """The raw-page exports (and reports), and the source pages read."""
    raw = [p for p in paths if not _is_source(Path(p))]
    src = [read_source_csv(Path(p)) for p in paths if _is_source(Path(p))]
    return raw, src


def _merged(paths: Sequence[str | Path], ncu: str | None) -> tuple[NcuProfile, list[str]]:
    profiles = [read_profile(p, ncu) for p in paths]
    first = profiles[0]
    if len(profiles) == 1:
        return first, [str(paths[0])]
    metrics = {k: [x for pr in profiles for x in pr.metrics[k]] for k in first.metrics}
    values = {k: [x for pr in profiles for x in pr.values[k]] for k in first.values}
    # launch IDs restart in each file: number them apart
    ids: list[int] = []
    vids: list[int] = []
    base = 0
    for pr in profiles:
        ids += [base + i for i in pr.metrics["id"]]
        vids += [base + i for i in pr.values["id"]]
        base = max(ids, default=-1) + 1
    metrics["id"], values["id"] = ids, vids
    merged = NcuProfile(metrics=metrics, values=values, launches=len(ids), host=first.host,
                        process=first.process)
    return merged, [str(p) for p in paths]


def _details(profile: NcuProfile, files: Sequence[str]) -> dict[str, object]:
    return {"ncu": {"files": list(files), "launches": profile.launches,
                    "host": profile.host, "process": profile.process}}


def import_profiles(paths: Sequence[str | Path], out: str | os.PathLike[str], *,
                    overwrite: bool = False, ncu: str | None = None) -> Path:
    """ncu exports -> a run of kernel metrics only (rank 0); source pages (``--page source``)
    among them add the kernels' hot lines."""
    raw, lines = _split(paths)
    if not raw:
        raise TraceFormatError(str(paths[0]), "a source-page export alone: import it with the "
                               "raw page of the same report (or --into a run that has it)")
    profile, files = _merged(raw, ncu)
    files = [str(p) for p in paths]
    bundle = RankBundle(kind=SourceKind.NCU, rank=RankInfo(rank=0, host=profile.host,
                                                           file=files[0]),
                        tables=_tables(profile, lines), tool=TOOL)

    def head(_: Sequence[RankBundle]) -> Manifest:
        return Manifest(source=SourceInfo(kind="ncu", files=tuple(files), tool=TOOL,
                                          details=_details(profile, files)),
                        ranks=(bundle.rank,), stepscope_version=__version__)

    return assemble(out, [bundle], head, overwrite=overwrite, inputs=paths)


def attach_profiles(paths: Sequence[str | Path], run: str | os.PathLike[str], *,
                    rank: int = 0, ncu: str | None = None) -> Path:
    """Add ncu exports to an existing run as rank ``rank``'s kernel metrics (replacing any it
    had); the run is rewritten beside itself and swapped in, never changed in place."""
    raw, lines = _split(paths)
    if not raw:
        return add_tables(run, rank, _tables(None, lines))
    profile, files = _merged(raw, ncu)
    return add_tables(run, rank, _tables(profile, lines),
                      details=_details(profile, [str(p) for p in paths]))


__all__ = ["NcuProfile", "attach_profiles", "import_profiles", "is_ncu_file", "read_profile"]
