"""Row batches of a capture: clip to the window, concatenate drained chunks, count rows; and the
CPU time of stepscope's own threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TIMED_TABLES = ("samples", "stacks", "input_waits", "steps")
Tables = dict[str, dict[str, list[Any]]]


def clip(tables: Mapping[str, Mapping[str, list[Any]]], lo: int, hi: int | None) -> Tables:
    """Keep rows whose time (the midpoint for ranges) lies in ``[lo, hi]``."""
    out: Tables = {}
    for name, cols in tables.items():
        ts = cols.get("ts_ns")
        if name not in TIMED_TABLES or ts is None:
            out[name] = {k: list(v) for k, v in cols.items()}
            continue
        durs = cols.get("dur_ns") or [0] * len(ts)
        keep = [i for i, (t, d) in enumerate(zip(ts, durs))
                if t is not None and lo <= t + (d or 0) // 2 and (hi is None or t + (d or 0) // 2 <= hi)]
        out[name] = {k: [v[i] for i in keep] for k, v in cols.items()}
    return out


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


def threads_cpu_s(match: str = "stepscope") -> float | None:
    """CPU time (user+system) of this process's threads whose name contains ``match`` (Linux)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return None
    total, found = 0, False
    for t in threading.enumerate():
        if match not in t.name.lower() or t.native_id is None:
            continue
        try:
            stat = Path(f"/proc/self/task/{t.native_id}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
        found = True
    return total / tick if found else None
