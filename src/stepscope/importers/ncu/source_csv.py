"""Nsight Compute's source page (``ncu --import R.ncu-rep --csv --page source``) -> the hot
source lines of each profiled kernel (``kernel_source_lines``).

The export is one block per kernel: a ``"File Path",PATH`` row, a ``"Function Name",NAME`` row,
a header row (``Line No``, ``Source``, ``Address``, ``Source``, ``Warp Stall Sampling (All
Samples)``...), then the source lines (``Line No`` set) each followed by its SASS instructions
(``Line No`` empty). Only the source lines are kept, with their warp-stall samples; the source
text is null where ncu could not open the file (a deleted temporary file of a JIT compiler).
Kernels without line information (built without ``-lineinfo``) have no such rows.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.errors import TraceFormatError
from stepscope.importers.ncu.units import number

FIRST = '"File Path"'
SAMPLES = "Warp Stall Sampling (All Samples)"


def looks_like_source_csv(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \r\n").startswith(FIRST.encode())


@dataclass(frozen=True)
class SourceLines:
    columns: dict[str, list[Any]]  # kernel_source_lines, as a column mapping
    kernels: int


def parse_source_text(text: str, name: str) -> SourceLines:
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise TraceFormatError(name, f"malformed CSV ({exc})") from None
    cols: dict[str, list[Any]] = {k: [] for k in (
        "kernel", "file", "line", "source", "samples", "share")}
    path = func = ""
    header: list[str] = []
    block: list[tuple[int, str | None, float]] = []
    kernels = 0

    def flush() -> None:
        nonlocal block
        total = sum(s for _, _, s in block)
        for line, src, s in block:
            cols["kernel"].append(func)
            cols["file"].append(path or None)
            cols["line"].append(line)
            cols["source"].append(src)
            cols["samples"].append(s)
            cols["share"].append(s / total if total > 0 else None)
        block = []

    for row in rows:
        if not row:
            continue
        if row[0] == "File Path":
            if func:
                flush()
            path, func, header = (row[1] if len(row) > 1 else ""), "", []
            continue
        if row[0] == "Function Name":
            func = row[1] if len(row) > 1 else ""
            kernels += 1
            continue
        if row[0] == "Line No":
            header = row
            continue
        if not header or not func or not row[0].strip():
            continue  # SASS rows (no line number) and anything before a block
        line = number(row[0])
        if line is None:
            continue
        src = row[1] if len(row) > 1 else ""
        at = header.index(SAMPLES) if SAMPLES in header else -1
        s = number(row[at]) if 0 <= at < len(row) else None
        block.append((int(line), None if src.startswith("<Unable") or not src.strip() else src,
                      s or 0.0))
    if func:
        flush()
    if not kernels:
        raise TraceFormatError(name, "an Nsight Compute source-page export with no kernel")
    return SourceLines(columns=cols, kernels=kernels)


def read_source_csv(path: Path) -> SourceLines:
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise TraceFormatError(str(path), f"cannot read ({exc.strerror or exc})") from None
    return parse_source_text(text, str(path))
