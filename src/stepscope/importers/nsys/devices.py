"""The GPUs and streams a process used, from an nsys export.

``TARGET_INFO_GPU`` (one row per GPU of the machine; absent from some exports, e.g. windows cut
out of a larger one) gives the properties: ``clockRate`` in Hz, ``memoryBandwidth`` in bytes/s,
``uuid`` without nsys's ``GPU-`` prefix. The CUPTI tables' ``deviceId`` is the CUDA ordinal in
the process: matched to a GPU row through ``TARGET_INFO_CUDA_DEVICE`` (``cudaId`` -> ``gpuId``
per process) where the export has it, else the row's ``cuDevice``, else its ``id``. Without a
GPU row a device keeps only its index (and vendor): occupancy then has no limits to work with.
``TARGET_INFO_CUDA_STREAM`` gives stream priorities (stored unsigned: 4294967291 is -5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from stepscope.importers.nsys.columns import I32, I64, STR, Scope
from stepscope.importers.nsys.source import Export
from stepscope.store.produce.devices import DeviceProperties, device_columns, device_row

_GPU_COLS: dict[str, pa.DataType] = {
    "id": I64, "name": STR, "busLocation": STR, "l2CacheSize": I64, "totalMemory": I64,
    "memoryBandwidth": I64, "clockRate": I64, "smCount": I32, "uuid": STR, "cuDevice": I64,
    "maxRegistersPerBlock": I32, "maxShmemPerBlock": I64, "maxShmemPerBlockOptin": I64,
    "maxShmemPerSm": I64, "maxRegistersPerSm": I32, "threadsPerWarp": I32,
    "maxWarpsPerSm": I32, "maxBlocksPerSm": I32, "maxThreadsPerBlock": I32,
    "computeMajor": I32, "computeMinor": I32,
}


def gpu_rows(export: Export) -> list[dict[str, Any]]:
    """``TARGET_INFO_GPU`` as dicts (every GPU of the machine)."""
    return [r for t in export.scan("TARGET_INFO_GPU", _GPU_COLS) for r in t.to_pylist()]


def cuda_map(export: Export, pid: int) -> dict[int, int]:
    """CUDA ordinal -> ``TARGET_INFO_GPU.id`` for process ``pid`` (``TARGET_INFO_CUDA_DEVICE``)."""
    out: dict[int, int] = {}
    if {"gpuId", "cudaId", "pid"} <= set(export.columns("TARGET_INFO_CUDA_DEVICE")):
        for t in export.scan("TARGET_INFO_CUDA_DEVICE", {"gpuId": I64, "cudaId": I64, "pid": I64}):
            for r in t.to_pylist():
                if r["pid"] == pid and r["cudaId"] is not None and r["gpuId"] is not None:
                    out[int(r["cudaId"])] = int(r["gpuId"])
    return out


def _row_for(device: int, gpus: list[dict[str, Any]], by_cuda: Mapping[int, int]
             ) -> dict[str, Any] | None:
    if device in by_cuda:
        return next((g for g in gpus if g["id"] == by_cuda[device]), None)
    if gpus and any(g["cuDevice"] is not None for g in gpus):
        return next((g for g in gpus if g["cuDevice"] == device), None)
    return next((g for g in gpus if g["id"] == device), None)


def _props(device: int, g: dict[str, Any] | None) -> tuple[DeviceProperties, float | None]:
    if g is None:
        return DeviceProperties(device=device), None
    warps, warp = g["maxWarpsPerSm"], g["threadsPerWarp"]
    uuid = g["uuid"]
    bus = g["busLocation"]
    props = DeviceProperties(
        device=device, name=g["name"], compute_major=g["computeMajor"],
        compute_minor=g["computeMinor"], sm_count=g["smCount"], warp_size=warp,
        max_threads_per_block=g["maxThreadsPerBlock"],
        max_threads_per_sm=warps * warp if warps and warp else None,
        max_blocks_per_sm=g["maxBlocksPerSm"], regs_per_block=g["maxRegistersPerBlock"],
        regs_per_sm=g["maxRegistersPerSm"], smem_per_block=g["maxShmemPerBlock"],
        smem_per_block_optin=g["maxShmemPerBlockOptin"], smem_per_sm=g["maxShmemPerSm"],
        total_memory=g["totalMemory"],
        clock_khz=g["clockRate"] // 1000 if g["clockRate"] else None,
        l2_bytes=g["l2CacheSize"],
        uuid=(uuid if uuid.upper().startswith("GPU-") else f"GPU-{uuid}") if uuid else None,
        pci_bus_id=bus.lower() if bus else None)
    bw = g["memoryBandwidth"]
    return props, (bw / 1e9 if bw else None)


def devices(export: Export, s: Scope, used: Iterable[int], gpus: list[dict[str, Any]]
            ) -> dict[str, list[Any]] | None:
    """One ``devices`` row per GPU the process used."""
    by_cuda = cuda_map(export, s.pid)
    rows = []
    for d in sorted(set(used)):
        props, bw = _props(d, _row_for(d, gpus, by_cuda))
        row = device_row(props)
        if bw is not None:  # the export states the peak bandwidth itself
            row["memory_bandwidth_gbs"] = bw
        rows.append(row)
    return device_columns(rows)


def streams(export: Export, s: Scope, gpu_tables: Iterable[Mapping[str, pa.Array] | None]
            ) -> dict[str, list[Any]] | None:
    pairs: set[tuple[int, int]] = set()
    for cols in gpu_tables:
        if not cols:
            continue
        t = pa.table({"d": cols["device"], "s": cols["stream"]}).drop_null()
        u = t.group_by(["d", "s"]).aggregate([])
        pairs.update(zip(u.column("d").to_pylist(), u.column("s").to_pylist()))
    if not pairs:
        return None
    prio: dict[int, int] = {}
    if {"streamId", "processId", "priority"} <= set(export.columns("TARGET_INFO_CUDA_STREAM")):
        want = {"streamId": I64, "processId": I64, "priority": I64}
        for t in export.scan("TARGET_INFO_CUDA_STREAM", want):
            for r in t.to_pylist():
                p = r["priority"]
                if r["processId"] == s.pid and r["streamId"] is not None and p is not None:
                    prio[int(r["streamId"])] = p - (1 << 32) if p >= 1 << 31 else p
    rows = sorted(pairs)
    return {"device": [d for d, _ in rows], "stream": [st for _, st in rows],
            "priority": [prio.get(st) for _, st in rows]}


__all__ = ["cuda_map", "devices", "gpu_rows", "streams"]
