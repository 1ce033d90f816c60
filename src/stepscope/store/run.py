"""Read a run: its manifest, its tables as Arrow, SQL over them with DuckDB."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar, cast

import pyarrow as pa
import pyarrow.parquet as pq

from stepscope.errors import QueryError, RunError
from stepscope.schema import TABLE_NAMES, empty_table, spec
from stepscope.store.manifest import Manifest, read_manifest

T = TypeVar("T")


class Run:
    """A run folder opened for reading. Tables are loaded lazily and cached."""

    def __init__(self, path: str | os.PathLike[str], *, check: bool = True) -> None:
        """``check=False``: leave out the check of every table file (``check_tables``), for a
        worker opening a run that its parent opened, and checked, already."""
        self.path = Path(path)
        if not self.path.is_dir():
            raise RunError(f"{self.path}: no such run folder")
        self.manifest: Manifest = read_manifest(self.path)
        if check:
            check_tables(self.path, self.manifest)
        self._cache: dict[tuple[str, int | None], pa.Table] = {}
        self._derived: dict[Hashable, Any] = {}

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, ranks={self.ranks})"

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(r.rank for r in self.manifest.ranks))

    def files(self, name: str) -> list[Path]:
        spec(name)
        return sorted((self.path / name).glob("rank-*.parquet"))

    def table(self, name: str, rank: int | None = None) -> pa.Table:
        """Table ``name`` as Arrow (all ranks concatenated unless ``rank`` is given).

        A table the run does not have is returned empty, with its full schema.
        """
        key = (name, rank)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        schema = spec(name).arrow_schema
        paths = self.files(name)
        if rank is not None:
            paths = [p for p in paths if p.name == f"rank-{rank}.parquet"]
        try:
            parts = [pq.read_table(p, schema=schema, page_checksum_verification=True)
                     for p in paths]  # pages without a checksum (older runs) are not checked
        except (OSError, pa.ArrowInvalid) as exc:
            raise RunError(f"{self.path / name}: cannot read table ({exc})") from None
        t = pa.concat_tables(parts) if parts else empty_table(name)
        self._cache[key] = t
        return t

    def forget(self, rank: int) -> None:
        """Drop the tables of ``rank`` read so far (a worker analysing one rank after another
        holds one rank's tables at a time)."""
        for key in [k for k in self._cache if k[1] == rank]:
            del self._cache[key]

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """A value derived from this run's (read-only) tables, computed once per Run object:
        analyses that several consumers need (e.g. the per-launch kernel frame) share it."""
        if key not in self._derived:
            self._derived[key] = compute()
        return cast(T, self._derived[key])

    def has(self, name: str) -> bool:
        return self.manifest.tables.get(name, 0) > 0

    @cached_property
    def _db(self) -> Any:
        """A DuckDB connection where each table is a view over the run's Parquet files, read
        as a query needs them (``count(*)`` reads the files' footers; a filter on ``rank``
        or a few columns reads only those): nothing is loaded up front. Each view is the
        table's full schema (an empty Arrow table of it, registered) united by name with the
        files, so a table the run lacks is empty, and columns added to the schema after a
        file was written read as nulls, as ``table()`` gives them."""
        duckdb = _duckdb()
        con = duckdb.connect(":memory:")
        for name in TABLE_NAMES:
            empty = f"__empty_{name}"
            con.register(empty, empty_table(name))
            files = self.files(name)
            if not files:
                con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "{empty}"')
                continue
            listed = ", ".join("'" + str(p.resolve()).replace("'", "''") + "'" for p in files)
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "{empty}" UNION ALL BY NAME '
                        f"SELECT * FROM read_parquet([{listed}], union_by_name = true)")
        return con

    def query(self, sql: str) -> pa.Table:
        """Run SQL over the run's tables (each table is a view of that name, over its
        Parquet files: ``_db``). Needs DuckDB (``pip install 'stepscope[query]'``)."""
        duckdb = _duckdb()

        try:
            rel = self._db.sql(sql)
            if rel is None:  # a statement with no result (e.g. SET)
                return pa.table({})
            # DuckDB >= 1.4 names it to_arrow_table(); older releases arrow()
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
            result = fetch()
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QueryError(f"query failed: {first}") from None
        assert isinstance(result, pa.Table)
        return result


def _duckdb() -> Any:
    """The ``duckdb`` module; a ``QueryError`` saying how to install it when it is missing."""
    try:
        import duckdb
    except ImportError:
        raise QueryError("SQL over a run needs DuckDB, an optional extra: "
                         "pip install 'stepscope[query]' (or: pip install duckdb)") from None
    return duckdb


def check_tables(path: Path, manifest: Manifest) -> None:
    """Raise ``RunError`` unless the run's table files are what its manifest says: a
    ``rank-<r>.parquet`` per rank of the manifest, each with its table's columns, and as many
    rows in all as the manifest counts. Reads only the files' footers (~0.1 ms each), so a
    deleted, swapped, truncated or foreign file is one line at open, never a report of wrong
    numbers. A manifest without row counts (written by hand) is checked for files only. A
    file may lack nullable columns (added to the schema after it was written; read as nulls)."""
    ranks = {r.rank for r in manifest.ranks}
    counts = manifest.tables
    for name in TABLE_NAMES:
        folder = path / name
        want = counts.get(name, 0)
        if not folder.is_dir():
            if folder.exists() or folder.is_symlink():
                raise RunError(f"{folder}: not a folder of table files (the run is damaged)")
            if want:
                raise RunError(f"{folder}: missing, but the manifest counts {want} rows "
                               "(the run is damaged)")
            continue
        columns = spec(name).arrow_schema.names
        # columns added to the schema later are nullable: a run written before them lacks
        # them and reads them as nulls
        optional = {c.name for c in spec(name).columns if c.nullable}
        rows = 0
        for f in sorted(folder.glob("rank-*.parquet")):
            rank = f.name[len("rank-"):-len(".parquet")]
            if not rank.isdigit() or int(rank) not in ranks:
                raise RunError(f"{f}: a file for rank {rank}, which the manifest does not list "
                               "(the run is damaged or mixed with another)")
            try:
                meta = pq.read_metadata(f)
            except (OSError, pa.ArrowException) as exc:
                raise RunError(f"{f}: cannot read table ({_first_line(exc)})") from None
            got = meta.schema.to_arrow_schema().names
            if got != columns and got != [c for c in columns if c in got or c not in optional]:
                lacks = [c for c in columns if c not in got]
                odd = [c for c in got if c not in columns]
                why = (f"no column {lacks[0]}" if lacks else f"a column {odd[0]}" if odd
                       else "its columns in another order")
                raise RunError(f"{f}: not a {name} table ({why}; the run is damaged)")
            rows += meta.num_rows
        if counts and rows != want:
            raise RunError(f"{folder}: {rows} rows, but the manifest counts {want} "
                           "(a table file is missing or was replaced)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def open_run(path: str | os.PathLike[str]) -> Run:
    return Run(path)
