"""What differs between Nsight Systems export layouts, told from the tables and columns present
(never from the nsys version): where names live, and the numeric codes of copy kinds, memory
kinds, synchronization kinds and NVTX event types.

The codes are read from the export's own ``ENUM_*`` tables when it has them (nsys 2023 on);
older exports (2022.x) lack them and use the same numbering, given here as the fallback:
``ENUM_CUDA_MEMCPY_OPER`` (CUPTI's memcpy kinds), ``ENUM_CUDA_MEM_KIND`` (nsys's own order,
pageable = 0, unlike CUPTI's), ``ENUM_CUPTI_SYNC_TYPE`` and ``ENUM_NSYS_EVENT_TYPE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from stepscope.importers.nsys.source import Export
from stepscope.schema_enums import CopyKind, MemoryKind, SyncKind

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)

_COPY_BY_NAME = {
    "HTOD": CopyKind.HTOD, "DTOH": CopyKind.DTOH, "HTOA": CopyKind.HTOD, "ATOH": CopyKind.DTOH,
    "ATOA": CopyKind.DTOD, "ATOD": CopyKind.DTOD, "DTOA": CopyKind.DTOD, "DTOD": CopyKind.DTOD,
    "HTOH": CopyKind.HTOH, "PTOP": CopyKind.PTOP, "UVM_HTOD": CopyKind.HTOD,
    "UVM_DTOH": CopyKind.DTOH, "UVM_DTOD": CopyKind.DTOD,
}
_COPY_CODES = ("UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH",
               "PTOP", "UVM_HTOD", "UVM_DTOH", "UVM_DTOD")
_MEM_BY_NAME = {
    "PAGEABLE": MemoryKind.PAGEABLE, "PINNED": MemoryKind.PINNED, "DEVICE": MemoryKind.DEVICE,
    "ARRAY": MemoryKind.ARRAY, "MANAGED": MemoryKind.MANAGED,
    "DEVICE_STATIC": MemoryKind.DEVICE, "MANAGED_STATIC": MemoryKind.MANAGED,
}
_MEM_CODES = ("PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC",
              "MANAGED_STATIC", "UNKNOWN")
_SYNC_BY_NAME = {
    "EVENT_SYNCHRONIZE": SyncKind.EVENT, "STREAM_WAIT_EVENT": SyncKind.STREAM_WAIT_EVENT,
    "STREAM_SYNCHRONIZE": SyncKind.STREAM, "CONTEXT_SYNCHRONIZE": SyncKind.CONTEXT,
}
_SYNC_CODES = ("UNKNOWN", "EVENT_SYNCHRONIZE", "STREAM_WAIT_EVENT", "STREAM_SYNCHRONIZE",
               "CONTEXT_SYNCHRONIZE")
# NVTX event types (ENUM_NSYS_EVENT_TYPE): ranges are push/pop and start/end; the rest
# (marks, thread and domain names, categories) are not ranges
NVTX_RANGE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange")
NVTX_DOMAIN_CREATE = "NvtxDomainCreate"
_NVTX_CODES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}


@dataclass(frozen=True)
class Layout:
    """The facts of one export that its version decides."""

    copy_kinds: Mapping[int, str]  # copyKind -> CopyKind value
    memory_kinds: Mapping[int, str]  # srcKind/dstKind/memKind -> MemoryKind value
    sync_kinds: Mapping[int, str]  # syncType -> SyncKind value
    nvtx_ranges: tuple[int, ...]  # eventType codes of ranges
    nvtx_domain_create: int
    kernel_name: str  # the kernel table's name column (a StringIds id)
    strings: str  # the string table ("StringIds")

    @staticmethod
    def of(export: Export) -> Layout:
        copy = _enum(export, "ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_", _COPY_CODES)
        mem = _enum(export, "ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_", _MEM_CODES)
        sync = _enum(export, "ENUM_CUPTI_SYNC_TYPE", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_",
                     _SYNC_CODES)
        events = _enum(export, "ENUM_NSYS_EVENT_TYPE", "", ())
        by_name = {v: k for k, v in events.items()} if events else dict(_NVTX_CODES)
        cols = export.columns(KERNEL)
        name_col = next((c for c in ("demangledName", "shortName", "name") if c in cols),
                        "demangledName")
        return Layout(
            copy_kinds={k: _COPY_BY_NAME.get(v, CopyKind.UNKNOWN).value for k, v in copy.items()},
            memory_kinds={k: _MEM_BY_NAME.get(v, MemoryKind.UNKNOWN).value for k, v in mem.items()},
            sync_kinds={k: _SYNC_BY_NAME.get(v, SyncKind.UNKNOWN).value for k, v in sync.items()},
            nvtx_ranges=tuple(by_name.get(n, _NVTX_CODES[n]) for n in NVTX_RANGE_NAMES),
            nvtx_domain_create=by_name.get(NVTX_DOMAIN_CREATE, _NVTX_CODES[NVTX_DOMAIN_CREATE]),
            kernel_name=name_col, strings="StringIds")


def _enum(export: Export, table: str, prefix: str, fallback: tuple[str, ...]) -> dict[int, str]:
    """``id -> name`` (without ``prefix``) from the export's enum table, else ``fallback``'s
    order."""
    out: dict[int, str] = {}
    if {"id", "name"} <= set(export.columns(table)):
        for t in export.scan(table, {"id": pa.int64(), "name": pa.string()}):
            for i, n in zip(t.column("id").to_pylist(), t.column("name").to_pylist()):
                if i is not None and n is not None:
                    out[int(i)] = n[len(prefix):] if n.startswith(prefix) else n
    return out or dict(enumerate(fallback))


__all__ = ["DRIVER", "GPU_TABLES", "KERNEL", "Layout", "MEMCPY", "MEMSET", "NVTX", "OSRT",
           "RUNTIME", "SYNC"]
