"""Column helpers for the timeline payload: event kinds, the event and track accumulators,
string tables, enum codes, grouping, nesting, packing.

Pure numpy/Arrow utilities used by :mod:`stepscope.reporters.timeline_data` and
:mod:`stepscope.reporters.timeline_host`; each works on whole columns (no per-row Python except
over distinct values).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
ESC = 0xFFFFFFFF  # "the value is in the overflow array" marker of uint32 columns
KINDS = ("kernel", "memcpy", "memset", "api", "op", "python", "annotation", "nvtx",
         "gpu_annotation", "profiler_step", "input_wait", "step", "gpu_sync", "stack")
K = {k: i for i, k in enumerate(KINDS)}


@dataclass
class Parts:
    """Event columns accumulated from every table, before sorting."""

    ts: list[I64] = field(default_factory=list)
    dur: list[I64] = field(default_factory=list)
    track: list[I64] = field(default_factory=list)
    kind: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    name: list[npt.NDArray[np.uint32]] = field(default_factory=list)
    row: list[I64] = field(default_factory=list)  # row within its kind, for the per-kind columns
    extra: dict[str, list[npt.NDArray[Any]]] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    configs: list[list[Any]] = field(default_factory=list)  # kernel launch configurations
    classes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # name id -> class

    def add(self, kind: int, ts: I64, dur: I64, track: I64, name: npt.NDArray[np.uint32],
            **extra: npt.NDArray[Any]) -> None:
        n = ts.size
        base = self.counts.get(kind, 0)
        self.counts[kind] = base + n
        self.ts.append(ts)
        self.dur.append(np.maximum(dur, 0))
        self.track.append(track)
        self.kind.append(np.full(n, kind, dtype=np.uint8))
        self.name.append(name)
        self.row.append(np.arange(base, base + n, dtype=np.int64))
        for k, v in extra.items():
            self.extra.setdefault(k, []).append(v)


class Tracks:
    """Track infos in creation order, one per distinct key."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.keys: dict[tuple[Any, ...], int] = {}

    def id(self, key: tuple[Any, ...], **info: Any) -> int:
        i = self.keys.get(key)
        if i is None:
            i = self.keys[key] = len(self.items)
            self.items.append(info)
        return i

    def ids(self, keys: list[tuple[Any, ...]], make: Any) -> I64:
        """Track id per row for row keys; ``make(key)`` gives a new track's info."""
        out = np.empty(len(keys), dtype=np.int64)
        cache: dict[tuple[Any, ...], int] = {}
        for i, key in enumerate(keys):
            tid = cache.get(key)
            if tid is None:
                tid = cache[key] = self.id(key, **make(key))
            out[i] = tid
        return out


def key_ids(tracks: Tracks, cols: list[I64], make: Any, prefix: tuple[Any, ...] = ()) -> I64:
    """Track ids for rows keyed by ``prefix`` + integer columns (unique keys resolved once)."""
    if not cols[0].size:
        return np.zeros(0, dtype=np.int64)
    group, first = row_groups(cols)
    lut = tracks.ids([prefix + tuple(int(c[i]) for c in cols) for i in first], make)
    return lut[group]


class Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def id(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.items)
            self.items.append(s)
        return i

    def column(self, col: pa.ChunkedArray) -> npt.NDArray[np.uint32]:
        """A string or dictionary column -> string-table ids (nulls -> "")."""
        codes, values = dict_codes(col)
        lut = np.array([self.id(v) for v in values] + [self.id("")], dtype=np.uint32)
        return lut[codes]


