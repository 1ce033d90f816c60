"""Counter series for the HTML report: allocator memory and sampled metrics, decimated.

Memory (``memory_events``): per rank and device, ``total_allocated`` and ``total_reserved``
after each allocator event, a step function of time. Samples (``samples``, long format):
one series per rank, device and metric. Each series keeps at most :data:`COUNTER_POINTS`
points: the run is cut into that many equal time buckets and each non-empty bucket keeps its
first timestamp with the bucket **maximum** (memory, so peaks survive) or **mean** (samples).
Times are µs relative to the timeline's ``t0``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.store.run import Run

I64 = npt.NDArray[np.int64]
COUNTER_POINTS = 2000


def _i64(t: pa.Table, name: str, fill: int = -1) -> I64:
    return np.asarray(pc.fill_null(t.column(name), fill).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def decimate(ts: I64, values: list[npt.NDArray[np.float64]], points: int, how: str
             ) -> tuple[I64, list[npt.NDArray[np.float64]]]:
    """At most ``points`` samples: per time bucket the maximum (``how="max"``) or the mean."""
    if ts.size <= points:
        return ts, values
    edges = np.linspace(ts[0], ts[-1] + 1, points + 1)
    b = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, points - 1)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    out = []
    for v in values:
        if how == "max":
            out.append(np.maximum.reduceat(v, starts))
        else:
            out.append(np.add.reduceat(v, starts) / np.diff(np.r_[starts, v.size]))
    return ts[starts], out


def build_counters(run: Run, t0: int, points: int = COUNTER_POINTS) -> list[dict[str, Any]]:
    """Allocator memory (allocated, reserved) per device and sampled metrics, per rank."""
    out: list[dict[str, Any]] = []
    caps = {(int(d["rank"]), int(d["device"])): d.get("total_memory")
            for d in run.table("devices").to_pylist()}
    mem = run.table("memory_events")
    if mem.num_rows:
        mem = mem.sort_by([("rank", "ascending"), ("ts_ns", "ascending")])
        dtype = pc.fill_null(mem.column("device_type").cast(pa.string()), "gpu").to_pylist()
        keys = list(zip(_i64(mem, "rank").tolist(), dtype, _i64(mem, "device").tolist()))
        for key in sorted(set(keys)):
            sel = pa.array([k == key for k in keys])
            sub = mem.filter(sel)
            ts = _i64(sub, "ts_ns", 0) - t0
            vals = [_i64(sub, c, 0).astype(np.float64) for c in ("total_allocated", "total_reserved")]
            peaks = [float(v.max()) for v in vals]
            ts, vals = decimate(ts, vals, points, "max")
            r, dev_type, dev = key
            label = f"GPU {dev} memory" if dev_type == "gpu" else "host memory"
            out.append({"kind": "memory", "rank": r, "device": dev, "device_type": dev_type,
                        "label": label, "unit": "B", "t_us": _round(ts / 1e3),
                        "series": {"allocated": _round(vals[0]), "reserved": _round(vals[1])},
                        "peak": {"allocated": peaks[0], "reserved": peaks[1]},
                        "capacity": caps.get((r, dev)) if dev_type == "gpu" else None,
                        "events": sub.num_rows})
    smp = run.table("samples")
    if smp.num_rows:
        smp = smp.sort_by([("rank", "ascending"), ("ts_ns", "ascending")])
        metric = smp.column("metric").cast(pa.string()).to_pylist()
        unit = pc.fill_null(smp.column("unit").cast(pa.string()), "").to_pylist()
        keys = list(zip(_i64(smp, "rank").tolist(), _i64(smp, "device").tolist(), metric))
        for key in sorted(set(keys)):
            mask = [k == key for k in keys]
            sub = smp.filter(pa.array(mask))
            ts = _i64(sub, "ts_ns", 0) - t0
            ts, vals = decimate(ts, [sub.column("value").to_numpy().astype(np.float64)], points,
                                "mean")
            r, dev, m = key
            out.append({"kind": "sample", "rank": r, "device": dev if dev >= 0 else None,
                        "label": (f"GPU {dev} · " if dev >= 0 else "") + m, "metric": m,
                        "unit": unit[mask.index(True)], "t_us": _round(ts / 1e3),
                        "series": {m: _round(vals[0])}, "events": sub.num_rows})
    return out


def _round(a: npt.NDArray[Any]) -> list[float]:
    return [round(float(x), 3) for x in a]
