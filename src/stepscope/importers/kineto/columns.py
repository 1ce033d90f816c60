"""Column helpers for the Kineto importer: time conversion, tolerant typed
arrays, event filtering and copy-name parsing (nesting: ``store.produce.nesting``)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stepscope.importers.kineto.events import Args, Event
from stepscope.schema_enums import CopyKind, MemoryKind
from stepscope.store.manifest import Diagnostic

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_TS, _DUR, _ARGS = attrgetter("ts"), attrgetter("dur"), attrgetter("args")
_I64, _F64, _STR = pa.int64(), pa.float64(), pa.string()
_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}


# The largest |ts| and dur read, in microseconds (~127 years): epoch microseconds are ~1.8e15,
# and a time beyond this would overflow int64 nanoseconds once the base time is added (an
# overflowed duration of 1e30 us used to become 0 ns).
MAX_US = 4e15


def us_to_ns(us: F64, offset_ns: int = 0) -> I64:
    """Microseconds (float) to integer nanoseconds, rounded to the nearest ns.

    Epoch microseconds (~1.7e15) times 1000 exceed float64's exact range, so the
    whole and fractional microseconds are scaled separately.
    """
    whole = np.floor(us)
    ns = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)
    if offset_ns:
        ns += np.int64(offset_ns)
    return ns


def _to_int(v: Any, lo: int, hi: int) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        out = v
    elif isinstance(v, float):
        if not math.isfinite(v):
            return None
        out = int(v)
    elif isinstance(v, str):
        try:
            out = int(v.strip(), 0)
        except ValueError:
            return None
    else:
        return None
    return out if lo <= out <= hi else None


def int_array(values: Sequence[Any], typ: pa.DataType = _I64) -> pa.Array:
    """An Arrow integer array; strings such as ``"0x0"`` are parsed, anything
    unusable (or out of range) becomes null."""
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        bits = _BITS[typ]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return pa.array([_to_int(v, lo, hi) for v in values], type=typ)


_ARROW_TYPES = {np.dtype(t): pa.from_numpy_dtype(t)
                for t in (np.int8, np.int16, np.int32, np.int64, np.float32, np.float64)}
# and back: ``pa.DataType.to_pandas_dtype`` imports pandas (an optional extra) before pyarrow 26
_NUMPY_TYPES = {a: d for d, a in _ARROW_TYPES.items()}


def arrow(values: npt.NDArray[Any], null: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    """A numeric numpy array as Arrow, zero-copy, null where ``null``.

    Built from buffers rather than with ``pa.array``, which imports ``numpy.ma``
    on first use (~60 ms, a tenth of importing a 60 MB trace).
    """
    v = np.ascontiguousarray(values)
    validity = None
    nulls = 0
    if null is not None and null.any():
        validity = pa.py_buffer(np.packbits(~null, bitorder="little").tobytes())
        nulls = int(null.sum())
    return pa.Array.from_buffers(_ARROW_TYPES[v.dtype], len(v), [validity, pa.py_buffer(v)],
                                 null_count=nulls)


def with_nulls(values: npt.NDArray[Any], null: npt.NDArray[np.bool_], typ: pa.DataType) -> pa.Array:
    """``values`` (cast to ``typ``) as an Arrow array, null where ``null``."""
    return arrow(values.astype(_NUMPY_TYPES[typ], copy=False), null)


def float_array(values: Sequence[Any], typ: pa.DataType = _F64) -> pa.Array:
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        out: list[float | None] = []
        for v in values:
            try:
                out.append(None if v is None or isinstance(v, bool) else float(v))
            except (TypeError, ValueError):
                out.append(None)
        return pa.array(out, type=typ)


def get(args: Sequence[Args], name: str) -> list[Any]:
    """One ``Args`` field for every event, as a list (C-speed attribute access)."""
    return list(map(attrgetter(name), args))


def args_of(events: Sequence[Event]) -> list[Args]:
    return list(map(_ARGS, events))


def int_or_fallback(primary: list[Any], fallback: list[Any], typ: pa.DataType) -> pa.Array:
    """``primary`` where it is set, else ``fallback`` (e.g. args.device, else pid)."""
    merged = [p if p is not None else f for p, f in zip(primary, fallback)]
    return int_array(merged, typ)


@dataclass
class Drops:
    """Events dropped while building tables, one diagnostic per reason."""

    path: str
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)  # code -> "<why> ...; first: ..."
    _chunk: tuple[int, Sequence[Event], Sequence[int], Sequence[int] | None] = (0, (), (), None)

    def set_chunk(self, index: int, events: Sequence[Event], skipped: Sequence[int] = (),
                  positions: Sequence[int] | None = None) -> None:
        """The chunk being processed, the file index of its first event and the
        (sorted) file indices of events the decoder already skipped. ``positions``:
        where in the chunk each of ``events`` is, when they are not all of it."""
        self._chunk = (index, events, skipped, positions)

    def add(self, code: str, events: Sequence[Event], mask: npt.NDArray[np.bool_],
            why: str) -> None:
        n = int(np.count_nonzero(mask))
        if not n:
            return
        where = None
        if code not in self.first:
            ev = events[int(np.argmax(mask))]
            _, chunk, _, positions = self._chunk
            i = next((i for i, e in enumerate(chunk) if e is ev), None)
            where = None if i is None else positions[i] if positions is not None else i
            self.add_at(code, n, where, ev.cat, ev.name, ev.ts, ev.dur, why)
        else:
            self.counts[code] += n

    def add_at(self, code: str, n: int, where: int | None, cat: str | None, name: str,
               ts: float, dur: float, why: str) -> None:
        """``n`` events dropped; the first is at ``where`` in the current chunk."""
        if not n:
            return
        self.counts[code] = self.counts.get(code, 0) + n
        if code not in self.first:
            start, _, skipped, _ = self._chunk
            if where is not None:
                where += start
                for s in skipped:  # positions after skipped events move up in the file
                    if start <= s <= where:
                        where += 1
            at = "" if where is None else f"event {where} "
            self.first[code] = (f"{why} were dropped; first: {at}(cat {cat!r}, "
                                f"name {name[:80]!r}, ts {ts}, dur {dur})")

    def diagnostics(self) -> list[Diagnostic]:
        return [Diagnostic("warning", code, f"{n} event(s) {self.first[code]}", self.path, n)
                for code, n in self.counts.items()]


@dataclass(frozen=True)
class Timed:
    """Events of one category that survived the checks, with their times in ns."""

    events: list[Event]
    ts_ns: I64
    dur_ns: I64  # zeros for instants


def timed(events: list[Event], base_ns: int, drops: Drops, *, instant: bool = False) -> Timed:
    """Convert ``ts``/``dur`` to ns; drop events with no ``ts``, no ``dur`` (complete
    events) or a negative ``dur``."""
    ts = np.fromiter(map(_TS, events), np.float64, len(events))
    bad = ~np.isfinite(ts)
    drops.add("missing_ts", events, bad, "without a timestamp ('ts')")
    far = ~bad & (np.abs(ts) > MAX_US)
    drops.add("time_out_of_range", events, far, "with a timestamp ('ts') out of range")
    bad |= far
    if instant:
        dur = np.zeros(len(events))
    else:
        dur = np.fromiter(map(_DUR, events), np.float64, len(events))
        no_dur = ~np.isfinite(dur) & ~bad
        drops.add("missing_dur", events, no_dur, "without a duration ('dur')")
        neg = (dur < 0) & ~bad
        drops.add("negative_duration", events, neg, "with a negative duration")
        huge = (dur > MAX_US) & ~bad & ~no_dur
        drops.add("duration_out_of_range", events, huge, "with a duration ('dur') out of range")
        bad |= no_dur | neg | huge
    if bad.any():
        keep = ~bad
        events = [e for e, k in zip(events, keep.tolist()) if k]
        ts, dur = ts[keep], dur[keep]
    return Timed(events, us_to_ns(ts, base_ns), us_to_ns(dur))


_COPY_KINDS = {
    "HtoD": CopyKind.HTOD, "DtoH": CopyKind.DTOH, "DtoD": CopyKind.DTOD, "HtoH": CopyKind.HTOH,
    "PtoP": CopyKind.PTOP, "HtoA": CopyKind.HTOD, "AtoH": CopyKind.DTOH, "AtoD": CopyKind.DTOD,
    "DtoA": CopyKind.DTOD, "AtoA": CopyKind.DTOD,
}
_MEM_KINDS = {
    "pageable": MemoryKind.PAGEABLE, "pinned": MemoryKind.PINNED, "device": MemoryKind.DEVICE,
    "device static": MemoryKind.DEVICE, "managed": MemoryKind.MANAGED,
    "managed static": MemoryKind.MANAGED, "array": MemoryKind.ARRAY,
}
_MEMCPY = re.compile(r"^\s*Memcpy\s+(\w+)(?:\s*\(\s*([^)>]*?)\s*->\s*([^)]*?)\s*\))?")
_MEMSET = re.compile(r"^\s*Memset\s*\(\s*([^)]*?)\s*\)")


def memory_kind(text: str | None) -> str:
    """``Pageable`` -> ``pageable``; AMD's ``Host`` and anything unknown -> ``unknown``."""
    if not text:
        return MemoryKind.UNKNOWN.value
    return _MEM_KINDS.get(text.lower(), MemoryKind.UNKNOWN).value


def parse_memcpy_name(name: str) -> tuple[str, str, str]:
    """``Memcpy HtoD (Pinned -> Device)`` -> (CopyKind, src MemoryKind, dst MemoryKind)."""
    m = _MEMCPY.match(name)
    if not m:
        unknown = MemoryKind.UNKNOWN.value
        return CopyKind.UNKNOWN.value, unknown, unknown
    kind = _COPY_KINDS.get(m.group(1), CopyKind.UNKNOWN).value
    return kind, memory_kind(m.group(2)), memory_kind(m.group(3))


def parse_memset_name(name: str) -> str:
    m = _MEMSET.match(name)
    return memory_kind(m.group(1) if m else None)


def per_name(names: pa.Array, fn: Any, typ: pa.DataType = _STR) -> pa.Array:
    """Apply ``fn`` once per distinct name and spread the results over the rows."""
    enc = names if pa.types.is_dictionary(names.type) else names.dictionary_encode()
    values = pa.array([fn(v) for v in enc.dictionary.to_pylist()], type=typ)
    return values.take(enc.indices)
