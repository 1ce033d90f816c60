"""The compiled fast path of the Kineto import: events -> column buffers, no object per event.

``_ss_kineto`` (``_kineto_scan.c``, an optional extension built by ``pip install``) reads a
chunk of the event array and returns, for the events of the categories the tables take as
columns, packed arrays (category, phase, position, name id, the integer fields and their
states, ``ts``/``dur``/occupancy, grid/block, sync kind) and one string table; events of
categories the builder keeps as objects (annotations) come back as byte spans, decoded here
with the msgspec Structs, and so do (besides their row) the events whose args have a
``Collective name`` (``kineto.comms``: the collectives); ignored categories are only counted. :mod:`scanned` turns
the arrays into the same columns :mod:`tables` makes from decoded events.

Whenever the scanner meets anything it does not reproduce exactly (see the C file's header:
an unknown or missing category, an odd phase, a used field of another type, a key with an
escape, ...) it returns None and the reader decodes that chunk with msgspec, so the tables
never depend on which path read a chunk. ``STEPSCOPE_KINETO_NATIVE=0`` (or
``parse_kineto(..., native=False)``) turns the fast path off; without the extension it is off.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from stepscope.importers.kineto.build import (
    API_CATEGORIES,
    CPU_OP_CATEGORIES,
    GPU_CATEGORIES,
    IGNORED_CATEGORIES,
)
from stepscope.importers.kineto.events import Event
from stepscope.schema_enums import CpuOpKind
from stepscope.settings import Settings


def _load() -> ModuleType | None:
    """The compiled scanner, if built. Its module path stays ``stepscope.importers._ss_kineto``
    (pyproject.toml), beside its sources ``importers/_kineto_*``: moving it into ``kineto/``
    would mean rebuilding every existing install."""
    try:
        return importlib.import_module("stepscope.importers._ss_kineto")
    except ImportError:
        return None


EXTENSION = _load()
ENV = "STEPSCOPE_KINETO_NATIVE"

# Kinds, as the C scanner knows them.
SKIP, PYTHON, OP, MEMORY, FULL, OBJECT = range(6)
OBJECT_CATEGORIES = ("user_annotation", "gpu_user_annotation")
_KINDS: dict[str, int] = {
    **{c: FULL for c in GPU_CATEGORIES if c not in OBJECT_CATEGORIES},
    **{c: FULL for c in API_CATEGORIES},
    **{c: PYTHON if k is CpuOpKind.PYTHON else OP for c, k in CPU_OP_CATEGORIES.items()},
    "cpu_instant_event": MEMORY,
    **{c: OBJECT for c in OBJECT_CATEGORIES},
    **{c: SKIP for c in sorted(IGNORED_CATEGORIES)},
}
CATEGORIES: tuple[str, ...] = tuple(_KINDS)
COLUMN_CATEGORIES = frozenset(c for c, k in _KINDS.items() if k not in (SKIP, OBJECT))
CODES: dict[str, int] = {c: i for i, c in enumerate(CATEGORIES)}
_KIND_BYTES = bytes(_KINDS.values())

# Columns of the integer matrix (the C scanner's order: pid, tid, then events.Args').
INT_COLUMNS = ("pid", "tid", "external_id", "sequence", "queued", "device", "stream", "cbid",
               "correlation", "registers", "shared_memory", "bytes", "to_device", "graph_id",
               "wait_event", "total_reserved", "total_allocated", "mem_bytes", "device_id",
               "device_type", "addr")
COLUMN = {name: i for i, name in enumerate(INT_COLUMNS)}
_NEED_CORRELATION = np.isin(np.arange(len(CATEGORIES)),
                            [CODES[c] for c in ("kernel", "gpu_memcpy", "gpu_memset")])


# measured end to end, `stepscope import` with and without the scanner, CPU time of the process
# (benchmarks/scanner_gain.py; docs/benchmarks.md, "What the missing scanner costs",
# 2026-11-26): 1.47x on a 225 MB trace, 1.60-1.64x on a 904 MB one
MISSING = ("the compiled Kineto scanner (stepscope.importers._ss_kineto) is not installed: "
           "imports of PyTorch traces take ~1.5-1.6x the CPU time; install a stepscope wheel, "
           "or reinstall from source with a C compiler and the Python headers")


def missing_notice() -> str | None:
    """The notice to give when the scanner is missing and would have been used (not when the
    user turned it off with ``STEPSCOPE_KINETO_NATIVE=0``); None otherwise."""
    if EXTENSION is not None or not Settings.from_env().kineto_native:
        return None
    return MISSING


def enabled(native: bool | None = None) -> bool:
    """Whether the fast path runs: ``native`` if given, else unless the variable says ``0``."""
    if EXTENSION is None:
        return False
    if native is not None:
        return native
    return Settings.from_env().kineto_native


@dataclass(frozen=True)
class Scanned:
    """One chunk's events as columns (rows: events of column categories, in file order)."""

    events: int  # events in the chunk, every category
    counts: dict[str, int]  # events per category (those present)
    cat: npt.NDArray[np.uint8]
    ph: npt.NDArray[np.uint8]  # the phase's character, 0 for none
    pos: npt.NDArray[np.int32]  # the event's place in the chunk
    name: npt.NDArray[np.int32]  # into strings
    ints: npt.NDArray[np.int64]  # (rows, INT_COLUMNS)
    set: npt.NDArray[np.bool_]  # (rows, INT_COLUMNS): the field holds an integer
    floats: npt.NDArray[np.float64]  # (rows, 3): ts, dur, occupancy (NaN: absent)
    xyz: npt.NDArray[np.int64]  # (rows, 6): grid, block
    xyz_set: npt.NDArray[np.bool_]  # (rows, 2): a list of 3 integers
    sync: npt.NDArray[np.int32]  # into strings, -1: none
    strings: pa.Array
    objects: dict[str, list[Event]]  # object categories: decoded events, in file order
    object_pos: dict[str, list[int]]
    comm: list[Event]  # events with a "Collective name" arg (also rows): decoded (kineto.comms)
    end: int  # offset after what was read (after the array's ']' for the last chunk)

    def rows(self, category: str) -> npt.NDArray[np.intp]:
        """This category's rows, in file order."""
        return np.flatnonzero(self.cat == CODES[category])

    def column(self, name: str, rows: npt.NDArray[np.intp]) -> tuple[
            npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """An integer field of ``rows``: values and whether each is set."""
        j = COLUMN[name]
        return self.ints[rows, j], self.set[rows, j]


_RESULT_ITEMS = 18  # what the scanner returns (_kineto_scan.c, the end of scan())


def _array(buf: bytes, dtype: Any, width: int = 0) -> Any:
    a = np.frombuffer(buf, dtype=dtype)
    return a.reshape(-1, width) if width else a


def scan(data: Any, start: int, stop: int, *, tail: bool,
         decoder: msgspec.json.Decoder[Any]) -> Scanned | None:
    """The events in ``data[start:stop]`` (with ``tail``: up to the array's end) as columns,
    or None when this chunk must be decoded by msgspec. ``decoder`` decodes the object
    categories' events (the fast union, fast.py)."""
    if EXTENSION is None:
        return None
    got = EXTENSION.scan(data, start, stop, CATEGORIES, _KIND_BYTES, tail)
    if got is None or len(got) != _RESULT_ITEMS:  # (an extension built from older sources)
        return None
    (events, counts, nrows, cat, ph, pos, name, ints, ist, flt, xyz, xst, sync, objs, comm,
     offsets, text, end) = got
    cat_a = _array(cat, np.uint8)
    ist_a = _array(ist, np.uint8, len(INT_COLUMNS)).astype(bool)
    need = _NEED_CORRELATION[cat_a]
    if need.any() and not ist_a[need, COLUMN["correlation"]].all():
        return None  # GPU events without a correlation id: the flows are needed (NeedFlows)
    objects: dict[str, list[Event]] = {}
    object_pos: dict[str, list[int]] = {}
    decoded = _decode_spans(data, _array(objs, np.int64, 3), decoder)
    comm_events = _decode_spans(data, _array(comm, np.int64, 3), decoder)
    if decoded is None or comm_events is None:
        return None
    for ev, p in decoded:
        objects.setdefault(ev.cat or "", []).append(ev)
        object_pos.setdefault(ev.cat or "", []).append(p)
    n_strings = len(offsets) // 4 - 1
    strings = pa.Array.from_buffers(pa.string(), n_strings,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(text)])
    per_cat = _array(counts, np.int64).tolist()
    return Scanned(
        events=events, counts={c: n for c, n in zip(CATEGORIES, per_cat) if n},
        cat=cat_a, ph=_array(ph, np.uint8), pos=_array(pos, np.int32),
        name=_array(name, np.int32), ints=_array(ints, np.int64, len(INT_COLUMNS)), set=ist_a,
        floats=_array(flt, np.float64, 3), xyz=_array(xyz, np.int64, 6),
        xyz_set=_array(xst, np.uint8, 2).astype(bool), sync=_array(sync, np.int32),
        strings=strings, objects=objects, object_pos=object_pos,
        comm=[ev for ev, _ in comm_events], end=end)


def _decode_spans(data: Any, spans: npt.NDArray[np.int64],
                  decoder: msgspec.json.Decoder[Any]) -> list[tuple[Event, int]] | None:
    """The events at ``spans`` (start, stop, place in the chunk), decoded with ``decoder``;
    None when one does not decode (the chunk then goes to msgspec whole)."""
    if not len(spans):
        return []
    view = memoryview(data)
    try:
        decoded = decoder.decode(b"".join((b"[", b",".join(
            [view[s:e] for s, e in spans[:, :2].tolist()]), b"]")))
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        return None
    finally:
        del view
    return list(zip(decoded, spans[:, 2].tolist()))


__all__ = ["CATEGORIES", "ENV", "EXTENSION", "INT_COLUMNS", "MISSING", "Scanned", "enabled",
           "missing_notice", "scan"]
