"""The only code that writes run tables. Capture and importers both end here, through the one
run assembler (``store.produce.assemble``), which also checks each rank's tables against what its
kind of source must provide; ``write_run`` (no such check) is for tests of the store itself.

A run is written into a temporary sibling folder and renamed into place when
complete, so a reader never sees a half-written run. Tables are validated and
cast against ``schema.TABLES`` on the way in.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.errors import RunError
from stepscope.schema import TABLE_NAMES, spec
from stepscope.store.manifest import MANIFEST_NAME, Manifest, read_manifest

REPORT_NAMES = ("report.html", "report.json", "report.txt")  # `stepscope report -o` defaults


def table_path(run_dir: Path, table: str, rank: int) -> Path:
    """``RUN/<table>/rank-<r>.parquet``: one file per table per rank."""
    return run_dir / table / f"rank-{rank}.parquet"


def conform(table: str, data: pa.Table | Mapping[str, Any]) -> pa.Table:
    """Cast ``data`` (Arrow table or column mapping) to the table's schema.

    Missing nullable columns are filled with nulls; unknown columns are an error
    (a typo in a producer must not silently drop data).
    """
    schema = spec(table).arrow_schema
    if isinstance(data, pa.Table):
        cols = {name: data.column(name) for name in data.column_names}
        n = data.num_rows
    else:
        cols = dict(data)
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"table {table}: columns have different lengths {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
    unknown = set(cols) - set(schema.names)
    if unknown:
        raise ValueError(f"table {table}: unknown columns {sorted(unknown)}")
    arrays = []
    for field in schema:
        if field.name in cols:
            value = cols[field.name]
            if isinstance(value, pa.ChunkedArray):  # one chunk: that array (no copy)
                value = value.chunk(0) if value.num_chunks == 1 else value.combine_chunks()
            if not isinstance(value, pa.Array):
                value = pa.array(value, type=field.type.value_type
                                 if pa.types.is_dictionary(field.type) else field.type)
            if value.type != field.type:
                value = value.cast(field.type)
            if not field.nullable and value.null_count:
                raise ValueError(f"table {table}: column {field.name} has nulls")
            arrays.append(value)
        elif field.nullable:
            arrays.append(pa.nulls(n, type=field.type))
        elif field.name == "rank":  # the writer sets it from the partition
            arrays.append(pa.repeat(pa.scalar(0, pa.int32()), n))
        else:
            raise ValueError(f"table {table}: required column {field.name} is missing")
    return pa.Table.from_arrays(arrays, schema=schema)


def _not_a_run(path: Path) -> str | None:
    """Why ``path`` is not a folder that only a stepscope run fills, or None when it is: a
    readable stepscope ``manifest.json``, table folders of ``rank-<r>.parquet`` files, and
    the reports ``stepscope report`` writes there; nothing else."""
    if path.is_symlink():
        return "is a symbolic link"
    if not path.is_dir():
        return "is not a folder"
    try:
        read_manifest(path)
    except RunError:
        return f"has no readable stepscope {MANIFEST_NAME}"
    try:
        for entry in path.iterdir():
            if entry.is_dir() and not entry.is_symlink() and entry.name in TABLE_NAMES:
                odd = [f.name for f in entry.iterdir()
                       if not (f.is_file() and f.name.startswith("rank-")
                               and f.name.endswith(".parquet"))]
                if odd:
                    return f"holds {entry.name}/{odd[0]}, which a run does not"
            elif not (entry.is_file() and entry.name in (MANIFEST_NAME, *REPORT_NAMES)):
                return f"holds {entry.name}, which a run does not"
    except OSError as exc:
        return f"cannot be listed ({exc.strerror})"
    return None


def _inside(child: Path, parent: Path) -> bool:
    try:
        return child.resolve().is_relative_to(parent.resolve())
    except (OSError, RuntimeError):
        return False


def check_replaceable(path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = ()
                      ) -> None:
    """Raise ``RunError`` unless an existing ``path`` may be deleted to make room for a new run
    (``--force``): it must be a stepscope run folder (``_not_a_run``), hold none of ``inputs``
    (a trace being imported, the recorded script) and not hold the working directory."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return
    why = _not_a_run(p)
    if why is not None:
        raise RunError(f"{p}: not replaced: it {why} (--force only replaces a stepscope run "
                       "folder)")
    for i in [*inputs, Path.cwd()]:
        if _inside(Path(i), p):
            raise RunError(f"{p}: not replaced: it holds {i}, which this command uses")


