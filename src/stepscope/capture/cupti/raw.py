"""Decode the raw CUPTI records a capture kept in its staging folder (``capture.cupti.spill``)
into the run's tables. Runs where the run is merged, after the window: never in the window.

Buffers are decoded in groups of about ``group_bytes`` (each group becomes one chunk of every
table, so memory stays bounded on long captures), with one ``Decoder`` over the whole recording
so that NVTX ranges and names carry across groups. Times are moved to the host clock (the
capture's ``clock_offset_ns``) and clipped to the window.
"""

from __future__ import annotations

import ctypes
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from stepscope.capture.chunks import clip
from stepscope.capture.cupti import layouts as L
from stepscope.capture.cupti.decode import DecodeContext, Decoder, walk_py
from stepscope.capture.cupti.native import Unavailable, demangler, load_shim, shim_walk
from stepscope.capture.cupti.spill import FRAME_MAGIC, RAW_META
from stepscope.store.manifest import Diagnostic

_CHUNK = re.compile(r"^cupti\.(\d+)\.bin$")
U8 = npt.NDArray[np.uint8]
Walk = Callable[[U8], tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint64], int]]


@dataclass(frozen=True)
class RawResult:
    """What decoding a folder's raw records gave."""

    records: int
    frames: int
    rows: int
    decode_s: float
    cupti_overhead_ns: dict[str, int] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()


def has_raw(folder: Path) -> bool:
    return (folder / RAW_META).is_file()


def raw_files(folder: Path) -> list[Path]:
    """Everything the spill wrote (records, names, meta, leftovers of an interrupted flush)."""
    return sorted(p for p in folder.glob("cupti.*") if p.is_file())


def _frames(path: Path) -> Iterator[U8 | str]:
    """The buffers of one ``.bin`` file; a string says where and why reading stopped."""
    with path.open("rb") as f:
        while True:
            head = f.read(16)
            if not head:
                return
            if len(head) < 16 or head[:8] != FRAME_MAGIC:
                yield f"{path.name}: not a record frame at byte {f.tell() - len(head)}"
                return
            n = int.from_bytes(head[8:], "little")
            buf = np.empty(n, dtype=np.uint8)
            got = f.readinto(buf.data)
            if got != n:
                yield f"{path.name}: the last frame is cut short ({got} of {n} bytes)"
                return
            yield buf


def _walker(sizes: list[int]) -> Walk:
    """The shim's record walk when it can be loaded here, else the pure-Python one."""
    try:
        shim = load_shim()
    except (Unavailable, OSError):
        return lambda buf: walk_py(buf, sizes)
    table = (ctypes.c_uint32 * 64)(*sizes)
    return lambda buf: shim_walk(shim, int(buf.ctypes.data), len(buf), table)


def _strings(folder: Path) -> dict[int, str]:
    out: dict[int, str] = {}
    for p in sorted(folder.glob("cupti.*.strings.json")):
        try:
            out.update({int(k): str(v) for k, v in json.loads(p.read_text("utf-8")).items()})
        except (OSError, ValueError, AttributeError):
            continue  # an interrupted flush: its records were not renamed into place either
    return out


def decode_folder(folder: Path, lo: int | None, hi: int | None,
                  write: Callable[[dict[str, Any]], int], group_bytes: int = 256 << 20
                  ) -> RawResult:
    """Decode every complete flush in ``folder``, clipped to ``[lo, hi]``, handing each group's
    tables to ``write`` (which returns the rows it wrote)."""
    t0 = time.perf_counter()
    diags: list[Diagnostic] = []
    try:
        meta = json.loads((folder / RAW_META).read_text("utf-8"))
        chosen = L.layouts_for(int(meta["cupti_api_version"]))
        sizes = [int(x) for x in meta["sizes"]]
        api = {(int(d), int(c)): str(n) for d, names in meta["api_names"].items()
               for c, n in names.items()}
        offset, pid = int(meta.get("clock_offset_ns", 0)), int(meta.get("pid", 0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return RawResult(0, 0, 0, 0.0, diagnostics=(Diagnostic(
            "error", "cupti_raw_unreadable",
            f"the raw CUPTI records could not be read ({RAW_META}: {exc}): GPU records lost"),))
    if chosen is None or chosen.name != meta.get("layout") or len(sizes) != 64:
        return RawResult(0, 0, 0, 0.0, diagnostics=(Diagnostic(
            "error", "cupti_raw_unreadable",
            f"raw CUPTI records of layout {meta.get('layout')!r} (CUPTI "
            f"{meta.get('cupti_api_version')}) cannot be decoded here: GPU records lost"),))
    names = _strings(folder)
    dec = Decoder(chosen.table, DecodeContext(strings=names.get, api_name=lambda d, c: api.get((d, c)),
                                           demangle=demangler(), pid=pid))
    walk = _walker(sizes)
    frames = rows = pending = 0
    lo_ns = lo if lo is not None else -(1 << 62)

    def emit() -> int:
        tables = dec.tables()
        if offset:
            for cols in tables.values():
                cols["ts_ns"] = np.asarray(cols["ts_ns"], dtype=np.int64) - offset
        return write(clip(tables, lo_ns, hi)) if tables else 0

    chunks = sorted((int(m.group(1)), p) for p in folder.glob("cupti.*.bin")
                    if (m := _CHUNK.match(p.name)))
    for _, path in chunks:
        for buf in _frames(path):
            if isinstance(buf, str):
                diags.append(Diagnostic("warning", "cupti_raw_truncated",
                                        f"raw CUPTI records: {buf}; the rest of that file is lost"))
                break
            kinds, offs, stop = walk(buf)
            if stop != len(buf):
                diags.append(Diagnostic("warning", "cupti_walk_stopped",
                                        f"a CUPTI buffer had an unknown record at byte {stop} of "
                                        f"{len(buf)}: the rest of that buffer was skipped"))
            dec.add(buf, kinds, offs)
            frames += 1
            pending += len(buf)
            if pending >= group_bytes:
                rows += emit()
                pending = 0
    rows += emit()
    if dec.unknown_kinds:
        diags.append(Diagnostic("info", "cupti_unknown_kinds",
                                f"CUPTI record kinds not decoded: {sorted(dec.unknown_kinds)}"))
    return RawResult(records=dec.records, frames=frames, rows=rows,
                     decode_s=round(time.perf_counter() - t0, 4),
                     cupti_overhead_ns=dict(dec.cupti_overhead_ns), diagnostics=tuple(_once(diags)))


def _once(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[str] = set()
    out = []
    for d in diags:
        if d.code not in seen:
            seen.add(d.code)
            out.append(d)
    return out


__all__ = ["RawResult", "decode_folder", "has_raw", "raw_files"]
