"""Tiny synthetic Nsight Systems SQLite exports, in the layouts of old and new nsys versions,
with every value chosen by hand (the tests state what the import must give)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EPOCH = 1_700_000_000_000_000_000  # TARGET_INFO_SESSION_START_TIME.utcEpochNs
RANK0_PID, RANK1_PID, HOST_PID = 300, 200, 50  # rank order: the GPU each process used first
STEP_NS = 10_000


def gpid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


STRINGS = {1: "kernA", 2: "kernB", 3: "cudaLaunchKernel_v7000", 4: "cuLaunchKernel",
           5: "forward", 6: "ioctl", 7: "main thread", 8: "cudaStreamSynchronize_v3020"}


def _table(con: sqlite3.Connection, name: str, rows: Sequence[Mapping[str, Any]],
           columns: Sequence[str]) -> None:
    con.execute(f'CREATE TABLE "{name}" ({", ".join(columns)})')
    for r in rows:
        cols = [c for c in columns if c in r]
        con.execute(f'INSERT INTO "{name}" ({", ".join(cols)}) VALUES '
                    f'({", ".join("?" for _ in cols)})', [r[c] for c in cols])


def build(path: Path, *, new: bool = True, gpu_info: bool = True) -> Path:
    """``new``: the layout of nsys 2023+ (ENUM_* tables, META_DATA_EXPORT, kernel names in
    ``demangledName``, call names behind ``nameId``); otherwise 2022-like (no enums,
    EXPORT_META_DATA, ``shortName`` only, call names inline in ``name``)."""
    con = sqlite3.connect(path)
    p0, p1 = RANK0_PID, RANK1_PID
    t0 = gtid(p0, p0 + 1)
    kern_name = "demangledName" if new else "shortName"
    kernels, runtime, nvtx = [], [], []
    for i in range(3):  # rank 0: three steps, each one launch and one kernel (kernA)
        base = i * STEP_NS
        runtime.append({"start": base + 100, "end": base + 150, "globalTid": t0,
                        "correlationId": 100 + i, "nameId": 3})
        kernels.append({"start": base + 1000, "end": base + 3000, "deviceId": 0, "streamId": 7,
                        "correlationId": 100 + i, "globalPid": gpid(p0), kern_name: 1,
                        "gridX": 4, "gridY": 2, "gridZ": 1, "blockX": 128, "blockY": 1,
                        "blockZ": 1, "registersPerThread": 32, "staticSharedMemory": 512,
                        "dynamicSharedMemory": 1024})
        nvtx.append({"start": base, "end": base + 9000, "eventType": 59, "text": "train_step",
                     "globalTid": t0, "domainId": 0})
    # kernB: launched before the file's window (no runtime row)
    kernels.append({"start": 35_000, "end": 36_000, "deviceId": 0, "streamId": 7,
                    "correlationId": 5, "globalPid": gpid(p0), kern_name: 2})
    # rank 1 (pid 200) drives device 1
    runtime.append({"start": 1900, "end": 1950, "globalTid": gtid(p1, p1 + 1),
                    "correlationId": 21, "nameId": 3})
    kernels.append({"start": 2000, "end": 2500, "deviceId": 1, "streamId": 13,
                    "correlationId": 21, "globalPid": gpid(p1), kern_name: 1})
    runtime.append({"start": 8000, "end": 8600, "globalTid": t0, "correlationId": 103,
                    "nameId": 8})
    # a host-only process: a call, no GPU work -> not a rank
    runtime.append({"start": 10, "end": 20, "globalTid": gtid(HOST_PID, HOST_PID),
                    "correlationId": 1, "nameId": 3})
    nvtx += [
        {"start": 200, "end": 5000, "eventType": 59, "textId": 5, "globalTid": t0, "domainId": 1},
        {"start": 500, "end": 600, "eventType": 60, "text": "async", "globalTid": t0,
         "endGlobalTid": gtid(p0, p0 + 2), "domainId": 0},
        {"start": 700, "eventType": 34, "text": "a mark", "globalTid": t0, "domainId": 0},
        {"start": 1, "eventType": 75, "text": "MyDomain", "globalTid": t0, "domainId": 1},
    ]
    if not new:  # names inline
        for r in runtime:
            r["name"] = STRINGS[r.pop("nameId")]
    _table(con, "StringIds", [{"id": k, "value": v} for k, v in STRINGS.items()], ["id", "value"])
    _table(con, "CUPTI_ACTIVITY_KIND_KERNEL", kernels, [
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
        kern_name, "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "graphId"])
    _table(con, "CUPTI_ACTIVITY_KIND_RUNTIME", runtime, [
        "start", "end", "eventClass", "globalTid", "correlationId",
        "nameId" if new else "name", "returnValue"])
    _table(con, "CUPTI_ACTIVITY_KIND_DRIVER", [
        {"start": 4000, "end": 4050, "globalTid": t0, "correlationId": 99, "nameId": 4}],
        ["start", "end", "globalTid", "correlationId", "nameId"])
    _table(con, "CUPTI_ACTIVITY_KIND_MEMCPY", [
        {"start": 7000, "end": 7500, "deviceId": 0, "streamId": 7, "correlationId": 13,
         "globalPid": gpid(p0), "bytes": 4096, "copyKind": 1, "srcKind": 0, "dstKind": 2},
        {"start": 7600, "end": 7700, "deviceId": 0, "streamId": 7, "correlationId": 14,
         "globalPid": gpid(p0), "bytes": 64, "copyKind": 42, "srcKind": 2, "dstKind": 2,
         "dstDeviceId": 1}],
        ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
         "copyKind", "srcKind", "dstKind", "dstDeviceId"])
    _table(con, "CUPTI_ACTIVITY_KIND_MEMSET", [
        {"start": 7800, "end": 7900, "deviceId": 0, "streamId": 7, "correlationId": 15,
         "globalPid": gpid(p0), "bytes": 256, "memKind": 2}],
        ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
         "memKind"])
    _table(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", [
        {"start": 8000, "end": 8600, "deviceId": 0, "streamId": 7, "correlationId": 103,
         "globalPid": gpid(p0), "syncType": 3, "eventId": None}],
        ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType",
         "eventId"])
    _table(con, "NVTX_EVENTS", nvtx, ["start", "end", "eventType", "rangeId", "text",
                                      "globalTid", "endGlobalTid", "textId", "domainId"])
    _table(con, "OSRT_API", [{"start": 300, "end": 400, "globalTid": t0, "nameId": 6}],
           ["start", "end", "eventClass", "globalTid", "nameId", "returnValue"])
    _table(con, "ThreadNames", [{"nameId": 7, "priority": 10, "globalTid": t0}],
           ["nameId", "priority", "globalTid"])
    _table(con, "PROCESSES", [{"globalPid": gpid(p0), "pid": p0, "name": "python3"},
                              {"globalPid": gpid(p1), "pid": p1, "name": "python3"},
                              {"globalPid": gpid(HOST_PID), "pid": HOST_PID, "name": "torchrun"}],
           ["globalPid", "pid", "name"])
    _table(con, "TARGET_INFO_SESSION_START_TIME", [{"utcEpochNs": EPOCH}], ["utcEpochNs"])
    _table(con, "TARGET_INFO_CUDA_STREAM", [
        {"streamId": 7, "processId": p0, "priority": 4294967291},
        {"streamId": 13, "processId": p1, "priority": 0}], ["streamId", "processId", "priority"])
    meta = "META_DATA_EXPORT" if new else "EXPORT_META_DATA"
    _table(con, meta, [{"name": "EXPORT_PRODUCT_VERSION", "value": "2099.1.0" if new else "2022.1"},
                       {"name": "EXPORT_SCHEMA_VERSION", "value": "3.99.0" if new else "2.9.0"}],
           ["name", "value"])
    if new:
        _table(con, "ENUM_CUDA_MEMCPY_OPER", [
            {"id": 1, "name": "CUDA_MEMCPY_KIND_HTOD"}, {"id": 42, "name": "CUDA_MEMCPY_KIND_PTOP"}],
            ["id", "name"])
        _table(con, "ENUM_CUDA_MEM_KIND", [
            {"id": 0, "name": "CUDA_MEMOPR_MEMORY_KIND_PINNED"},
            {"id": 2, "name": "CUDA_MEMOPR_MEMORY_KIND_DEVICE"}], ["id", "name"])
        _table(con, "ENUM_NSYS_EVENT_TYPE", [
            {"id": 59, "name": "NvtxPushPopRange"}, {"id": 60, "name": "NvtxStartEndRange"},
            {"id": 34, "name": "NvtxMark"}, {"id": 75, "name": "NvtxDomainCreate"}],
            ["id", "name"])
    if gpu_info:
        gpu = {"smCount": 100, "clockRate": 1_500_000_000, "memoryBandwidth": 2_000_000_000_000,
               "computeMajor": 9, "computeMinor": 0, "threadsPerWarp": 32, "maxWarpsPerSm": 64,
               "maxBlocksPerSm": 32, "maxThreadsPerBlock": 1024, "maxRegistersPerBlock": 65536,
               "maxRegistersPerSm": 65536, "maxShmemPerBlock": 49152,
               "maxShmemPerBlockOptin": 232448, "maxShmemPerSm": 233472, "totalMemory": 80 << 30,
               "l2CacheSize": 50 << 20}
        _table(con, "TARGET_INFO_GPU", [
            {**gpu, "id": 5, "cuDevice": 1, "name": "Test GPU five", "uuid": "abc",
             "busLocation": "0000:AB:00.0"},
            {**gpu, "id": 6, "cuDevice": 0, "name": "Test GPU six", "uuid": "GPU-def",
             "busLocation": "0000:CD:00.0"}], ["id", "cuDevice", "name", "uuid", "busLocation",
                                               *gpu])
        if new:  # process 300's CUDA device 0 is GPU 5 (its cuDevice says otherwise)
            _table(con, "TARGET_INFO_CUDA_DEVICE", [
                {"gpuId": 5, "cudaId": 0, "pid": p0}, {"gpuId": 6, "cudaId": 1, "pid": p1}],
                ["gpuId", "cudaId", "pid"])
    con.commit()
    con.close()
    return path
