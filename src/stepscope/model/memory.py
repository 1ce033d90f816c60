"""Device memory: the peak per device against its capacity, and the GPU-idle time spent in
CPU-computing framework ops (what a larger batch would not amortise): what the memory rules
(``memory_pressure``, ``memory_underused``) measure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis import RankAnalysis
from stepscope.analysis.busy import IntervalSet
from stepscope.analysis.graph import StepGraph
from stepscope.analysis.launches import LAUNCH_KINDS, bounds, column_i64, str_in
from stepscope.analysis.results import FACT
from stepscope.model.transfers import Windows, activity, load_api
from stepscope.schema_enums import CpuOpKind, DeviceType

MEMORY_USED_METRICS = ("gpu.memory_used_bytes", "gpu.memory_used", "gpu.mem_used")  # bytes (NVML samples: the first)
MIN_CPU_OP_NS = 50_000


@dataclass(frozen=True)
class Peak:
    device: int
    peak: int  # bytes
    allocated: int  # peak total_allocated (0 when unknown)
    capacity: int
    source: str  # "memory_events" | "samples"

    @property
    def share(self) -> float:
        return self.peak / self.capacity if self.capacity else 0.0


def _capacities(ra: RankAnalysis) -> dict[int, int]:
    return {int(d["device"]): int(d["total_memory"]) for d in ra.devices
            if d.get("total_memory")}


def peaks(g: StepGraph, ra: RankAnalysis) -> list[Peak]:
    """Peak device memory per device with a known capacity (memory events, else samples);
    once per rank graph (a per-rank fact, ``advisor.rank_facts``)."""
    return g.memo((FACT, "memory_peaks"), lambda: _peaks(g, ra))


def _peaks(g: StepGraph, ra: RankAnalysis) -> list[Peak]:
    cap = _capacities(ra)
    out: list[Peak] = []
    me = g.table("memory_events")
    if me.num_rows:
        gpu = me.filter(pc.fill_null(pc.equal(me.column("device_type").cast(pa.string()),
                                              DeviceType.GPU.value), False))
        for dev in sorted(cap):
            t = gpu.filter(pc.fill_null(pc.equal(gpu.column("device"), dev), False))
            if t.num_rows == 0:
                continue
            res = pc.max(t.column("total_reserved")).as_py()
            alloc = pc.max(t.column("total_allocated")).as_py()
            peak = res if res is not None else alloc
            if peak is not None:
                out.append(Peak(dev, int(peak), int(alloc or 0), cap[dev], "memory_events"))
    if out:
        return out
    sm = g.table("samples")
    if sm.num_rows:
        m = str_in(sm, "metric", MEMORY_USED_METRICS)
        if m.any():
            t = sm.filter(pa.array(m))
            devs = t.column("device").fill_null(0).to_numpy()
            vals = t.column("value").to_numpy()
            for dev in sorted(cap):
                dm = devs == dev
                if dm.any():
                    out.append(Peak(dev, int(vals[dm].max()), 0, cap[dev], "samples"))
    return out


def has_memory_data(g: StepGraph) -> bool:
    """Whether the rank has memory events or GPU memory samples; once per rank graph (a
    per-rank fact, ``advisor.rank_facts``)."""
    return g.memo((FACT, "has_memory_data"), lambda: _has_memory_data(g))


def _has_memory_data(g: StepGraph) -> bool:
    me = g.table("memory_events")
    if me.num_rows:
        return True
    sm = g.table("samples")
    return bool(sm.num_rows and str_in(sm, "metric", MEMORY_USED_METRICS).any())


def cpu_compute_ns(g: StepGraph, win: Windows) -> float:
    """Mean per step of the GPU-idle time inside framework ops of >= 50 us that issue no
    launch on their thread (CPU computation that scales with the batch)."""
    ops = g.table("cpu_ops")
    if ops.num_rows == 0 or win.n == 0:
        return 0.0
    s, e = bounds(ops)
    fw = str_in(ops, "kind", (CpuOpKind.FRAMEWORK.value,)) & (e - s >= MIN_CPU_OP_NS)
    if not fw.any():
        return 0.0
    api = load_api(g)
    lm = api.kind_is(*LAUNCH_KINDS)
    tid = column_i64(ops, "tid")
    launches = np.zeros(s.size, dtype=np.int64)
    for t in np.unique(tid[fw]).tolist():
        ls = np.sort(api.s[lm & (api.tid == t)])
        m = fw & (tid == t)
        launches[m] = np.searchsorted(ls, e[m]) - np.searchsorted(ls, s[m])
    cpu = fw & (launches == 0)
    if not cpu.any():
        return 0.0
    idle = IntervalSet.of(s[cpu], e[cpu]) - activity(g).busy
    return float(np.mean(idle.within(win.starts, win.ends)))