def dict_codes(col: pa.ChunkedArray) -> tuple[I64, list[str]]:
    """Codes into the column's distinct values; null rows get code ``len(values)``."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col.cast(pa.string()))
    col = col.unify_dictionaries()
    values = [str(v) for v in col.chunk(0).dictionary.to_pylist()] if col.num_chunks else []
    arr = pa.chunked_array([c.indices for c in col.chunks], type=col.type.index_type)
    codes = np.asarray(pc.fill_null(arr, len(values)).to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, values


def i64(t: pa.Table, name: str, fill: int = -1) -> I64:
    return np.asarray(pc.fill_null(t.column(name), fill).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def enum_codes(t: pa.Table, name: str, values: list[str]) -> npt.NDArray[np.uint8]:
    """Enum column -> index into ``values`` (unknown values and nulls -> the last one)."""
    codes, present = dict_codes(t.column(name))
    lut = {v: i for i, v in enumerate(values)}
    table = np.array([lut.get(v, len(values) - 1) for v in present] + [len(values) - 1], dtype=np.uint8)
    return table[codes]


def row_groups(cols: list[I64]) -> tuple[I64, I64]:
    """Rows keyed by several integer columns -> (group id per row, first row of each group).

    Group ids follow the sorted order of the keys. Column codes are combined pairwise and
    re-densified, which is much faster than ``np.unique(axis=0)`` and never overflows.
    """
    key = np.zeros(cols[0].size, dtype=np.int64)
    size = 1  # key < size
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        if hi - lo < 4096:
            code, card = c - lo, hi - lo + 1  # small range: no sort needed
        else:
            vals, inv = np.unique(c, return_inverse=True)
            code, card = inv.reshape(-1).astype(np.int64), len(vals)
        if size * card >= 2**62:
            _, dense = np.unique(key, return_inverse=True)
            key, size = dense.reshape(-1).astype(np.int64), int(dense.max()) + 1
        key, size = key * card + code, size * card
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), first.astype(np.int64)


def nesting_depth(starts: I64, ends: I64) -> I64:
    """Depth of each interval = intervals still open at its start (exact for nested ones)."""
    n = starts.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.maximum(ends, starts + 1)  # a zero-length event is not "closed" at its own start
    order = np.lexsort((-ends, starts))
    closed = np.searchsorted(np.sort(ends), starts[order], side="right")
    depth = np.empty(n, dtype=np.int64)
    depth[order] = np.maximum(np.arange(n) - closed, 0)
    return depth


def lane_overlaps(starts: I64, ends: I64, depth: I64) -> npt.NDArray[np.bool_]:
    """Events that start before an earlier event of the same depth has ended."""
    if starts.size == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((starts, depth))
    g, s, e = depth[order], starts[order], ends[order]
    span = int(max(int(e.max()), int(s.max()))) + 1
    if int(g.max()) * span >= 2**62:  # pragma: no cover - absurd depths or spans
        return np.zeros(starts.size, dtype=bool)
    run = np.maximum.accumulate(g * span + e)
    bad = np.zeros(starts.size, dtype=bool)
    bad[order[1:]] = g[1:] * span + s[1:] < run[:-1]
    return bad


def lanes(starts: I64, ends: I64, rounds: int = 4) -> I64:
    """Lane per event: its nesting depth, with events that partially overlap another one at
    that depth (not properly nested, e.g. a profiler step marker cutting a Python frame)
    moved to extra lanes below, so no two events of a lane overlap."""
    depth = nesting_depth(starts, ends)
    for _ in range(rounds):
        bad = np.flatnonzero(lane_overlaps(starts, ends, depth))
        if bad.size == 0:
            break
        depth[bad] = int(depth.max()) + 1 + nesting_depth(starts[bad], ends[bad])
    return depth


def u32_escaped(x: I64) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float64]]:
    big = x >= ESC
    return np.where(big, ESC, x).astype("<u4"), x[big].astype("<f8")


def pack(arrays: dict[str, npt.NDArray[Any]]) -> tuple[bytes, dict[str, list[Any]]]:
    out = bytearray()
    layout: dict[str, list[Any]] = {}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
            a = a.byteswap().view(a.dtype.newbyteorder("<"))  # pragma: no cover
        layout[name] = [a.dtype.name, len(out), int(a.size)]
        out += a.tobytes()
        out += b"\0" * (-len(out) % 8)
    return bytes(out), layout
