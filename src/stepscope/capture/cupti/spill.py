"""Keep a capture's raw CUPTI records in the staging folder instead of decoding them in the
profiled process.

Why: decoding costs about 1.3-1.6 µs of Python and numpy per record (measured on the recorded
buffers of ``tests/data/cupti``, docs/benchmarks.md), nearly all of it holding the GIL. Done
every 5 s inside the window, as stepscope did before, that stalled the training thread for
hundreds of milliseconds per flush on a busy GPU program. Now, while the window is open, a
flush only moves CUPTI's completed buffers to a file — ``ss_write_frame`` in the C shim, no GIL
— after ``ss_scan`` has counted their records and picked the string pointers (kernel and NVTX
names live in CUPTI's memory) not seen before, which are read here, once per distinct name. The
records are decoded when the run is merged (``capture.cupti.raw``): by ``stepscope record``
after the program has ended, or at the end of ``stepscope.record()``'s block. A process killed
mid-window keeps every flush that completed, as the Parquet chunks did.

Files in a process's staging folder:

- ``cupti.json``: what decoding needs — CUPTI version, record layout, record sizes (kinds learnt
  from libcupti included), call names of both callback domains, clock offset, pid;
- ``cupti.<n>.bin``: the buffers of flush *n*, framed (8 bytes ``SSCUPTI1``, length, bytes);
- ``cupti.<n>.strings.json``: ``{pointer: text}`` for the pointers first seen in flush *n*.

A flush writes its files under temporary names and renames the strings before the records, so a
``.bin`` never lies there without the names it needs.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stepscope.capture.cupti import layouts as L

RAW_META = "cupti.json"
FRAME_MAGIC = b"SSCUPTI1"
_NEW_CAP = 4096  # string pointers returned per ss_scan call


def string_fields(layouts: Mapping[int, L.Layout]) -> tuple[list[int], list[int]]:
    """Per kind, the byte offsets of up to two ``char*`` fields whose text decoding needs (0 =
    none): kernel names, NVTX names."""
    a, b = [0] * 64, [0] * 64
    for kind in (L.CONCURRENT_KERNEL, L.MARKER):
        lay = layouts.get(kind)
        if lay is not None and "name" in lay.fields:
            a[kind] = lay.fields["name"][0]
    return a, b


class SpillWriter:
    """Writes one process's raw CUPTI buffers (see the module doc). Not thread-safe: the capture
    serialises its flushes."""

    def __init__(self, folder: Path, shim: ctypes.CDLL, layouts: Mapping[int, L.Layout],
                 read_string: Callable[[int], str | None]) -> None:
        self.folder = folder
        self.shim = shim
        self.read_string = read_string
        a, b = string_fields(layouts)
        self._str_a = (ctypes.c_uint32 * 64)(*a)
        self._str_b = (ctypes.c_uint32 * 64)(*b)
        self._new = np.zeros(_NEW_CAP, dtype=np.uint64)
        self.counts = [0] * 64  # records per kind, all flushes
        self.records = 0
        self.frames = 0
        self.bytes = 0
        self._chunk = 0
        self._fd: int | None = None
        self._strings: dict[int, str] = {}
        self.error: str | None = None  # set when writing failed; nothing more is written
        folder.mkdir(parents=True, exist_ok=True)
        shim.ss_seen_reset()

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        tmp = self.folder / (RAW_META + ".tmp")
        tmp.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp, self.folder / RAW_META)

    def _paths(self) -> tuple[Path, Path]:
        base = f"cupti.{self._chunk:05d}"
        return self.folder / f"{base}.bin", self.folder / f"{base}.strings.json"

    def scan(self, ptr: int, valid: int, sizes: ctypes.Array[ctypes.c_uint32],
             start: int = 0) -> tuple[list[int], int]:
        """Count the records of a buffer from ``start`` and read the names first seen there.
        Returns (records per kind, the offset where the walk ended)."""
        counts = (ctypes.c_uint64 * 64)()
        n_new, stop = ctypes.c_size_t(0), ctypes.c_size_t(0)
        new = self._new.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64))
        off = start
        while True:
            self.shim.ss_scan(ptr, valid, off, sizes, self._str_a, self._str_b, counts, new,
                              _NEW_CAP, ctypes.byref(n_new), ctypes.byref(stop))
            for p in self._new[: n_new.value].tolist():
                text = self.read_string(int(p))
                if text is not None:
                    self._strings[int(p)] = text
            if n_new.value < _NEW_CAP - 1 or stop.value == off:
                return list(counts), int(stop.value)
            off = int(stop.value)  # the pointers filled the array: go on from there

    def add(self, ptr: int, valid: int, counts: list[int]) -> None:
        """Append one buffer (already scanned) to this flush's file."""
        if self.error is not None:
            return
        try:
            if self._fd is None:
                path, _ = self._paths()
                self._fd = os.open(f"{path}.tmp",
                                   os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            rc = int(self.shim.ss_write_frame(self._fd, ptr, valid))
            if rc != 0:
                raise OSError(-rc, os.strerror(-rc))
        except OSError as exc:
            self.error = f"writing CUPTI records to {self.folder} failed: {exc}"
            return
        for k, c in enumerate(counts):
            if c:
                self.counts[k] += c
                self.records += c
        self.frames += 1
        self.bytes += valid

    def end_flush(self) -> None:
        """Close this flush's files (strings first, then the records) and start the next."""
        fd, self._fd = self._fd, None
        if fd is None and not self._strings:
            return
        path, spath = self._paths()
        try:
            if fd is not None:
                os.close(fd)
            if self._strings:
                tmp = Path(f"{spath}.tmp")
                tmp.write_text(json.dumps({str(k): v for k, v in self._strings.items()}),
                               encoding="utf-8")
                os.replace(tmp, spath)
            if fd is not None:
                os.replace(f"{path}.tmp", path)
        except OSError as exc:
            self.error = self.error or f"writing CUPTI records to {self.folder} failed: {exc}"
        self._strings = {}
        self._chunk += 1


__all__ = ["FRAME_MAGIC", "RAW_META", "SpillWriter", "string_fields"]
