"""Nsight Compute's raw page (``ncu --import R.ncu-rep --csv --page raw``) -> kernel_metrics.

The export is one header row of names (identity columns such as ``ID``, ``Kernel Name``,
``Block Size``; then one column per metric), one row of units (empty under the identity
columns), then one row per profiled kernel launch. Lines a profiled program printed before
the header (``==PROF==`` lines, its own stdout) are skipped.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepscope.errors import TraceFormatError
from stepscope.importers.ncu.columns import COLUMNS
from stepscope.importers.ncu.units import base_unit, dims, number
from stepscope.schema_ncu import NCU_COLUMNS

HEADER_START = '"ID",'
_METRIC = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")
_INTS = {c for c, t, _, _ in NCU_COLUMNS if str(t).startswith("int")}
_IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
             "Block Size", "Grid Size", "Device", "CC")


@dataclass(frozen=True)
class NcuProfile:
    """The launches of one raw-page export: ``kernel_metrics`` and ``kernel_metric_values``
    as column mappings (``store.writer.conform`` casts them), and what the file said."""

    metrics: dict[str, list[Any]]
    values: dict[str, list[Any]]
    launches: int
    host: str = ""
    process: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def looks_like_raw_csv(head: bytes) -> bool:
    """Whether the first bytes of a file are an ncu CSV export (a header row starting with
    ``"ID","Process ID"`` on some line of the first kilobytes)."""
    return b'"ID","Process ID"' in head[:1 << 16]


def _rows(text: str, name: str) -> list[list[str]]:
    text = text.lstrip("\ufeff")  # a byte-order mark (the export re-saved on Windows)
    at = text.find(HEADER_START)
    while at > 0 and text[at - 1] not in "\r\n":
        at = text.find(HEADER_START, at + 1)
    if at < 0:
        raise TraceFormatError(name, "not an Nsight Compute CSV export (no header row starting "
                                     "with \"ID\"; export with ncu --import R.ncu-rep --csv "
                                     "--page raw)")
    try:
        return list(csv.reader(io.StringIO(text[at:])))
    except csv.Error as exc:
        raise TraceFormatError(name, f"malformed CSV ({exc})") from None


def parse_raw_text(text: str, name: str) -> NcuProfile:
    """Parse a raw-page export; ``name`` labels errors. Raises ``TraceFormatError``."""
    rows = [r for r in _rows(text, name) if r]
    header = [h.strip() for h in rows[0]]
    if "Section Name" in header and "Metric Name" in header:
        raise TraceFormatError(name, "an Nsight Compute details-page export; stepscope reads the "
                                     "raw page (ncu --import R.ncu-rep --csv --page raw)")
    if "Kernel Name" not in header:
        raise TraceFormatError(name, "not an Nsight Compute raw-page export (no Kernel Name "
                                     "column)")
    units = [""] * len(header)
    body = rows[1:]
    if body and body[0] and not body[0][0].strip():  # the units row
        units = [u.strip() for u in body[0]] + [""] * max(0, len(header) - len(body[0]))
        body = body[1:]
    col = {h: i for i, h in enumerate(header)}
    # metric names are dotted identifiers; other columns (NVTX ranges with --nvtx) are not
    metric_cols = [i for i, h in enumerate(header) if h not in _IDENTITY and _METRIC.match(h)]
    scales = {i: base_unit(units[i]) if i < len(units) else (1.0, "") for i in metric_cols}
    metrics: dict[str, list[Any]] = {k: [] for k in (
        "id", "name", "pid", "device", "stream", "cc", "grid_x", "grid_y", "grid_z",
        "block_x", "block_y", "block_z", *COLUMNS)}
    values: dict[str, list[Any]] = {k: [] for k in ("id", "metric", "unit", "value", "text")}
    host = process = ""
    for n, row in enumerate(body, start=3):
        if len(row) != len(header):
            raise TraceFormatError(name, f"row {n} has {len(row)} fields, the header {len(header)}"
                                         " (the export is truncated or damaged)")
        lid = number(row[col["ID"]]) if "ID" in col else None
        if lid is None or lid != int(lid):
            raise TraceFormatError(name, f"row {n}: launch ID {row[col['ID']]!r} is not a number")
        kname = row[col["Kernel Name"]].strip()
        if not kname:
            raise TraceFormatError(name, f"row {n}: no kernel name")
        host = host or (row[col["Host Name"]] if "Host Name" in col else "")
        process = process or (row[col["Process Name"]] if "Process Name" in col else "")
        got: dict[str, float] = {}
        for i in metric_cols:
            raw = row[i]
            v = number(raw)
            factor, unit = scales[i]
            values["id"].append(int(lid))
            values["metric"].append(header[i])
            values["unit"].append(unit or None)
            if v is None:
                values["value"].append(None)
                values["text"].append(raw.strip() or None)
            else:
                got[header[i]] = v * factor
                values["value"].append(v * factor)
                values["text"].append(None)
        grid = dims(row[col["Grid Size"]]) if "Grid Size" in col else None
        block = dims(row[col["Block Size"]]) if "Block Size" in col else None
        metrics["id"].append(int(lid))
        metrics["name"].append(kname)
        for key, head in (("pid", "Process ID"), ("device", "Device"), ("stream", "Stream")):
            v = number(row[col[head]]) if head in col else None
            metrics[key].append(int(v) if v is not None else None)
        metrics["cc"].append(row[col["CC"]].strip() or None if "CC" in col else None)
        for axis, d in (("grid", grid), ("block", block)):
            for j, xyz in enumerate("xyz"):
                metrics[f"{axis}_{xyz}"].append(d[j] if d else None)
        for c, fn in COLUMNS.items():
            v = fn(got)
            metrics[c].append(None if v is None else round(v) if c in _INTS else v)
    if not metrics["id"]:
        raise TraceFormatError(name, "an Nsight Compute export with no profiled launches")
    return NcuProfile(metrics=metrics, values=values, launches=len(metrics["id"]), host=host,
                      process=process)


def read_raw_csv(path: Path) -> NcuProfile:
    """Read a raw-page export file (``TraceFormatError`` naming it when it is not one)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(str(path), f"cannot read ({exc.strerror or exc})") from None
    return parse_raw_text(data.decode("utf-8", errors="replace"), str(path))


def metric_names(profile: NcuProfile) -> Sequence[str]:
    return sorted(set(profile.values["metric"]))
