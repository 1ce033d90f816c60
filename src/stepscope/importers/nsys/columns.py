"""Small vectorised helpers shared by the nsys table builders: one process's rows, globalTid
decoding, code -> enum value mapping, and batches -> one table."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.importers.nsys.source import Export, KeyRange

I32, I64, STR = pa.int32(), pa.int64(), pa.string()
PID_SHIFT = 24
PID_MASK = 0xFFFFFF
_VERSION_SUFFIX = re.compile(r"_v\d+$")


@dataclass(frozen=True)
class Scope:
    """One process of the export: its ``globalPid`` (nsys packs the pid in bits 24-47 of the
    ``globalPid``/``globalTid`` values, the thread id in bits 0-23) and the clock offset."""

    global_pid: int
    pid: int
    offset_ns: int

    def key(self, column: str) -> KeyRange:
        """Rows of this process: ``column`` (globalPid or globalTid) in its 2**24 ids."""
        base = (self.global_pid >> PID_SHIFT) << PID_SHIFT
        return KeyRange(column, base, base + (1 << PID_SHIFT))


def pid_of(global_id: int) -> int:
    return (global_id >> PID_SHIFT) & PID_MASK


def tid_of(global_tid: pa.Array) -> pa.Array:
    return pc.bit_wise_and(global_tid, pa.scalar(PID_MASK, I64))


def pids_of(global_tid: pa.Array) -> pa.Array:
    shifted = pc.shift_right(global_tid, pa.scalar(PID_SHIFT, I64))
    return pc.bit_wise_and(shifted, pa.scalar(PID_MASK, I64))


def times(t: pa.Table, offset_ns: int) -> tuple[pa.Array, pa.Array]:
    """``ts_ns`` (start + the clock offset) and ``dur_ns`` (end - start, at least 0; 0 where
    the end is missing)."""
    start = t.column("start").combine_chunks()
    end = t.column("end").combine_chunks()
    dur = pc.max_element_wise(pc.fill_null(pc.subtract(end, start), 0), pa.scalar(0, I64))
    return pc.add(start, pa.scalar(offset_ns, I64)), dur


def coded(codes: pa.Array | pa.ChunkedArray, mapping: Mapping[int, str], default: str) -> pa.Array:
    """Integer codes -> their enum values (``default`` for unknown or null codes)."""
    arr = codes.combine_chunks() if isinstance(codes, pa.ChunkedArray) else codes
    raw = arr.cast(I64).fill_null(-(1 << 62)).to_numpy()
    uniq, inv = np.unique(raw, return_inverse=True)
    values = pa.array([mapping.get(int(u), default) for u in uniq], STR)
    return values.take(pa.array(inv.astype(np.int64)))


def per_value(names: pa.Array, fn: Callable[[str], Any], typ: pa.DataType = STR) -> pa.Array:
    """``fn`` once per distinct (non-null) string, spread over the rows."""
    enc = names.dictionary_encode() if not pa.types.is_dictionary(names.type) else names
    values = pa.array([fn(v) if v is not None else None for v in enc.dictionary.to_pylist()], typ)
    return values.take(enc.indices)


def call_name(name: str) -> str:
    """An API name without the version suffix nsys records (``cudaLaunchKernel_v7000``)."""
    return _VERSION_SUFFIX.sub("", name)


def gather(export: Export, table: str, want: Mapping[str, pa.DataType], where: KeyRange | None,
           build: Callable[[pa.Table], dict[str, pa.Array] | None]) -> dict[str, pa.Array] | None:
    """Scan ``table`` (one process's rows), ``build`` each batch's columns, concatenate and
    sort by ``ts_ns`` when there is one."""
    chunks = [c for c in (build(b) for b in export.scan(table, want, where)) if c]
    return concat(chunks)


def concat(chunks: Iterable[dict[str, pa.Array]]) -> dict[str, pa.Array] | None:
    parts = [c for c in chunks if c and len(next(iter(c.values())))]
    if not parts:
        return None
    keys = list(parts[0])
    out = {k: _concat([p[k] for p in parts]) for k in keys}
    if "ts_ns" in out:
        ts = out["ts_ns"].to_numpy()
        if ts.size > 1 and not bool((ts[1:] >= ts[:-1]).all()):  # exports are mostly in order
            order = pa.array(np.argsort(ts, kind="stable"))
            out = {k: v.take(order) for k, v in out.items()}
    return out


def _concat(arrays: list[pa.Array]) -> pa.Array:
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    if len(arrays) == 1:
        return arrays[0]
    kinds = {pa.types.is_dictionary(a.type) for a in arrays}
    if kinds == {True}:  # names stay dictionary-encoded, over one dictionary
        return pa.chunked_array(arrays).unify_dictionaries().combine_chunks()
    if True in kinds:
        arrays = [a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in arrays]
    return pa.concat_arrays(arrays)


def rows(cols: Mapping[str, pa.Array] | None) -> int:
    return len(next(iter(cols.values()))) if cols else 0


__all__ = ["I32", "I64", "STR", "Scope", "call_name", "coded", "concat", "gather", "per_value",
           "pid_of", "pids_of", "rows", "tid_of", "times"]
