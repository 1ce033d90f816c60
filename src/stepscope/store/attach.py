"""Add tables to a finished run without ever leaving it damaged.

``add_tables`` builds the new run beside the old one (the old table files linked, or copied
where links cannot be made; the new partitions written; the manifest's counts updated), checks
that it opens, then swaps it in with two renames. Until the second rename a reader sees the old
run; an error on the way leaves the old run as it was and removes the new one. Reports
``stepscope report`` wrote into the folder are kept (regenerate them to see the new tables).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.errors import RunError
from stepscope.schema import TABLE_NAMES
from stepscope.store.manifest import MANIFEST_NAME, read_manifest
from stepscope.store.run import check_tables
from stepscope.store.writer import REPORT_NAMES, table_path, write_partition


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def add_tables(run: str | os.PathLike[str], rank: int,
               tables: Mapping[str, pa.Table | Mapping[str, Any]], *,
               details: Mapping[str, Any] | None = None) -> Path:
    """Write ``tables`` as rank ``rank``'s partitions of the run at ``run`` (replacing the
    rank's partitions of those tables, if any), merging ``details`` into the manifest's
    ``source.details``. The rank must be one of the run's. Returns the run's path."""
    path = Path(run)
    manifest = read_manifest(path)
    check_tables(path, manifest)
    if rank not in {r.rank for r in manifest.ranks}:
        ranks = ", ".join(str(r.rank) for r in manifest.ranks) or "none"
        raise RunError(f"{path}: has no rank {rank} (its ranks: {ranks})")
    unknown = [t for t in tables if t not in TABLE_NAMES]
    if unknown:
        raise RunError(f"unknown table {unknown[0]}")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise RunError(f"{path.parent}: cannot write beside the run ({_why(exc)})") from None
    try:
        counts = dict(manifest.tables)
        for entry in path.iterdir():
            if entry.name in TABLE_NAMES and entry.is_dir():
                (tmp / entry.name).mkdir()
                for f in entry.glob("rank-*.parquet"):
                    if entry.name in tables and f.name == f"rank-{rank}.parquet":
                        continue  # replaced below
                    _link_or_copy(f, tmp / entry.name / f.name)
            elif entry.name in REPORT_NAMES and entry.is_file():
                _link_or_copy(entry, tmp / entry.name)  # the user's; regenerate to see the new
        for name, data in tables.items():
            old = table_path(path, name, rank)
            if old.exists():
                counts[name] = counts.get(name, 0) - pq.read_metadata(old).num_rows
            dest = table_path(tmp, name, rank)
            dest.parent.mkdir(exist_ok=True)
            counts[name] = counts.get(name, 0) + write_partition(dest, name, rank, data)
        source = manifest.source
        merged = {**source.details, **(details or {})}
        new = dataclasses.replace(manifest, tables=counts,
                                  source=dataclasses.replace(source, details=merged))
        (tmp / MANIFEST_NAME).write_text(new.to_json(), encoding="utf-8")
        check_tables(tmp, read_manifest(tmp))
        os.chmod(tmp, 0o755)
        old_dir = path.with_name(f".{path.name}.old")
        shutil.rmtree(old_dir, ignore_errors=True)
        os.replace(path, old_dir)
        try:
            os.replace(tmp, path)
        except OSError:
            os.replace(old_dir, path)  # put the old run back
            raise
        shutil.rmtree(old_dir, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RunError(f"{path}: cannot add to the run ({_why(exc)}); it is unchanged") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


__all__ = ["add_tables"]
