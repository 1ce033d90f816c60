"""Can the steps timed after the window time the program's steps at all? Checked at merge, when
the window's GPU records are decoded.

The run's cost figure compares the window's median step with the median of the steps right after
it, timed on the host. A program that waits for the GPU only every few steps (a loss read every N
steps, no other sync) lets its host run ahead of the GPU: most of its host-side steps then last
as long as it takes to queue them, not to run them, and the medians no longer time the steps.
Measured on an H100 (docs/benchmarks.md, 2026-11-25): a GPT step reading its loss every 10th step
took 24.2 ms of GPU work per step in the window while the 10 steps after it read 18.9 ms on the
host, which made the run's figure x1.39 where side-by-side blocks measured 1.08-1.34.

So the GPU's busy time per window step (union of kernels, copies and memsets per device, inside
the window, the busiest device) is kept with the figures, and a median after-window step shorter
than ``AHEAD_LIMIT`` times it marks the figure unmeasurable. Without CUPTI a kernel runs as fast or
faster, so steps that are truly timed cannot be much shorter than that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

GPU_TABLES = ("kernels", "memcpy", "memset")
AHEAD_LIMIT = 0.95
SLICE_ROWS = 1 << 20

I64 = npt.NDArray[np.int64]


def _merged(starts: I64, ends: I64) -> tuple[I64, I64]:
    """Disjoint sorted intervals covering the given ones (empty and inverted ones dropped)."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    first = np.ones(s.size, dtype=bool)
    first[1:] = s[1:] > e[:-1]  # starts past every earlier end: a new interval
    heads = np.flatnonzero(first)
    lasts = np.append(heads[1:] - 1, s.size - 1)
    return s[heads], e[lasts]


class GpuBusy:
    """The GPU's busy time inside ``[lo, hi)``, device by device, fed one table at a time (each
    reduced to its merged intervals at once, so a table's rows are not kept)."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self._parts: dict[int, list[tuple[I64, I64]]] = {}

    @staticmethod
    def for_window(settings: Mapping[str, Any]) -> GpuBusy | None:
        """From a partition's settings; None when the window did not both open and close."""
        lo, hi = settings.get("window_start_ns"), settings.get("window_end_ns")
        if not isinstance(lo, int) or not isinstance(hi, int) or hi <= lo:
            return None
        return GpuBusy(lo, hi)

    def add(self, table: pa.Table) -> None:
        names = set(table.column_names)
        if table.num_rows == 0 or not {"ts_ns", "dur_ns"} <= names:
            return
        # a slice at a time: a 10-minute window's kernel table has tens of millions of rows
        for batch in table.select([c for c in ("ts_ns", "dur_ns", "device") if c in names]
                                  ).to_batches(max_chunksize=SLICE_ROWS):
            cols = dict(zip(batch.schema.names, batch.columns))
            ts = np.asarray(cols["ts_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
            end = ts + np.asarray(cols["dur_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
            ts, end = np.clip(ts, self.lo, self.hi), np.clip(end, self.lo, self.hi)
            dev = (np.asarray(cols["device"].fill_null(-1).to_numpy(zero_copy_only=False),
                              dtype=np.int64) if "device" in cols else np.zeros(len(ts), np.int64))
            for d in np.unique(dev):
                pick = dev == d
                self._parts.setdefault(int(d), []).append(_merged(ts[pick], end[pick]))

    def busiest_ns(self) -> int:
        """Busy nanoseconds of the busiest device (0 with nothing added)."""
        best = 0
        for parts in self._parts.values():
            s, e = _merged(np.concatenate([p[0] for p in parts]),
                           np.concatenate([p[1] for p in parts]))
            best = max(best, int((e - s).sum()))
        return best


def with_gpu_pace(overhead: Mapping[str, Any], busy_ns: int) -> dict[str, Any]:
    """``overhead`` (a rank's figures, docs/record.md) with the GPU's busy ms per window step, and
    marked unmeasurable when the steps after the window were shorter than ``AHEAD_LIMIT`` times
    that (module doc). Unchanged without window steps or GPU records."""
    out = dict(overhead)
    steps = out.get("steps_in_window")
    if not isinstance(steps, int) or steps <= 0 or busy_ns <= 0:
        return out
    per_step_ms = busy_ns / steps / 1e6
    out["gpu_busy_ms_per_step_in_window"] = round(per_step_ms, 6)
    after = out.get("median_step_ms_after_window")
    if (isinstance(after, (int, float)) and after < AHEAD_LIMIT * per_step_ms
            and not out.get("step_time_ratio_after_unmeasurable")):
        out["step_time_ratio_after_unmeasurable"] = (
            f"the steps after the window ({after:.3g} ms on the host) were shorter than the GPU's "
            f"work per step in it ({per_step_ms:.3g} ms): the host ran ahead of the GPU (the "
            "program waits for it only every few steps), so host step times do not time the steps")
    return out
