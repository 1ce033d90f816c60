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

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise RunError(f"{self.path}: no such run folder")
        self.manifest: Manifest = read_manifest(self.path)
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
            parts = [pq.read_table(p, schema=schema) for p in paths]
        except (OSError, pa.ArrowInvalid) as exc:
            raise RunError(f"{self.path / name}: cannot read table ({exc})") from None
        t = pa.concat_tables(parts) if parts else empty_table(name)
        self._cache[key] = t
        return t

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
        import duckdb

        con = duckdb.connect(":memory:")
        for name in TABLE_NAMES:
            con.register(name, self.table(name))
        return con

    def query(self, sql: str) -> pa.Table:
        """Run SQL over the run's tables (each table is a view of that name)."""
        import duckdb

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


def open_run(path: str | os.PathLike[str]) -> Run:
    return Run(path)
