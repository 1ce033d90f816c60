"""The ``devices`` rows of a captured process: one per GPU it used, from the CUDA driver.

Made in the profiled process when its GPU backend stops (CUDA is initialised by then), for every
backend alike (``capture.gpu.GpuSlot``). The GPUs a process used are those with an active
primary context (what the runtime API, and so PyTorch, JAX, CuPy, Triton, make), the device of
the context current on the stopping thread (a driver-API program's own context), and every device
id in the GPU records the backend decoded in the process. The ``cupti`` backend keeps its records
raw until the merge, so for it the contexts alone say which GPUs were used: a program that drives
several GPUs through contexts of its own (``cuCtxCreate``), not primary ones, gets a row for the
stopping thread's GPU only.

Rows the backend made itself (``--backend torch``: Kineto's ``deviceProperties``, which lists
every visible GPU) are replaced by the driver's for the GPUs used; a GPU the driver could not
describe keeps the backend's row, and GPUs the process did not use are dropped (they would
otherwise count in per-device means such as GPU busy %).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

import numpy as np
import pyarrow as pa

from stepscope.capture.cuda_driver import CudaDriver, DeviceProperties

Columns = dict[str, list[Any]]
RECORD_TABLES = ("kernels", "memcpy", "memset", "sync")  # GPU records with a ``device`` column
_PROPS = tuple(f.name for f in fields(DeviceProperties))


def row(p: DeviceProperties) -> dict[str, Any]:
    """A ``devices`` row (schema columns, ``rank`` left to the merge)."""
    out = {name: getattr(p, name) for name in _PROPS}
    out["vendor"] = "nvidia"
    out["memory_bandwidth_gbs"] = p.memory_bandwidth_gbs
    return out


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


def used_devices(driver: CudaDriver | None, tables: Mapping[str, Any]) -> list[int]:
    """The ordinals the process used (module doc), sorted."""
    used = record_devices(tables)
    if driver is not None:
        used.update(driver.active_devices())
        cur = driver.current_device()
        if cur is not None:
            used.add(cur)
    return sorted(used)


def devices_table(driver: CudaDriver | None, tables: Mapping[str, Any]) -> Columns | None:
    """The ``devices`` columns for the GPUs used (module doc); None when there are none."""
    used = used_devices(driver, tables)
    rows: dict[int, dict[str, Any]] = {}
    if driver is not None:
        for ordinal in used:
            props = driver.properties(ordinal)
            if props is not None:
                rows[ordinal] = row(props)
    for r in _rows_of(tables.get("devices")):
        dev = r.get("device")
        if dev is not None and int(dev) in used and int(dev) not in rows:
            rows[int(dev)] = r
    if not rows:
        return None
    names = list(dict.fromkeys(k for r in rows.values() for k in r if k != "rank"))
    return {k: [rows[d].get(k) for d in sorted(rows)] for k in names}


def _rows_of(cols: Any) -> list[dict[str, Any]]:
    if cols is None:
        return []
    if isinstance(cols, pa.Table):
        return list(cols.to_pylist())
    n = len(next(iter(cols.values()), []))
    return [{k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) for k, v in cols.items()}
            for i in range(n)]


__all__ = ["devices_table", "record_devices", "row", "used_devices"]
