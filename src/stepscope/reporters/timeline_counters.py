"""Counter series for the HTML report: allocator memory and sampled metrics, decimated and folded.

Memory (``memory_events``): per rank and device, ``total_allocated`` and ``total_reserved``
after each allocator event, a step function of time. Samples (``samples``, long format):
one series per rank, device and metric. Each series keeps at most :data:`COUNTER_POINTS`
points: the run is cut into that many equal time buckets and each non-empty bucket keeps its
first timestamp with the bucket **maximum** (memory, so peaks survive) or **mean** (samples).
Times are µs relative to the timeline's ``t0``.

Sampled metrics are folded, per rank, into a few groups (:data:`GROUPS`): CPU (all cores),
process CPU, memory, each GPU (NVML and GPM), disk and network, other. A group of two metrics or
more gets a ``summary`` counter (``role: "summary"``, ``kind: "summary"``, ``members``: the
indices of its metrics, each ``role: "member"`` with ``parent``) whose series are computed from
the raw samples before decimation: CPU ``mean`` (``cpu.util_pct``, else the mean of the cores) and
``max core``; process ``process`` and ``DataLoader workers`` (% of one core); memory ``RSS`` and
``GPU d used``; GPU ``util``, ``memory util`` and, with GPM, ``SM active`` and ``tensor active``;
``disk`` (read + write) and ``network`` (received + sent) in B/s. Where a summary combines
metrics sampled at different times, each one holds its last value until its next sample.
A group with one metric shows it alone (``role: "single"``), as do allocator memory counters.

The series are read from the run by :mod:`stepscope.reporters.timeline_build` (``CounterData``);
this module only shapes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
COUNTER_POINTS = 2000
_CORE = re.compile(r"^cpu\.core(\d+)\.util_pct$")
_UNITS = {"cpu": "%", "process": "%", "memory": "B", "gpu": "%", "io": "B/s"}  # of the summaries
# group key, label; metrics are assigned by _group_of
GROUPS = (("cpu", "CPU (all cores)"), ("process", "Process CPU"), ("memory", "Memory"),
          ("gpu", "GPU {d} (NVML)"), ("io", "Disk and network"), ("other", "Other samples"))
_ORDER = ("cpu.util_pct", "process.cpu_pct", "dataloader.workers_cpu_pct", "dataloader.workers",
          "process.rss_bytes", "gpu.memory_used_bytes", "gpu.util_pct", "gpu.mem_util_pct",
          "gpu.gpm.sm_active_pct", "gpu.gpm.sm_occupancy_pct", "gpu.gpm.tensor_active_pct",
          "gpu.gpm.dram_bw_pct", "gpu.sm_clock_mhz", "gpu.power_w", "gpu.pcie_tx_bytes_per_s",
          "gpu.pcie_rx_bytes_per_s", "gpu.nvlink_tx_bytes_per_s", "gpu.nvlink_rx_bytes_per_s",
          "gpu.throttle_reasons", "disk.read_bytes_per_s", "disk.write_bytes_per_s",
          "net.recv_bytes_per_s", "net.sent_bytes_per_s")  # members' order in their group


@dataclass(frozen=True)
class Series:
    """One sampled metric of one rank (and device), times in ns (since the epoch as read,
    relative to ``t0`` once :func:`build_counters` has them)."""

    rank: int
    device: int  # -1: not a GPU metric
    metric: str
    unit: str
    ts: I64
    values: F64


def decimate(ts: I64, values: list[F64], points: int, how: str) -> tuple[I64, list[F64]]:
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


@dataclass(frozen=True)
class MemorySeries:
    """One device's allocator totals after each of its events, times in ns since the epoch."""

    rank: int
    device_type: str  # "gpu" or a host kind
    device: int
    ts: I64
    allocated: F64
    reserved: F64
    capacity: int | None  # the GPU's total memory, where the devices table has it


