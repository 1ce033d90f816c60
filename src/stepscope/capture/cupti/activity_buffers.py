"""The completed CUPTI activity buffers of one capture, from the shim to records.

``drain()`` takes every buffer the shim holds (``ss_take``), counts it, checks its record sizes
against CUPTI's own iterator (``size_check``: a kind first seen in a later buffer with a size
other than the table's would otherwise be walked out of step, and its string fields read at
addresses that are not strings, a crash of the program), then either keeps it raw in the
staging folder (``spill``: what a recording session does, decoded at merge) or walks and
decodes it here (``decode``), and hands it back to the shim (``ss_release``).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.decode import Decoder
from stepscope.capture.cupti.dump import BufferDump
from stepscope.capture.cupti.native import shim_walk
from stepscope.capture.cupti.size_check import check_sizes
from stepscope.capture.cupti.spill import SpillWriter

TAKE = 64  # buffers taken from the shim per call


class ActivityBuffers:
    """``diag(code, message, level)`` is the capture's; ``api_names()`` the call names of the
    runtime and driver domains, for the spill's meta."""

    def __init__(self, lib: Any, shim: Any, version: int, layout: L.LayoutChoice,
                 decoder: Decoder, diag: Callable[[str, str, str], None],
                 dump: BufferDump | None,
                 api_names: Callable[[], dict[str, dict[str, str]]]) -> None:
        self.lib, self.shim, self.version, self.layout = lib, shim, version, layout
        self.decoder = decoder
        self._diag = diag
        self._dump = dump
        self._api_names = api_names
        self.sizes = (ctypes.c_uint32 * 64)(*L.size_table(layout.table))
        self.ok = True  # every buffer so far had the record sizes this stepscope reads
        self.spill: SpillWriter | None = None
        self.clock_offset_ns = 0  # CUPTI's clock minus the wall clock, when over 1 ms
        self.buffers = 0
        self.bytes = 0
        self.verify_s = 0.0  # checking each buffer's record sizes against CUPTI's iterator
        self.decode_s = 0.0  # decoding here (no spill); spilling: the time moving buffers

    @property
    def records(self) -> int:
        """Records taken so far (decoded here, or kept raw)."""
        return self.decoder.records + (self.spill.records if self.spill is not None else 0)

    @property
    def raw_records(self) -> int:
        """Records kept raw in the spill folder (decoded when the run is merged)."""
        return self.spill.records if self.spill is not None else 0

    def start_spill(self, folder: Path, strings: Callable[[int], str | None]) -> None:
        """Keep the buffers raw in ``folder`` from now on."""
        self.spill = SpillWriter(folder, self.shim, self.layout.table, strings)
        self.write_raw_meta()

    def drain(self) -> dict[str, dict[str, Any]]:
        """Take every buffer the shim holds; the decoded tables (none when spilling)."""
        t0 = time.perf_counter()
        bufs = (ctypes.c_void_p * TAKE)()
        valid = (ctypes.c_size_t * TAKE)()
        take = self._decode if self.spill is None else self._keep_raw
        while True:
            n = self.shim.ss_take(bufs, valid, TAKE)
            if n <= 0:
                break
            for i in range(n):
                try:
                    take(int(bufs[i] or 0), int(valid[i]))
                finally:
                    self.shim.ss_release(bufs[i], valid[i])
        if self.spill is not None:
            self.spill.end_flush()
            self.decode_s += time.perf_counter() - t0
            return {}
        tables = self.decoder.tables() if self.ok else {}
        if self.clock_offset_ns:
            for cols in tables.values():
                cols["ts_ns"] = np.asarray(cols["ts_ns"], dtype=np.int64) - self.clock_offset_ns
        self.decode_s += time.perf_counter() - t0
        return tables

    def write_raw_meta(self) -> None:
        if self.spill is None:
            return
        by_kind = {L.KIND_NAMES.get(k, str(k)): c for k, c in enumerate(self.spill.counts) if c}
        self.spill.write_meta({
            "cupti_api_version": self.version, "layout": self.layout.name,
            "sizes": list(self.sizes), "api_names": self._api_names(), "pid": os.getpid(),
            "clock_offset_ns": self.clock_offset_ns, "records_by_kind": by_kind})

    def manifest(self) -> dict[str, Any]:
        return {"record_layout": self.layout.name, "records": self.records,
                "buffers": self.buffers, "valid_bytes": self.bytes,
                "records_kept_raw": self.spill is not None,
                "decode_s" if self.spill is None else "spill_s": round(self.decode_s, 4),
                "verify_s": round(self.verify_s, 4), "clock_offset_ns": self.clock_offset_ns,
                "cupti_overhead_ns": dict(self.decoder.cupti_overhead_ns)}

    def _checked(self, ptr: int, valid: int) -> bool:
        """Count a buffer and check its record sizes; False: do not read it."""
        if not ptr or not valid or not self.ok:
            return False
        self.buffers += 1
        self.bytes += valid
        if self._dump:
            self._dump.buffer(self.buffers, ptr, valid)
        t0 = time.perf_counter()
        self._verify(ptr, valid)
        self.verify_s += time.perf_counter() - t0
        return self.ok

    def _keep_raw(self, ptr: int, valid: int) -> None:
        spill = self.spill
        if spill is None:
            return
        sizes_before = list(self.sizes)
        if not self._checked(ptr, valid):  # also learns the sizes of kinds first seen
            return
        counts, stop = spill.scan(ptr, valid, self.sizes)
        if stop != valid:
            self._walk_stopped(stop, valid)
        if list(self.sizes) != sizes_before:
            self.write_raw_meta()
        spill.add(ptr, valid, counts)

    def _decode(self, ptr: int, valid: int) -> None:
        if not self._checked(ptr, valid):
            return
        kinds, offs, stop = shim_walk(self.shim, ptr, valid, self.sizes)
        if stop != valid:
            self._walk_stopped(stop, valid)
        buf = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(valid,))
        self.decoder.add(buf, kinds, offs)

    def _walk_stopped(self, stop: int, valid: int) -> None:
        self._diag("cupti_walk_stopped", f"a CUPTI buffer had an unknown record at byte {stop} of "
                   f"{valid}: the rest of that buffer was skipped", "warning")

    def _verify(self, ptr: int, valid: int) -> None:
        nxt = ctypes.cast(self.lib.cuptiActivityGetNextRecord, ctypes.c_void_p).value or 0
        got = check_sizes(self.shim, nxt, ptr, valid, self.sizes, self.layout)
        for kind, size, known in got.grown:
            self._diag(f"cupti_layout_learnt_{kind}",
                       f"CUPTI {self.version} is newer than the newest this stepscope was checked "
                       f"against (13.5): its {L.KIND_NAMES.get(kind, kind)} records are {size} "
                       f"bytes (13.5: {known}), read at 13.5's field offsets", "info")
        if got.bad is not None:
            self.ok = False
            kind, size, known = got.bad
            self._diag("cupti_layout_mismatch",
                       f"CUPTI {self.version} records of kind {kind} are {size} bytes, not the "
                       f"{known} this stepscope knows: GPU records dropped", "error")


__all__ = ["ActivityBuffers"]
