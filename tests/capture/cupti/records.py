"""Build CUPTI activity records byte by byte from the layout table (for decoder tests).

The layout offsets were computed from NVIDIA's cupti_activity.h (see layouts.py); these helpers
write a record exactly where libcupti would, so the decoder is tested on the real byte layout.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from stepscope.capture.cupti import layouts as L


def record(kind: int, table: dict[int, L.Layout] | None = None, **fields: Any) -> bytes:
    lay = (table or L.LAYOUTS_13)[kind]
    buf = bytearray(lay.size)
    buf[0:4] = int(kind).to_bytes(4, "little")
    for name, value in fields.items():
        off, dt = lay.fields[name]
        d = np.dtype(dt)
        buf[off:off + d.itemsize] = np.array([value], dtype=d).tobytes()
    return bytes(buf)


def kernel(start: int, end: int, *, name: int, corr: int, stream: int = 7, device: int = 0,
           ctx: int = 1, grid: tuple[int, int, int] = (4, 1, 1), block: tuple[int, int, int] = (128, 1, 1),
           regs: int = 32, smem: tuple[int, int] = (1024, 2048), table: dict[int, L.Layout] | None = None,
           **extra: Any) -> bytes:
    return record(L.CONCURRENT_KERNEL, table, start=start, end=end, name=name, correlation=corr,
                  stream=stream, device=device, context=ctx, grid_x=grid[0], grid_y=grid[1],
                  grid_z=grid[2], block_x=block[0], block_y=block[1], block_z=block[2],
                  registers=regs, static_smem=smem[0], dynamic_smem=smem[1], **extra)


def api(kind: int, start: int, end: int, *, cbid: int, corr: int, tid: int = 11, pid: int = 99) -> bytes:
    return record(kind, start=start, end=end, cbid=cbid, correlation=corr, tid=tid, pid=pid)


NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))


def replay_iterator(base: int, starts: list[int]) -> Any:
    """A stand-in for ``cuptiActivityGetNextRecord`` over a buffer at ``base`` whose records start
    at the offsets ``starts`` (libcupti's walk, replayed). Keep the result referenced while used."""
    index = {off: i for i, off in enumerate(starts)}

    @NEXT
    def next_record(_buf: int, _valid: int, rec: ctypes.Array[ctypes.c_void_p]) -> int:
        i = 0 if not rec[0] else index[rec[0] - base] + 1
        if i >= len(starts):
            return 3  # CUPTI_ERROR_MAX_LIMIT_REACHED, as libcupti ends a buffer
        rec[0] = base + starts[i]
        return 0

    return next_record
