"""JSON text built column-wise with Arrow's string kernels (no Python object per event): each
distinct string encoded once by msgspec, numbers and exact µs times as text, ``,"key":value``
argument fields joined per row."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def enc(v: Any) -> str:
    return msgspec.json.encode(v).decode()


class JsonStrings:
    """A string column with each distinct value JSON-encoded once (by msgspec)."""

    def __init__(self, col: pa.ChunkedArray | pa.Array, null: str = "null") -> None:
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        self.indices = arr.indices
        values = arr.dictionary.to_pylist()
        self.encoded = pa.array([null if v is None else enc(v) for v in values], pa.string())
        self.null = null

    def take(self, lo: int, hi: int) -> pa.Array:
        return pc.fill_null(pc.take(self.encoded, self.indices.slice(lo, hi - lo)), self.null)


def num_text(arr: pa.Array) -> pa.Array:
    """Numbers (nullable) -> JSON text; non-finite floats become null."""
    if pa.types.is_floating(arr.type):
        arr = pc.if_else(pc.is_finite(arr), pc.round(arr, 3), pa.scalar(None, arr.type))
    return pc.fill_null(pc.cast(arr, pa.string()), "null")


def int_text(a: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(a), pa.string())


def us_text(ns: np.ndarray) -> pa.Array:
    """Non-negative integer ns -> exact µs text with 3 decimals."""
    q, r = np.divmod(ns, 1000)
    return pc.binary_join_element_wise(int_text(q), pc.utf8_lpad(int_text(r), 3, "0"), lit("."))


def args_text(parts: list[Any]) -> pa.Array | str:
    """Fields (each ``,"key":value``, possibly empty for a row) -> the args' inner text."""
    return pc.utf8_ltrim(join(parts), ",") if parts else ""


def arg_field(key: str, text: pa.Array, valid: pa.Array | None = None) -> list[Any]:
    """One arg as ``,"key":value`` parts; rows where ``valid`` is false get nothing."""
    head = "," + enc(key) + ":"
    if valid is None or pc.all(valid).as_py():
        return [head, text]
    return [pc.if_else(valid, join([head, text]), lit(""))]


@functools.lru_cache(maxsize=512)
def lit(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.string())


def join(parts: Sequence[Any]) -> pa.Array:
    # literals as ready Arrow scalars: converting a Python str per call costs more than the join
    args = [lit(p) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*args, lit(""))


def column_slice(t: pa.Table, name: str, lo: int, hi: int) -> pa.Array:
    return t.column(name).slice(lo, hi - lo).combine_chunks()


def int_column(t: pa.Table, name: str, fill: int = 0) -> np.ndarray:
    return np.asarray(pc.fill_null(t.column(name), fill).to_numpy(), dtype=np.int64)


def by_time(t: pa.Table) -> pa.Table:
    """Rows ordered by ``ts_ns`` (stable), one chunk per column, dictionaries unified."""
    t = t.unify_dictionaries().combine_chunks()
    if t.num_rows:
        t = t.take(np.argsort(int_column(t, "ts_ns"), kind="stable")).combine_chunks()
    return t


def group_keys(cols: Sequence[pa.ChunkedArray | pa.Array]) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """Distinct key tuples (None for null) and, per row, the index of its tuple."""
    n = len(cols[0])
    key = np.zeros(n, dtype=np.int64)
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols]
    for a in arrays:
        d = pc.dictionary_encode(a, null_encoding="encode")
        key = key * len(d.dictionary) + d.indices.to_numpy().astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    first = np.zeros(len(uniq), dtype=np.int64)
    first[inv[::-1]] = np.arange(n - 1, -1, -1)
    values = [a.take(pa.array(first)).to_pylist() for a in arrays]
    return list(zip(*values)), inv.reshape(-1)
