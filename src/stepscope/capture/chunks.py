"""Row batches of a capture: clip to the window, concatenate drained chunks, count rows; and the
CPU time of stepscope's own threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

TIMED_TABLES = ("samples", "stacks", "input_waits", "steps")
Tables = dict[str, dict[str, list[Any]]]


def clip(tables: Mapping[str, Any], lo: int, hi: int | None) -> dict[str, Any]:
    """Keep the rows whose time (the midpoint for ranges) lies in ``[lo, hi]``, in every table
    with a ``ts_ns`` column: host tables (column lists; a row without a time is dropped, a
    missing duration counts as 0) and the GPU backend's (numpy or list columns, or Arrow tables:
    drops what the warm-up step before the window recorded). Tables without times (threads,
    processes) pass whole."""
    out: dict[str, Any] = {}
    for name, cols in tables.items():
        keep = _in_window(cols, lo, hi)
        if keep is None or keep.all():
            out[name] = cols
        elif isinstance(cols, pa.Table):
            out[name] = cols.filter(pa.array(keep))
        else:
            idx = np.flatnonzero(keep)
            out[name] = {k: (v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx.tolist()])
                         for k, v in cols.items()}
    return out


def _in_window(cols: Any, lo: int, hi: int | None) -> npt.NDArray[np.bool_] | None:
    """Which rows of one table fall in the window; None for a table without times."""
    if isinstance(cols, pa.Table):
        if "ts_ns" not in cols.column_names or not cols.num_rows:
            return None
        ts = np.asarray(cols.column("ts_ns").fill_null(0), dtype=np.int64)
        dur = (np.asarray(cols.column("dur_ns").fill_null(0), dtype=np.int64)
               if "dur_ns" in cols.column_names else np.zeros_like(ts))
        valid = np.ones(len(ts), dtype=bool)
    else:
        raw = cols.get("ts_ns")
        if raw is None or not len(raw):
            return None
        n = len(raw)
        if isinstance(raw, np.ndarray):
            ts, valid = raw.astype(np.int64), np.ones(n, dtype=bool)
        else:
            valid = np.fromiter((t is not None for t in raw), bool, n)
            ts = np.fromiter((t or 0 for t in raw), np.int64, n)
        d = cols.get("dur_ns")
        dur = (np.zeros(n, dtype=np.int64) if d is None else d.astype(np.int64)
               if isinstance(d, np.ndarray) else np.fromiter((x or 0 for x in d), np.int64, n))
    mid = ts + dur // 2
    keep: npt.NDArray[np.bool_] = valid & (mid >= lo)
    if hi is not None:
        keep &= mid <= hi
    return keep


def concat(chunks: list[Tables]) -> Tables:
    """Concatenate drained column dicts table by table (missing columns become None)."""
    merged: Tables = {}
    for c in chunks:
        for name, cols in c.items():
            dest = merged.setdefault(name, {})
            n_before = len(next(iter(dest.values()), []))
            for k, v in cols.items():
                dest.setdefault(k, [None] * n_before).extend(v)
            n_after = n_before + len(next(iter(cols.values()), []))
            for v in dest.values():
                v.extend([None] * (n_after - len(v)))
    return merged


def count_rows(tables: Mapping[str, Any]) -> int:
    return sum(int(c.num_rows) if hasattr(c, "num_rows") else len(next(iter(c.values()), []))
               for c in tables.values())


def threads_cpu_s(match: str = "stepscope") -> dict[int, float] | None:
    """CPU time (user+system, seconds) of each of this process's threads whose name contains
    ``match``, by native thread id (Linux; None elsewhere). Compare two readings with
    :func:`cpu_since`, not their totals: threads start and end between readings."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return None
    times: dict[int, float] = {}
    for t in threading.enumerate():
        if match not in t.name.lower() or t.native_id is None:
            continue
        try:
            stat = Path(f"/proc/self/task/{t.native_id}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        times[t.native_id] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (14, 15)
    return times


def cpu_since(before: Mapping[int, float] | None, after: Mapping[int, float] | None
              ) -> float | None:
    """CPU seconds the threads of ``after`` used since ``before`` (two :func:`threads_cpu_s`
    readings): a thread started in between counts from zero; one that ended in between is no
    longer readable and counts nothing (the figure is then a lower bound, never negative, as a
    difference of the two totals could be). None when either reading is unavailable or empty."""
    if before is None or after is None or not (before or after):
        return None
    return sum(max(0.0, cpu - before.get(tid, 0.0)) for tid, cpu in after.items())
