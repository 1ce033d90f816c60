"""The ``devices`` rows of a captured process: one per GPU it used, from the CUDA driver.

Made in the profiled process when its GPU backend stops (CUDA is initialised by then), for every
backend alike (``capture.gpu.GpuSlot``). The GPUs a process used are those with an active
primary context (what the runtime API, and so PyTorch, JAX, CuPy, Triton, make), the device of
the context current on the stopping thread (a driver-API program's own context), and every device
id in the GPU records the backend decoded in the process. The ``cupti`` backend keeps its records
raw until the merge, so for it the contexts alone say which GPUs were used: a program that drives
several GPUs through contexts of its own (``cuCtxCreate``), not primary ones, gets a row for the
stopping thread's GPU only.

Rows the backend made itself are replaced by the driver's for the GPUs used; a GPU the driver
could not describe keeps the backend's row, and GPUs the process did not use are dropped
(``store.produce.devices.choose``; the ``torch`` backend's Kineto rows meet the driver's at the
merge, ``capture.materialize``). The rows themselves are made in ``store.produce.devices``; where
each GPU sits in the machine (NUMA node and its CPUs, NVLink, PCIe) is added to them by the
``topology`` reader given (``capture.topology.with_topology`` in a recording).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stepscope.capture.cuda_driver import CudaDriver
from stepscope.store.produce.devices import (
    Columns,
    choose,
    device_columns,
    device_row,
    record_devices,
    rows_of,
)

TopologyReader = Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]


def used_devices(driver: CudaDriver | None, tables: Mapping[str, Any]) -> list[int]:
    """The ordinals the process used (module doc), sorted."""
    used = record_devices(tables)
    if driver is not None:
        used.update(driver.active_devices())
        cur = driver.current_device()
        if cur is not None:
            used.add(cur)
    return sorted(used)


def driver_rows(driver: CudaDriver | None, ordinals: list[int]) -> dict[int, dict[str, Any]]:
    """device -> the driver's ``devices`` row, for the ordinals it can describe."""
    rows: dict[int, dict[str, Any]] = {}
    if driver is not None:
        for ordinal in ordinals:
            props = driver.properties(ordinal)
            if props is not None:
                rows[ordinal] = device_row(props)
    return rows


def devices_table(driver: CudaDriver | None, tables: Mapping[str, Any],
                  topology: TopologyReader | None = None) -> Columns | None:
    """The ``devices`` columns for the GPUs used (module doc); None when there are none.
    ``topology``: fills the rows' NUMA/NVLink/PCIe columns (``capture.topology``)."""
    used = used_devices(driver, tables)
    cols = choose(driver_rows(driver, used), tables.get("devices"), used)
    if cols is None or topology is None:
        return cols
    return device_columns(topology(rows_of(cols)))


__all__ = ["TopologyReader", "devices_table", "driver_rows", "used_devices"]
