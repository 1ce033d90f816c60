"""The ``devices`` table's one home: a GPU's properties, from whichever source describes it.

Sources describe GPUs in their own terms: the CUDA driver during capture
(``capture.cuda_driver``), Kineto's ``deviceProperties`` in a torch.profiler trace
(``importers.kineto``), later Nsight Systems and XSpace. Each turns its description into
``DeviceProperties``; ``device_row`` makes the table row, and ``choose`` picks the rows of the
GPUs a rank used when two sources describe them (the driver's before the trace's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa

Columns = dict[str, list[Any]]
RECORD_TABLES = ("kernels", "memcpy", "memset", "sync")  # GPU records with a ``device`` column


@dataclass(frozen=True)
class DeviceProperties:
    """One GPU as a source describes it (None: the source did not say)."""

    device: int  # the ordinal in the process (after CUDA_VISIBLE_DEVICES)
    name: str | None = None
    compute_major: int | None = None
    compute_minor: int | None = None
    sm_count: int | None = None
    warp_size: int | None = None
    max_threads_per_block: int | None = None
    max_threads_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    regs_per_block: int | None = None
    regs_per_sm: int | None = None
    smem_per_block: int | None = None
    smem_per_block_optin: int | None = None
    smem_per_sm: int | None = None
    total_memory: int | None = None
    clock_khz: int | None = None
    memory_clock_khz: int | None = None
    bus_width_bits: int | None = None
    l2_bytes: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None

    @property
    def memory_bandwidth_gbs(self) -> float | None:
        return peak_bandwidth_gbs(self.memory_clock_khz, self.bus_width_bits)


def peak_bandwidth_gbs(memory_clock_khz: int | None, bus_width_bits: int | None) -> float | None:
    """Peak DRAM bandwidth in GB/s (1e9 bytes): 2 transfers per memory clock (double data rate)
    x clock x bus width / 8, as the CUDA C++ Best Practices Guide computes "theoretical
    bandwidth". CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE is the clock that formula takes (H100 SXM
    80GB HBM3: 2619 MHz x 5120 bits -> 3352 GB/s, the 3.35 TB/s of its datasheet)."""
    if not memory_clock_khz or not bus_width_bits:
        return None
    return 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8 / 1e9


_PROPS = tuple(f.name for f in fields(DeviceProperties))


def device_row(p: DeviceProperties, vendor: str = "nvidia") -> dict[str, Any]:
    """A ``devices`` row (schema columns; ``rank`` is the writer's)."""
    out = {name: getattr(p, name) for name in _PROPS}
    out["vendor"] = vendor
    out["memory_bandwidth_gbs"] = p.memory_bandwidth_gbs
    return out


def device_columns(rows: Sequence[Mapping[str, Any]]) -> Columns | None:
    """Rows -> the ``devices`` columns (None for no rows)."""
    if not rows:
        return None
    names = list(dict.fromkeys(k for r in rows for k in r if k != "rank"))
    return {k: [r.get(k) for r in rows] for k in names}


def record_devices(tables: Mapping[str, Any]) -> set[int]:
    """Device ids in the GPU records of ``tables`` (column lists, numpy arrays or Arrow)."""
    out: set[int] = set()
    for name in RECORD_TABLES:
        cols = tables.get(name)
        if cols is None:
            continue
        if isinstance(cols, pa.Table):
            if "device" not in cols.column_names:
                continue
            vals: Iterable[Any] = cols.column("device").drop_null().to_pylist()
        else:
            raw = cols.get("device")
            if raw is None:
                continue
            vals = np.unique(raw).tolist() if isinstance(raw, np.ndarray) else set(raw)
        out.update(int(v) for v in vals if v is not None and int(v) >= 0)
    return out


def choose(first: Mapping[int, Mapping[str, Any]], fallback: Any, used: Iterable[int]
           ) -> Columns | None:
    """The ``devices`` columns of the GPUs ``used``, one row each, sorted by device: the row of
    ``first`` (device -> row: the better-informed source) else the row of ``fallback`` (columns
    or an Arrow table of ``devices``, e.g. a trace's, which lists every visible GPU); GPUs not
    used are dropped (they would count in per-device means such as GPU busy %). None when no
    GPU used has a row."""
    want = set(used)
    rows = {d: dict(r) for d, r in first.items() if d in want}
    for r in rows_of(fallback):
        dev = r.get("device")
        if dev is not None and int(dev) in want and int(dev) not in rows:
            rows[int(dev)] = r
    return device_columns([rows[d] for d in sorted(rows)])


def rows_of(cols: Any) -> list[dict[str, Any]]:
    """The rows of a table given as an Arrow table or as columns (lists or numpy arrays)."""
    if cols is None:
        return []
    if isinstance(cols, pa.Table):
        return list(cols.to_pylist())
    n = len(next(iter(cols.values()), []))
    return [{k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) for k, v in cols.items()}
            for i in range(n)]


__all__ = ["RECORD_TABLES", "DeviceProperties", "choose", "device_columns", "device_row",
           "peak_bandwidth_gbs", "record_devices", "rows_of"]
