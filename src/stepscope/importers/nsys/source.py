"""An Nsight Systems export opened for reading: an SQLite file (``nsys export --type sqlite``,
plain or gzipped) or a Parquet folder (``nsys export --type parquetdir``: one Parquet file per
table, the same table and column names).

Both are read the same way: which tables and columns there are (``columns``, from ``PRAGMA
table_info`` or the Parquet schema: the layout differs between nsys versions and is told from
these, never from a version number) and ``scan``, which yields the rows of a table in Arrow
batches of at most ``BATCH_ROWS`` rows, optionally only those whose key column lies in a range
(one process's rows). A gzipped file is decompressed piece by piece into a temporary file,
removed by ``close``.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.dataset as ds

from stepscope.errors import DamagedFileError, TraceFormatError

BATCH_ROWS = 65_536
SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_SUFFIX = ".parquet"


@dataclass(frozen=True)
class KeyRange:
    """Rows whose ``column`` is in ``[lo, hi)``."""

    column: str
    lo: int
    hi: int


class Export(Protocol):
    """An opened export (``open_export``)."""

    path: str
    kind: str  # "sqlite" | "parquetdir"
    compressed: bool

    def columns(self, table: str) -> tuple[str, ...]:
        """The table's columns; () when the table is absent."""
        ...

    def scan(self, table: str, want: Mapping[str, pa.DataType],
             where: KeyRange | None = None) -> Iterator[pa.Table]:
        """The table's rows in batches, with the columns of ``want`` (a column the table lacks
        comes as nulls) cast to their types."""
        ...

    def close(self) -> None: ...


def _batch(names: list[str], want: Mapping[str, pa.DataType],
           values: Mapping[str, pa.Array | list[object]], n: int) -> pa.Table:
    arrays = []
    for name in names:
        typ = want[name]
        got = values.get(name)
        if got is None:
            arrays.append(pa.nulls(n, typ))
        elif isinstance(got, pa.Array):
            arrays.append(got if got.type == typ else got.cast(typ, safe=False))
        else:
            arrays.append(pa.array(got, type=typ))
    return pa.Table.from_arrays(arrays, names=names)


