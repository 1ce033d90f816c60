"""GPU activity as interval sets: what was running on each device, when.

``busy`` of a device = union of its kernel, memcpy and memset intervals (any
stream). ``gpu_busy_ns`` of a run = that union's length summed over devices.
Compute vs communication kernels are told apart by name (NCCL/RCCL kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import stepscope.analysis.intervals as iv
from stepscope.analysis.graph import RunGraph, StepGraph
from stepscope.analysis.intervals import I64
from stepscope.call_kinds import COMM_KERNEL

COMM_NAME = COMM_KERNEL  # the one test of a communication kernel (call_kinds)


@dataclass(frozen=True)
class IntervalSet:
    """Disjoint, sorted half-open intervals (ns)."""

    starts: I64
    ends: I64

    @staticmethod
    def of(starts: object, ends: object) -> IntervalSet:
        s, e = iv.union(starts, ends)
        return IntervalSet(s, e)

    @staticmethod
    def empty() -> IntervalSet:
        z = np.zeros(0, dtype=np.int64)
        return IntervalSet(z, z.copy())

    @property
    def total_ns(self) -> int:
        return int((self.ends - self.starts).sum())

    def __or__(self, other: IntervalSet) -> IntervalSet:
        return IntervalSet.of(np.concatenate((self.starts, other.starts)),
                              np.concatenate((self.ends, other.ends)))

    def __sub__(self, other: IntervalSet) -> IntervalSet:
        s, e = iv.subtract(self.starts, self.ends, other.starts, other.ends)
        return IntervalSet(s, e)

    def __and__(self, other: IntervalSet) -> IntervalSet:
        s, e = iv.intersect(self.starts, self.ends, other.starts, other.ends)
        return IntervalSet(s, e)

    def within(self, win_start: I64, win_end: I64) -> I64:
        """Covered length inside each window."""
        return iv.overlap_with_windows(self.starts, self.ends, win_start, win_end)


@dataclass(frozen=True)
class DeviceActivity:
    device: int
    compute: IntervalSet  # non-communication kernels
    communication: IntervalSet  # NCCL/RCCL kernels
    copies: IntervalSet  # memcpy + memset

    @property
    def kernels(self) -> IntervalSet:
        return self.compute | self.communication

    @property
    def busy(self) -> IntervalSet:
        return self.kernels | self.copies


def is_communication(names: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Boolean mask of communication kernels, evaluated once per distinct name."""
    if isinstance(names, pa.ChunkedArray):
        names = names.combine_chunks()
    if not pa.types.is_dictionary(names.type):
        names = pc.dictionary_encode(names)
    dictionary = names.dictionary.to_pylist()
    flags = np.array([bool(COMM_NAME.search(n or "")) for n in dictionary] + [False], dtype=bool)
    idx = names.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
    return np.asarray(flags[idx], dtype=bool)


def _bounds(t: pa.Table) -> tuple[I64, I64]:
    s = t.column("ts_ns").to_numpy()
    return s, s + t.column("dur_ns").to_numpy()


def gpu_activity(g: StepGraph) -> dict[int, DeviceActivity]:
    """Interval sets per device of one rank (devices with no activity are absent); computed
    once per graph."""
    return g.memo("gpu_activity", lambda: _gpu_activity(g))


def _gpu_activity(g: StepGraph) -> dict[int, DeviceActivity]:
    k = g.table("kernels")
    copies = pa.concat_tables([g.table("memcpy").select(["ts_ns", "dur_ns", "device"]),
                               g.table("memset").select(["ts_ns", "dur_ns", "device"])])
    devs: set[int] = set()
    for t in (k, copies):
        if t.num_rows:
            devs.update(int(d) for d in pc.unique(t.column("device").fill_null(0)).to_pylist())
    out: dict[int, DeviceActivity] = {}
    kd = k.column("device").fill_null(0).to_numpy() if k.num_rows else np.zeros(0, np.int32)
    comm = is_communication(k.column("name")) if k.num_rows else np.zeros(0, bool)
    ks, ke = _bounds(k)
    cd = copies.column("device").fill_null(0).to_numpy() if copies.num_rows else np.zeros(0, np.int32)
    cs, ce = _bounds(copies)
    for d in sorted(devs):
        m = kd == d
        out[d] = DeviceActivity(
            device=d,
            compute=IntervalSet.of(ks[m & ~comm], ke[m & ~comm]),
            communication=IntervalSet.of(ks[m & comm], ke[m & comm]),
            copies=IntervalSet.of(cs[cd == d], ce[cd == d]),
        )
    return out


def rank_union(acts: dict[int, DeviceActivity]) -> DeviceActivity:
    """All devices of a rank merged (what the step breakdown looks at)."""
    e = IntervalSet.empty()
    comp, comm, cop = e, e, e
    for a in acts.values():
        comp, comm, cop = comp | a.compute, comm | a.communication, cop | a.copies
    return DeviceActivity(device=-1, compute=comp, communication=comm, copies=cop)


def gpu_busy_ns(graph: RunGraph) -> int:
    """Union of all GPU activity over the whole run, summed over devices (and ranks)."""
    return sum(a.busy.total_ns for r in graph.ranks for a in gpu_activity(graph.rank(r)).values())