@dataclass(frozen=True)
class CounterData:
    """What the counters are made of, as read from the run (:mod:`.timeline_build`)."""

    memory: tuple[MemorySeries, ...]
    samples: tuple[Series, ...]  # times in ns since the epoch


def _memory(mems: tuple[MemorySeries, ...], t0: int, points: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in mems:
        ts = m.ts - t0
        vals = [m.allocated, m.reserved]
        peaks = [float(v.max()) for v in vals]
        ts, vals = decimate(ts, vals, points, "max")
        r, dev_type, dev = m.rank, m.device_type, m.device
        label = f"GPU {dev} memory" if dev_type == "gpu" else "host memory"
        out.append({"kind": "memory", "role": "single", "rank": r, "device": dev,
                    "device_type": dev_type, "label": label, "unit": "B",
                    "t_us": _round(ts / 1e3),
                    "series": {"allocated": _round(vals[0]), "reserved": _round(vals[1])},
                    "peak": {"allocated": peaks[0], "reserved": peaks[1]},
                    "capacity": m.capacity if dev_type == "gpu" else None,
                    "events": int(m.ts.size)})
    return out


def _group_of(s: Series) -> str:
    m = s.metric
    if m == "cpu.util_pct" or _CORE.match(m):
        return "cpu"
    if m in ("process.rss_bytes", "gpu.memory_used_bytes"):
        return "memory"
    if m.startswith(("process.", "dataloader.")):
        return "process"
    if m.startswith("gpu."):
        return f"gpu{s.device}"
    if m.startswith(("disk.", "net.")):
        return "io"
    return "other"


def _align(parts: list[Series]) -> tuple[I64, list[F64]]:
    """Series on the union of their times, each holding its last value (NaN before its first)."""
    ts = np.unique(np.concatenate([s.ts for s in parts]))
    out = []
    for s in parts:
        i = np.searchsorted(s.ts, ts, side="right") - 1
        out.append(np.where(i >= 0, s.values[np.maximum(i, 0)], np.nan))
    return ts, out


def _combine(parts: list[Series], how: Callable[[npt.NDArray[np.float64]], F64]
             ) -> tuple[I64, F64]:
    ts, vals = _align(parts)
    return ts, how(np.vstack(vals))


def _summary(key: str, members: list[Series]) -> dict[str, tuple[I64, F64, str]]:
    """Summary series of a group: name -> (ns, values, decimation)."""
    by = {s.metric: s for s in members}
    out: dict[str, tuple[I64, F64, str]] = {}

    def one(name: str, metric: str) -> None:
        if metric in by:
            out[name] = (by[metric].ts, by[metric].values, "mean")

    def nan(f: Callable[..., F64]) -> Callable[[npt.NDArray[np.float64]], F64]:
        return lambda a: np.asarray(f(a, axis=0), dtype=np.float64)

    if key == "cpu":
        cores = [s for s in members if _CORE.match(s.metric)]
        if "cpu.util_pct" in by:
            one("mean", "cpu.util_pct")
        elif cores:
            out["mean"] = (*_combine(cores, nan(np.nanmean)), "mean")
        if cores:
            out["max core"] = (*_combine(cores, nan(np.nanmax)), "max")
    elif key == "process":
        one("process", "process.cpu_pct")
        one("DataLoader workers", "dataloader.workers_cpu_pct")
    elif key == "memory":
        one("RSS", "process.rss_bytes")
        for s in members:
            if s.metric == "gpu.memory_used_bytes":
                out[f"GPU {s.device} used"] = (s.ts, s.values, "mean")
    elif key.startswith("gpu"):
        for name, metric in (("util", "gpu.util_pct"), ("memory util", "gpu.mem_util_pct"),
                             ("SM active", "gpu.gpm.sm_active_pct"),
                             ("tensor active", "gpu.gpm.tensor_active_pct")):
            one(name, metric)
    elif key == "io":
        for name, pre in (("disk", "disk."), ("network", "net.")):
            sel = [s for s in members if s.metric.startswith(pre)]
            if sel:
                out[name] = (*_combine(sel, nan(np.nansum)), "mean")
    return out


def _member_order(s: Series) -> tuple[int, int, int, str]:
    """Known metrics in :data:`_ORDER`, then cores by number, then the rest by name."""
    core = _CORE.match(s.metric)
    if core:
        return (1, int(core.group(1)), s.device, s.metric)
    if s.metric in _ORDER:
        return (0, _ORDER.index(s.metric), s.device, s.metric)
    return (2, 0, s.device, s.metric)


def _groups(series: list[Series]) -> list[tuple[str, str, list[Series]]]:
    """(key, label, members) per rank, in :data:`GROUPS` order."""
    found: dict[tuple[int, str], list[Series]] = {}
    for s in series:
        found.setdefault((s.rank, _group_of(s)), []).append(s)
    rank_of = {k: i for i, (k, _) in enumerate(GROUPS)}
    labels = dict(GROUPS)

    def order(k: tuple[int, str]) -> tuple[int, int, int]:
        r, g = k
        base = "gpu" if g.startswith("gpu") and g not in labels else g
        return (r, rank_of[base], int(g[3:]) if base == "gpu" else 0)

    out = []
    for k in sorted(found, key=order):
        g = k[1]
        label = labels[g] if g in labels else labels["gpu"].format(d=g[3:])
        out.append((g, label, sorted(found[k], key=_member_order)))
    return out


def _sample_counter(s: Series, points: int) -> dict[str, Any]:
    ts, vals = decimate(s.ts, [s.values], points, "mean")
    return {"kind": "sample", "role": "single", "rank": s.rank,
            "device": s.device if s.device >= 0 else None,
            "label": (f"GPU {s.device} · " if s.device >= 0 else "") + s.metric, "metric": s.metric,
            "unit": s.unit, "t_us": _round(ts / 1e3), "series": {s.metric: _round(vals[0])},
            "events": int(s.ts.size)}


def build_counters(data: CounterData, t0: int, points: int = COUNTER_POINTS
                   ) -> list[dict[str, Any]]:
    """Allocator memory per device, then each rank's sample groups (summary, then members)."""
    out = _memory(data.memory, t0, points)
    for key, label, whole in _groups([replace(s, ts=s.ts - t0) for s in data.samples]):
        if len(whole) == 1:
            out.append(_sample_counter(whole[0], points))
            continue
        parts = _summary(key, whole)
        shown = [s for s in whole if not (  # cpu.util_pct is the summary's mean
            s.metric == "cpu.util_pct" and any(_CORE.match(x.metric) for x in whole))]
        ts = (np.unique(np.concatenate([p[0] for p in parts.values()])) if parts
              else np.zeros(0, dtype=np.int64))
        ts_d = decimate(ts, [], points, "mean")[0]
        series = {}
        for name, (t, v, how) in parts.items():  # on the common times, each its own bucket rule
            i = np.searchsorted(t, ts, side="right") - 1
            full = np.where(i >= 0, v[np.maximum(i, 0)], np.nan)
            series[name] = _round(decimate(ts, [full], points, how)[1][0])
        head = len(out)
        unit = _UNITS.get("gpu" if key.startswith("gpu") else key, "")
        out.append({"kind": "summary", "role": "summary", "group": key, "rank": whole[0].rank,
                    "device": None, "label": label, "unit": unit,
                    "t_us": _round(ts_d / 1e3), "series": series,
                    "events": int(sum(s.ts.size for s in whole)),
                    "members": list(range(head + 1, head + 1 + len(shown)))})
        for s in shown:
            c = _sample_counter(s, points)
            c.update(role="member", parent=head, group=key)
            out.append(c)
    return out


def _round(a: npt.NDArray[Any]) -> list[float | None]:
    return [None if np.isnan(x) else round(float(x), 3) for x in a]