def _why(exc: OSError) -> str:
    if exc.strerror:
        return exc.strerror
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_number(typ: pa.DataType) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ)
                or pa.types.is_boolean(typ) or pa.types.is_temporal(typ))


def _of_rank(t: pa.Table, rank: int) -> pa.Table:
    """``t`` with its ``rank`` column (the schema's first) set to ``rank``: the partition is the
    truth for the rank column."""
    return t.set_column(0, "rank", pa.repeat(pa.scalar(rank, pa.int32()), t.num_rows))


def write_partition(dest: Path, table: str, rank: int, data: pa.Table | Mapping[str, Any]
                    ) -> int:
    """Write ``data`` (conformed to the table's schema) as rank ``rank``'s partition file
    ``dest``, as a run holds it; returns the rows (none written: 0, and no file). Raises
    ``OSError`` when the file cannot be written. ``RunWriter.write`` writes through it, and so do
    the workers of a rank-parallel import (``RunWriter.adopt`` takes their files)."""
    t = conform(table, data)
    if t.num_rows == 0:
        return 0
    t = _of_rank(t, rank)
    # Dictionary pages for the text columns only: for numbers they cost more to build
    # than they save (measured on a 500k-row cpu_ops: 40% less time, a 15% smaller file).
    text = [f.name for f in t.schema if not _is_number(f.type)]
    # Page checksums (CRC32, verified by Run.table): a flipped byte in a data page that
    # still decodes changed numbers silently in 35 of 152 flips of a kernels file; 2 with.
    pq.write_table(t, dest, compression="zstd", use_dictionary=text, write_page_checksum=True)
    return int(t.num_rows)


def check_partition(path: Path, table: str, rank: int) -> int:
    """The rows of a partition file written by ``write_partition``; ``RunError`` naming the file
    unless it has the table's columns and types, no nulls in a column that allows none and only
    rows of ``rank`` (from the file's footer: its statistics, not its data)."""
    schema = spec(table).arrow_schema
    try:
        meta = pq.read_metadata(path)
        got = meta.schema.to_arrow_schema()
    except OSError as exc:
        raise RunError(f"{path}: cannot read ({_why(exc)})") from None
    except pa.ArrowException as exc:
        raise RunError(f"{path}: not a partition of {table} ({exc})") from None
    if got.names != schema.names or any(a.type != b.type for a, b in zip(got, schema)):
        raise RunError(f"{path}: not a partition of {table} (its columns differ from the schema)")
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for i, field in enumerate(schema):
            if field.nullable:
                continue
            stats = group.column(i).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                raise RunError(f"{path}: not a partition of {table} (nulls in {field.name})")
            if field.name == "rank" and not (stats.has_min_max and stats.min == stats.max == rank):
                raise RunError(f"{path}: not rank {rank}'s {table} (rows of another rank)")
    return int(meta.num_rows)


