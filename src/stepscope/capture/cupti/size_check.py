"""Check one CUPTI buffer's record sizes against CUPTI's own iterator before it is read.

The size table (``layouts``) says where each record ends; libcupti's
``cuptiActivityGetNextRecord`` knows. ``ss_check_walk`` (the C shim) walks the buffer with the
latter and compares: kinds the table does not know are learnt (their records are then stepped
over); a known kind of another size is a mismatch. For a CUPTI newer than any header read here
(``LayoutChoice.checked`` false), a record that grew is learnt too: every CUPTI 13 release so far
grew its records by fields appended at their end, leaving the fields read here where they were.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from stepscope.capture.cupti import layouts as L

MAX_RECORD = 4096  # a learnt record size above this is not believed


@dataclass(frozen=True)
class SizeCheck:
    ok: bool
    grown: tuple[tuple[int, int, int], ...] = ()  # (kind, CUPTI's size, the table's) learnt
    bad: tuple[int, int, int] | None = None  # (kind, CUPTI's size, the table's) on a mismatch


def check_sizes(shim: Any, next_record: int, ptr: int, valid: int,
                sizes: ctypes.Array[ctypes.c_uint32], choice: L.LayoutChoice) -> SizeCheck:
    """Check (and learn into ``sizes``) the record sizes of the buffer at ``ptr``."""
    kind, stride, learnt = ctypes.c_uint32(0), ctypes.c_uint64(0), ctypes.c_uint32(0)
    grown: list[tuple[int, int, int]] = []
    for _ in range(len(sizes)):
        if shim.ss_check_walk(next_record, ptr, valid, sizes, ctypes.byref(kind),
                              ctypes.byref(stride), ctypes.byref(learnt)) < 0:
            return SizeCheck(True, tuple(grown))
        k, got = kind.value, int(stride.value)
        known = int(sizes[k]) if k < len(sizes) else 0  # a kind past the table: never learnt
        if choice.checked or k not in choice.table or not known < got <= MAX_RECORD:
            return SizeCheck(False, tuple(grown), (k, got, known))
        sizes[k] = got
        grown.append((k, got, known))
    k = kind.value
    return SizeCheck(False, tuple(grown), (k, int(stride.value), int(sizes[k]) if k < len(sizes) else 0))