class SqliteExport:
    kind = "sqlite"

    def __init__(self, path: str, db: Path, compressed: bool, tmp: Path | None) -> None:
        self.path = path
        self.compressed = compressed
        self._tmp = tmp
        self._cols: dict[str, tuple[str, ...]] = {}
        try:
            self._con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
            # names recorded from the target may not be UTF-8 (an environment dump, a path)
            self._con.text_factory = lambda b: b.decode("utf-8", "replace")
            names = [r[0] for r in self._con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
            for t in names:
                q = t.replace('"', '""')
                self._cols[t] = tuple(r[1] for r in self._con.execute(f'PRAGMA table_info("{q}")'))
        except sqlite3.DatabaseError as exc:
            self.close()
            raise DamagedFileError(path, f"not a readable SQLite database ({exc})") from None

    def columns(self, table: str) -> tuple[str, ...]:
        return self._cols.get(table, ())

    def scan(self, table: str, want: Mapping[str, pa.DataType],
             where: KeyRange | None = None) -> Iterator[pa.Table]:
        have = set(self.columns(table))
        if not have:
            return
        names = list(want)
        read = [c for c in names if c in have]
        sql = f'SELECT {", ".join(chr(34) + c + chr(34) for c in read) or "1"} FROM "{table}"'
        params: tuple[int, ...] = ()
        if where is not None and where.column in have:
            sql += f' WHERE "{where.column}" >= ? AND "{where.column}" < ?'
            params = (where.lo, where.hi)
        try:
            cur = self._con.execute(sql, params)
            while True:
                rows = cur.fetchmany(BATCH_ROWS)
                if not rows:
                    break
                cols = list(zip(*rows)) if read else []
                values = {c: list(v) for c, v in zip(read, cols)}
                yield _batch(names, want, values, len(rows))
        except sqlite3.DatabaseError as exc:
            raise DamagedFileError(self.path, f"cannot read table {table} ({exc})") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise TraceFormatError(self.path, f"table {table} holds values of an unexpected "
                                              f"type ({str(exc).splitlines()[0]})") from None

    def close(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            con.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


class ParquetExport:
    kind = "parquetdir"
    compressed = False

    def __init__(self, folder: Path) -> None:
        self.path = str(folder)
        self._files = {p.name[: -len(PARQUET_SUFFIX)]: p for p in folder.iterdir()
                       if p.name.endswith(PARQUET_SUFFIX)}
        self._sets: dict[str, ds.Dataset] = {}

    def _set(self, table: str) -> ds.Dataset | None:
        if table not in self._files:
            return None
        if table not in self._sets:
            try:
                self._sets[table] = ds.dataset(self._files[table], format="parquet")
            except (pa.ArrowInvalid, OSError) as exc:
                raise DamagedFileError(str(self._files[table]),
                                       f"not a readable Parquet file ({exc})") from None
        return self._sets[table]

    def columns(self, table: str) -> tuple[str, ...]:
        d = self._set(table)
        return tuple(d.schema.names) if d is not None else ()

    def scan(self, table: str, want: Mapping[str, pa.DataType],
             where: KeyRange | None = None) -> Iterator[pa.Table]:
        d = self._set(table)
        if d is None:
            return
        names = list(want)
        have = set(d.schema.names)
        read = [c for c in names if c in have]
        filt = None
        if where is not None and where.column in have:
            f = ds.field(where.column)
            filt = (f >= where.lo) & (f < where.hi)
        try:
            for b in d.to_batches(columns=read, filter=filt, batch_size=BATCH_ROWS):
                if b.num_rows:
                    yield _batch(names, want, {c: b.column(c) for c in read}, b.num_rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
            raise DamagedFileError(str(self._files[table]),
                                   f"cannot read ({str(exc).splitlines()[0]})") from None

    def close(self) -> None:
        self._sets.clear()


def is_parquet_export(folder: Path) -> bool:
    """A folder holding an nsys Parquet export (its kernel or runtime table as Parquet)."""
    return folder.is_dir() and any(
        (folder / f"{t}{PARQUET_SUFFIX}").exists()
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds"))


def _gunzip(path: Path, name: str) -> Path:
    """Decompress ``path`` into a new temporary folder (piece by piece: bounded memory)."""
    tmp = Path(tempfile.mkdtemp(prefix="stepscope-nsys-"))
    try:
        with gzip.open(path, "rb") as src, open(tmp / "export.sqlite", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except EOFError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DamagedFileError(name, "truncated gzip file (the download or copy is "
                                     "incomplete)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DamagedFileError(name, f"corrupt gzip file ({exc})") from None
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TraceFormatError(name, f"cannot decompress ({exc.strerror or exc})") from None
    return tmp


def open_export(path: str | Path) -> Export:
    """Open an SQLite export (plain or gzip) or a Parquet export folder."""
    p = Path(path)
    name = str(p)
    if p.is_dir():
        if not is_parquet_export(p):
            raise TraceFormatError(name, "a folder without Nsight Systems Parquet tables")
        return ParquetExport(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise TraceFormatError(name, "no such file") from None
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read ({exc.strerror or exc})") from None
    if head.startswith(GZIP_MAGIC):
        tmp = _gunzip(p, name)
        db = tmp / "export.sqlite"
        with open(db, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                shutil.rmtree(tmp, ignore_errors=True)
                raise TraceFormatError(name, "a gzip file that does not hold an SQLite database")
        return SqliteExport(name, db, True, tmp)
    if head != SQLITE_MAGIC:
        raise TraceFormatError(name, "not an SQLite database (an nsys export starts with "
                                     "'SQLite format 3')")
    return SqliteExport(name, p, False, None)


__all__ = ["BATCH_ROWS", "SQLITE_MAGIC", "Export", "KeyRange", "ParquetExport", "SqliteExport",
           "is_parquet_export", "open_export"]