class RunWriter:
    """Write a run atomically.

    >>> with RunWriter(path) as w:           # doctest: +SKIP
    ...     w.write("kernels", rank=0, data={...})
    ...     w.finish(manifest)
    Leaving the block without ``finish`` (or on an exception) removes the
    temporary folder and leaves any existing run at ``path`` untouched.
    ``overwrite`` replaces only a stepscope run folder, never one holding ``inputs`` or
    anything else (``check_replaceable``).
    """

    def __init__(self, path: str | os.PathLike[str], *, overwrite: bool = False,
                 inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.path = Path(path)
        self.overwrite = overwrite
        self.inputs = tuple(inputs)
        if self.path.exists() and not overwrite:
            raise RunError(f"{self.path}: already exists (choose another -o or pass --force)")
        if overwrite:
            check_replaceable(self.path, self.inputs)
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=parent))
        except OSError as exc:
            raise RunError(f"{parent}: cannot create the run folder ({exc.strerror})") from None
        self._counts: dict[tuple[str, int], int] = {}
        self._done = False

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._done:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def write(self, table: str, rank: int, data: pa.Table | Mapping[str, Any]) -> int:
        """Write (or append to) one table partition; returns the rows written."""
        t = conform(table, data)
        if t.num_rows == 0:
            return 0
        dest = table_path(self._tmp, table, rank)
        try:
            dest.parent.mkdir(exist_ok=True)
            if dest.exists():  # append (several files for one rank): rewrite the partition
                t = pa.concat_tables([pq.read_table(dest, schema=t.schema),
                                      _of_rank(t, rank)])
            n = write_partition(dest, table, rank, t)
        except OSError as exc:  # a full disk, a quota: the temporary folder goes on exit
            raise RunError(f"{self.path}: cannot write the run ({_why(exc)})") from None
        self._counts[(table, rank)] = n
        return n

    def adopt(self, table: str, rank: int, path: Path) -> int:
        """Take a partition that ``write_partition`` wrote elsewhere (a worker of a rank-parallel
        import) as rank ``rank``'s ``table``, moving the file; returns its rows. Checked as
        ``write`` checks what it writes: the schema's columns and types, no nulls where the
        schema allows none, every row of ``rank``; a partition already written is refused."""
        rows = check_partition(path, table, rank)
        dest = table_path(self._tmp, table, rank)
        if dest.exists() or (table, rank) in self._counts:
            raise RunError(f"{path}: rank {rank}'s {table} is written already")
        try:
            dest.parent.mkdir(exist_ok=True)
            shutil.move(path, dest)  # a rename on one file system
        except OSError as exc:
            raise RunError(f"{self.path}: cannot write the run ({_why(exc)})") from None
        self._counts[(table, rank)] = rows
        return rows

    def table(self, table: str, rank: int) -> pa.Table:
        """A partition written so far (for an observer of what is written)."""
        return pq.read_table(table_path(self._tmp, table, rank), schema=spec(table).arrow_schema)

    def write_many(self, rank: int, tables: Mapping[str, pa.Table | Mapping[str, Any]]) -> None:
        for name, data in tables.items():
            self.write(name, rank, data)

    def finish(self, manifest: Manifest) -> Path:
        """Write the manifest and move the run into place."""
        m = dataclasses.replace(
            manifest,
            tables={name: sum(n for (t, _), n in self._counts.items() if t == name) for name in TABLE_NAMES},
            created=manifest.created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )
        try:
            (self._tmp / MANIFEST_NAME).write_text(m.to_json(), encoding="utf-8")
        except OSError as exc:
            raise RunError(f"{self.path}: cannot write the run ({_why(exc)})") from None
        os.chmod(self._tmp, 0o755)  # mkdtemp makes it private
        if self.path.exists() or self.path.is_symlink():
            if not self.overwrite:
                raise RunError(f"{self.path}: already exists")
            check_replaceable(self.path, self.inputs)  # again: it may have changed meanwhile
            old = self.path.with_name(f".{self.path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.path, old)
            os.replace(self._tmp, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(self._tmp, self.path)
            except OSError as exc:  # it appeared meanwhile (another command writing it)
                raise RunError(f"{self.path}: cannot write the run ({_why(exc)}); another "
                               "command may be writing it") from None
        self._done = True
        return self.path


def write_run(
    path: str | os.PathLike[str],
    manifest: Manifest,
    partitions: Iterable[tuple[int, Mapping[str, pa.Table | Mapping[str, Any]]]],
    *,
    overwrite: bool = False,
) -> Path:
    """Convenience: write all ``(rank, {table: data})`` partitions and finish."""
    with RunWriter(path, overwrite=overwrite) as w:
        for rank, tables in partitions:
            w.write_many(rank, tables)
        return w.finish(manifest)


__all__: Sequence[str] = ["RunWriter", "check_partition", "check_replaceable", "conform",
                          "table_path", "write_partition", "write_run"]
